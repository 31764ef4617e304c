"""Delta Lake for Spark: where its jars are, fetching them once, the session settings it needs and the table
properties of an image.

The jars (io.delta:delta-spark_2.13 and its dependencies) are fetched once, by ``scripts/setup.sh``
(``python -m spark_readers.delta_jars``, which prints them for spark-submit's ``--jars``), into :func:`jar_dir`:
``$GATE_JARS`` or ``~/.cache/gate/jars``, one folder per Delta version. Sessions then take them from there
(``spark.jars``): no network.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pyspark
from delta.tables import DeltaTable
from py4j.java_gateway import JavaClass, JVMView
from pyspark.sql import SparkSession

from gate.common.errors import DeltaUnavailable, MaterialiseError

DELTA_VERSION = "4.4.0"  # io.delta:delta-spark_2.13 on Maven Central, built for Spark 4.2.0 (pinned in pyproject.toml)
PACKAGE = f"io.delta:delta-spark_2.13:{DELTA_VERSION}"
SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

# The table properties of an image, whatever the cluster's defaults (spark.databricks.delta.properties.defaults.*).
# Deletion vectors on: Spark's MERGE of a few keys spread over every file marks their rows deleted instead of copying
# each file (the 1,000,000-row benchmark's MERGE took 3.9 s against 10.8 s copy-on-write; the driver's MERGE of a
# small update, spark_readers.driver_commits, copies the files, which it keeps small). delta-rs 1.6 reads
# such a table with DeltaTable.scan() and refuses it in to_pyarrow_table/to_pandas (DeltaProtocolError). Column
# mapping and type widening stay off: delta-rs's to_pyarrow_table reads column-mapped columns as NULL without an
# error, and it refuses type widening on every path. The state table has no deletion vectors, so every delta-rs
# path reads it.
_IMAGE_PROPERTIES = {"delta.enableDeletionVectors": "true", "delta.enableTypeWidening": "false",
                     "delta.columnMapping.mode": "none"}

# Delta 4.4 writes a small table's file list into each commit's checksum file. When the session's or the JVM's time
# zone is not UTC (its name lacks "UTC": "GMT" counts as not), it checks that list after every commit by rebuilding
# the table's state from its log (a check of its own serialisation of timestamps before 1883); in UTC it checks it
# when it writes a checkpoint (every 10 commits). It never reads a table's files from that list, only from the log.
# An image update commits each table it changes and the state: in a JVM whose zone was Asia/Shanghai, an update of
# the 1,000,000-row benchmark image took 4.3 s with the check at every commit and 3.5 s without (median of 4
# interleaved pairs), what it takes in UTC. An update's commits check at checkpoints only, as in UTC, unless the
# session sets this.
CRC_CHECK_ON_NON_UTC = "spark.databricks.delta.allFilesInCrc.verificationMode.forceOnNonUTC.enabled"

IVY_SETTINGS = """<ivysettings><settings defaultResolver="central"/><resolvers>
<ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/></resolvers></ivysettings>
"""


def jar_dir() -> Path:
    """The folder holding the Delta jars of :data:`DELTA_VERSION`."""
    root = os.environ.get("GATE_JARS") or str(Path.home() / ".cache" / "gate" / "jars")
    return Path(root) / f"delta-{DELTA_VERSION}"


def delta_jars() -> list[str]:
    """The Delta jars, fetched by setup; a clear error when they are not there."""
    folder = jar_dir()
    jars = sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []
    if not any(Path(j).name.startswith("delta-spark_") for j in jars):
        raise MaterialiseError(f"The Delta Lake jars ({PACKAGE}) are not in {folder}: run scripts/setup.sh (or "
                               "python -m spark_readers.delta_jars) once with access to Maven Central.")
    return jars


def on_class_path(jvm: JVMView) -> bool:
    """Whether the JVM has Delta Lake's classes."""
    return isinstance(jvm.io.delta.tables.DeltaTable, JavaClass)


