"""Table images as Delta tables (spark_readers.materialise, spark_readers.image) on a real DC and Spark
local[2]: incremental updates equal a rebuild and a consumer's model, a replayed batch commits nothing,
an update killed -9 at any point and restarted ends with the uninterrupted image, time travel by
channel id, an older gate's image is rebuilt, and delta-rs reads the same rows without Spark."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from gate.common.config import ServerConfig
from gate.common.dc import connect
from gate.common.errors import MaterialiseError
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import ImageModel, RandomHistory, SyntheticChannel
from spark_readers.image import STATE, ImageStore, as_of, read_image, register_tables
from spark_readers.materialise import ImageUpdater, materialise_channel
from spark_readers.types import column_type
from tests.replay import make_channel
from tests.test_spark_source import Synthetic

ROOT = Path(__file__).resolve().parent.parent
Tables = dict[str, tuple[list[str], list[tuple[Any, ...]]]]


@pytest.fixture(scope="module")
def synthetic(sandbox: Sandbox) -> Synthetic:
    """A channel holding random contract rows of every optype (snapshots included), written directly."""
    name = "images_random"
    dc = make_channel(sandbox.dc, sandbox.source, name)
    history = RandomHistory(SyntheticChannel(connect(dc, "DC", name), name), "shop", seed=5)
    history.run(300)
    return Synthetic(dc, name, history)


def options(dc: ServerConfig, channel: str, **more: object) -> dict[str, str]:
    return {"channel": channel, "host": dc.host, "port": str(dc.port), "user": dc.user,
            **{k: str(v) for k, v in more.items()}}


def state(out: Path) -> dict[str, Any]:
    """The image's JSON, read with delta-rs (no Spark)."""
    return json.loads(deltalake.DeltaTable(str(out / STATE)).to_pyarrow_table().column("image")[0].as_py())


def image_tables(spark: SparkSession, out: Path) -> Tables:
    return {name: (frame.columns, sorted((tuple(row) for row in frame.collect()), key=repr))
            for name, frame in read_image(spark, str(out)).items()}


def delta_rs_table(out: Path, table: dict[str, Any]) -> pa.Table:
    """One table of the image read with delta-rs in this plain Python process, at the image's version (scan():
    it applies deletion vectors)."""
    return pa.table(deltalake.DeltaTable(str(out / table["path"]), version=table["version"]).scan())


def delta_rs_tables(out: Path) -> Tables:
    """The image's tables read with delta-rs, each at the image's version."""
    tables = {name: delta_rs_table(out, table) for name, table in state(out)["tables"].items()}
    return {name: (table.column_names, sorted((tuple(row.values()) for row in table.to_pylist()), key=repr))
            for name, table in tables.items()}


def model_tables(model: ImageModel, types: dict[str, list[str] | None] | None = None) -> Tables:
    """The model's tables; those ``types`` gives column types for typed by them (values converted from
    the text by spark_readers.types) and followed by ``_invalid``, as typed images hold them."""
    tables: Tables = {}
    for name, table in model.tables.items():
        kinds = (types or {}).get(name)
        rows = [tuple(row[c] for c in table.columns) for row in table.rows.values()]
        if kinds is not None:
            converters = [column_type(kind).convert for kind in kinds]
            rows = [(*(None if v is None else f(v) for v, f in zip(row, converters)), None) for row in rows]
        tables[name] = ([*table.columns, *(["_invalid"] if kinds is not None else [])], sorted(rows, key=repr))
    return tables


def random_types(model: ImageModel) -> dict[str, list[str] | None]:
    """The column types RandomHistory gives its tables: key int, the others varchar(20)."""
    return {name: ["int" if c in table.key else "varchar(20)" for c in table.columns]
            for name, table in model.tables.items()}


