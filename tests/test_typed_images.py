"""Typed table images (spark_readers.image_types): every value of the type matrix equals the source's,
read by Spark and by delta-rs, through inserts, a snapshot, updates and deletes; and ALTERs of typed
columns (widening, a change that is not one, ADD with a default, DROP, rename) applied to the Delta table."""

from __future__ import annotations

import re
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pytest
from pyspark.sql import SparkSession

import spark_readers.driver_commits
from gate.common.dc import connect
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import SyntheticChannel
from spark_readers.image import ImageStore, read_image
from spark_readers.materialise import materialise_channel
from spark_readers.types import to_time
from tests.replay import make_channel, wait_caught_up
from tests.test_images import delta_rs_table, options, state
from tests.test_snapshot import request, wait_finished
from tests.test_type_matrix import COLUMNS
from tests.test_typed_stream import NO_CODEC, matrix_channel, same, source_rows, zero_invalid

TIMES = {name for name, kind, _ in COLUMNS if kind.startswith("TIME(")}  # their text: Delta has no interval type


def as_dict(invalid: Any) -> dict[str, str] | None:
    """``_invalid`` as a dict (delta-rs gives a map as a list of pairs)."""
    return dict(invalid) if isinstance(invalid, list) else invalid


def assert_image_equals(where: str, rows: list[dict[str, Any]], source: dict[int, dict[str, Any]]) -> None:
    """Each image row's values equal the source row's of its id (read with PyMySQL); zero dates are NULL
    with their text in _invalid."""
    assert sorted(row["id"] for row in rows) == sorted(source), where
    for row in rows:
        want = source[row["id"]]
        for name, kind, _ in COLUMNS:
            got = to_time(row[name]) if name in TIMES and row[name] is not None else row[name]
            assert name in NO_CODEC or same(name, kind, want[name], got), (
                f"{where}, id {row['id']}: column {name} ({kind}) {got!r} != {want[name]!r}")
        assert as_dict(row["_invalid"]) == (zero_invalid() if row["id"] == 3 else None), f"{where}, id {row['id']}"


def check_image(spark: SparkSession, out: Path, where: str, source: dict[int, dict[str, Any]]) -> None:
    table = state(out)["tables"][f"{where}.everything"]
    frame = read_image(spark, str(out))[f"{where}.everything"]
    assert_image_equals(f"Spark's {where}", [r.asDict() for r in frame.collect()], source)
    delta_rs = delta_rs_table(out, table)
    assert_image_equals(f"delta-rs's {where}", delta_rs.to_pylist(), source)
    spark_types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    assert {n: spark_types[n] for n in ("ti", "tiu", "biu", "dec65_30", "dec10_2", "f", "dt6", "ts6", "tm6", "dte",
                                        "yr", "bit1", "bit9", "bit64", "st", "bl", "uu", "_invalid")} == {
        "ti": "tinyint", "tiu": "smallint", "biu": "decimal(20,0)", "dec65_30": "string", "dec10_2": "decimal(10,2)",
        "f": "float", "dt6": "timestamp_ntz", "ts6": "timestamp", "tm6": "string", "dte": "date", "yr": "smallint",
        "bit1": "boolean", "bit9": "bigint", "bit64": "decimal(20,0)", "st": "array<string>", "bl": "binary",
        "uu": "string", "_invalid": "map<string,string>"}
    arrow = {f.name: str(f.type) for f in delta_rs.schema}
    assert {n: arrow[n] for n in ("ti", "biu", "dt6", "ts6", "dte", "bit1", "st", "bl")} == {
        "ti": "int8", "biu": "decimal128(20, 0)", "dt6": "timestamp[us]", "ts6": "timestamp[us, tz=UTC]",
        "dte": "date32[day]", "bit1": "bool", "st": "list<element: string_view>", "bl": "binary_view"}  # scan()'s


