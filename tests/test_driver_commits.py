"""A small update of an image on the local file system, committed by the driver with delta-rs
(spark_readers.driver_commits): the commits carry what Spark's would (rows, idempotent-write id and version,
userMetadata), a commit made before a kill is skipped when the update runs again, odd column names and columns
named like the update's own are matched, and past the bounds Spark MERGEs."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import spark_readers.driver_commits
from gate.common.dc import connect
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import SyntheticChannel
from spark_readers.image import STATE, Commit, ImageStore, committed, read_image
from spark_readers.materialise import materialise_channel
from spark_readers.session import session_conf
from tests.replay import make_channel
from tests.test_image_features import delta_rs_rows, twenty_rows
from tests.test_images import state

CHANGES = [("shop", "t", "UPDATE", {"NEW": [{"id": "1"}, {"v": "11"}], "OLD": [{"id": "1"}, {"v": "10"}]}),
           ("shop", "t", "DELETE", {"OLD": [{"id": "2"}, {"v": "20"}]}),
           ("shop", "t", "INSERT", {"NEW": [{"id": "30"}, {"v": "300"}]})]
AFTER = [{"id": 1, "v": 11, "_invalid": None}, *[{"id": i, "v": 10 * i, "_invalid": None} for i in range(3, 21)],
         {"id": 30, "v": 300, "_invalid": None}]


def last_commit(path: Path) -> dict[str, object]:
    return deltalake.DeltaTable(str(path)).history(1)[0]


def engines(path: Path, commits: int = 1) -> list[str]:
    """Who made the table's last ``commits`` commits: delta-rs or Apache-Spark."""
    return [re.split("[:/]", str(h["engineInfo"]))[0] for h in deltalake.DeltaTable(str(path)).history(commits)]


