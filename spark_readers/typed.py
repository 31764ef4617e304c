"""``format("gate").option("table", "db.table")``: one table's changes as typed columns.

The schema is the table's columns at the query's starting point (spark_readers.table_schema), typed by
spark_readers.types, plus the columns of spark_readers.typed_rows. Offsets, transactions and retention
work as for the untyped source (spark_readers.source); the executors read only the table's rows
(``WHERE dbname = ? AND tablename = ?``, the DC's index on them, pages of :data:`CHUNK` rows).

A statement that changes the table's columns (ALTER TABLE, CREATE TABLE again, a snapshot of another
definition) is never read with the old schema: a stream's micro-batch ends before it, and the next one
stops the query with :class:`TableSchemaChanged` naming it and its id. A streaming query needs the option
``consumer``: the stopped query leaves its position there (the row before the statement), and a
restarted query takes its schema at that position, which includes the statement, so it continues
from it with the new columns, nothing lost or doubled. A batch read over such a statement is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pymysql
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from gate.common.config import check_identifier
from gate.common.dc import read_settings
from gate.common.errors import InvalidValue, MissingPrivileges, TableSchemaChanged
from spark_readers.source import Channel, GateBatchReader, GateStreamReader, IdRange, Login, Settings, require_kept
from spark_readers.table_schema import Change, columns_at, first_change, same
from spark_readers.typed_rows import META, RowBuilder, TypedTable, Typing

CHUNK = 10_000  # rows per query of a range read


def table_name(text: str) -> tuple[str, str]:
    """``db.table`` as (db, table), both safe identifiers."""
    db, dot, table = text.partition(".")
    if not dot:
        raise InvalidValue(f'Option table={text!r} of format("gate") must name a table as db.table, e.g. "shop.orders".')
    return check_identifier(db, "Database name"), check_identifier(table, "Table name")


def _consumer_position(conn: pymysql.Connection, consumer: str | None) -> int | None:
    if consumer is None:
        return None
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM gate_consumer WHERE name = %s", (consumer,))
        row = cur.fetchone()
    return int(row[0]) if row else None


def describe(table: str, change: Change) -> str:
    return f"{change.optype} row {change.id} on {table}: {change.sql[:300]}"


def channel_typing(conn: pymysql.Connection, login: Login) -> Typing:
    """The channel's settings that typed values depend on, from its gate_settings."""
    try:
        return Typing.of(read_settings(conn, login.channel))
    except pymysql.err.OperationalError as exc:
        raise MissingPrivileges(
            f"A typed read of channel '{login.channel}' needs its time zone and binary format from "
            f"{login.channel}.gate_settings, which user '{login.user}' cannot read ({exc.args[-1]}). "
            f"GRANT SELECT ON {login.channel}.gate_settings TO the reader.") from None


def typed_table(settings: Settings, table: str) -> TypedTable:
    """The table's columns where the query starts (the consumer's stored position when it has one, else
    startingId or the oldest kept row), with the channel's settings."""
    db, name = table_name(table)
    login = settings.login
    with Channel(login) as dc:
        conn = dc.conn
        position = _consumer_position(conn, settings.consumer)
        if position is None:
            position = dc.start(settings.starting_id)
        typing = channel_typing(conn, login)
        columns = columns_at(conn, login.channel, db, name, position, dc.checkpoint())
    clash = [c for c, _ in columns if c.casefold() in META]  # Spark resolves names whatever their case
    if clash:
        raise InvalidValue(f"Table {table} has columns named like the stream's own ({', '.join(clash)}): read it "
                           'without the option "table".')
    return typing.table(f"{db}.{name}", columns)


def planned_table(settings: Settings, known: TypedTable | None, schema: StructType) -> TypedTable:
    """The table a reader types rows by: the one schema() found (worked out again when Spark plans in
    another process), which must still give the query's schema."""
    table = known or typed_table(settings, str(settings.table))
    if table.schema() != schema:
        raise TableSchemaChanged(f"The columns of {table.table} changed between load() and the start of the query "
                                 f"(now {list(table.columns)}): call load() again.")
    return table


