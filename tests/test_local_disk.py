"""The ``file:`` file system of the sessions spark_readers.session starts (gate.spark.LocalDisk): Hadoop's local
file system setting permissions and reading link statuses in-process, to the same permissions and statuses."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession


def _fs(spark: SparkSession) -> tuple[Any, Any]:
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration())
    return jvm, fs


def test_the_sessions_read_and_write_local_files_through_gates_file_system(spark: SparkSession) -> None:
    jvm, fs = _fs(spark)
    assert fs.getClass().getName() == "gate.spark.LocalDisk$FileSystem"
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"),
                                                                  spark._jsc.hadoopConfiguration())
    assert context.getDefaultFileSystem().getClass().getName() == "gate.spark.LocalDisk$Context"


def test_permissions_are_set_as_chmod_sets_them(spark: SparkSession, tmp_path: Path) -> None:
    jvm, fs = _fs(spark)
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission
    made = tmp_path / "made"
    assert fs.mkdirs(jvm.org.apache.hadoop.fs.Path(str(made)), permission(0o751))
    assert stat.S_IMODE(made.stat().st_mode) == 0o751
    for mode in (0o640, 0o777, 0o000, 0o404):
        fs.setPermission(jvm.org.apache.hadoop.fs.Path(str(made)), permission(mode))
        assert stat.S_IMODE(made.stat().st_mode) == mode
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    fs.setPermission(jvm.org.apache.hadoop.fs.Path(str(sticky)), permission(0o1777))  # Hadoop's own chmod
    assert stat.S_IMODE(sticky.stat().st_mode) == 0o1777
    for shared in ("by_gate", "by_chmod"):  # a setgid directory keeps its bit, as chmod 0755 keeps it
        (tmp_path / shared).mkdir()
        os.chmod(tmp_path / shared, 0o2775)
    fs.setPermission(jvm.org.apache.hadoop.fs.Path(str(tmp_path / "by_gate")), permission(0o755))
    subprocess.run(["chmod", "0755", str(tmp_path / "by_chmod")], check=True)
    assert stat.S_IMODE((tmp_path / "by_gate").stat().st_mode) == stat.S_IMODE((tmp_path / "by_chmod").stat().st_mode)
    out = fs.create(jvm.org.apache.hadoop.fs.Path(str(tmp_path / "file")))
    out.write(b"abc")
    out.close()
    assert (tmp_path / "file").read_bytes() == b"abc"
    assert stat.S_IMODE((tmp_path / "file").stat().st_mode) == 0o644  # Hadoop's umask (022), not the process's
    with pytest.raises(Exception, match="FileNotFoundException: File .*missing does not exist"):
        fs.setPermission(jvm.org.apache.hadoop.fs.Path(str(tmp_path / "missing")), permission(0o644))


def test_link_statuses_are_hadoops(spark: SparkSession, tmp_path: Path) -> None:
    jvm, fs = _fs(spark)
    (tmp_path / "target").write_text("x")
    os.symlink(tmp_path / "target", tmp_path / "link")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    plain = fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(f"file://{tmp_path}/target"))
    assert (plain.isSymlink(), plain.isFile(), plain.getLen()) == (False, True, 1)
    link = fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(str(tmp_path / "link")))
    assert link.isSymlink() and link.getSymlink().toUri().getPath() == str(tmp_path / "target")
    dangling = fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(str(tmp_path / "dangling")))
    assert dangling.isSymlink() and dangling.getSymlink().toUri().getPath() == str(tmp_path / "nowhere")
    with pytest.raises(Exception, match="FileNotFoundException"):
        fs.getFileLinkStatus(jvm.org.apache.hadoop.fs.Path(str(tmp_path / "missing")))


SECOND_SESSION = """
import sys
from pyspark.sql import SparkSession
SparkSession.builder.master("local[1]").getOrCreate().stop()  # the JVM starts without gate's jar
from spark_readers.session import spark_session
spark = spark_session("local[1]")
jvm = spark._jvm
print(jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration())
      .getClass().getName())
spark.range(3).write.parquet(sys.argv[1] + "/in")
query = (spark.readStream.schema("id long").parquet(sys.argv[1] + "/in").writeStream.format("noop")
         .option("checkpointLocation", sys.argv[1] + "/checkpoint").trigger(availableNow=True).start())
query.awaitTermination()
print(query.recentProgress[0]["numInputRows"])
"""


def test_a_session_in_a_jvm_started_without_the_jar_keeps_hadoops_file_system(tmp_path: Path) -> None:
    """The file system's class must be on the JVM's classpath from its start: a session of a process whose JVM
    another session started keeps Hadoop's own file system, and its files and checkpoints work."""
    done = subprocess.run([sys.executable, "-c", SECOND_SESSION, str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    file_system, rows = done.stdout.split()
    assert (file_system.startswith("org.apache.hadoop."), rows) == (True, "3")  # Hadoop's, whichever Spark chose


@pytest.mark.parametrize(("master", "submit_args", "defaults", "used"), [
    ("local[2]", "", None, True),
    ("local", "", "# spark.driver.extraClassPath /commented/out\n", True),
    ("local-cluster[2,1,1024]", "", None, False),  # executors of their own would need the jar from their start
    ("spark://host:7077", "", None, False),
    ("local[2]", "--driver-class-path /opt/jdbc.jar pyspark-shell", None, False),  # the jar's would replace it
    ("local[2]", "--conf spark.driver.extraClassPath=/opt/jdbc.jar pyspark-shell", None, False),
    ("local[2]", "", "spark.driver.extraClassPath /opt/jdbc.jar\n", False),
])
def test_local_disk_only_where_it_replaces_nobodys_class_path(master: str, submit_args: str, defaults: str | None,
                                                             used: bool, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext

    from spark_readers.session import _local_disk

    monkeypatch.setattr(SparkContext, "_gateway", None)  # as before the first session of a process
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", submit_args)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    if defaults is not None:
        (tmp_path / "spark-defaults.conf").write_text(defaults)
    assert _local_disk(master) is used
