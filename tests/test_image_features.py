"""Delta features of a table image: deletion vectors (whatever the session's defaults) read by delta-rs's
scan(), the state readable by every delta-rs path, a MERGE matching keys of mixed types, and updates that
reuse the code Spark generated for the last one, read the state ahead of its commit, commit outside UTC as
in UTC, and cache their rows in partitions of bounded size."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import spark_readers.image
import spark_readers.materialise
from gate.common.dc import connect
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import SyntheticChannel
from spark_readers.delta_jars import CRC_CHECK_ON_NON_UTC, image_table_options
from spark_readers.image import STATE, ImageStore
from spark_readers.materialise import ImageUpdater, materialise_channel
from spark_readers.session import SNAPSHOT_PARTITIONS, session_conf
from tests.replay import make_channel
from tests.test_images import state

DEFAULT_DV = "spark.databricks.delta.properties.defaults.enableDeletionVectors"


@pytest.fixture
def dv_off_by_default(spark: SparkSession) -> Iterator[SparkSession]:
    """The session as a cluster that gives new Delta tables no deletion vectors."""
    with session_conf(spark, {DEFAULT_DV: "false"}):
        yield spark


@pytest.fixture
def spark_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit of an image made by Spark, as for an image on HDFS or an object store (on the local file
    system, the driver makes a small update's commits: spark_readers.driver_commits)."""
    monkeypatch.setattr(ImageStore, "local_path", lambda self, relative: None)


def _column(name: str, data_type: str, key: bool) -> dict[str, str]:
    return {"field_name": name, "nullable": "No" if key else "Yes", "primary_key": "Yes" if key else "No",
            "data_type": data_type}


def twenty_rows(sandbox: Sandbox, unique_name: str) -> tuple[SyntheticChannel, dict[str, str]]:
    """A channel whose history creates shop.t (id int key, v int) with rows 1..20 (v = 10 * id), and the
    format("gate") options that read it."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    channel.write([[("shop", "t", "CREATETABLE", {"NEW": [_column("id", "int", True), _column("v", "int", False)]}),
                    *[("shop", "t", "INSERT", {"NEW": [{"id": str(i)}, {"v": str(10 * i)}]}) for i in range(1, 21)]]])
    return channel, {"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user}


def delta_rs_rows(path: Path, version: int | None = None) -> list[dict[str, Any]]:
    """A table's rows read with delta-rs as the docs say (DeltaTable.scan(), which applies deletion vectors)."""
    return pa.table(deltalake.DeltaTable(str(path), version=version).scan()).to_pylist()


