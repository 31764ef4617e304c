"""The JVM format("gate") (spark_readers/jvm) on a real DC and Spark local[2], against the Python source
(format("gate_python")): the same rows in batch and stream, micro-batches ending at transactions, a restart
from the checkpointLocation (either source's) losing and doubling nothing, no offset above the checkpoint,
the clear errors for purged and missing rows, and no password in plans. One SparkSession serves the module."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from gate.common.dc import connect
from gate.common.errors import JvmSourceUnavailable
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import RandomHistory, SyntheticChannel
from spark_readers import jvm_source as jar
from spark_readers.rows import ROW_SCHEMA
from spark_readers.source import jvm_source
from tests.replay import make_channel
from tests.test_spark_source import inserts, login, small_channel


def test_the_jar_is_built_once_with_the_schema_and_a_failed_build_says_why(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATE_JARS", str(tmp_path / "jars"))
    built = jar.source_jar()
    with zipfile.ZipFile(built) as archive:
        assert archive.read(jar.SCHEMA_RESOURCE).decode() == ROW_SCHEMA.json()
        assert archive.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode().split() == [
            "gate.spark.GateProvider"]
    stamp = Path(built).stat().st_mtime_ns
    assert jar.source_jar() == built and Path(built).stat().st_mtime_ns == stamp  # not built again
    broken = tmp_path / "main"
    shutil.copytree(jar.SOURCES, broken)
    (broken / "java" / "gate" / "spark" / "Broken.java").write_text("package gate.spark; class Broken { int x = }")
    monkeypatch.setattr(jar, "SOURCES", broken)
    with pytest.raises(JvmSourceUnavailable, match=r'(?s)javac could not compile the JVM format\("gate"\) in .*'
                                                   r"Broken.java.*Is the JDK 17 or newer"):
        jar.source_jar()
    monkeypatch.setattr(shutil, "which", lambda _: None)
    with pytest.raises(JvmSourceUnavailable, match=re.escape(
            'Building the jar of format("gate") needs a JDK (javac), and none is on the PATH. Install one')):
        jar.source_jar()
    assert sorted(p.name for p in (tmp_path / "jars").iterdir()) == [Path(built).parent.name]  # nothing half-built


def rows(frame: DataFrame) -> list[Any]:
    return frame.orderBy("id").collect()


def test_batch_rows_equal_the_python_sources(spark: SparkSession, sandbox: Sandbox, unique_name: str) -> None:
    """Every optype (snapshots, DDL, images of every shape RandomHistory writes), whole and in a range."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    history = RandomHistory(SyntheticChannel(connect(dc, "DC", unique_name), unique_name), "shop", seed=11)
    history.run(300)
    assert jvm_source(spark)
    both = {name: spark.read.format(name).options(**login(dc, unique_name, partitions=3)) for name in
            ("gate", "gate_python")}
    jvm, python = rows(both["gate"].load()), rows(both["gate_python"].load())
    assert [r.id for r in jvm] == list(range(1, history.channel.id + 1))
    assert jvm == python
    assert {r.optype for r in jvm} >= {"SNAPSHOTSTART", "SNAPSHOT", "SNAPSHOTEND", "CREATETABLE", "RENAME"}
    ranged = {name: rows(reader.options(startingId=40, endingId=90).load()) for name, reader in both.items()}
    assert [r.id for r in ranged["gate"]] == list(range(40, 91)) and ranged["gate"] == ranged["gate_python"]


PAYLOADS = [  # (optype, data as stored): gate's plain shape and every other one the parsers must agree on
    ("INSERT", '{"NEW":[{"a":"1"},{"b":null},{"c":"é ☃"}]}'),
    ("UPDATE", '{ "NEW" : [ {"a" : "2"} ] ,\n "OLD": [{"a": "1"}] }'),
    ("INSERT", '{"NEW": [{"a": "say \\"hi\\""}, {"b": "\\u00e9\\n"}, {"c": 5}, {"d": [1, {"x": "é"}]}, {"e": true}]}'),
    ("DELETE", '{"OLD": [{"a": "1", "z": "q"}]}'),
    ("DELETE", '{"OLD": "not a list"}'),
    ("INSERT", "[1, 2]"),
    ("UPDATE", '{"NEW": null, "OLD": [{"a": "x"}], "other": 1}'),
    ("SNAPSHOT", '{"NEW": []}'),
    ("INSERT", "{}"),
    ("INSERT", None),
    ("INSERT", ""),
    ("CREATETABLE", '{"primary_key": ["a"], "SELECT": 1, "extra": "dropped", "NEW": [{"field_name": "a", '
                    '"nullable": false, "primary_key": "Yes", "data_type": "int"}]}'),
    ("RENAME", '{"RENAME": [{"from": {"dbname": "d", "tablename": "t"}, "to": {"dbname": "d", "tablename": "u"}}]}'),
    ("SNAPSHOTEND", '{"SNAPSHOT": {"id": 3, "reason": "gate", "key": ["a"], "rows": 9.5, "state": "done"}}'),
    ("TRUNCATE", None),
]