def test_incremental_images_equal_a_full_rebuild(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                 tmp_path: Path) -> None:
    """Three incremental updates of one image equal one rebuild from the whole history and the images a
    consumer applying the rows holds: key changes, ADD/DROP COLUMN, TRUNCATE, RENAME, DROP and CREATE
    again, snapshots done and cancelled. delta-rs reads the same rows; each update is a Delta commit of
    the state whose userMetadata is the watermark, and as_of reads each earlier image by channel id."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    history = RandomHistory(SyntheticChannel(connect(dc, "DC", unique_name), unique_name), "shop", seed=7,
                            ddl_rate=0.04, snapshot_rate=0.02)
    source = options(dc, unique_name)
    earlier: list[tuple[int, Tables]] = []
    for _ in range(3):
        history.run(60)
        materialise_channel(spark, source, str(tmp_path / "inc"))
        assert state(tmp_path / "inc")["watermark"] == {"id": history.channel.id, "tid": history.channel.tid}
        expected = model_tables(history.model, random_types(history.model))
        assert {name: t["types"] for name, t in state(tmp_path / "inc")["tables"].items()} == random_types(history.model)
        assert image_tables(spark, tmp_path / "inc") == expected
        assert delta_rs_tables(tmp_path / "inc") == expected
        earlier.append((history.channel.id, expected))
    for channel_id, expected in earlier:
        assert {name: (frame.columns, sorted((tuple(r) for r in frame.collect()), key=repr))
                for name, frame in as_of(spark, str(tmp_path / "inc"), channel_id + 1).items()} == expected
    with pytest.raises(MaterialiseError, match=re.escape(f"starts at channel id {earlier[0][0]}: there is no image "
                                                         f"as of {earlier[0][0] - 1}")):
        as_of(spark, str(tmp_path / "inc"), earlier[0][0] - 1)
    history_rows = deltalake.DeltaTable(str(tmp_path / "inc" / STATE)).history()
    assert sorted(json.loads(h["userMetadata"])["watermark"]["id"] for h in history_rows) == [i for i, _ in earlier]
    result = materialise_channel(spark, source, str(tmp_path / "full"))
    assert image_tables(spark, tmp_path / "full") == image_tables(spark, tmp_path / "inc")
    assert result.tables == {name: len(table.rows) for name, table in history.model.tables.items()}


def stream_image(spark: SparkSession, synthetic: Synthetic, out: Path, checkpoint: Path,
                 rows_per_trigger: int) -> ImageUpdater:
    """A foreachBatch(ImageUpdater) query in this process, until caught up; its updater."""
    source = options(synthetic.dc, synthetic.channel, maxRowsPerTrigger=rows_per_trigger)
    updater = ImageUpdater(str(out), synthetic.channel, source=source)
    query = (spark.readStream.format("gate").options(**source).load().writeStream.foreachBatch(updater)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    return updater


def test_a_stream_keeps_an_image_with_foreach_batch(spark: SparkSession, synthetic: Synthetic, tmp_path: Path) -> None:
    """ImageUpdater applies each micro-batch; the image equals the model; a replayed batch commits nothing."""
    out = tmp_path / "image"
    updater = stream_image(spark, synthetic, out, tmp_path / "checkpoint", 1000)
    before = state(out)
    assert before["watermark"]["id"] == synthetic.history.channel.id
    assert image_tables(spark, out) == model_tables(synthetic.history.model, random_types(synthetic.history.model))
    versions = deltalake.DeltaTable(str(out / STATE)).version()
    first = spark.read.format("gate").options(**options(synthetic.dc, synthetic.channel, endingId=600)).load()
    updater(first, 0)  # Spark replays a batch after a crash: the image is past it
    assert state(out) == before and deltalake.DeltaTable(str(out / STATE)).version() == versions
    statuses = {t["snapshot"]["state"] for t in before["tables"].values() if t["snapshot"]}
    assert statuses and statuses <= {"done", "cancelled"}  # every snapshot of the history ended


KILL_BATCH = 700  # rows per micro-batch of the kill test: its history in two batches


def kill_image_job(synthetic: Synthetic, out: Path, checkpoint: Path, killed_when: Any) -> None:
    """tests.spark_job's image stream (foreachBatch(ImageUpdater), batches of KILL_BATCH rows) in a child
    process, killed -9 as soon as ``killed_when()`` holds."""
    command = [sys.executable, "-m", "tests.spark_job", "image",
               json.dumps(options(synthetic.dc, synthetic.channel, maxRowsPerTrigger=KILL_BATCH)), str(out),
               str(checkpoint), "all"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 900  # a condition, not a timing: generous for a loaded machine
        while not killed_when():
            assert child.poll() is None and time.monotonic() < deadline, "the query never reached the kill point"
            time.sleep(0.01)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def table_commits(out: Path) -> int:
    """Commits of the image's tables (not of its state) so far."""
    return sum(1 for log in out.glob("*/*/_delta_log/*.json"))


def test_an_image_stream_killed_9_at_any_point_recovers(spark: SparkSession, synthetic: Synthetic,
                                                        tmp_path: Path) -> None:
    """foreachBatch(ImageUpdater) in a child process killed -9 after a table's first commit (no state yet),
    then again after a table commit of the second batch (the state one update behind), then restarted
    here with the same checkpoint: Spark replays the batch, Delta skips the commits already made, and
    the image equals the model (which an uninterrupted stream's equals: the test above)."""
    out, checkpoint = tmp_path / "image", tmp_path / "checkpoint"
    assert synthetic.history.channel.id > KILL_BATCH  # two batches
    kill_image_job(synthetic, out, checkpoint, lambda: table_commits(out) >= 1)
    assert not (out / STATE).exists()
    first_update: list[int] = []  # the table commits when the state appears: the first batch's

    def in_second_batch() -> bool:
        if (out / STATE).exists() and not first_update:
            first_update.append(table_commits(out))
        return bool(first_update) and table_commits(out) > first_update[0]

    kill_image_job(synthetic, out, checkpoint, in_second_batch)
    assert state(out)["watermark"]["id"] < synthetic.history.channel.id
    stream_image(spark, synthetic, out, checkpoint, KILL_BATCH)
    assert state(out)["watermark"]["id"] == synthetic.history.channel.id
    assert delta_rs_tables(out) == model_tables(synthetic.history.model, random_types(synthetic.history.model))


