"""The columns every spark_readers reader gives a transfer_data row, and their parsing in plain Python.

The JDBC reader (spark_readers.incremental) parses with Spark SQL expressions; the gate data source
(spark_readers.source) parses on the executors with :func:`to_batch`. Both give the same values: a
DDL payload is conformed to :data:`DDL_SCHEMA` the way ``from_json`` does it (missing keys and values
of another kind are null, extra keys are dropped, a non-string JSON value read as a string is its
JSON text).

This module runs on executors: it imports only the standard library, pyarrow, pyspark and, where the
executors' Python has it, orjson.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

ROW_OPTYPES = frozenset({"INSERT", "UPDATE", "DELETE", "SNAPSHOT"})
"""Optypes whose payload is a row image (NEW/OLD lists); every other optype's payload goes to ``ddl``.
SNAPSHOT rows carry exactly what an INSERT of the same row carries."""


def _struct(*names: str) -> StructType:
    return StructType([StructField(name, StringType()) for name in names])


_TABLE = _struct("dbname", "tablename")
_TEXTS = ArrayType(StringType())

DDL_SCHEMA = StructType([
    StructField("NEW", ArrayType(_struct("field_name", "nullable", "primary_key", "data_type"))),  # CREATETABLE
    StructField("primary_key", _TEXTS),  # CREATETABLE: the key's columns in key order
    StructField("LIKE", _TABLE),
    StructField("SELECT", BooleanType()),
    StructField("ADDCOLUMN", ArrayType(_struct("field_name", "data_type"))),
    StructField("ADDINDEX", ArrayType(StructType([StructField("index_name", StringType()),
                                                  StructField("column_name", _TEXTS)]))),
    StructField("DROPCOLUMN", _TEXTS),
    StructField("CHANGECOLUMN", ArrayType(_struct("origin_field_name", "field_name", "data_type"))),
    StructField("DROPINDEX", _TEXTS),
    StructField("OTHERS", _TEXTS),
    StructField("RENAME", ArrayType(StructType([StructField("from", _TABLE), StructField("to", _TABLE)]))),
    StructField("DROPTABLE", ArrayType(_TABLE)),
    StructField("SQL", StringType()),
    StructField("SNAPSHOT", StructType([  # SNAPSHOTSTART and SNAPSHOTEND
        StructField("id", LongType()), StructField("reason", StringType()), StructField("key", _TEXTS),
        StructField("rows", LongType()), StructField("state", StringType())])),
    StructField("VERIFY", StructType([  # a verification's chunk (ROWS and source_* are gate verify's own)
        StructField("id", LongType()), StructField("chunk", LongType()), StructField("key", _TEXTS),
        StructField("after", _TEXTS), StructField("upto", _TEXTS), StructField("rows", LongType()),
        StructField("checksum", StringType()), StructField("last", BooleanType())])),
])
"""Every key gate writes into a non-row payload (docs/reference/dc-format.md, plus LIKE, DROPTABLE, SQL, the
snapshot markers and the VERIFY chunks; SELECT is in the CREATE TABLE ... SELECT rows of older gates)."""

_IMAGE = MapType(StringType(), StringType())

ROW_SCHEMA = StructType([
    StructField("optype", StringType()), StructField("dbname", StringType()), StructField("tablename", StringType()),
    StructField("id", LongType()), StructField("tid", LongType()), StructField("create_time", TimestampType()),
    StructField("instance_name", StringType()), StructField("columns", _TEXTS),
    StructField("new", _IMAGE), StructField("old", _IMAGE), StructField("ddl", DDL_SCHEMA),
])
"""optype, dbname, tablename, id, tid, create_time (UTC), instance_name; columns, new, old for row optypes;
ddl for the others."""


def conform(value: Any, kind: DataType) -> Any:
    """A parsed JSON value as ``from_json`` gives it for ``kind``."""
    if value is None:
        return None
    if isinstance(kind, StringType):
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(kind, StructType):
        return {f.name: conform(value.get(f.name), f.dataType) for f in kind.fields} if isinstance(value, dict) else None
    if isinstance(kind, ArrayType):
        return [conform(v, kind.elementType) for v in value] if isinstance(value, list) else None
    if isinstance(kind, MapType):
        return {k: conform(v, kind.valueType) for k, v in value.items()} if isinstance(value, dict) else None
    if isinstance(kind, BooleanType):
        return value if isinstance(value, bool) else None
    if isinstance(kind, LongType):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    raise TypeError(f"no JSON conversion for {kind}")


def _text(value: Any) -> str | None:
    return value if value is None or value.__class__ is str else conform(value, StringType())


try:  # orjson parses a payload 3 to 4 times faster than json; an executor without it uses json
    import orjson

    def _loads(text: str | bytes) -> Any:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:  # what only json reads (NaN, Infinity) or the error it gives
            return json.loads(text)
except ImportError:  # pragma: no cover (the project's environment has orjson)

    def _loads(text: str | bytes) -> Any:
        return json.loads(text)


ARROW_SCHEMA = to_arrow_schema(ROW_SCHEMA, timezone="UTC")


class _Maps:
    """One map column of images (``[{"c1": "v"}, {"c2": null}]`` per row) kept as flat buffers: the
    offsets, keys and values of all rows, and which rows have no image."""

    def __init__(self) -> None:
        self.offsets = [0]
        self.keys: list[str] = []
        self.values: list[Any] = []
        self.null: list[bool] = []

    def add(self, cells: Any) -> bool:
        """Append one row's image (null unless a list); True if it has one."""
        if cells.__class__ is list:  # every cell has one key: both lists grow in C, no Python loop per cell
            self.keys.extend(chain.from_iterable(cells))
            self.values.extend(chain.from_iterable(map(dict.values, cells)))
            self.null.append(False)
            self.offsets.append(len(self.keys))
            return True
        self.null.append(True)
        self.offsets.append(len(self.keys))
        return False

    def lists(self) -> tuple[pa.ListArray, pa.MapArray]:
        """The keys of each row's image (the ``columns``) and the images."""
        try:  # gate writes every value as a string or null; anything else is converted one by one
            values = pa.array(self.values, pa.string())
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            values = pa.array([_text(v) for v in self.values], pa.string())
        offsets, keys = pa.array(self.offsets, pa.int32()), pa.array(self.keys, pa.string())
        mask = pa.array(self.null, pa.bool_())
        return (pa.ListArray.from_arrays(offsets, keys, type=ARROW_SCHEMA.field("columns").type, mask=mask),
                pa.MapArray.from_arrays(offsets, keys, values, type=ARROW_SCHEMA.field("new").type, mask=mask))


