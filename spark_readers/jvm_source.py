"""The JVM ``format("gate")`` (the Java DataSource V2 in spark_readers/jvm/): its jar, built once and cached.

The Java sources are compiled with javac against the jars PySpark ships (Spark 4.2, Scala 2.13, Jackson) into
``gate-source.jar``, with :data:`spark_readers.rows.ROW_SCHEMA` as JSON (the JVM reads its schema from there, so
the columns are defined once) and the ServiceLoader entry that makes Spark find the provider by the name
"gate". The jar lives in the jar cache next to the Delta jars (``$GATE_JARS`` or ``~/.cache/gate/jars``), in a
folder named by a digest of everything it is built from: a changed source or another PySpark builds anew.
``scripts/setup.sh`` builds it (``python -m spark_readers.jvm_source``); a session that finds none builds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pyspark

from gate.common.errors import JvmSourceUnavailable
from spark_readers.delta_jars import jar_dir
from spark_readers.rows import ROW_SCHEMA

SOURCES = Path(__file__).with_name("jvm") / "src" / "main"
SCHEMA_RESOURCE = "gate/spark/row_schema.json"


def _inputs() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file())


def digest() -> str:
    """What the jar is built from: the sources, the row schema and the PySpark version."""
    h = hashlib.sha256(f"{pyspark.__version__}\n{ROW_SCHEMA.json()}\n".encode())
    for path in _inputs():
        h.update(f"{path.relative_to(SOURCES)}\n".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def jar_path() -> Path:
    return jar_dir().parent / f"gate-source-{digest()}" / "gate-source.jar"


def build(target: Path) -> Path:
    """Compile the sources into the jar ``target`` (its folder is created whole or not at all)."""
    javac = shutil.which("javac")
    if javac is None:
        raise JvmSourceUnavailable("Building the jar of format(\"gate\") needs a JDK (javac), and none is on the "
                                   "PATH. Install one (Debian: apt-get install default-jdk-headless; scripts/setup.sh "
                                   "does), then run python -m spark_readers.jvm_source.")
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent.parent) as work:
        classes = Path(work) / "classes"
        sources = [str(p) for p in _inputs() if p.suffix == ".java"]
        classpath = str(Path(pyspark.__file__).parent / "jars" / "*")
        compiled = subprocess.run([javac, "-nowarn", "-Xlint:none", "--release", "17", "-encoding", "UTF-8", "-d",
                                   str(classes), "-cp", classpath, *sources], capture_output=True, text=True)
        if compiled.returncode != 0:
            raise JvmSourceUnavailable(f"javac could not compile the JVM format(\"gate\") in {SOURCES.parent.parent} "
                                       f"against PySpark {pyspark.__version__}'s jars:\n{compiled.stderr.strip()}\n"
                                       "Is the JDK 17 or newer (javac -version)?")
        staging = Path(work) / target.parent.name
        staging.mkdir()
        with zipfile.ZipFile(staging / target.name, "w", zipfile.ZIP_DEFLATED) as jar:
            for file in sorted(classes.rglob("*.class")):
                jar.write(file, str(file.relative_to(classes)))
            for file in _inputs():
                if file.suffix != ".java":
                    jar.write(file, str(file.relative_to(SOURCES / "resources")))
            jar.writestr(SCHEMA_RESOURCE, ROW_SCHEMA.json())
        try:
            staging.rename(target.parent)
        except OSError:  # another process built the same jar meanwhile
            if not target.exists():
                raise
    return target


def source_jar() -> str:
    """The jar's path, built first if this machine has not built it yet."""
    target = jar_path()
    return str(target if target.exists() else build(target))


def main() -> None:
    """Build the jar unless it is there already; print its path."""
    try:
        print(source_jar())
    except JvmSourceUnavailable as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    os.umask(0o022)
    main()
