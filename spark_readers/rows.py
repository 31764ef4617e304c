"""The columns every spark_readers reader gives a transfer_data row, and their parsing in plain Python.

The JDBC reader (spark_readers.incremental) parses with Spark SQL expressions; the gate data source
(spark_readers.source) parses on the executors with :func:`to_row`. Both give the same values: a
DDL payload is conformed to :data:`DDL_SCHEMA` the way ``from_json`` does it (missing keys and values
of another kind are null, extra keys are dropped, a non-string JSON value read as a string is its
JSON text).

This module runs on executors: it imports only the standard library and pyspark's types.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

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
])
"""Every key gate writes into a non-row payload (the README's DC format, plus LIKE, DROPTABLE, SQL and the
snapshot markers; SELECT is in the CREATE TABLE ... SELECT rows of older gates)."""

_IMAGE = MapType(StringType(), StringType())

ROW_SCHEMA = StructType([
    StructField("optype", StringType()), StructField("dbname", StringType()), StructField("tablename", StringType()),
    StructField("id", LongType()), StructField("tid", LongType()), StructField("create_time", TimestampType()),
    StructField("instance_name", StringType()), StructField("columns", _TEXTS),
    StructField("new", _IMAGE), StructField("old", _IMAGE), StructField("ddl", DDL_SCHEMA),
])
"""optype, dbname, tablename, id, tid, create_time (UTC), instance_name; columns, new, old for row optypes;
ddl for the others."""

COLUMNS = tuple(ROW_SCHEMA.fieldNames())


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


def _image(cells: Any) -> dict[str, str | None] | None:
    """``[{"c1": "v"}, {"c2": null}]`` as ``{"c1": "v", "c2": None}``."""
    if not isinstance(cells, list):
        return None
    return {name: conform(value, StringType()) for cell in cells for name, value in cell.items()}


def to_row(id_: int, tid: int, dbname: str, tablename: str, create_ts: int, instance_name: str, optype: str,
           data: str | None) -> tuple[Any, ...]:
    """A transfer_data row (create_time as UNIX_TIMESTAMP) as a tuple of :data:`ROW_SCHEMA`."""
    payload = json.loads(data) if data else None
    created = datetime.fromtimestamp(int(create_ts), timezone.utc)
    head = (optype, dbname, tablename, int(id_), int(tid), created, instance_name)
    if optype in ROW_OPTYPES:
        images = payload if isinstance(payload, dict) else {}
        new, old = images.get("NEW"), images.get("OLD")
        cells = new if isinstance(new, list) else old
        columns = [next(iter(cell)) for cell in cells] if isinstance(cells, list) else None
        return (*head, columns, _image(new), _image(old), None)
    return (*head, None, None, None, conform(payload, DDL_SCHEMA))