def test_every_payload_shape_parses_as_the_python_sources(spark: SparkSession, sandbox: Sandbox,
                                                          unique_name: str) -> None:
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO transfer_data (id, tid, dbname, tablename, create_time, instance_name, optype, "
                        "data) VALUES (%s, %s, 'd', 't', FROM_UNIXTIME(1700000000), 'i', %s, %s)",
                        [(i, i, optype, data) for i, (optype, data) in enumerate(PAYLOADS, 1)])
        cur.execute("UPDATE transfer_checkpoint SET id = %s, tid = %s", (len(PAYLOADS), len(PAYLOADS)))
    jvm, python = (rows(spark.read.format(name).options(**login(dc, unique_name)).load())
                   for name in ("gate", "gate_python"))
    assert [(r.id, r.columns, r.new, r.old) for r in jvm][:4] == [
        (1, ["a", "b", "c"], {"a": "1", "b": None, "c": "é ☃"}, None),
        (2, ["a"], {"a": "2"}, {"a": "1"}),
        (3, ["a", "b", "c", "d", "e"], {"a": 'say "hi"', "b": "é\n", "c": "5", "d": '[1,{"x":"é"}]', "e": "true"}, None),
        (4, ["a", "z"], None, {"a": "1", "z": "q"})]
    assert jvm == python


def test_the_password_reaches_the_executors_but_no_plan(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                        tmp_path: Path) -> None:
    """From gate's config file; passwordEnv names a variable of the JVM's environment (which it took from the
    driver's Python when the session started)."""
    dc, channel = small_channel(sandbox, unique_name, 5)
    secret = f"pw-{unique_name}-x"
    with connect(dc, "DC") as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{unique_name}'@'%' IDENTIFIED BY '{secret}'")
        cur.execute(f"GRANT SELECT ON {unique_name}.* TO '{unique_name}'@'%'")
    config = tmp_path / "config.yaml"
    config.write_text(f"dc:\n  host: {dc.host}\n  port: {dc.port}\n  user: {unique_name}\n  password: {secret}\n")
    loaded = spark.read.format("gate").option("config", str(config)).option("channel", unique_name).load()
    assert [r.id for r in loaded.select("id").collect()] == list(range(1, channel.id + 1))
    plans = loaded._jdf.queryExecution().toString()
    assert f"gate channel Login({unique_name}@{dc.host}:{dc.port}/{unique_name})" in plans
    assert secret not in plans
    with pytest.raises(Exception, match="takes no password option"):
        spark.read.format("gate").options(**login(dc, unique_name, password=secret)).load()
    with pytest.raises(Exception, match=re.escape(
            "format(\"gate\") option passwordEnv names the environment variable GATE_UNSET_PW, which is not set. Export "
            "GATE_UNSET_PW=... in the driver's environment.")):
        spark.read.format("gate").options(**login(dc, unique_name, passwordEnv="GATE_UNSET_PW")).load()


def stream(spark: SparkSession, source: str, options: dict[str, str], checkpoint: Path) -> list[list[tuple[int, int]]]:
    """Run a streaming query of ``source`` to the end of what there is (Trigger.AvailableNow); its batches' (id, tid)."""
    batches: list[list[tuple[int, int]]] = []
    (spark.readStream.format(source).options(**options).load().writeStream
     .foreachBatch(lambda frame, _: batches.append(sorted((r.id, r.tid) for r in frame.select("id", "tid").collect())))
     .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start().awaitTermination())
    return batches