def require_delta(spark: SparkSession) -> None:
    """Refuse a session without Delta Lake's jars or without its two :data:`SETTINGS` (a spark-submit job that
    lacks them), naming what to add: without the jars, an image job would fail later with a riddle (in a
    ``foreachBatch``: ``TypeError: 'JavaPackage' object is not callable``)."""
    missing = []
    if not on_class_path(spark._jvm):
        missing.append("its jars are not on the class path")
    for key, value in SETTINGS.items():
        if value not in (spark.conf.get(key, None) or "").replace(" ", "").split(","):
            missing.append(f"{key} is not {value}")
    if missing:
        settings = " ".join(f"--conf {key}={value}" for key, value in SETTINGS.items())
        raise DeltaUnavailable(
            f"This Spark session has no Delta Lake, which table images are written with: {'; '.join(missing)}. "
            f"Give the job Delta's jars, --packages {PACKAGE} (or --jars with the jars in {jar_dir()}, which "
            f"scripts/setup.sh fetches), and its settings, {settings}.")


def with_deletion_vectors(spark: SparkSession, url: str) -> None:
    """Turn deletion vectors on for the image table at ``url`` if it exists without them (made by a gate from
    before image tables had them: Delta sets table properties when it creates a table, not when a write
    overwrites it), so that the MERGEs and writes that follow mark rows instead of copying files."""
    if not DeltaTable.isDeltaTable(spark, url):
        return
    on = "delta.enableDeletionVectors"
    if DeltaTable.forPath(spark, url).detail().first()["properties"].get(on) != _IMAGE_PROPERTIES[on]:  # type: ignore[index]
        name = url.replace("`", "``")
        spark.sql(f"ALTER TABLE delta.`{name}` SET TBLPROPERTIES ('{on}' = '{_IMAGE_PROPERTIES[on]}')")


def image_table_options(deletion_vectors: bool = True) -> dict[str, str]:
    """Writer options for a Delta write that creates (or overwrites) a table of an image: the table
    properties above; ``deletion_vectors`` False for the image's state."""
    return {**_IMAGE_PROPERTIES, "delta.enableDeletionVectors": str(deletion_vectors).lower()}


def _artifact(jar: str) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core``."""
    return re.sub(r"-\d[^-]*(-\d[^-]*)?\.jar$", "", jar)


def fetch() -> Path:
    """Resolve :data:`PACKAGE` with Spark's Ivy (from Maven Central) and copy its jars into :func:`jar_dir`."""
    folder = jar_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as ivy:
        settings = Path(ivy) / "ivysettings.xml"  # Maven Central only: not a partial ~/.m2 nor spark-packages
        settings.write_text(IVY_SETTINGS)
        spark = (SparkSession.builder.master("local[1]").appName("gate-fetch-delta")
                 .config("spark.jars.packages", PACKAGE).config("spark.jars.ivy", ivy)
                 .config("spark.jars.ivySettings", str(settings))
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.stop()
        jars = list((Path(ivy) / "jars").glob("*.jar"))
        if not any(j.name.startswith("io.delta_delta-spark") for j in jars):
            raise MaterialiseError(f"Spark fetched no jar of {PACKAGE}: check access to Maven Central.")
        staging = Path(tempfile.mkdtemp(dir=folder.parent))
        provided = {_artifact(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
        for jar in jars:  # Ivy names them group_artifact-version.jar; Spark's own libraries stay Spark's
            name = jar.name.split("_", 1)[1] if "_" in jar.name else jar.name
            if _artifact(name) not in provided:
                shutil.copy(jar, staging / name)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.move(str(staging), folder)
    return folder


def main() -> None:
    """Fetch the Delta jars unless they are there already; print their paths, comma-separated (for ``--jars``)."""
    try:
        delta_jars()
    except MaterialiseError:
        try:
            fetch()
        except Exception as exc:  # the JVM's own resolution error, whatever its class
            sys.exit(f"error: could not fetch {PACKAGE} from Maven Central into {jar_dir()}: {exc}\n"
                     "Check the network (or a proxy: Ivy takes -Dhttps.proxyHost through JAVA_TOOL_OPTIONS), "
                     "then run scripts/setup.sh again.")
    print(",".join(delta_jars()))


if __name__ == "__main__":
    main()
