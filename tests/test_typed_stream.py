"""format("gate").option("table", ...): typed rows whose values equal the source's over the type matrix
(inserts, snapshot reads, updates, deletes), read by the JVM source, and by the Python one (format("gate_python"))
alike; and a streaming query stopped by an ALTER TABLE that a restart continues with the new schema, nothing
lost or doubled, with either source. One SparkSession serves the module."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from gate.common.config import ChannelDefaults, ServerConfig
from gate.common.dc import connect
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import SyntheticChannel
from tests.replay import make_channel, running, wait_caught_up
from tests.test_snapshot import request, wait_finished
from tests.test_type_matrix import COLUMNS, MAX_ROW, MIN_ROW, MIXED_ROWS, ZERO_ROW

NO_CODEC = {"vc_arm", "c_kbc", "tx_ejp"}  # text in a character set Python cannot decode: the DC's base64/hex text
ZERO_DATES = {f"dt{n}" for n in range(7)} | {f"ts{n}" for n in range(7)} | {"dte"}


def login(dc: Any, channel: str, **more: object) -> dict[str, str]:
    return {"channel": channel, "host": dc.host, "port": str(dc.port), "user": dc.user,
            **{k: str(v) for k, v in more.items()}}


def spark_value(value: Any) -> Any:
    """A collected Spark value in the form PyMySQL gives the source's (timestamps as naive UTC)."""
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def same(name: str, kind: str, source: Any, got: Any) -> bool:
    """Whether the typed value ``got`` is the source's value ``source`` (as PyMySQL reads it)."""
    definition = kind.upper()
    if name in ZERO_DATES and isinstance(source, str):  # PyMySQL gives a zero date as its text: NULL, in _invalid
        return got is None and source.startswith("0000-00-00")
    if source is None or got is None:
        return source is None and got is None
    if definition.startswith("BIT"):
        number = int.from_bytes(source, "big")
        return got == (bool(number) if definition == "BIT(1)" else number)
    if definition.startswith("FLOAT"):
        return struct.pack("<f", source) == struct.pack("<f", got)
    if definition.startswith("DECIMAL(65"):
        return Decimal(got) == source
    if definition.startswith("TIMESTAMP"):
        return got.astimezone(timezone.utc).replace(tzinfo=None) == source  # collected as local time
    if definition.startswith("SET"):
        return got == (source.split(",") if source else []) if isinstance(source, str) else set(got) == source
    return spark_value(got) == source