def to_batch(rows: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
    """transfer_data rows (``id, tid, dbname, tablename, UNIX_TIMESTAMP(create_time), instance_name, optype,
    data``) as an Arrow batch of :data:`ROW_SCHEMA`. The images go into flat key and value buffers (no
    Python object per row or cell beyond the parsed JSON), the other columns straight from the rows."""
    new, old = _Maps(), _Maps()
    from_new: list[bool] = []  # per row: its columns are the keys of its new image (else of its old one)
    ddls: list[Any] = []
    loads = _loads
    for row in rows:
        payload = loads(row[7]) if row[7] else None
        if row[6] in ROW_OPTYPES:
            images = payload if payload.__class__ is dict else {}
            from_new.append(new.add(images.get("NEW")))
            old.add(images.get("OLD"))
            ddls.append(None)
        else:
            from_new.append(False)
            new.add(None)
            old.add(None)
            ddls.append(conform(payload, DDL_SCHEMA))
    new_columns, new_maps = new.lists()
    old_columns, old_maps = old.lists()
    names = pc.if_else(pa.array(from_new, pa.bool_()), new_columns, old_columns)
    columns = list(zip(*rows)) if rows else [()] * 8
    ids, tids, dbnames, tablenames, times, instances, optypes = columns[:7]
    arrays = [pa.array(optypes, pa.string()), pa.array(dbnames, pa.string()), pa.array(tablenames, pa.string()),
              pa.array(ids, pa.int64()), pa.array(tids, pa.int64()),
              pa.array([int(t) * 1_000_000 for t in times], pa.int64()).cast(ARROW_SCHEMA.field("create_time").type),
              pa.array(instances, pa.string()), names, new_maps, old_maps,
              pa.array(ddls, type=ARROW_SCHEMA.field("ddl").type)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
