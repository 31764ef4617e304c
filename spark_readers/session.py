"""A SparkSession that reads gate channels over JDBC, and where a channel is.

The same code runs locally and on a cluster: only the master URL (``local[2]``, ``spark://...``,
``yarn``, or what spark-submit chose) and, when executors reach the DC by another address,
the JDBC URL change. The JDBC URL is ``jdbc:mysql://host:port/channel`` with MariaDB Connector/J:
with ``jdbc:mariadb://`` Spark picks no SQL dialect and quotes names wrongly.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

from gate.common.config import CONNECT_TIMEOUT, READ_TIMEOUT, ServerConfig, check_identifier
from spark_readers.delta_jars import SETTINGS as DELTA_SETTINGS
from spark_readers.delta_jars import delta_jars, on_class_path
from spark_readers.gate_format import register
from spark_readers.jvm_source import source_jar

MARIADB_JAR = "/usr/share/java/mariadb-java-client.jar"
JDBC_DRIVER = "org.mariadb.jdbc.Driver"
# Delta replays a table's log (at every read, MERGE, commit and time travel) in this many tasks, 50 by default:
# an image table's log is small, and 50 tasks per replay made an update of the 1,000,000-row benchmark image
# 2.4x slower on local[2] (235 s against 97 s, load average 17 to 23). At most one per core (an image update: one).
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
# Spark compiles the generated code of each new plan once and keeps at most 100 classes by default. An image update
# uses about 145 (the MERGE, the log replays, the writes), so each update of the 200,000-row benchmark image compiled
# all 145 again; with room for 1,000 it compiles only the few whose code holds the update's own values (such as its
# watermark), and took 4.5 s against 6.0 s (median of 3, local[2]). A static setting: given when the session starts
# its JVM, unless the user gave one (spark-submit jobs give it with --conf).
CODEGEN_CACHE = ("spark.sql.codegen.cache.maxEntries", "1000")
# Hadoop's local file system without its native library (PySpark from PyPI has none) starts a chmod or readlink
# process for each file it creates or link it checks: about 30 per streaming micro-batch, 160 per image update,
# 3.5 ms each on local[2]. The JVM source's jar has the same file system doing that work in-process (LocalDisk.java).
LOCAL_DISK = {"spark.hadoop.fs.file.impl": "gate.spark.LocalDisk$FileSystem",
              "spark.hadoop.fs.AbstractFileSystem.file.impl": "gate.spark.LocalDisk$Context"}


@dataclass(frozen=True)
class ChannelSource:
    """A channel database on a DC server, for Spark's JDBC reads (and the driver's own small queries)."""

    dc: ServerConfig
    channel: str
    url: str | None = None  # JDBC URL override; default jdbc:mysql://dc.host:dc.port/channel

    def __post_init__(self) -> None:
        check_identifier(self.channel, "Channel name")

    @property
    def jdbc_url(self) -> str:
        return self.url or f"jdbc:mysql://{self.dc.host}:{self.dc.port}/{self.channel}"

    def jdbc_options(self) -> dict[str, str]:
        """Options for ``spark.read.format("jdbc")``; the password goes in ``password`` (which Spark redacts),
        never in the URL; the DC's TLS settings and gate's network timeouts as Connector/J's own properties."""
        return {"url": self.jdbc_url, "driver": JDBC_DRIVER, "user": self.dc.user,
                "password": self.dc.password.reveal(), **self.dc.tls.jdbc_properties(), **jdbc_timeouts()}


def jdbc_timeouts() -> dict[str, str]:
    """gate's connect and read timeouts (gate.common.config) as Connector/J's properties, in milliseconds:
    an executor whose DC link goes silent fails its task instead of hanging (Spark retries the task)."""
    return {"connectTimeout": str(CONNECT_TIMEOUT * 1000), "socketTimeout": str(READ_TIMEOUT * 1000)}


