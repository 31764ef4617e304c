"""The columns every spark_readers reader gives a transfer_data row, and their parsing in plain Python.

The JDBC reader (spark_readers.incremental) parses with Spark SQL expressions; the gate data source
(spark_readers.source) parses on the executors with :func:`to_batch`. Both give the same values: a
DDL payload is conformed to :data:`DDL_SCHEMA` the way ``from_json`` does it (missing keys and values
of another kind are null, extra keys are dropped, a non-string JSON value read as a string is its
JSON text).

This module runs on executors: it imports only the standard library, pyarrow and pyspark.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
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
])
"""Every key gate writes into a non-row payload (docs/reference/dc-format.md, plus LIKE, DROPTABLE, SQL and the
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


def _entries(cells: Any) -> list[tuple[str, str | None]] | None:
    """``[{"c1": "v"}, {"c2": null}]`` as the map entries ``[("c1", "v"), ("c2", None)]``."""
    if not isinstance(cells, list):
        return None
    return [(name, _text(value)) for cell in cells for name, value in cell.items()]


ARROW_SCHEMA = to_arrow_schema(ROW_SCHEMA, timezone="UTC")


def to_batch(rows: Sequence[tuple[Any, ...]]) -> pa.RecordBatch:
    """transfer_data rows (``id, tid, dbname, tablename, UNIX_TIMESTAMP(create_time), instance_name, optype,
    data``) as an Arrow batch of :data:`ROW_SCHEMA`, built column by column (cheaper than Spark converting
    Python rows one by one)."""
    columns: list[list[Any]] = [[] for _ in ROW_SCHEMA.fields]
    (optypes, dbnames, tablenames, ids, tids, times, instances, names, news, olds, ddls) = columns
    for id_, tid, dbname, tablename, create_ts, instance_name, optype, data in rows:
        payload = json.loads(data) if data else None
        optypes.append(optype)
        dbnames.append(dbname)
        tablenames.append(tablename)
        ids.append(int(id_))
        tids.append(int(tid))
        times.append(int(create_ts) * 1_000_000)
        instances.append(instance_name)
        if optype in ROW_OPTYPES:
            images = payload if isinstance(payload, dict) else {}
            new, old = _entries(images.get("NEW")), _entries(images.get("OLD"))
            either = new if new is not None else old
            names.append(None if either is None else [name for name, _ in either])
            news.append(new)
            olds.append(old)
            ddls.append(None)
        else:
            names.append(None)
            news.append(None)
            olds.append(None)
            ddls.append(conform(payload, DDL_SCHEMA))
    return pa.RecordBatch.from_arrays([pa.array(values, type=field.type) for values, field in zip(columns, ARROW_SCHEMA)],
                                      schema=ARROW_SCHEMA)