@pytest.mark.parametrize("merged_by", ["delta-rs", "Apache-Spark"])
def test_typed_images_equal_the_source_over_the_type_matrix(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            merged_by: str) -> None:
    """Every type of the matrix through a running channel (TIMESTAMP in a zone that is not UTC, hex
    binaries) into an image updated three times: the inserted rows (a new table), a snapshot with an
    update and a delete after it (a rewrite: SNAPSHOTSTART replaces the rows), then an update and a
    delete alone (a MERGE: by the driver with delta-rs, as for a local image, or by Spark, as for one on
    HDFS). Each time every value Spark and delta-rs read equals the source's."""
    if merged_by == "Apache-Spark":
        monkeypatch.setattr(ImageStore, "local_path", lambda self, relative: None)
    else:  # the values through delta-rs (its statistics of wide decimals: test_driver_commits)
        monkeypatch.setattr(spark_readers.driver_commits, "EXACT_DIGITS", 38)
    out = tmp_path / "image"
    with matrix_channel(sandbox, unique_name, "Etc/GMT-8", "hex") as (dc, db, conn, cur):
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        materialise_channel(spark, options(dc, unique_name), str(out))
        check_image(spark, out, db, source_rows(conn, db))

        snapshot = request(sandbox.dc, unique_name, db, "everything")
        assert wait_finished(sandbox.dc, unique_name, snapshot) == ("done", None)
        cur.execute(f"UPDATE `{db}`.everything SET i = -5, dte = '2001-02-03', vb = 0x00ff WHERE id = 1")
        cur.execute(f"DELETE FROM `{db}`.everything WHERE id = 2")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        materialise_channel(spark, options(dc, unique_name), str(out))
        check_image(spark, out, db, source_rows(conn, db))
        assert state(out)["tables"][f"{db}.everything"]["snapshot"] == {"id": snapshot, "state": "done"}

        cur.execute(f"UPDATE `{db}`.everything SET dt6 = '2030-01-02 03:04:05.000006', biu = 7 WHERE id = 4")
        cur.execute(f"DELETE FROM `{db}`.everything WHERE id = 5")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        materialise_channel(spark, options(dc, unique_name), str(out))
        check_image(spark, out, db, source_rows(conn, db))
    table = state(out)["tables"][f"{db}.everything"]
    merge = deltalake.DeltaTable(str(out / table["path"])).history(1)[0]
    assert (merge["operation"], re.split("[:/]", merge["engineInfo"])[0]) == ("MERGE", merged_by)


def _column(name: str, data_type: str, key: bool = False) -> dict[str, str]:
    return {"field_name": name, "nullable": "No" if key else "Yes", "primary_key": "Yes" if key else "No",
            "data_type": data_type}