def spark_session(master: str | None = None, app_name: str = "gate-spark-readers",
                  jars: str = MARIADB_JAR) -> SparkSession:
    """Get or create the session: Connector/J, the JVM ``format("gate")`` and Delta Lake on the classpath, UTC
    session time zone, no UI, Delta's log replays in at most one task per core, ``format("gate")`` registered
    (spark_readers.gate_format.register).

    A session that starts its JVM keeps 1,000 generated classes (:data:`CODEGEN_CACHE`) unless the user set
    that number. A local master without spark-submit also gets the ``file:`` file system of :data:`LOCAL_DISK` (Hadoop's,
    without the processes it starts per file) when the session starts the JVM and the user set no driver class
    path (:func:`_local_disk`).

    Under spark-submit, ``master`` None keeps its master and its ``--jars`` are used (give the Delta jars and
    the gate source's jar there too: spark_readers.delta_jars, spark_readers.jvm_source), and Delta's settings are
    given only when its jars are there (a JDBC load needs none); otherwise the master
    defaults to ``local[2]``, ``jars``, the gate source's jar and the Delta jars are added and Python workers
    use this Python (unless PYSPARK_PYTHON says otherwise). With a ``local`` master the driver binds to
    127.0.0.1 (SPARK_LOCAL_IP, unless already set).
    """
    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        master = master or "local[2]"
        builder = builder.config("spark.jars", ",".join([jars, source_jar(), *delta_jars()]))
        if SparkContext._gateway is None and not _user_sets(re.escape(CODEGEN_CACHE[0])):
            builder = builder.config(*CODEGEN_CACHE)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers run gate's code
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            if _local_disk(master):
                builder = builder.config("spark.driver.extraClassPath", source_jar())
                for key, value in LOCAL_DISK.items():
                    builder = builder.config(key, value)
    if _delta_given():
        for key, value in DELTA_SETTINGS.items():
            builder = builder.config(key, value)
    spark = (builder.config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    if spark.conf.get(SNAPSHOT_PARTITIONS, None) is None:  # unless the job sets its own
        spark.conf.set(SNAPSHOT_PARTITIONS, str(min(50, spark.sparkContext.defaultParallelism)))
    register(spark)
    return spark


def _delta_given() -> bool:
    """Whether the session gets Delta's settings: always, unless spark-submit started the JVM without Delta's
    classes, whose catalog setting would then fail every query (image jobs refuse such a session by name:
    spark_readers.delta_jars.require_delta)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return True
    SparkContext._ensure_initialized()  # connects to spark-submit's JVM
    return on_class_path(SparkContext._jvm)


def _local_disk(master: str) -> bool:
    """Whether a session with ``master`` gets :data:`LOCAL_DISK`: a local master (one JVM, no executors of their
    own), a JVM this session starts (spark-submit itself reads files before it adds jars, so the class must be on
    the JVM's class path from its start), and no class path of the user's, which the jar's would replace
    (spark-submit keeps one value of spark.driver.extraClassPath)."""
    if not (master == "local" or master.startswith("local[")) or SparkContext._gateway is not None \
            or "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    return not _user_sets(r"--driver-class-path|spark\.driver\.extraClassPath")


def _user_sets(pattern: str) -> bool:
    """Whether the user's Spark settings (PYSPARK_SUBMIT_ARGS, spark-defaults.conf) name a setting that
    ``pattern`` (a regular expression) matches."""
    # the whole name (maxEntriesX or --driver-class-paths is another setting), also as a -D system property
    if re.search(rf"(?:(?<![\w.-])|(?<=-D))({pattern})(?![\w.-])", os.environ.get("PYSPARK_SUBMIT_ARGS", "")):
        return True
    home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    defaults = Path(os.environ.get("SPARK_CONF_DIR") or home / "conf") / "spark-defaults.conf"
    return defaults.is_file() and re.search(rf"^\s*({pattern})(?![\w.-])", defaults.read_text(),
                                            re.MULTILINE) is not None


@contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """The block runs with ``settings`` in the session's runtime conf; after it each key has its value back
    (or none again). The settings are the session's, not the thread's: blocks that run at the same time on one
    session from several threads would give each other's values back."""
    before = {key: spark.conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


@contextmanager
def spark_job(master: str | None = None) -> Iterator[SparkSession]:
    """:func:`spark_session` for one job: stopped at the end, unless it was running already."""
    running = SparkSession.getActiveSession()
    spark = spark_session(master)
    try:
        yield spark
    finally:
        if running is None:
            spark.stop()