def test_a_small_update_is_committed_by_the_driver(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                   tmp_path: Path) -> None:
    """The first build's commits are Spark's; the update's two (the table's MERGE, the state's overwrite) are
    delta-rs's, each the idempotent write gate-image:0 at the watermark's id with the watermark as its
    userMetadata (the state's with the image too), and Spark and delta-rs read the new rows."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    assert engines(out / "shop" / "t") == ["Apache-Spark"]
    channel.write([CHANGES])
    materialise_channel(spark, source, str(out))

    image = state(out)
    watermark = {"channel": unique_name, "watermark": image["watermark"]}
    table, commit = deltalake.DeltaTable(str(out / "shop" / "t")), last_commit(out / "shop" / "t")
    assert (commit["operation"], engines(out / "shop" / "t")) == ("MERGE", ["delta-rs"])
    assert json.loads(str(commit["userMetadata"])) == watermark
    assert table.transaction_version("gate-image:0") == image["watermark"]["id"]
    assert (image["tables"]["shop.t"]["version"], image["tables"]["shop.t"]["rows"]) == (table.version(), 20) == (1, 20)
    commit = last_commit(out / STATE)
    assert (commit["operation"], engines(out / STATE)) == ("WRITE", ["delta-rs"])
    assert json.loads(str(commit["userMetadata"])) == {**watermark, "image": image}
    assert deltalake.DeltaTable(str(out / STATE)).transaction_version("gate-image:0") == image["watermark"]["id"]
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == AFTER
    assert sorted((r.asDict() for r in read_image(spark, str(out))["shop.t"].collect()), key=lambda r: r["id"]) == AFTER
    # Spark's path reads a delta-rs MERGE's metrics (1 inserted, 1 deleted) when it finds the commit made
    made = Commit("gate-image:0", (image["watermark"]["id"], image["watermark"]["tid"]), unique_name)
    assert committed(spark, str(out / "shop" / "t"), made, (0, 1000)) == (1, 1000)
    assert committed(spark, str(out / "shop" / "t"), made, (-1, 1000)) == (1, 20)  # not the next version: counted


class Killed(Exception):
    """The update dies here."""


def test_an_update_killed_after_its_table_commit_skips_it_when_run_again(
        spark: SparkSession, sandbox: Sandbox, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An update that dies after the driver's MERGE and before the state's commit leaves the old image current;
    run again, it leaves the table (changed since the image's version) to Spark's path, which finds the MERGE
    made (the table's idempotent write), makes no second one, and takes the table's rows from the MERGE's
    metrics (delta-rs's names)."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    built = state(out)
    channel.write([CHANGES])

    def die(self: ImageStore, *args: object) -> None:
        raise Killed()

    with monkeypatch.context() as dying:
        dying.setattr(ImageStore, "publish", die)
        with pytest.raises(Killed):
            materialise_channel(spark, source, str(out))
    assert state(out) == built
    assert deltalake.DeltaTable(str(out / "shop" / "t")).version() == 1
    materialise_channel(spark, source, str(out))

    table = deltalake.DeltaTable(str(out / "shop" / "t"))
    assert [h["operation"] for h in table.history()] == ["MERGE", "WRITE"]
    assert (state(out)["tables"]["shop.t"]["version"], state(out)["tables"]["shop.t"]["rows"]) == (1, 20)
    assert state(out)["watermark"]["id"] > built["watermark"]["id"]
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == AFTER


@pytest.mark.parametrize("merged_by", ["delta-rs", "Apache-Spark"])
@pytest.mark.parametrize("typed", [True, False], ids=["typed", "text"])
def test_columns_named_like_the_updates_own_are_merged(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       merged_by: str, typed: bool) -> None:
    """Source columns named key, alive, table, _gate_k0 and _gate_key, in a typed table and in one without a
    CREATETABLE (text columns), through a build, a MERGE by the driver or by Spark, and a rewrite after an ALTER
    (the stored rows the history leaves alone, told from the changed ones by key). The update's own columns
    used those names: its frames held two columns `key` and the MERGE failed (AMBIGUOUS_REFERENCE)."""
    if merged_by == "Apache-Spark":
        monkeypatch.setattr(ImageStore, "local_path", lambda self, relative: None)
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    names = ["key", "alive", "table", "_gate_k0", "_gate_key"]

    def image(key: int, version: int) -> list[dict[str, str | None]]:
        return [{"id": str(key)}, *[{name: f"{name}{version}"} for name in names]]

    create = ("shop", "o", "CREATETABLE", {"NEW": [
        {"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int"},
        *[{"field_name": name, "nullable": "Yes", "primary_key": "No", "data_type": "varchar(20)"}
          for name in names]]})
    inserts = [("shop", "o", "INSERT", {"NEW": image(i, i)}) for i in (1, 2, 3)]
    channel.write([[create, *inserts] if typed else inserts])
    source = {"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user}
    out = tmp_path / "image"
    keys = None if typed else {"shop.o": ["id"]}
    materialise_channel(spark, source, str(out), keys)
    channel.write([[("shop", "o", "UPDATE", {"NEW": image(1, 9), "OLD": image(1, 1)}),
                    ("shop", "o", "DELETE", {"OLD": image(2, 2)}),
                    ("shop", "o", "INSERT", {"NEW": image(4, 4)})]])
    materialise_channel(spark, source, str(out), keys)

    assert engines(out / "shop" / "o") == [merged_by]
    invalid = {"_invalid": None} if typed else {}
    assert sorted(delta_rs_rows(out / "shop" / "o"), key=lambda r: int(r["id"])) == [
        {"id": key if typed else str(key), **{name: f"{name}{version}" for name in names}, **invalid}
        for key, version in ((1, 9), (3, 3), (4, 4))]

    alter = ("shop", "o", "ALTERTABLE", {"ADDCOLUMN": [{"field_name": "extra", "data_type": "varchar(5)"}],
                                         "SQL": "ALTER TABLE o ADD extra VARCHAR(5)"})
    channel.write([[alter], [("shop", "o", "UPDATE", {"NEW": [*image(3, 8), {"extra": "x"}], "OLD": image(3, 3)})]])
    materialise_channel(spark, source, str(out), keys)
    assert sorted(delta_rs_rows(out / "shop" / "o"), key=lambda r: int(r["id"])) == [
        {"id": key if typed else str(key), **{name: f"{name}{version}" for name in names}, "extra": extra,
         **invalid} for key, version, extra in ((1, 9, None), (3, 8, "x"), (4, 4, None))]


@pytest.mark.parametrize("merged_by", ["delta-rs", "Apache-Spark"])
def test_odd_column_names_are_matched(spark: SparkSession, sandbox: Sandbox, unique_name: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch, merged_by: str) -> None:
    """A key whose name has a double quote and capitals, and a column whose name has a backtick, through a build
    and a MERGE by the driver or by Spark (as for an image off the local file system)."""
    if merged_by == "Apache-Spark":
        monkeypatch.setattr(ImageStore, "local_path", lambda self, relative: None)
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    key, note = 'Order"Id', "No`te"
    create = ("shop", "o", "CREATETABLE", {"NEW": [
        {"field_name": key, "nullable": "No", "primary_key": "Yes", "data_type": "int"},
        {"field_name": note, "nullable": "Yes", "primary_key": "No", "data_type": "varchar(8)"}]})
    channel.write([[create, *[("shop", "o", "INSERT", {"NEW": [{key: str(i)}, {note: f"n{i}"}]}) for i in (1, 2, 3)]]])
    source = {"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user}
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    channel.write([[("shop", "o", "UPDATE", {"NEW": [{key: "1"}, {note: "new"}], "OLD": [{key: "1"}, {note: "n1"}]}),
                    ("shop", "o", "DELETE", {"OLD": [{key: "2"}, {note: "n2"}]}),
                    ("shop", "o", "INSERT", {"NEW": [{key: "4"}, {note: None}]})]])
    materialise_channel(spark, source, str(out))

    assert engines(out / "shop" / "o") == [merged_by]
    assert sorted(delta_rs_rows(out / "shop" / "o"), key=lambda r: r[key]) == [
        {key: 1, note: "new", "_invalid": None}, {key: 3, note: "n3", "_invalid": None},
        {key: 4, note: None, "_invalid": None}]


def test_past_the_drivers_bounds_spark_merges(spark: SparkSession, sandbox: Sandbox, unique_name: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A table larger than DRIVER_MERGE_BYTES gets Spark's MERGE (deletion vectors, no copy of the table's
    files; the state is still the driver's commit); the next update's MERGE by the driver keeps out the rows
    those deletion vectors removed; an update of more than DRIVER_MERGE_ROWS new rows is Spark's again."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    channel.write([CHANGES[:2]])  # id 1 updated, id 2 deleted
    with monkeypatch.context() as small:
        small.setattr(spark_readers.driver_commits, "DRIVER_MERGE_BYTES", 1)
        materialise_channel(spark, source, str(out))
    table = deltalake.DeltaTable(str(out / "shop" / "t"))
    assert (table.version(), engines(out / "shop" / "t"), engines(out / STATE)) == (1, ["Apache-Spark"], ["delta-rs"])
    assert pa.table(table.deletion_vectors()).num_rows >= 1

    channel.write([CHANGES[2:], [("shop", "t", "DELETE", {"OLD": [{"id": "3"}, {"v": "30"}]})]])
    materialise_channel(spark, source, str(out))
    assert (deltalake.DeltaTable(str(out / "shop" / "t")).version(), engines(out / "shop" / "t")) == (2, ["delta-rs"])
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == [AFTER[0], *AFTER[2:]]

    channel.write([[("shop", "t", "UPDATE", {"NEW": [{"id": "4"}, {"v": "44"}], "OLD": [{"id": "4"}, {"v": "40"}]})]])
    with monkeypatch.context() as few:
        few.setattr(spark_readers.driver_commits, "DRIVER_MERGE_ROWS", 0)
        materialise_channel(spark, source, str(out))
    assert (deltalake.DeltaTable(str(out / "shop" / "t")).version(), engines(out / "shop" / "t")) == (3, ["Apache-Spark"])
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == [
        AFTER[0], {"id": 4, "v": 44, "_invalid": None}, *AFTER[3:]]
    assert state(out)["tables"]["shop.t"]["rows"] == 19


def test_a_table_with_wide_decimals_is_sparks_and_filters_find_its_rows(spark: SparkSession, sandbox: Sandbox,
                                                                        unique_name: str, tmp_path: Path) -> None:
    """delta-rs 1.6 writes a decimal's file statistics as a double: 1234567890123456.78 (decimal(18,2)) would
    be 1234567890123456.75 there (1234567890123456.8 in the log's JSON), and a filter on its value would skip
    the file. A table with a decimal of more than EXACT_DIGITS digits is MERGEd by Spark, and the filter finds
    the row."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    channel.write([[("shop", "d", "CREATETABLE", {"NEW": [
        {"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int"},
        {"field_name": "d", "nullable": "Yes", "primary_key": "No", "data_type": "decimal(18,2)"}]}),
        ("shop", "d", "INSERT", {"NEW": [{"id": "1"}, {"d": "1.00"}]})]])
    source = {"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user}
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    channel.write([[("shop", "d", "INSERT", {"NEW": [{"id": "2"}, {"d": "1234567890123456.78"}]})]])
    materialise_channel(spark, source, str(out))

    assert engines(out / "shop" / "d") == ["Apache-Spark"]
    found = read_image(spark, str(out))["shop.d"].filter("d = 1234567890123456.78bd").collect()
    assert [(r.id, r.d) for r in found] == [(2, Decimal("1234567890123456.78"))]


def test_an_image_whose_path_has_a_percent_sign_is_sparks(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                          tmp_path: Path) -> None:
    """delta-rs 1.6 decodes %XX in a path when it reads a table's log (img%41 as imgA; the test reads with Spark
    for that reason): an image whose path has a ``%`` is read and committed by Spark."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "img%41"
    materialise_channel(spark, source, str(out))
    channel.write([CHANGES])
    materialise_channel(spark, source, str(out))

    history = spark.sql(f"DESCRIBE HISTORY delta.`{out / 'shop' / 't'}`").orderBy("version").collect()
    assert [(h.operation, h.engineInfo.split("/")[0]) for h in history] == [("WRITE", "Apache-Spark"),
                                                                          ("MERGE", "Apache-Spark")]
    assert sorted((r.asDict() for r in read_image(spark, str(out))["shop.t"].collect()), key=lambda r: r["id"]) == AFTER
    assert not (tmp_path / "imgA").exists()


def test_tables_with_features_delta_rs_does_not_write_are_sparks(spark: SparkSession, sandbox: Sandbox,
                                                                  unique_name: str, tmp_path: Path) -> None:
    """A cluster whose defaults give new Delta tables row tracking (a feature delta-rs 1.6 refuses to commit
    to): the update's MERGE and the state's commit are Spark's, and the rows are right."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    with session_conf(spark, {"spark.databricks.delta.properties.defaults.enableRowTracking": "true"}):
        materialise_channel(spark, source, str(out))
    assert "rowTracking" in (deltalake.DeltaTable(str(out / STATE)).protocol().writer_features or [])
    channel.write([CHANGES])
    materialise_channel(spark, source, str(out))

    assert (engines(out / "shop" / "t"), engines(out / STATE)) == (["Apache-Spark"], ["Apache-Spark"])
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == AFTER
    assert state(out)["tables"]["shop.t"]["rows"] == 20


def test_a_merge_delta_rs_fails_is_sparks(spark: SparkSession, sandbox: Sandbox, unique_name: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """When delta-rs fails to MERGE, the failure is logged and Spark's MERGE makes the commit."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    channel.write([CHANGES])

    def fail(self: object) -> None:
        raise RuntimeError("no room left")

    with monkeypatch.context() as failing:
        failing.setattr(deltalake.table.TableMerger, "execute", fail)
        materialise_channel(spark, source, str(out))
    assert engines(out / "shop" / "t") == ["Apache-Spark"]
    assert "delta-rs failed at a MERGE" in caplog.text and "no room left" in caplog.text
    assert sorted(delta_rs_rows(out / "shop" / "t"), key=lambda r: r["id"]) == AFTER
    assert state(out)["tables"]["shop.t"]["rows"] == 20


def test_checkpoints_and_commits_that_keep_rows(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """The driver checkpoints a table at its delta.checkpointInterval (1 here), and a checkpoint that fails is only
    logged; commits that keep the rows (a table property, VACUUM) leave the next update to the driver, its rows
    counted from the MERGE's metrics."""
    channel, source = twenty_rows(sandbox, unique_name)
    out = tmp_path / "image"
    materialise_channel(spark, source, str(out))
    table = out / "shop" / "t"
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    channel.write([CHANGES])
    materialise_channel(spark, source, str(out))
    assert (deltalake.DeltaTable(str(table)).version(), engines(table)) == (2, ["delta-rs"])
    assert (table / "_delta_log" / "00000000000000000002.checkpoint.parquet").exists()
    # VACUUM lists the files with a job of parallelPartitionDiscovery.parallelism tasks: 10,000 by default, 105 s on
    # local[2] for this table's few files, 15 s with 2 (docs/consumers/spark.md)
    with session_conf(spark, {"spark.databricks.delta.retentionDurationCheck.enabled": "false",
                              "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"}):
        spark.sql(f"VACUUM delta.`{table}` RETAIN 0 HOURS")
    assert [h["operation"] for h in deltalake.DeltaTable(str(table)).history(2)] == ["VACUUM END", "VACUUM START"]

    channel.write([[("shop", "t", "DELETE", {"OLD": [{"id": "3"}, {"v": "30"}]})]])

    def fail(self: object) -> None:
        raise OSError("disk full")

    with monkeypatch.context() as failing:
        failing.setattr(deltalake.DeltaTable, "create_checkpoint", fail)
        materialise_channel(spark, source, str(out))
    assert (deltalake.DeltaTable(str(table)).version(), engines(table)) == (5, ["delta-rs"])
    assert "failed to checkpoint" in caplog.text and "disk full" in caplog.text
    assert not (table / "_delta_log" / "00000000000000000005.checkpoint.parquet").exists()
    assert (state(out)["tables"]["shop.t"]["version"], state(out)["tables"]["shop.t"]["rows"]) == (5, 19)
    assert sorted((r.asDict() for r in read_image(spark, str(out))["shop.t"].collect()), key=lambda r: r["id"]) == [
        AFTER[0], *AFTER[2:]]
