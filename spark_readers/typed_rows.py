"""The rows of a typed change stream of one table, built from its transfer_data rows (on the executors).

Columns: the table's columns typed by :mod:`spark_readers.types`, then ``_op`` ('c' insert, 'u' update,
'd' delete, 'r' snapshot read, 't' all rows gone: TRUNCATE, DROP TABLE, RENAME away or a new snapshot's
SNAPSHOTSTART), ``_id``, ``_tid``, ``_ts`` (create_time), ``_before`` (the row before an update or
delete, a struct of the same columns) and ``_invalid`` (column -> the DC's text of each value its Spark
type cannot hold, which is NULL in the row; before-image columns as ``_before.col``; NULL when none).
A delete's columns hold the deleted row. CREATETABLE, ALTERTABLE and SNAPSHOTEND rows give no row (a
statement that changes the columns stops the stream before it is read).

This module runs on executors: it imports only the standard library, pyarrow, pyspark,
gate.common.columns, pymysql and spark_readers' types and table_schema.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType, TimestampType

from gate.common.columns import ColumnRule, matching
from gate.common.errors import TableSchemaChanged
from spark_readers.table_schema import Columns
from spark_readers.types import ColumnType, Converter, Unrepresentable, column_type

if TYPE_CHECKING:
    from gate.common.dc import ChannelSettings

META = ("_op", "_id", "_tid", "_ts", "_before", "_invalid")
_OPS = {"INSERT": "c", "UPDATE": "u", "DELETE": "d", "SNAPSHOT": "r", "TRUNCATE": "t", "DROPTABLE": "t",
        "RENAME": "t", "SNAPSHOTSTART": "t"}


def typed_values(names: Sequence[str], texts: Sequence[str | None], converters: Sequence[Converter],
                 invalid: dict[str, str], prefix: str = "") -> list[Any]:
    """The typed values of one row's texts (None: NULL); a text its type cannot hold is NULL, and
    ``invalid[prefix + name]`` keeps it."""
    values: list[Any] = []
    for name, text, convert in zip(names, texts, converters):
        if text is None:
            values.append(None)
            continue
        try:
            values.append(convert(text))
        except Unrepresentable:
            values.append(None)
            invalid[prefix + name] = text
    return values


@dataclass(frozen=True)
class Typing:
    """The channel settings a value's conversion depends on: its time zone, binary format, and the
    patterns (``db.table.column``) of its column rules, whose columns hold the rule's text: string."""

    timezone: str = "UTC"
    binary_format: str = "base64"
    as_text: tuple[str, ...] = ()

    @classmethod
    def of(cls, channel: ChannelSettings) -> Typing:
        return cls(channel.defaults.timezone, channel.defaults.binary_format,
                   tuple(rule.pattern for rule in channel.columns if rule.kind != "exclude"))

    def table(self, table: str, columns: Columns) -> TypedTable:
        """``table`` ("db.table") of ``columns`` (name, data_type) typed with these settings."""
        db, name = table.split(".", 1)
        rules = [ColumnRule("text", pattern) for pattern in self.as_text]
        as_text = frozenset(c.casefold() for c, _ in columns if matching(rules, db, name, c))
        return TypedTable(table, tuple(columns), self.timezone, self.binary_format, as_text)


@dataclass(frozen=True)
class TypedTable:
    """What the executors need to type one table's rows: its columns (name, data_type), the channel's
    time zone and binary format, and the columns a masking rule turns into text of another kind."""

    table: str  # "db.table"
    columns: tuple[tuple[str, str], ...]
    timezone: str = "UTC"
    binary_format: str = "base64"
    as_text: frozenset[str] = frozenset()  # casefolded names of columns kept as the DC's text

    def types(self) -> list[ColumnType]:
        tz = ZoneInfo(self.timezone)
        return [column_type("text" if name.casefold() in self.as_text else kind, tz, self.binary_format)
                for name, kind in self.columns]

    def image_schema(self) -> StructType:
        """The table's columns as Spark types."""
        return StructType([StructField(name, kind.spark) for (name, _), kind in zip(self.columns, self.types())])

    def schema(self) -> StructType:
        image = self.image_schema()
        return StructType([*image.fields, StructField("_op", StringType()), StructField("_id", LongType()),
                           StructField("_tid", LongType()), StructField("_ts", TimestampType()),
                           StructField("_before", image), StructField("_invalid", MapType(StringType(), StringType()))])


class RowBuilder:
    """Turns transfer_data rows (``id, tid, UNIX_TIMESTAMP(create_time), optype, data``) of one table into
    Arrow batches of :meth:`TypedTable.schema`."""

    def __init__(self, table: TypedTable) -> None:
        self.table = table
        self.names = [name for name, _ in table.columns]
        self.folded = [name.casefold() for name in self.names]
        self.converters = [kind.convert for kind in table.types()]
        self.arrow = to_arrow_schema(table.schema(), timezone="UTC")

    def _image(self, id_: int, cells: Any, prefix: str, invalid: dict[str, str]) -> list[Any]:
        """One row image's typed values, in the schema's order."""
        pairs = [pair for cell in cells for pair in cell.items()] if isinstance(cells, list) else []
        if [name.casefold() for name, _ in pairs] != self.folded:
            raise TableSchemaChanged(
                f"Row {id_} of {self.table.table} has the columns {[name for name, _ in pairs]}, the stream's schema "
                f"has {self.names}: the table changed in a way its DDL rows do not show (a table renamed into its "
                "name?). Restart the query: it reads the schema again from the channel.")
        texts = [value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                 for _, value in pairs]
        return typed_values(self.names, texts, self.converters, invalid, prefix)

    def batch(self, rows: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
        width = len(self.names)
        columns: list[list[Any]] = [[] for _ in range(width)]
        ops: list[str] = []
        ids: list[int] = []
        tids: list[int] = []
        times: list[int] = []
        befores: list[dict[str, Any] | None] = []
        invalids: list[list[tuple[str, str]] | None] = []
        for id_, tid, create_ts, optype, data in rows:
            op = _OPS.get(optype)
            if op is None:
                continue
            payload = json.loads(data) if data and op != "t" else {}
            invalid: dict[str, str] = {}
            new = payload.get("NEW") if optype != "DELETE" else payload.get("OLD")
            after = self._image(id_, new, "", invalid) if op != "t" else [None] * width
            old = self._image(id_, payload.get("OLD"), "_before.", invalid) if op in ("u", "d") else None
            for values, value in zip(columns, after):
                values.append(value)
            ops.append(op)
            ids.append(int(id_))
            tids.append(int(tid))
            times.append(int(create_ts) * 1_000_000)
            befores.append(None if old is None else dict(zip(self.names, old)))
            invalids.append(list(invalid.items()) or None)
        arrays = [*columns, ops, ids, tids, times, befores, invalids]
        return pa.RecordBatch.from_arrays([pa.array(values, type=field.type) for values, field in zip(arrays, self.arrow)],
                                          schema=self.arrow)