def test_image_tables_have_deletion_vectors_whatever_the_defaults(dv_off_by_default: SparkSession, sandbox: Sandbox,
                                                                  unique_name: str, tmp_path: Path,
                                                                  spark_commits: None) -> None:
    """Spark's MERGE marks the changed keys' rows deleted (a deletion vector) instead of copying their file; delta-rs
    reads the table with scan() and refuses it in to_pyarrow_table (never a wrong value); the state has no
    deletion vectors, so every delta-rs path reads it."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(dv_off_by_default, source, str(out))
    channel.write([[("shop", "t", "UPDATE", {"NEW": [{"id": "1"}, {"v": "11"}], "OLD": [{"id": "1"}, {"v": "10"}]}),
                    ("shop", "t", "DELETE", {"OLD": [{"id": "2"}, {"v": "20"}]}),
                    ("shop", "t", "INSERT", {"NEW": [{"id": "30"}, {"v": "300"}]})]])
    materialise_channel(dv_off_by_default, source, str(out))  # a MERGE of the changed keys

    state = json.loads(deltalake.DeltaTable(str(out / STATE)).to_pyarrow_table().column("image")[0].as_py())
    table = deltalake.DeltaTable(str(out / "shop" / "t"))
    assert table.history(1)[0]["operation"] == "MERGE"
    assert state["tables"]["shop.t"]["version"] == table.version() == 1
    assert state["tables"]["shop.t"]["rows"] == 20  # from the MERGE's metrics
    assert pa.table(table.deletion_vectors()).num_rows >= 1  # the MERGE marked rows 1 and 2 deleted in their files
    before = [{"id": i, "v": 10 * i, "_invalid": None} for i in range(1, 21)]  # typed, as CREATETABLE says
    assert sorted(delta_rs_rows(out / "shop" / "t", 0), key=lambda r: r["id"]) == before
    assert sorted(delta_rs_rows(out / "shop" / "t", 1), key=lambda r: r["id"]) == [
        {"id": 1, "v": 11, "_invalid": None}, *before[2:], {"id": 30, "v": 300, "_invalid": None}]
    with pytest.raises(deltalake.exceptions.DeltaProtocolError, match="deletionVectors"):
        table.to_pyarrow_table()
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.reader_features) == (3, ["deletionVectors"])
    assert table.metadata().configuration == {"delta.enableDeletionVectors": "true", "delta.enableTypeWidening": "false",
                                              "delta.columnMapping.mode": "none"}
    protocol = deltalake.DeltaTable(str(out / STATE)).protocol()
    assert (protocol.min_reader_version, protocol.reader_features) == (1, None)


def test_a_table_made_without_deletion_vectors_gets_them_at_its_next_update(
        spark: SparkSession, sandbox: Sandbox, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        spark_commits: None) -> None:
    """A table an older gate made (no deletion vectors; Delta sets table properties only when it creates a
    table) has them turned on by the next update, whose MERGE by Spark then marks rows instead of copying files."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    with monkeypatch.context() as older:  # the image as an older gate wrote it
        older.setattr(spark_readers.image, "image_table_options", lambda deletion_vectors=True: image_table_options(False))
        materialise_channel(spark, source, str(out))
    assert deltalake.DeltaTable(str(out / "shop" / "t")).metadata().configuration["delta.enableDeletionVectors"] == "false"
    channel.write([[("shop", "t", "UPDATE", {"NEW": [{"id": "1"}, {"v": "11"}], "OLD": [{"id": "1"}, {"v": "10"}]}),
                    ("shop", "t", "DELETE", {"OLD": [{"id": "2"}, {"v": "20"}]})]])
    materialise_channel(spark, source, str(out))

    table = deltalake.DeltaTable(str(out / "shop" / "t"))
    assert [h["operation"] for h in table.history(2)] == ["MERGE", "SET TBLPROPERTIES"]
    assert table.metadata().configuration["delta.enableDeletionVectors"] == "true"
    assert pa.table(table.deletion_vectors()).num_rows >= 1
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == [
        {"id": 1, "v": 11, "_invalid": None}, *[{"id": i, "v": 10 * i, "_invalid": None} for i in range(3, 21)]]
    state = json.loads(deltalake.DeltaTable(str(out / STATE)).to_pyarrow_table().column("image")[0].as_py())
    assert (state["tables"]["shop.t"]["version"], state["tables"]["shop.t"]["rows"]) == (table.version(), 19)