def tids(dc: Any, channel: str) -> dict[int, int]:
    with connect(dc, "DC", channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid FROM transfer_data ORDER BY id")
        return dict(cur.fetchall())


def test_a_stream_ends_batches_at_transactions_and_restarts_from_either_sources_checkpoint(
        spark: SparkSession, sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    dc, channel = small_channel(sandbox, unique_name, 30)
    options = login(dc, unique_name, maxRowsPerTrigger=25, partitions=2, consumer="jvm")
    first = stream(spark, "gate", options, tmp_path / "checkpoint")
    python = stream(spark, "gate_python", options, tmp_path / "python")
    assert first == python
    known = tids(dc, unique_name)
    assert [row for batch in first for row in batch] == sorted(known.items())
    for batch in first:
        last = batch[-1][0]
        assert last == channel.id or known[last + 1] != known[last]  # no transaction is split
        assert len(batch) <= 25 or len({tid for _, tid in batch}) == 1
    read = channel.id
    for source, seed in (("gate", 7), ("gate_python", 8), ("gate", 9)):  # each continues the other's offsets
        channel.write(inserts(10, seed, first=channel.id + 1))
        more = stream(spark, source, options, tmp_path / "checkpoint")
        assert [row[0] for batch in more for row in batch] == list(range(read + 1, channel.id + 1)), source
        read = channel.id
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM gate_consumer WHERE name = 'jvm'")
        assert cur.fetchone()[0] in (read, *(b[-1][0] for b in more))  # Spark commits a batch late


def test_no_row_above_the_checkpoint_is_read_or_planned(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                        tmp_path: Path) -> None:
    dc, channel = small_channel(sandbox, unique_name, 20)
    known = tids(dc, unique_name)
    held = max(i for i in known if i < channel.id - 10 and known[i + 1] != known[i])  # a transaction's end
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("UPDATE transfer_checkpoint SET id = %s, tid = %s", (held, known[held]))
    options = login(dc, unique_name, maxRowsPerTrigger=7)
    assert [r.id for r in rows(spark.read.format("gate").options(**options).load())] == list(range(1, held + 1))
    batches = stream(spark, "gate", options, tmp_path / "checkpoint")
    assert [row[0] for batch in batches for row in batch] == list(range(1, held + 1))
    with pytest.raises(Exception, match=re.escape(f"endingId={held + 1} is above the checkpoint of channel "
                                                  f"'{unique_name}', {held}")):
        spark.read.format("gate").options(**login(dc, unique_name, endingId=held + 1)).load().collect()
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:  # the channel made again, shorter
        cur.execute("UPDATE transfer_checkpoint SET id = 3, tid = %s", (known[3],))
    with pytest.raises(Exception, match=re.escape(
            f"The query's offset, row {held}, is beyond the checkpoint of channel '{unique_name}' (row 3): rows above "
            f"the checkpoint may be missing or incomplete, and reading on from there would skip rows 4 to {held} "
            "without a word. Was the channel dropped and created again? Start the query with a new checkpointLocation.")):
        stream(spark, "gate", options, tmp_path / "checkpoint")


def test_purged_and_missing_rows_give_the_clear_errors(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                       tmp_path: Path) -> None:
    dc, channel = small_channel(sandbox, unique_name, 10)
    options = login(dc, unique_name, partitions=1)
    assert stream(spark, "gate", options, tmp_path / "checkpoint")  # the query's offset: the checkpoint
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM transfer_data WHERE id IN (7, 8)")
    with pytest.raises(Exception, match=re.escape(
            f"RowsMissing: Channel '{unique_name}': rows 7 to 8 are not there, yet retention has removed none of "
            "them")):
        spark.read.format("gate").options(**options).load().collect()
    end = channel.id
    channel.write(inserts(5, 3, first=end + 1))
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO gate_meta (name, value) VALUES ('purged_through', %s)", (str(end + 2),))
        cur.execute("DELETE FROM transfer_data WHERE id <= %s", (end + 2,))
    expired = (f"Channel '{unique_name}' no longer holds the rows after cursor id {end}: retention "
               f"has removed every row up to id {end + 2}, so the oldest kept row is {end + 3} (the channel's retention "
               f"is off now (retain_days 0)), and rows {end + 1} to {end + 2} cannot be read again. Restart from the "
               f"oldest kept row (option startingId={end + 3}, or a new checkpointLocation)")
    with pytest.raises(Exception, match=re.escape(expired)):
        stream(spark, "gate", options, tmp_path / "checkpoint")
    from_five = expired.replace(f"cursor id {end}", "cursor id 4").replace(f"rows {end + 1} to", "rows 5 to")
    with pytest.raises(Exception, match=re.escape(f"CursorExpiredError: {from_five}")):
        spark.read.format("gate").options(**login(dc, unique_name, startingId=5)).load().collect()
