"""spark_readers.source (format("gate")) on a real DC and Spark local[2]: the rows equal the JDBC reader's,
micro-batches end at transaction boundaries, consumers are registered, expired cursors refused; the
README's cluster recipe reads and streams on a standalone cluster; a streaming query killed -9 loses and
doubles no row (the table images: tests/test_images.py). One SparkSession serves the module."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow
import pyspark
import pytest
from pyspark.sql import SparkSession

from gate.common.config import ServerConfig
from gate.common.dc import connect
from gate.common.errors import CursorExpiredError, RowsMissing
from gate.devtools.sandbox import Sandbox, free_port
from gate.devtools.synthetic import RandomHistory, SyntheticChannel
from spark_readers.incremental import read_increment
from spark_readers.jvm_source import source_jar
from spark_readers.rows import to_batch
from spark_readers.session import MARIADB_JAR, ChannelSource
from spark_readers.source import transaction_end
from tests.replay import make_channel

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Synthetic:
    dc: ServerConfig
    channel: str
    history: RandomHistory


@pytest.fixture(scope="module")
def synthetic(sandbox: Sandbox) -> Synthetic:
    """A channel holding random contract rows of every optype (snapshots included), written directly."""
    name = "spark_source_random"
    dc = make_channel(sandbox.dc, sandbox.source, name)
    conn = connect(dc, "DC", name)
    history = RandomHistory(SyntheticChannel(conn, name), "shop", seed=5)
    history.run(300)
    return Synthetic(dc, name, history)


def options(data: Synthetic, **more: object) -> dict[str, str]:
    return {"channel": data.channel, "host": data.dc.host, "port": str(data.dc.port), "user": data.dc.user,
            **{k: str(v) for k, v in more.items()}}


def test_batch_rows_equal_the_jdbc_readers(spark: SparkSession, synthetic: Synthetic) -> None:
    end = synthetic.history.channel.id
    frame = spark.read.format("gate").options(**options(synthetic, partitions=3)).load()
    jdbc = read_increment(spark, ChannelSource(synthetic.dc, synthetic.channel), 0, end)
    got = frame.orderBy("id").collect()
    assert [r.id for r in got] == list(range(1, end + 1))
    assert got == jdbc.orderBy("id").collect()
    assert {r.optype for r in got} >= {"SNAPSHOTSTART", "SNAPSHOT", "SNAPSHOTEND", "RENAME", "TRUNCATE"}


def test_to_batch_gives_every_image_shape_its_columns() -> None:
    """Executors' parsing (flat Arrow buffers per batch): values that are not strings keep their JSON text,
    an image that is not a list is null, columns come from the new image else the old one, DDL payloads
    are conformed, an empty chunk is an empty batch."""
    def row(id_: int, optype: str, payload: object) -> tuple[object, ...]:
        return (id_, 7, "d", "t", 1_700_000_000 + id_, "i", optype, None if payload is None else json.dumps(payload))

    rows = [row(1, "INSERT", {"NEW": [{"a": "1"}, {"b": None}, {"c": 5}, {"d": [1, {"x": "é"}]}, {"e": True}]}),
            row(2, "UPDATE", {"NEW": [{"a": "2"}], "OLD": [{"a": "1"}]}),
            row(3, "DELETE", {"OLD": [{"a": "1"}, {"z": "q"}]}),
            row(4, "DELETE", {"OLD": "not a list"}),
            row(5, "INSERT", [1, 2]),
            row(6, "UPDATE", {"NEW": None, "OLD": [{"a": "x"}]}),
            row(7, "SNAPSHOT", {"NEW": []}),
            row(8, "CREATETABLE", {"primary_key": ["a"], "SELECT": 1, "extra": "dropped"})]
    got = [(r["id"], r["columns"], r["new"], r["old"], r["ddl"] and {k: v for k, v in r["ddl"].items() if v is not None})
           for r in to_batch(rows).to_pylist()]
    assert got == [
        (1, ["a", "b", "c", "d", "e"], [("a", "1"), ("b", None), ("c", "5"), ("d", '[1,{"x":"é"}]'), ("e", "true")],
         None, None),
        (2, ["a"], [("a", "2")], [("a", "1")], None),
        (3, ["a", "z"], None, [("a", "1"), ("z", "q")], None),
        (4, None, None, None, None),
        (5, None, None, None, None),
        (6, ["a"], None, [("a", "x")], None),
        (7, [], [], None, None),
        (8, None, None, None, {"primary_key": ["a"]}),
    ]
    assert to_batch(rows)["create_time"][0].as_py().timestamp() == 1_700_000_001
    assert to_batch([]).num_rows == 0


@pytest.mark.parametrize(("ids", "named"), [
    ([1, 2, 3, 4, 6], "row 5 is"),
    ([1, 2, 5, 6], "rows 3 to 4 are"),
    ([3, 4, 5, 6], "rows 1 to 2 are"),
    ([1, 2, 3], "rows 4 to 6 are"),
    ([1, 2, 3, 4, 5], "row 6 is"),
    ([], "rows 1 to 6 are"),
    ([1, 4, 6], "rows 2 to 3 are"),  # the first gap
])
def test_a_gap_in_a_range_is_named_by_its_first_missing_ids(ids: list[int], named: str) -> None:
    from spark_readers.source import first_gap

    assert first_gap(0, 6, ids) == named


@pytest.mark.parametrize(("start", "want", "expected"), [
    (0, 2, 2),    # 2 ends transaction 1
    (0, 3, 2),    # 3 is inside transaction 2 (3..6): back to the end of 1
    (2, 4, 6),    # transaction 2 is longer than the limit: all of it
    (2, 7, 7),
    (6, 9, 9),    # 9 ends the last transaction before the checkpoint ... and the limit
    (7, 8, 9),    # 8..9 is one transaction
    (9, 100, 10),  # the checkpoint
])
def test_transaction_end(start: int, want: int, expected: int) -> None:
    tids = {1: 1, 2: 1, 3: 2, 4: 2, 5: 2, 6: 2, 7: 3, 8: 4, 9: 4, 10: 5}
    looked: list[int] = []

    def tid_of(id_: int) -> int:
        looked.append(id_)
        return tids[id_]

    assert transaction_end(start, want, 10, tid_of) == expected
    assert len(looked) <= 8


def small_channel(sandbox: Sandbox, name: str, transactions: int, seed: int = 1) -> tuple[ServerConfig, SyntheticChannel]:
    """A channel of ``transactions`` INSERT transactions of 1 to 9 rows each."""
    dc = make_channel(sandbox.dc, sandbox.source, name)
    channel = SyntheticChannel(connect(dc, "DC", name), name)
    channel.write(inserts(transactions, seed))
    return dc, channel


def inserts(transactions: int, seed: int, first: int = 1) -> list[list[tuple[str, str, str, dict[str, Any]]]]:
    rng = random.Random(seed)
    out, key = [], first
    for _ in range(transactions):
        size = rng.randint(1, 9)
        out.append([("shop", "t", "INSERT", {"NEW": [{"id": str(k)}, {"v": "x"}]}) for k in range(key, key + size)])
        key += size
    return out


def login(dc: ServerConfig, channel: str, **more: object) -> dict[str, str]:
    return {"channel": channel, "host": dc.host, "port": str(dc.port), "user": dc.user,
            **{k: str(v) for k, v in more.items()}}


def test_micro_batches_end_at_transactions_and_register_the_consumer(spark: SparkSession, sandbox: Sandbox,
                                                                      unique_name: str, tmp_path: Path) -> None:
    dc, channel = small_channel(sandbox, unique_name, 30)
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid FROM transfer_data ORDER BY id")
        tids = dict(cur.fetchall())
    batches: list[list[tuple[int, int]]] = []
    query = (spark.readStream.format("gate").options(**login(dc, unique_name, maxRowsPerTrigger=25, partitions=2,
                                                             consumer="spark:test")).load()
             .writeStream.foreachBatch(lambda frame, _: batches.append(
                 sorted((r.id, r.tid) for r in frame.select("id", "tid").collect())))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert [row for batch in batches for row in batch] == sorted(tids.items())
    assert len(batches) >= channel.id // 25
    for batch in batches:
        last = batch[-1][0]
        assert last == channel.id or tids[last + 1] != tids[last]  # no transaction is split
        assert len(batch) <= 25 or len({tid for _, tid in batch}) == 1
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid FROM gate_consumer WHERE name = 'spark:test'")
        registered = cur.fetchone()
    ends = [0] + [batch[-1][0] for batch in batches]
    assert registered[0] in ends[-2:] and registered[1] == tids.get(registered[0], 0)  # Spark commits a batch late


def test_an_expired_cursor_below_purged_through_is_refused(spark: SparkSession, sandbox: Sandbox,
                                                           unique_name: str) -> None:
    dc, channel = small_channel(sandbox, unique_name, 10)
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO gate_meta (name, value) VALUES ('purged_through', '12')")
        cur.execute("DELETE FROM transfer_data WHERE id <= 12")
    assert [r.id for r in spark.read.format("gate").options(**login(dc, unique_name)).load().collect()] == list(
        range(13, channel.id + 1))  # by default from the oldest kept row
    with pytest.raises(Exception, match=re.escape(
            f"CursorExpiredError: Channel '{unique_name}' no longer holds the rows after cursor id 4: retention has "
            "removed every row up to id 12, so the oldest kept row is 13 (the channel's retention is off now "
            "(retain_days 0)), and rows 5 to 12 cannot be read again. Restart from the oldest kept row (option "
            "startingId=13, or a new checkpointLocation) or rebuild from a new snapshot of the source tables")):
        spark.read.format("gate").options(**login(dc, unique_name, startingId=5)).load().collect()
    with pytest.raises(Exception, match="takes no password option"):
        spark.read.format("gate").options(**login(dc, unique_name, password="secret")).load().collect()
    with pytest.raises(CursorExpiredError):
        from spark_readers.source import Channel, settings

        with Channel(settings(login(dc, unique_name)).login) as reader:
            reader.start(3)


def test_a_range_read_meeting_removed_rows_is_expired_and_another_gap_is_an_error(sandbox: Sandbox,
                                                                                  unique_name: str) -> None:
    """What an executor's range scan raises when rows are gone: retention's removal (purged_through covers
    them) is CursorExpiredError; a gap retention did not make is RowsMissing, never fewer rows."""
    from spark_readers.source import read_range, settings

    dc, channel = small_channel(sandbox, unique_name, 10)
    reader = settings(login(dc, unique_name)).login
    assert [r for batch in read_range(reader, 0, channel.id) for r in batch.column("id").to_pylist()] == list(
        range(1, channel.id + 1))
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM transfer_data WHERE id IN (7, 8)")
    with pytest.raises(RowsMissing, match=re.escape(
            f"Channel '{unique_name}': rows 7 to 8 are not there, yet retention has removed none of them")):
        list(read_range(reader, 0, channel.id))
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO gate_meta (name, value) VALUES ('purged_through', '8')")
        cur.execute("DELETE FROM transfer_data WHERE id <= 8")
    with pytest.raises(CursorExpiredError) as expired:
        list(read_range(reader, 2, channel.id))
    assert (expired.value.cursor_id, expired.value.purged_through) == (2, 8)
    assert "(option startingId=9, or a new checkpointLocation)" in str(expired.value)


def test_a_streaming_query_killed_9_writes_every_id_once(sandbox: Sandbox, unique_name: str, tmp_path: Path,
                                                         spark: SparkSession) -> None:
    """readStream.format("gate") -> Parquet with a checkpointLocation, killed -9 at random moments and
    restarted, new rows arriving meanwhile: every id is in the Parquet exactly once."""
    dc, channel = small_channel(sandbox, unique_name, 400, seed=3)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = json.dumps(login(dc, unique_name, maxRowsPerTrigger=150, partitions=2))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = random.Random(unique_name)
    kills = 0
    while kills < 2:
        child = subprocess.Popen([sys.executable, "-m", "tests.spark_job", "stream", options, str(out),
                                  str(checkpoint)], cwd=ROOT, env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 240  # a JVM and a first batch: minutes on a loaded machine
            while not (checkpoint / "commits").is_dir() or not any((checkpoint / "commits").iterdir()):
                assert child.poll() is None and time.monotonic() < deadline, "the query did not start"
                time.sleep(0.1)
            time.sleep(rng.uniform(0.0, 2.0))
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        kills += 1
        channel.write(inserts(50, kills, first=channel.id + 1))  # more rows while it is down
    finish = subprocess.run([sys.executable, "-m", "tests.spark_job", "stream", options, str(out), str(checkpoint),
                             "all"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # minutes under load
    assert finish.returncode == 0, finish.stderr[-3000:]
    ids = [r.id for r in spark.read.parquet(str(out)).select("id").collect()]
    assert sorted(ids) == list(range(1, channel.id + 1))


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python with only pyarrow (this venv's, linked in: no pip run): no gate, no pyspark."""
    venv = tmp_path_factory.mktemp("bare-python")
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)], check=True,
                   capture_output=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                               capture_output=True, text=True).stdout.strip())
    installed = Path(pyarrow.__file__).parent
    for package in (installed, *installed.parent.glob(f"pyarrow-{pyarrow.__version__}.dist-info")):
        (site / package.name).symlink_to(package)
    return python


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory, bare_python: str) -> Iterator[str]:
    """A Spark master and a worker (pyspark's spark-class) whose Python workers run ``bare_python``; its
    master URL."""
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    work, port = tmp_path_factory.mktemp("standalone"), free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m", PYSPARK_PYTHON=bare_python)
    daemons = []
    with (work / "cluster.log").open("wb") as log:
        for command in (["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)],
                        ["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
                         "127.0.0.1", "--cores", "2", "--memory", "768m", "--work-dir", str(work / "work")]):
            daemons.append(subprocess.Popen([spark_class, *command, "--webui-port", str(free_port())], env=env,
                                            stdout=log, stderr=log, start_new_session=True))
    yield f"spark://127.0.0.1:{port}"
    for daemon in daemons:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()


@pytest.mark.parametrize("jvm", [False, True], ids=["python-source", "jvm-source"])
def test_the_readmes_cluster_recipe_reads_and_streams(sandbox: Sandbox, unique_name: str, tmp_path: Path,
                                                      bare_python: str, standalone: str, jvm: bool) -> None:
    """The README's recipe on a standalone cluster, as written: the zip from spark_readers.package,
    PYSPARK_PYTHON a Python with only pyarrow, spark-submit --py-files gate-spark.zip, and --jars with
    Connector/J alone (format("gate") is the Python source) or with the JVM source's jar too. A batch read
    and a streaming query (whose Python source runs in a Python process Spark starts on the driver) give
    every row, the executors imported gate's code from the zip, and a typed stream of one table (the
    Python source, which the JVM one hands it to) gives its rows with their types."""
    dc, channel = small_channel(sandbox, unique_name, 30)
    channel.write([[("shop", "typed", "CREATETABLE", {"NEW": [
        {"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "bigint(20) unsigned"},
        {"field_name": "amount", "nullable": "Yes", "primary_key": "No", "data_type": "decimal(10,2)"}]})],
        [("shop", "typed", "INSERT", {"NEW": [{"id": "18446744073709551615"}, {"amount": "-0.50"}]})],
        [("shop", "typed", "UPDATE", {"NEW": [{"id": "18446744073709551615"}, {"amount": "12.00"}],
                                      "OLD": [{"id": "18446744073709551615"}, {"amount": "-0.50"}]})]])
    subprocess.run([sys.executable, "-m", "spark_readers.package", "gate-spark.zip"], cwd=tmp_path, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=bare_python)
    job = subprocess.run([str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", standalone,
                          "--py-files", "gate-spark.zip", "--jars", ",".join([MARIADB_JAR, *[source_jar()] * jvm]),
                          "--conf", "spark.executor.memory=512m",
                          str(ROOT / "tests" / "cluster_job.py"), json.dumps(login(dc, unique_name)),
                          str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stderr[-4000:]
    result = json.loads(job.stdout.strip().splitlines()[-1])
    assert result["batch"] == result["stream"] == list(range(1, channel.id + 1))
    assert result["jvm_source"] == jvm
    last = channel.id
    assert result["typed"] == [[str(2**64 - 1), "-0.50", "c", last - 1], [str(2**64 - 1), "12.00", "u", last]]
    assert "gate-spark.zip/spark_readers/source.py" in result["executor_module"]