def test_a_key_of_columns_of_different_types_is_merged(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                       tmp_path: Path) -> None:
    """A typed table whose key is an int and a varchar gets a MERGE of its changed keys (matched column by
    column), not a rewrite, and keeps the right rows."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    columns = [_column("id", "int", True), _column("code", "varchar(8)", True), _column("v", "decimal(6,2)", False)]
    channel.write([[("shop", "t", "CREATETABLE", {"NEW": columns}),
                    *[("shop", "t", "INSERT", {"NEW": [{"id": str(i)}, {"code": code}, {"v": f"{i}.50"}]})
                      for i, code in ((1, "a"), (1, "b"), (2, "a"))]]])
    out = tmp_path / "image"
    source = {"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user}
    materialise_channel(spark, source, str(out))
    channel.write([[("shop", "t", "UPDATE", {"NEW": [{"id": "1"}, {"code": "b"}, {"v": "9.99"}],
                                            "OLD": [{"id": "1"}, {"code": "b"}, {"v": "1.50"}]}),
                    ("shop", "t", "DELETE", {"OLD": [{"id": "2"}, {"code": "a"}, {"v": "2.50"}]}),
                    ("shop", "t", "INSERT", {"NEW": [{"id": "2"}, {"code": "b"}, {"v": "3.00"}]})]])
    materialise_channel(spark, source, str(out))

    table = deltalake.DeltaTable(str(out / "shop" / "t"))
    assert table.history(1)[0]["operation"] == "MERGE"
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: (r["id"], r["code"])) == [
        {"id": 1, "code": "a", "v": Decimal("1.50"), "_invalid": None},
        {"id": 1, "code": "b", "v": Decimal("9.99"), "_invalid": None},
        {"id": 2, "code": "b", "v": Decimal("3.00"), "_invalid": None}]


def test_the_next_update_reuses_the_code_spark_generated_for_the_last(spark: SparkSession, sandbox: Sandbox,
                                                                      unique_name: str, tmp_path: Path) -> None:
    """Spark keeps the classes it generated for an update (spark_readers.session.CODEGEN_CACHE): the next
    update of the same shape compiles only the few whose code holds its own values, such as the filter
    ``id > watermark`` (10 when written). With Spark's default room for 100 classes it compiled 136 again. The
    session has its settings back after each update."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    compilations = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()  # type: ignore[union-attr]
    keys = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled", SNAPSHOT_PARTITIONS, CRC_CHECK_ON_NON_UTC)
    settings = [spark.conf.get(key, None) for key in keys]
    compiled = []
    for i in (1, 2):
        channel.write([[("shop", "t", "UPDATE", {"NEW": [{"id": str(i)}, {"v": str(i)}],
                                                "OLD": [{"id": str(i)}, {"v": str(10 * i)}]}),
                        ("shop", "t", "INSERT", {"NEW": [{"id": str(20 + i)}, {"v": str(i)}]})]])
        count = compilations.getCount()
        materialise_channel(spark, source, str(out))
        compiled.append(compilations.getCount() - count)

    assert deltalake.DeltaTable(str(out / "shop" / "t")).history(1)[0]["operation"] == "MERGE"
    assert compiled[1] <= 20
    assert [spark.conf.get(key, None) for key in keys] == settings  # the update's own settings are gone
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1, "_invalid": None}, {"id": 2, "v": 2, "_invalid": None},
        *[{"id": i, "v": 10 * i, "_invalid": None} for i in range(3, 21)],
        {"id": 21, "v": 1, "_invalid": None}, {"id": 22, "v": 2, "_invalid": None}]


def test_the_state_is_read_ahead_in_the_callers_job_group(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                         tmp_path: Path, spark_commits: None) -> None:
    """ImageStore.warmed reads the state's Delta snapshot (for Spark's commit of the state) in a thread whose Spark
    jobs have the caller's job group (cancelling the group, as a stopped stream does, cancels those running), and
    starts nothing for a directory without state."""
    _, source = twenty_rows(sandbox, unique_name)
    materialise_channel(spark, source, str(tmp_path / "image"))
    context = spark.sparkContext
    groups = {"empty": f"{unique_name}-empty", "image": f"{unique_name}-image"}
    try:
        for name, group in groups.items():
            context.setJobGroup(group, "reading the state ahead")
            with ImageStore(spark, str(tmp_path / name)).warmed():
                pass
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]

    tracker = context.statusTracker()
    deadline = time.monotonic() + 30  # the tracker learns of jobs from Spark's listener bus, a little later
    while time.monotonic() < deadline:
        jobs = tracker.getJobIdsForGroup(groups["image"])
        if jobs and {tracker.getJobInfo(job).status for job in jobs} == {"SUCCEEDED"}:  # type: ignore[union-attr]
            break
        time.sleep(0.1)
    assert jobs and {tracker.getJobInfo(job).status for job in jobs} == {"SUCCEEDED"}  # type: ignore[union-attr]
    assert tracker.getJobIdsForGroup(groups["empty"]) == []
    assert not [t for t in threading.enumerate() if t.name == "gate-image-state"]
    assert not (tmp_path / "empty").exists()


