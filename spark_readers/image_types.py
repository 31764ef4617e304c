"""Typed image tables: the history's text values converted to the Spark types of the table's columns.

The types and conversions are those of the typed change stream (spark_readers.types through
:class:`spark_readers.typed_rows.TypedTable`), but for TIME, which is its text (:func:`for_delta`). A
typed table's Delta columns are the table's columns, then ``_invalid``: column -> the DC's text of
each value its Spark type cannot hold (a zero date, a TIMESTAMP its channel's zone shows twice, ...),
which is NULL in the row; NULL when there is none.

When an ALTER changes a column's type, the stored rows' values are cast when the change widens it
exactly (a wider integer or decimal, or integer or decimal to text: :func:`exact_cast`); otherwise the
value is NULL and ``_invalid`` keeps the old value's text (Spark's), never a converted guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    DayTimeIntervalType,
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
from spark_readers.types import Converter, Unrepresentable

INVALID = "_invalid"
INVALID_TYPE = MapType(StringType(), StringType())
_INTEGERS: dict[type, int] = {ByteType: 3, ShortType: 5, IntegerType: 10, LongType: 19}  # decimal digits


def quoted(name: str) -> str:
    """``name`` as a Spark SQL identifier, whatever its characters (a backtick included)."""
    return "`" + name.replace("`", "``") + "`"


def column(name: str) -> Column:
    """The column ``name``, whatever its characters."""
    return F.col(quoted(name))


# gate's own columns in frames that also hold a source table's columns. MySQL and MariaDB refuse a column name
# that ends with a space, so no source column (a `key`, an `alive`) can be named like one of these.
KEY = "_gate_key "  # a changed key's values as the DC has them (array<string>)
ALIVE = "_gate_alive "  # whether a changed key is there after the update (False: deleted)
IDENTITY = "_gate_identity "  # a stored row's key values, compared with the changed keys'
TYPED = "_gate_typed "  # the typed values of a row, before they become columns


def key_column(position: int) -> str:
    """The name of a changed key's ``position``-th value, typed, in :func:`converted` frames."""
    return f"_gate_k{position} "


def for_delta(table: TypedTable) -> TypedTable:
    """``table`` as a Delta table holds it: TIME columns (a day-time interval, which Delta Lake has no type
    for) are their text, as the DC has it."""
    times = {name.casefold() for (name, _), kind in zip(table.columns, table.types())
             if isinstance(kind.spark, DayTimeIntervalType)}
    return replace(table, as_text=table.as_text | times)


def identity(table: TypedTable, columns: Sequence[str]) -> TypedTable:
    """``table`` reduced to ``columns`` (in that order): the types of a key's values."""
    types = {name.casefold(): kind for name, kind in table.columns}
    return replace(table, columns=tuple((c, types[c.casefold()]) for c in columns))


def converted(frame: DataFrame, table: TypedTable | None, key: TypedTable | None = None,
              passthrough: Sequence[str] = ()) -> DataFrame:
    """``frame``'s columns of ``table`` (the DC's text) typed, then ``_invalid``; with ``key`` (the
    columns of ``frame``'s :data:`KEY`, an array of their texts), its values typed as :func:`key_column`
    columns; then the ``passthrough`` columns as they are. (A Python UDF: mapInArrow would need pandas.)"""
    names = [name for name, _ in table.columns] if table else []
    fields = [*table.image_schema().fields, StructField(INVALID, INVALID_TYPE)] if table else []
    key_names = [name for name, _ in key.columns] if key else []
    key_fields = [StructField(key_column(i), f.dataType) for i, f in enumerate(key.image_schema().fields)] if key else []
    converters: list[list[Converter]] = []  # built once per task, on the executor

    def convert(texts: list[str | None], key_texts: list[str | None] | None) -> tuple[Any, ...]:
        if not converters:
            converters.extend([[kind.convert for kind in table.types()] if table else [],
                               [kind.convert for kind in key.types()] if key else []])
        invalid: dict[str, str] = {}
        values = typed_values(names, texts, converters[0], invalid)
        keys = typed_values(key_names, key_texts or [], converters[1], {})
        return (*values, *([invalid or None] if table else []), *keys)

    typed = F.udf(convert, StructType([*fields, *key_fields]), useArrow=False)
    texts = F.array(*[column(name) for name in names]) if names else F.array().cast("array<string>")
    passed = [column(name) for name in passthrough]
    return frame.select(typed(texts, column(KEY) if key else F.lit(None).cast("array<string>")).alias(TYPED),
                        *passed).select(f"{quoted(TYPED)}.*", *passed)


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
        value = column(names[field.name])
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