def read_table_range(login: Login, table: TypedTable, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    """The table's typed rows ``lo < id <= hi`` in id order, :data:`CHUNK` rows per query; retention
    removing rows of the range meanwhile raises CursorExpiredError."""
    db, name = table.table.split(".", 1)
    builder = RowBuilder(table)
    conn = login.connect()
    try:
        with conn.cursor() as cur:
            after = lo
            while True:
                cur.execute("SELECT id, tid, UNIX_TIMESTAMP(create_time), optype, data FROM transfer_data "
                            "WHERE dbname = %s AND tablename = %s AND id > %s AND id <= %s ORDER BY id LIMIT %s",
                            (db, name, after, hi, CHUNK))
                rows = cur.fetchall()
                require_kept(conn, login.channel, after)
                if rows:
                    yield builder.batch(rows)
                if len(rows) < CHUNK:
                    return
                after = int(rows[-1][0])
    finally:
        conn.close()


class _TypedRanges:
    settings: Settings
    table: TypedTable

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, IdRange)
        return read_table_range(self.settings.login, self.table, partition.lo, partition.hi)

    def _change(self, lo: int, hi: int) -> Change | None:
        db, name = self.table.table.split(".", 1)
        with Channel(self.settings.login) as dc:
            return first_change(dc.conn, db, name, self.table.columns, lo, hi)


class TypedBatchReader(_TypedRanges, GateBatchReader):
    """``spark.read.format("gate").option("table", ...)``."""

    def __init__(self, settings: Settings, table: TypedTable) -> None:
        super().__init__(settings)
        self.table = table

    def partitions(self) -> Sequence[InputPartition]:
        ranges = super().partitions()
        if ranges:
            change = self._change(ranges[0].lo, ranges[-1].hi)  # type: ignore[attr-defined]
            if change:
                raise TableSchemaChanged(
                    f"The rows to read change the columns of {self.table.table} at {describe(self.table.table, change)}. "
                    f"Read up to it (endingId={change.id - 1}), then from it (startingId={change.id}) with its new "
                    "schema.")
        return ranges


class TypedStreamReader(_TypedRanges, GateStreamReader):
    """``spark.readStream.format("gate").option("table", ...).option("consumer", ...)``."""

    def __init__(self, settings: Settings, table: TypedTable) -> None:
        if not settings.consumer:
            raise InvalidValue('A typed stream (option "table") needs the option consumer, e.g. '
                               '.option("consumer", "orders_stream"): a restarted query finds its schema at the '
                               "position stored under that name.")
        super().__init__(settings)
        self.table = table

    def initialOffset(self) -> dict[str, int]:
        db, name = self.table.table.split(".", 1)
        with Channel(self.settings.login) as dc:
            start = dc.start(self.settings.starting_id)
            columns = columns_at(dc.conn, self.settings.login.channel, db, name, start, dc.checkpoint())
        if not same(columns, self.table.columns):
            raise TableSchemaChanged(
                f"This new query starts after row {start}, where {self.table.table} has the columns {list(columns)}, "
                f"but consumer '{self.settings.consumer}' stored a position where it has {list(self.table.columns)}. "
                "Give a new query its own consumer name (or drop the old one), or startingId after that position.")
        return super().initialOffset()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        end = super().latestOffset(start, limit)
        after = int(start["id"])
        change = self._change(after, int(end["id"]))
        if change is None:
            return end
        if change.id - 1 > after:
            return {"id": change.id - 1}  # a statement is a transaction of its own: its predecessor ends one
        with Channel(self.settings.login) as dc:
            dc.register(str(self.settings.consumer), after)
        raise TableSchemaChanged(
            f"The typed stream of {self.table.table} stops at {describe(self.table.table, change)}, which changes "
            f"its columns. Every row before it has been read (up to {after}, stored for consumer "
            f"'{self.settings.consumer}'); start the query again with the same checkpointLocation and it continues "
            f"from row {change.id} with the new schema.")