def test_an_older_gates_image_is_rebuilt_and_a_foreign_directory_refused(spark: SparkSession, tmp_path: Path) -> None:
    """An image of an older gate (Parquet behind _gate_image.json) is removed, pointer last; a directory
    without state that holds anything but Delta tables is refused and left as it is."""
    (tmp_path / "old" / "v-00000000000000000012" / "shop" / "t").mkdir(parents=True)
    (tmp_path / "old" / "_gate_image.json").write_text("{}")
    assert ImageStore(spark, str(tmp_path / "old")).current("c") is None
    assert os.listdir(tmp_path / "old") == []
    (tmp_path / "other" / "shop").mkdir(parents=True)
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(MaterialiseError, match=re.escape(
            f"file:{tmp_path}/other is not empty and holds no image (no {STATE}): give a new or empty "
            "directory for the table images.")):
        ImageStore(spark, str(tmp_path / "other")).current("c")
    assert sorted(os.listdir(tmp_path / "other")) == ["notes.txt", "shop"]


def test_a_snapshot_of_a_table_without_key(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                           tmp_path: Path) -> None:
    """SNAPSHOTSTART with key []: the whole row is the identity (a MERGE on the whole row, NULLs
    included); SNAPSHOTEND(done) marks the table complete, a running snapshot leaves it incomplete; a
    rebuild at the same watermark is a new generation, committed although the watermark is the same."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    model = ImageModel()
    columns = [{"field_name": c, "nullable": "Yes", "primary_key": "No", "data_type": "text"} for c in ("a", "b")]

    def row(a: str, b: str | None) -> list[dict[str, str | None]]:
        return [{"a": a}, {"b": b}]

    def write(*changes: tuple[str, dict[str, Any]]) -> None:
        rows = [("shop", "nokey", optype, data) for optype, data in changes]
        for change in rows:
            model.apply(*change)
        channel.write([rows])

    channel.write([[("shop", "nokey", "INSERT", {"NEW": row("ghost", "x")})]])  # the snapshot must drop it
    write(("SNAPSHOTSTART", {"NEW": columns, "SNAPSHOT": {"id": 9, "reason": "test", "key": []}}))
    write(("SNAPSHOT", {"NEW": row("1", "x")}), ("SNAPSHOT", {"NEW": row("2", None)}))
    out = tmp_path / "image"
    source = options(dc, unique_name)
    materialise_channel(spark, source, str(out))
    assert state(out)["tables"]["shop.nokey"] == {
        "path": "shop/nokey", "version": 0, "columns": ["a", "b"], "types": ["text", "text"], "key": [], "rows": 2,
        "complete": False, "snapshot": {"id": 9, "state": "running"}}
    write(("SNAPSHOT", {"NEW": row("3", "z")}))
    write(("SNAPSHOTEND", {"SNAPSHOT": {"id": 9, "rows": 3, "state": "done"}}))
    write(("UPDATE", {"NEW": row("2", "y"), "OLD": row("2", None)}), ("DELETE", {"OLD": row("3", "z")}),
          ("INSERT", {"NEW": row("1", "x")}))  # the same row twice: one identity, one image row
    materialise_channel(spark, source, str(out))
    table = state(out)["tables"]["shop.nokey"]
    assert (table["complete"], table["snapshot"], table["version"]) == (True, {"id": 9, "state": "done"}, 1)
    assert deltalake.DeltaTable(str(out / "shop" / "nokey")).history(1)[0]["operation"] == "MERGE"
    assert image_tables(spark, out) == model_tables(model, {"shop.nokey": ["text", "text"]}) == {
        "shop.nokey": (["a", "b", "_invalid"], [("1", "x", None), ("2", "y", None)])}
    assert register_tables(spark, str(out), "lake") == ["lake.shop_nokey"]
    assert sorted(tuple(r) for r in spark.table("lake.shop_nokey").collect()) == [("1", "x", None), ("2", "y", None)]
    materialise_channel(spark, source, str(out), full=True)
    rebuilt = state(out)
    assert (rebuilt["generation"], rebuilt["tables"]["shop.nokey"]["version"]) == (1, 2)
    assert image_tables(spark, out) == model_tables(model, {"shop.nokey": ["text", "text"]})