def test_an_update_in_a_session_outside_utc_skips_deltas_replay_after_each_commit(spark: SparkSession, sandbox: Sandbox,
                                                                                   unique_name: str, tmp_path: Path,
                                                                                   spark_commits: None) -> None:
    """When the session's (or the JVM's) time zone is not UTC, Delta checks the file list in each commit's checksum
    by replaying the table's log after the commit (in UTC only at checkpoints). An update's commits by Spark check at
    checkpoints only (spark_readers.delta_jars.CRC_CHECK_ON_NON_UTC): no table it commits has its state rebuilt after
    the commit, and the rows are the same.
    A session that sets the check keeps it."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    channel.write([[("shop", "t", "UPDATE", {"NEW": [{"id": "1"}, {"v": "1"}], "OLD": [{"id": "1"}, {"v": "10"}]}),
                    ("shop", "t", "DELETE", {"OLD": [{"id": "2"}, {"v": "20"}]})]])
    with session_conf(spark, {"spark.sql.session.timeZone": "Asia/Shanghai"}):
        materialise_channel(spark, source, str(out))

    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog  # type: ignore[union-attr]
    rebuilt = {name: delta_log.forTable(spark._jsparkSession, str(out / name)).unsafeVolatileSnapshot()
               .stateReconstructionTriggered() for name in ("shop/t", STATE)}
    assert rebuilt == {"shop/t": False, STATE: False}
    assert deltalake.DeltaTable(str(out / "shop" / "t")).history(1)[0]["operation"] == "MERGE"
    assert spark.conf.get(CRC_CHECK_ON_NON_UTC, None) is None

    channel.write([[("shop", "t", "DELETE", {"OLD": [{"id": "3"}, {"v": "30"}]})]])
    with session_conf(spark, {"spark.sql.session.timeZone": "Asia/Shanghai", CRC_CHECK_ON_NON_UTC: "true"}):
        materialise_channel(spark, source, str(out))  # the session's own setting is kept: Delta checks
    assert delta_log.forTable(spark._jsparkSession, str(out / "shop" / "t")).unsafeVolatileSnapshot() \
        .stateReconstructionTriggered()
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1, "_invalid": None}, *[{"id": i, "v": 10 * i, "_invalid": None} for i in range(4, 21)]]


def test_the_history_is_read_in_partitions_of_bounded_rows(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """materialise_channel reads the history in partitions of at most PARTITION_ROWS rows (more than the
    source's ``partitions`` when needed: the rows are cached, and a rebuild of 3,000,000 rows in 2 or 4 partitions
    ran out of local mode's default heap); the rows after a watermark in as many as they need. The keys' last
    changes are cached, and the table written, in as many partitions (one per core at least): for a build from
    a stream's first micro-batch, as many as its rows need, not its last id; its rows are cached once."""
    _, source = twenty_rows(sandbox, unique_name)  # 21 rows: the CREATE TABLE and 20 inserts
    monkeypatch.setattr(spark_readers.materialise, "PARTITION_ROWS", 5)
    reads: dict[int, list[int]] = {}
    update_image = spark_readers.materialise.update_image

    def recorded(spark: SparkSession, out_path: str, rows_after: Any, *args: Any, **kwargs: Any) -> Any:
        for after in (0, 18):
            history = rows_after(after)
            reads[after] = [history.rdd.getNumPartitions(), history.count()]
        return update_image(spark, out_path, rows_after, *args, **kwargs)

    with monkeypatch.context() as patch, session_conf(spark, {"spark.sql.shuffle.partitions": "200"}):  # Spark's default
        patch.setattr(spark_readers.materialise, "update_image", recorded)
        materialise_channel(spark, {**source, "partitions": "2"}, str(tmp_path / "image"))

    assert reads == {0: [5, 21], 18: [2, 3]}
    table = deltalake.DeltaTable(str(tmp_path / "image" / "shop" / "t"))
    assert len(table.file_uris()) == 5  # the keys' last changes in as many partitions, not the shuffle's 200
    assert sorted(r["id"] for r in delta_rs_rows(tmp_path / "image" / "shop" / "t")) == list(range(1, 21))

    cached: list[int] = []
    apply = spark_readers.materialise._apply

    def counted(*args: Any) -> Any:
        image = apply(*args)  # it has read the rows: a cache of them exists now
        cached.append(spark.sparkContext._jsc.getPersistentRDDs().size())  # type: ignore[union-attr]
        return image

    monkeypatch.setattr(spark_readers.materialise, "_apply", counted)
    before = spark.sparkContext._jsc.getPersistentRDDs().size()  # type: ignore[union-attr]
    batch = spark.read.format("gate").options(**source, startingId="15").load().persist()  # rows 15..21: 7
    ImageUpdater(str(tmp_path / "from_15"), unique_name, keys={"shop.t": ["id"]})(batch, 0)
    assert cached == [before + 1]  # the micro-batch, not a second copy of it
    assert len(deltalake.DeltaTable(str(tmp_path / "from_15" / "shop" / "t")).file_uris()) == 2  # not 21 / 5
    assert sorted(int(r["id"]) for r in delta_rs_rows(tmp_path / "from_15" / "shop" / "t")) == list(range(14, 21))


def test_a_database_named_like_the_images_state_gets_a_folder_beside_it(spark: SparkSession, sandbox: Sandbox,
                                                                         unique_name: str, tmp_path: Path) -> None:
    """A source database named _gate: its tables go to _gate~2/TABLE, not inside the state's Delta table
    (_gate), where a VACUUM of the state would delete their files; the folder stays through a MERGE and a
    rewrite after an ALTER."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    channel.write([[(STATE, "t", "CREATETABLE", {"NEW": [_column("id", "int", True), _column("v", "int", False)]}),
                    *[(STATE, "t", "INSERT", {"NEW": [{"id": str(i)}, {"v": str(i)}]}) for i in (1, 2)]]])
    source = {"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user}
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    assert state(out)["tables"][f"{STATE}.t"]["path"] == f"{STATE}~2/t"
    assert sorted(p.name for p in (out / STATE).iterdir() if p.is_dir()) == ["_delta_log"]

    channel.write([[(STATE, "t", "INSERT", {"NEW": [{"id": "3"}, {"v": "3"}]})]])
    materialise_channel(spark, source, str(out))  # a MERGE
    channel.write([[(STATE, "t", "ALTERTABLE", {"ADDCOLUMN": [{"field_name": "w", "data_type": "int"}],
                                                "SQL": "ALTER TABLE t ADD w INT"})],
                   [(STATE, "t", "INSERT", {"NEW": [{"id": "4"}, {"v": "4"}, {"w": "40"}]})]])
    materialise_channel(spark, source, str(out))  # a rewrite
    assert state(out)["tables"][f"{STATE}.t"]["path"] == f"{STATE}~2/t"
    assert sorted((r["id"], r["v"], r["w"]) for r in delta_rs_rows(out / f"{STATE}~2" / "t")) == [
        (1, 1, None), (2, 2, None), (3, 3, None), (4, 4, 40)]
    assert sorted(p.name for p in (out / STATE).iterdir() if p.is_dir()) == ["_delta_log"]


def test_a_table_that_found_its_folder_taken_keeps_the_one_it_got(spark: SparkSession, sandbox: Sandbox,
                                                                   unique_name: str, tmp_path: Path) -> None:
    """shop.t renamed to shop.t_old keeps the folder shop/t; a new shop.t gets shop/t~2, and keeps it when an
    ALTER rewrites it (it moved to shop/t~3, leaving its rows in a folder the image no longer names)."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    rename = {"RENAME": [{"from": {"dbname": "shop", "tablename": "t"}, "to": {"dbname": "shop", "tablename": "t_old"}}]}
    channel.write([[("shop", "t", "RENAME", rename)],
                   [("shop", "t", "CREATETABLE", {"NEW": [_column("id", "int", True), _column("w", "int", False)]}),
                    ("shop", "t", "INSERT", {"NEW": [{"id": "1"}, {"w": "5"}]})]])
    materialise_channel(spark, source, str(out))
    paths = {name: t["path"] for name, t in state(out)["tables"].items()}
    assert paths == {"shop.t_old": "shop/t", "shop.t": "shop/t~2"}

    channel.write([[("shop", "t", "ALTERTABLE", {"ADDCOLUMN": [{"field_name": "x", "data_type": "int"}],
                                                 "SQL": "ALTER TABLE t ADD x INT"})],
                   [("shop", "t", "INSERT", {"NEW": [{"id": "2"}, {"w": "6"}, {"x": "7"}]})]])
    materialise_channel(spark, source, str(out))
    assert state(out)["tables"]["shop.t"]["path"] == "shop/t~2"
    assert sorted((r["id"], r["w"], r["x"]) for r in delta_rs_rows(out / "shop" / "t~2")) == [(1, 5, None), (2, 6, 7)]
    assert len(delta_rs_rows(out / "shop" / "t")) == 20