def test_alters_of_typed_columns(spark: SparkSession, sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    """ALTERs after the image's rows: int -> bigint and decimal(10,2) -> decimal(12,3) (widening: the stored
    values cast), varchar -> int (not a widening: stored values NULL, their text in _invalid), a rename
    with a type change, ADD with a literal DEFAULT (typed), DROP; then RENAME TABLE, TRUNCATE, DROP and
    CREATE again; delta-rs reads the same rows and types as Spark."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    create = ("shop", "t", "CREATETABLE", {"NEW": [
        _column("id", "int(11)", key=True), _column("n", "int(11)"), _column("d", "decimal(10,2)"),
        _column("s", "varchar(10)"), _column("dt", "datetime"), _column("old", "date")], "SQL": "CREATE TABLE t (...)"})

    def insert(*values: str | None) -> tuple[str, str, str, dict[str, Any]]:
        names = ("id", "n", "d", "s", "dt", "old")
        return ("shop", "t", "INSERT", {"NEW": [{n: v} for n, v in zip(names, values)]})

    channel.write([[create], [insert("1", "2147483647", "-12.50", "42", "2024-01-02 03:04:05", "2024-01-01"),
                              insert("2", "-1", "0.01", "x", "0000-00-00 00:00:00", None)]])
    out = tmp_path / "image"
    materialise_channel(spark, options(dc, unique_name), str(out))
    assert [tuple(r) for r in read_image(spark, str(out))["shop.t"].orderBy("id").collect()] == [
        (1, 2147483647, Decimal("-12.50"), "42", datetime(2024, 1, 2, 3, 4, 5), date(2024, 1, 1), None),
        (2, -1, Decimal("0.01"), "x", None, None, {"dt": "0000-00-00 00:00:00"})]
    alter = ("shop", "t", "ALTERTABLE", {
        "CHANGECOLUMN": [{"origin_field_name": "n", "field_name": "n", "data_type": "bigint(20)"},
                         {"origin_field_name": "d", "field_name": "d", "data_type": "decimal(12,3)"},
                         {"origin_field_name": "s", "field_name": "s", "data_type": "int(11)"},
                         {"origin_field_name": "dt", "field_name": "at", "data_type": "datetime(6)"}],
        "DROPCOLUMN": ["old"], "ADDCOLUMN": [{"field_name": "c", "data_type": "decimal(5,1)"}],
        "SQL": "ALTER TABLE t MODIFY n BIGINT, MODIFY d DECIMAL(12,3), MODIFY s INT, CHANGE dt at DATETIME(6), "
               "DROP old, ADD c DECIMAL(5,1) NOT NULL DEFAULT 2.25"})
    after = ("shop", "t", "INSERT", {"NEW": [{"id": "3"}, {"n": "9223372036854775807"}, {"d": "1.125"}, {"s": "7"},
                                             {"at": "2024-05-06 07:08:09.123456"}, {"c": "3.5"}]})
    channel.write([[alter], [after]])
    materialise_channel(spark, options(dc, unique_name), str(out))
    expected = [
        (1, 2147483647, Decimal("-12.500"), None, datetime(2024, 1, 2, 3, 4, 5), Decimal("2.3"), {"s": "42"}),
        (2, -1, Decimal("0.010"), None, None, Decimal("2.3"), {"at": "0000-00-00 00:00:00", "s": "x"}),
        (3, 9223372036854775807, Decimal("1.125"), 7, datetime(2024, 5, 6, 7, 8, 9, 123456), Decimal("3.5"), None)]
    frame = read_image(spark, str(out))["shop.t"]
    assert frame.columns == ["id", "n", "d", "s", "at", "c", "_invalid"]
    assert [f.dataType.simpleString() for f in frame.schema.fields] == [
        "int", "bigint", "decimal(12,3)", "int", "timestamp_ntz", "decimal(5,1)", "map<string,string>"]
    assert [tuple(r) for r in frame.orderBy("id").collect()] == expected
    table = state(out)["tables"]["shop.t"]
    assert table["types"] == ["int(11)", "bigint(20)", "decimal(12,3)", "int(11)", "datetime(6)", "decimal(5,1)"]
    rows = sorted(delta_rs_table(out, table).to_pylist(), key=lambda r: r["id"])
    assert [(*list(r.values())[:-1], as_dict(r["_invalid"])) for r in rows] == expected

    channel.write([[("shop", "t", "RENAME", {"RENAME": [{"from": {"dbname": "shop", "tablename": "t"},
                                                          "to": {"dbname": "shop", "tablename": "u"}}]})],
                   [("shop", "u", "DELETE", {"OLD": [{"id": "3"}, {"n": "9223372036854775807"}, {"d": "1.125"},
                                                     {"s": "7"}, {"at": "2024-05-06 07:08:09.123456"}, {"c": "3.5"}]})]])
    materialise_channel(spark, options(dc, unique_name), str(out))
    assert sorted(state(out)["tables"]) == ["shop.u"]
    assert [tuple(r) for r in read_image(spark, str(out))["shop.u"].orderBy("id").collect()] == expected[:2]
    channel.write([[("shop", "u", "TRUNCATE", {})], [
        ("shop", "u", "INSERT", {"NEW": [{"id": n}, {"n": n}, {"d": n}, {"s": n}, {"at": None}, {"c": n}]})
        for n in ("4", "5")]])
    materialise_channel(spark, options(dc, unique_name), str(out))
    assert [tuple(r) for r in read_image(spark, str(out))["shop.u"].orderBy("id").collect()] == [
        (4, 4, Decimal("4.000"), 4, None, Decimal("4.0"), None), (5, 5, Decimal("5.000"), 5, None, Decimal("5.0"), None)]
    channel.write([[("shop", "u", "DROPTABLE", {"DROPTABLE": [{"dbname": "shop", "tablename": "u"}]})],
                   [("shop", "u", "CREATETABLE", {"NEW": [_column("id", "bigint", key=True), _column("b", "bit(1)")]})],
                   [("shop", "u", "INSERT", {"NEW": [{"id": "6"}, {"b": "1"}]})]])
    materialise_channel(spark, options(dc, unique_name), str(out))
    assert [tuple(r) for r in read_image(spark, str(out))["shop.u"].collect()] == [(6, True, None)]
