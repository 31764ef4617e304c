"""Typed image tables: the history's text values converted to the Spark types of the table's columns.

The types and conversions are those of the typed change stream (spark_readers.types through
:class:`spark_readers.typed_rows.TypedTable`). A typed table's Delta columns are the table's columns,
then ``_invalid``: column -> the DC's text of each value its Spark type cannot hold (a zero date, a
TIMESTAMP its channel's zone shows twice, ...), which is NULL in the row; NULL when there is none.

When an ALTER changes a column's type, the stored rows' values are cast when the change widens it
exactly (a wider integer or decimal, or integer or decimal to text: :func:`exact_cast`); otherwise the
value is NULL and ``_invalid`` keeps the old value's text (Spark's), never a converted guess.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ByteType,
    DataType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from spark_readers.typed_rows import TypedTable, typed_values
from spark_readers.types import Unrepresentable

INVALID = "_invalid"
INVALID_TYPE = MapType(StringType(), StringType())
_INTEGERS: dict[type, int] = {ByteType: 3, ShortType: 5, IntegerType: 10, LongType: 19}  # decimal digits


def key_column(position: int) -> str:
    """The name of a changed key's ``position``-th value, typed, in :func:`converted` frames."""
    return f"_gate_k{position}"


def converted(frame: DataFrame, table: TypedTable, key: Sequence[str] | None = None,
              passthrough: Sequence[str] = ()) -> DataFrame:
    """``frame``'s columns of ``table`` (the DC's text) typed, then ``_invalid``; with ``key`` (the
    columns of ``frame``'s ``key``, an array of their texts), its values typed as :func:`key_column`
    columns; then the ``passthrough`` columns as they are."""
    names = [name for name, _ in table.columns]
    keys = replace(table, columns=tuple((c, dict(table.columns)[c]) for c in key)) if key is not None else None
    key_fields = [StructField(key_column(i), f.dataType) for i, f in enumerate(keys.image_schema().fields)] if keys else []
    schema = StructType([*table.image_schema().fields, StructField(INVALID, INVALID_TYPE), *key_fields,
                         *[frame.schema[c] for c in passthrough]])

    def convert(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        converters = [kind.convert for kind in table.types()]
        key_converters = [kind.convert for kind in keys.types()] if keys else []
        arrow = to_arrow_schema(schema, timezone="UTC")
        for batch in batches:
            texts = [batch.column(name).to_pylist() for name in names]
            key_texts = batch.column("key").to_pylist() if keys else []
            values: list[list[Any]] = [[] for _ in range(len(names) + len(key_converters))]
            invalids: list[list[tuple[str, str]] | None] = []
            for row in range(batch.num_rows):
                invalid: dict[str, str] = {}
                typed = typed_values(names, [column[row] for column in texts], converters, invalid)
                invalids.append(list(invalid.items()) or None)
                if keys:
                    typed += typed_values(list(key or ()), key_texts[row], key_converters, {})
                for column, value in zip(values, typed):
                    column.append(value)
            arrays = [pa.array(v, type=f.type) for v, f in zip([*values[:len(names)], invalids, *values[len(names):]],
                                                                 arrow)]
            arrays += [batch.column(c) for c in passthrough]
            yield pa.RecordBatch.from_arrays(arrays, schema=arrow)

    return frame.select(*names, *(["key"] if keys else []), *passthrough).mapInArrow(convert, schema)


def exact_cast(old: DataType, new: DataType) -> bool:
    """Whether every value of Spark type ``old`` casts to ``new`` as MySQL converts it in an ALTER."""
    digits = _INTEGERS.get(type(old))
    if old == new:
        return True
    if isinstance(new, StringType):
        return digits is not None or isinstance(old, DecimalType)
    if digits is not None and type(new) in _INTEGERS:
        return _INTEGERS[type(new)] >= digits
    if isinstance(new, DecimalType):
        if digits is not None:
            return new.precision - new.scale >= digits
        return (isinstance(old, DecimalType) and new.scale >= old.scale
                and new.precision - new.scale >= old.precision - old.scale)
    return False


def default_value(table: TypedTable, column: str, text: str | None) -> Column:
    """An added column's default (its text, as :func:`spark_readers.materialise.column_default` gives it)
    as a literal of the column's type; NULL when the type cannot hold it."""
    kind = table.types()[[name for name, _ in table.columns].index(column)]
    try:
        value = None if text is None else kind.convert(text)
    except Unrepresentable:
        value = None
    return F.lit(value).cast(kind.spark)


def stored_columns(stored: StructType, table: TypedTable, names: dict[str, str],
                   defaults: dict[str, str | None]) -> list[Column]:
    """The columns of ``table`` (then ``_invalid``) from rows of a typed image table of schema ``stored``:
    ``names`` maps a column to its stored name (a column not in it was added: its default)."""
    columns: list[Column] = []
    invalid: list[Column] = []
    for field in table.image_schema().fields:
        if field.name not in names:
            columns.append(default_value(table, field.name, defaults.get(field.name)).alias(field.name))
            continue
        value = F.col(f"`{names[field.name]}`")
        old = stored[names[field.name]].dataType
        kept = F.element_at(F.col(INVALID), F.lit(names[field.name]))
        if exact_cast(old, field.dataType):
            columns.append(value.cast(field.dataType).alias(field.name))
        else:
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
            kept = F.coalesce(kept, value.cast("string"))
        invalid += [F.lit(field.name), kept]
    pairs = F.map_filter(F.create_map(*invalid), lambda _, v: v.isNotNull()) if invalid else F.create_map()
    columns.append(F.when(F.size(pairs) > 0, pairs).cast(INVALID_TYPE).alias(INVALID))
    return columns