def source_rows(conn: pymysql.Connection, db: str) -> dict[int, dict[str, Any]]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{db}`.everything")
        return {row["id"]: row for row in cur.fetchall()}


def assert_row_equals(where: str, got: dict[str, Any], want: dict[str, Any]) -> None:
    for name, kind, _ in COLUMNS:
        if name in NO_CODEC:
            continue
        assert same(name, kind, want[name], got[name]), f"{where}: column {name} ({kind}) {got[name]!r} != {want[name]!r}"


def create_matrix(cur: pymysql.cursors.Cursor, db: str) -> None:
    """Table ``db``.everything of every type of the matrix, with its rows: 1 MIN_ROW, 2 MAX_ROW, 3 ZERO_ROW,
    4 NULL in every nullable column, 5... MIXED_ROWS."""
    cur.execute(f"CREATE TABLE `{db}`.everything (" + ", ".join(f"`{n}` {d}" for n, d, _ in COLUMNS) + ")")
    rows = [{"id": 1, **MIN_ROW}, {"id": 2, **MAX_ROW}, {"id": 4},
            *[{"id": 5 + n, **row} for n, row in enumerate(MIXED_ROWS)]]
    for row in rows:
        cur.execute(f"INSERT INTO `{db}`.everything ({', '.join(f'`{n}`' for n in row)}) VALUES "
                    f"({', '.join(['%s'] * len(row))})", list(row.values()))
    cur.execute("SET SESSION sql_mode = ''")
    cur.execute(f"INSERT INTO `{db}`.everything ({', '.join(f'`{n}`' for n in ZERO_ROW)}, id) VALUES "
                f"({', '.join(['%s'] * (len(ZERO_ROW) + 1))})", [*ZERO_ROW.values(), 3])
    cur.execute("SET SESSION sql_mode = DEFAULT")


@contextmanager
def matrix_channel(sandbox: Sandbox, unique_name: str, channel_zone: str,
                   binary_format: str) -> Iterator[tuple[ServerConfig, str, pymysql.Connection, pymysql.cursors.Cursor]]:
    """A running channel on database src_NAME of the source, whose table everything (create_matrix) it
    has created: the channel's DC config, the database, and a source connection and cursor (UTC)."""
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=ChannelDefaults(
        timezone=channel_zone, binary_format=binary_format, snapshot_chunk_rows=3, batch_rows=25))  # type: ignore[arg-type]
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute("SET time_zone = '+00:00'")
        try:
            with running(dc, unique_name):
                create_matrix(cur, db)
                yield dc, db, conn, cur
        finally:
            cur.execute(f"DROP DATABASE `{db}`")


def zero_invalid() -> dict[str, str]:
    """``_invalid`` of the ZERO_ROW: the DC's text of each zero date."""
    return {name: ZERO_ROW[name] + ("." + "0" * int(name[2:]) if name[2:] not in ("", "0") else "")
            if name != "dte" else "0000-00-00" for name in sorted(ZERO_DATES)}


@pytest.mark.parametrize("channel_zone,binary_format", [("Etc/GMT-8", "hex")])
def test_typed_values_equal_the_sources_over_the_type_matrix(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                            channel_zone: str, binary_format: str) -> None:
    """Every type of the matrix through a running channel (TIMESTAMP in a zone that is not UTC, hex
    binaries): each typed value of each insert, snapshot read, update (both images) and delete equals
    the source's value read with PyMySQL; zero dates are NULL with their text in _invalid."""
    with matrix_channel(sandbox, unique_name, channel_zone, binary_format) as (dc, db, conn, cur):
        inserted = source_rows(conn, db)
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        assert wait_finished(sandbox.dc, unique_name, request(sandbox.dc, unique_name, db, "everything")) == (
            "done", None)
        cur.execute(f"UPDATE `{db}`.everything SET i = -5, dte = '2001-02-03', vb = 0x00ff WHERE id = 1")
        cur.execute(f"DELETE FROM `{db}`.everything WHERE id = 2")
        final = source_rows(conn, db)
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)

    typed = spark.read.format("gate").options(**login(dc, unique_name, table=f"{db}.everything")).load()
    assert f"/{unique_name}), table {db}.everything" in typed._jdf.queryExecution().executedPlan().toString()  # JVM
    assert typed.schema["biu"].dataType.simpleString() == "decimal(20,0)"
    assert typed.schema["ts6"].dataType.simpleString() == "timestamp"
    collected = [row.asDict(recursive=True) for row in typed.orderBy("_id").collect()]
    python = spark.read.format("gate_python").options(**login(dc, unique_name, table=f"{db}.everything")).load()
    assert python.schema == typed.schema
    assert [row.asDict(recursive=True) for row in python.orderBy("_id").collect()] == collected
    ops = [row["_op"] for row in collected]
    count = len(inserted)
    assert ops == ["c"] * count + ["t"] + ["r"] * count + ["u", "d"]
    for row in collected:
        if row["_op"] in ("c", "r"):
            assert_row_equals(f"{row['_op']} of id {row['id']}", row, inserted[row["id"]])
        zero = row["_op"] in ("c", "r") and row["id"] == 3
        assert row["_invalid"] == (zero_invalid() if zero else None)
    update, delete = collected[-2:]
    assert_row_equals("update", update, final[1])
    assert_row_equals("update before", update["_before"], inserted[1])
    assert_row_equals("delete", delete, inserted[2])
    assert_row_equals("delete before", delete["_before"], inserted[2])
    assert update["i"] == -5 and update["_before"]["i"] == -2147483648


# --- a schema change in the middle of a stream -----------------------------------------------------

def _insert(n: int, with_note: bool = False) -> tuple[str, str, str, dict[str, Any]]:
    cells = [{"id": str(n)}, {"amount": f"{n}.50"}] + ([{"note": f"n{n}"}] if with_note else [])
    return ("shop", "orders", "INSERT", {"NEW": cells})


CREATE = ("shop", "orders", "CREATETABLE", {"NEW": [
    {"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "bigint(20) unsigned"},
    {"field_name": "amount", "nullable": "Yes", "primary_key": "No", "data_type": "decimal(10,2)"}],
    "SQL": "CREATE TABLE orders (id BIGINT UNSIGNED PRIMARY KEY, amount DECIMAL(10,2))"})
ALTER = ("shop", "orders", "ALTERTABLE", {"ADDCOLUMN": [{"field_name": "note", "data_type": "varchar(20)"}],
                                          "SQL": "ALTER TABLE orders ADD note VARCHAR(20)"})


def run_stream(spark: SparkSession, options: dict[str, str], checkpoint: Path,
               source: str = "gate") -> tuple[list[dict[str, Any]], str]:
    """One typed streaming query of ``source`` until caught up (or stopped): its rows, and its error text."""
    got: list[dict[str, Any]] = []

    def keep(batch: DataFrame, _: int) -> None:
        got.extend(row.asDict() for row in batch.collect())

    query = (spark.readStream.format(source).options(**options).load().writeStream.foreachBatch(keep)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
        return got, ""
    except StreamingQueryException as exc:
        return got, str(exc)


@pytest.mark.parametrize("source", ["gate", "gate_python"])
def test_an_alter_stops_the_stream_and_a_restart_continues_with_the_new_schema(
        spark: SparkSession, sandbox: Sandbox, unique_name: str, tmp_path: Path, source: str) -> None:
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    channel.write([[CREATE], [_insert(1), _insert(2)], [("shop", "other", "INSERT", {"NEW": [{"x": "1"}]})],
                   [_insert(3)], [ALTER], [_insert(4, True)], [_insert(5, True), ("shop", "other", "DELETE",
                                                                                    {"OLD": [{"x": "1"}]})]])
    options = login(dc, unique_name, table="shop.orders", consumer="orders_typed", maxRowsPerTrigger=2)
    first, error = run_stream(spark, options, tmp_path / "checkpoint", source)
    assert "stops at ALTERTABLE row 6 on shop.orders: ALTER TABLE orders ADD note VARCHAR(20)" in error, error
    assert [(r["id"], r["amount"], r["_op"], r["_id"]) for r in first] == [
        (Decimal(1), Decimal("1.50"), "c", 2), (Decimal(2), Decimal("2.50"), "c", 3), (Decimal(3), Decimal("3.50"), "c", 5)]
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM gate_consumer WHERE name = 'orders_typed'")
        assert cur.fetchone() == (5,)

    second, error = run_stream(spark, options, tmp_path / "checkpoint", source)
    assert error == ""
    assert [(r["id"], r["note"], r["_id"]) for r in second] == [(Decimal(4), "n4", 7), (Decimal(5), "n5", 8)]
    assert sorted(second[0]) == sorted(["id", "amount", "note", "_op", "_id", "_tid", "_ts", "_before", "_invalid"])

    batch = spark.read.format(source).options(**login(dc, unique_name, table="shop.orders"))
    with pytest.raises(Exception, match=r"Read up to it \(endingId=5\), then from it \(startingId=6\)"):
        batch.load().collect()
    assert [r.note for r in batch.option("startingId", 6).load().collect()] == ["n4", "n5"]


@pytest.mark.parametrize("clash", ["_ts", "_Op"])
def test_a_table_with_a_column_named_like_the_streams_own_is_refused(spark: SparkSession, sandbox: Sandbox,
                                                                      unique_name: str, clash: str) -> None:
    """A source column named like one of the typed stream's own (in any case: Spark resolves names whatever
    their case, so `_Op` would be ambiguous with `_op`) is refused with the way out, not read wrong."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    create = ("shop", "c", "CREATETABLE", {"NEW": [
        {"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int"},
        {"field_name": clash, "nullable": "Yes", "primary_key": "No", "data_type": "int"}]})
    channel.write([[create], [("shop", "c", "INSERT", {"NEW": [{"id": "1"}, {clash: "2"}]})]])
    with pytest.raises(Exception, match=rf"columns named like the stream's own \({clash}\): read it without"):
        spark.read.format("gate").options(**login(dc, unique_name, table="shop.c")).load().collect()


def test_an_insert_after_an_update_has_its_own_images(spark: SparkSession, sandbox: Sandbox, unique_name: str) -> None:
    """Rows of one task are typed each from its own payload: an insert (no OLD image) after an update whose
    OLD image lies further into its payload than the insert's whole payload."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    update = ("shop", "orders", "UPDATE", {"NEW": [{"id": "1"}, {"amount": "12345678.90"}],
                                           "OLD": [{"id": "1"}, {"amount": "1.00"}]})
    channel.write([[CREATE], [_insert(1)], [update], [_insert(2)]])
    rows = spark.read.format("gate").options(**login(dc, unique_name, table="shop.orders", partitions=1)).load()
    assert [(r.id, r.amount, r._op, r._before and r._before.amount) for r in rows.orderBy("_id").collect()] == [
        (Decimal(1), Decimal("1.50"), "c", None), (Decimal(1), Decimal("12345678.90"), "u", Decimal("1.00")),
        (Decimal(2), Decimal("2.50"), "c", None)]


@pytest.mark.parametrize("changed_at", [50_000, 50_001])
def test_a_long_read_finds_the_first_change_on_either_side_of_its_searchs_seam(
        spark: SparkSession, sandbox: Sandbox, unique_name: str, changed_at: int) -> None:
    """A typed batch of 100,000 rows searches them for statements in two pieces at once (up to row 50,000 and
    after it): the first change is found on either side of the seam, a later one in the other piece does not
    hide it, and neither an ALTER that changes no column (beside it, across the seam) nor the table dropped and
    created again with the same columns is taken for one."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    index = ("shop", "orders", "ALTERTABLE", {"SQL": "ALTER TABLE orders ADD INDEX (amount)"})
    drop = ("shop", "orders", "DROPTABLE", {"SQL": "DROP TABLE orders"})
    later = ("shop", "orders", "ALTERTABLE", {"DROPCOLUMN": ["amount"], "SQL": "ALTER TABLE orders DROP amount"})
    special = {1: CREATE, 20_000: drop, 30_000: CREATE, changed_at: ALTER, 100_001 - changed_at: index, 90_000: later}
    changes = [special.get(i) or _insert(i, i > changed_at) for i in range(1, 100_001)]
    SyntheticChannel(connect(dc, "DC", unique_name), unique_name).write([[change] for change in changes])

    batch = spark.read.format("gate").options(**login(dc, unique_name, table="shop.orders", partitions=2))
    with pytest.raises(Exception, match=rf"at ALTERTABLE row {changed_at} on shop.orders: ALTER TABLE orders ADD note "
                                        rf"VARCHAR\(20\)\. Read up to it \(endingId={changed_at - 1}\), then from it "
                                        rf"\(startingId={changed_at}\)"):
        batch.load().collect()
    rows = batch.option("endingId", changed_at - 1).load().select("_id", "_op").collect()
    assert [r._id for r in rows] == [i for i in range(2, changed_at) if special.get(i) not in (CREATE, index)]
    assert {r._id for r in rows if r._op == "t"} == {20_000}


def test_the_columns_where_a_read_starts_follow_statements_on_both_sides_of_the_searchs_seam(
        spark: SparkSession, sandbox: Sandbox, unique_name: str) -> None:
    """A typed read starting after row 100,000 learns its table's columns from every statement before it,
    searched in two pieces at once (up to row 50,000 and after it): an ALTER of the table under its old name
    at row 50,000 and its RENAME at row 50,001, either side of the seam, replay in order."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    old = {"NEW": CREATE[3]["NEW"], "SQL": "CREATE TABLE old (id BIGINT UNSIGNED PRIMARY KEY, amount DECIMAL(10,2))"}
    rename = ("shop", "old", "RENAME", {"RENAME": [{"from": {"dbname": "shop", "tablename": "old"},
                                                   "to": {"dbname": "shop", "tablename": "orders"}}],
                                        "SQL": "RENAME TABLE old TO orders"})
    special = {1: ("shop", "old", "CREATETABLE", old), 50_000: ("shop", "old", *ALTER[2:]), 50_001: rename}
    def insert(i: int) -> tuple[str, str, str, dict[str, Any]]:
        note = [{"note": f"n{i}"}] if i > 50_000 else []
        return ("shop", "old" if i < 50_000 else "orders", "INSERT", {"NEW": [{"id": str(i)}, {"amount": "1.50"}, *note]})

    changes = [special.get(i) or insert(i) for i in range(1, 100_003)]
    SyntheticChannel(connect(dc, "DC", unique_name), unique_name).write([[change] for change in changes])

    rows = spark.read.format("gate").options(**login(dc, unique_name, table="shop.orders", startingId=100_001)).load()
    assert rows.columns[:3] == ["id", "amount", "note"]
    assert [(r.id, r.note, r._id) for r in rows.collect()] == [(Decimal(100_001), "n100001", 100_001),
                                                               (Decimal(100_002), "n100002", 100_002)]
