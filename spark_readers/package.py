"""The zip that gives a cluster's Python workers gate's code: ``--py-files`` (or ``spark.submit.pyFiles``).

``python -m spark_readers.package gate-spark.zip`` writes gate, spark_readers and dc_schema with the
pure-Python libraries format("gate") imports on executors (PyMySQL, PyYAML; PyYAML's C speed-ups stay
out, it works without them). The executors' Python needs only what Spark's Python data sources need
(pyarrow). Every Python process of the job puts the zip first on its path, so it wins over any other
installed version of gate.
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path
from types import ModuleType

import pymysql
import yaml

import dc_schema
import gate
import spark_readers

PACKAGES: tuple[ModuleType, ...] = (gate, spark_readers, dc_schema, pymysql, yaml)


def build_zip(path: str | Path) -> Path:
    """Write the zip to ``path`` (replaced); returns it."""
    target = Path(path)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in PACKAGES:
            root = Path(str(package.__file__)).parent
            for file in sorted(root.rglob("*")):
                if file.is_file() and file.suffix in (".py", ".sql"):
                    archive.write(file, str(file.relative_to(root.parent)))
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="spark_readers.package", description=__doc__.split("\n")[0])
    parser.add_argument("zip", help="the zip to write, e.g. gate-spark.zip")
    print(build_zip(parser.parse_args(argv).zip))


if __name__ == "__main__":
    main()
