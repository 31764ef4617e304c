"""The Spark type of every MySQL/MariaDB column type, and the conversion of the DC's text to it.

One definition for every typed reader of a channel (the typed change stream of ``format("gate")``
with option ``table``, and typed table images). A column's type is the ``data_type`` of gate's
CREATETABLE, SNAPSHOTSTART and ALTERTABLE payloads (lower-cased, as written or as
``information_schema.COLUMNS.COLUMN_TYPE`` shows it); a value is the DC's text of it
(docs/reference/dc-format.md). The mapping is documented in docs/consumers/spark.md ("Typed change
streams"); in short:

- integers by width and sign: TINYINT byte, SMALLINT and TINYINT UNSIGNED short, MEDIUMINT, INT and
  SMALLINT/MEDIUMINT UNSIGNED int, BIGINT and INT UNSIGNED long, BIGINT UNSIGNED decimal(20,0);
- DECIMAL(p,s) decimal(p,s) for p <= 38, else string (the exact text: Spark's decimals stop at 38
  digits); FLOAT float, DOUBLE double;
- DATE date, DATETIME timestamp_ntz, TIMESTAMP timestamp (the DC's text is in the channel's time zone),
  TIME a day-time interval, YEAR short;
- text, ENUM and JSON string; SET array<string>; BINARY/BLOB and GEOMETRY binary (decoded from the
  channel's base64/hex); BIT(1) boolean, BIT(2..63) long, BIT(64) decimal(20,0); UUID and INET6 string
  and INET4 string (their text);
- any other type name: string, the DC's text.

A value Spark cannot hold (a zero date, a TIMESTAMP that the channel's time zone shows twice, text
that is not the type's, e.g. masked by a column rule) raises :class:`Unrepresentable`; readers store
NULL and keep the DC's text aside (never a wrong value).

This module runs on executors: it imports only the standard library and pyspark.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

Converter = Callable[[str], Any]
MAX_PRECISION = 38  # Spark's widest decimal
_UTC = timezone.utc


class Unrepresentable(ValueError):
    """The DC's text of a value has no value of the column's Spark type (a zero date, a masked value...)."""


@dataclass(frozen=True)
class ColumnType:
    """A column's Spark type and the function from the DC's (non-null) text to the Python value Spark
    and Arrow take for it."""

    spark: DataType
    convert: Converter
    bounds: tuple[int, int] | None = None  # integers: the range the source type holds

    @property
    def identity(self) -> str:
        """Equal for two column types whose values convert alike (``int(11)`` and ``int``, ``json`` and
        ``longtext``): what decides whether a DDL statement changes a typed schema."""
        return self.spark.simpleString() + (f"[{self.bounds[0]},{self.bounds[1]}]" if self.bounds else "")


def _ranged(lo: int, hi: int) -> Converter:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise Unrepresentable(text) from None
        if not lo <= value <= hi:
            raise Unrepresentable(text)
        return value
    return convert


_DIGITS = Context(prec=MAX_PRECISION + 1)  # the default context's 28 digits would refuse DECIMAL(29..38) values


def _decimal(precision: int, scale: int) -> Converter:
    quantum = Decimal(1).scaleb(-scale)
    limit = Decimal(10) ** (precision - scale)

    def convert(text: str) -> Decimal:
        try:
            value = Decimal(text)
            exact = value.quantize(quantum, context=_DIGITS)
        except InvalidOperation:
            raise Unrepresentable(text) from None
        if exact != value or exact.copy_abs() >= limit:
            raise Unrepresentable(text)
        return exact
    return convert


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise Unrepresentable(text) from None


_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_DATETIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")
_TIME = re.compile(r"^(-?)(\d{1,3}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def to_date(text: str) -> date:
    """DATE; zero dates and dates with a zero month or day are :class:`Unrepresentable`."""
    match = _DATE.match(text)
    if not match:
        raise Unrepresentable(text)
    try:
        return date(*map(int, match.groups()))
    except ValueError:
        raise Unrepresentable(text) from None


def to_datetime(text: str) -> datetime:
    """DATETIME as a naive datetime (microseconds exact); zero values are :class:`Unrepresentable`."""
    match = _DATETIME.match(text)
    if not match:
        raise Unrepresentable(text)
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                        int((fraction or "").ljust(6, "0")))
    except ValueError:
        raise Unrepresentable(text) from None


def timestamp_converter(tz: tzinfo) -> Converter:
    """TIMESTAMP: the DC's text is the wall time in the channel's zone ``tz``; the instant, in UTC. A
    wall time the zone shows twice (the hour repeated when clocks go back) names no single instant."""
    def convert(text: str) -> datetime:
        wall = to_datetime(text)
        if tz is _UTC:
            return wall.replace(tzinfo=_UTC)
        first, second = wall.replace(tzinfo=tz, fold=0), wall.replace(tzinfo=tz, fold=1)
        if first.utcoffset() != second.utcoffset():
            raise Unrepresentable(text)
        return first.astimezone(_UTC)
    return convert


def to_time(text: str) -> timedelta:
    """TIME (-838:59:59.999999 to 838:59:59.999999) as a signed duration."""
    match = _TIME.match(text)
    if not match:
        raise Unrepresentable(text)
    sign, hours, minutes, seconds, fraction = match.groups()
    us = ((int(hours) * 60 + int(minutes)) * 60 + int(seconds)) * 1_000_000 + int((fraction or "").ljust(6, "0"))
    return timedelta(microseconds=-us if sign else us)


def bytes_converter(binary_format: str) -> Converter:
    """Binary strings and GEOMETRY: the bytes of the channel's base64 or hex text."""
    def convert(text: str) -> bytes:
        try:
            return base64.b64decode(text, validate=True) if binary_format == "base64" else bytes.fromhex(text)
        except (binascii.Error, ValueError):
            raise Unrepresentable(text) from None
    return convert


def _sized(decode: Converter, size: int, show: Callable[[bytes], str]) -> Converter:
    def convert(text: str) -> str:
        raw = decode(text)
        if len(raw) != size:
            raise Unrepresentable(text)
        return show(raw)
    return convert


def inet6_text(raw: bytes) -> str:
    """INET6's text as MariaDB shows it: RFC 5952, IPv4-mapped and IPv4-compatible addresses dotted."""
    address = ipaddress.IPv6Address(raw)
    if raw[:10] == bytes(10) and raw[10:12] in (b"\xff\xff", b"\x00\x00") and (raw[10] or raw[12:14] != bytes(2)):
        return f"::{'ffff:' if raw[10] else ''}{ipaddress.IPv4Address(raw[12:])}"
    return address.compressed


def _integer(spark: DataType, lo: int, hi: int) -> ColumnType:
    return ColumnType(spark, _ranged(lo, hi), (lo, hi))


_UNSIGNED_64 = ColumnType(DecimalType(20, 0), lambda text: Decimal(_ranged(0, 2**64 - 1)(text)), (0, 2**64 - 1))


def _inet4(raw: bytes) -> str:
    return str(ipaddress.IPv4Address(raw))


def _bit(width: int) -> ColumnType:
    if width == 1:
        return ColumnType(BooleanType(), lambda text: bool(_ranged(0, 1)(text)))
    if width < 64:
        return _integer(LongType(), 0, 2**width - 1)
    return _UNSIGNED_64


_INTEGERS = {  # type name -> (bits, signed Spark type, unsigned Spark type)
    "tinyint": (8, ByteType(), ShortType()), "int1": (8, ByteType(), ShortType()),
    "bool": (8, ByteType(), ShortType()), "boolean": (8, ByteType(), ShortType()),
    "smallint": (16, ShortType(), IntegerType()), "int2": (16, ShortType(), IntegerType()),
    "mediumint": (24, IntegerType(), IntegerType()), "middleint": (24, IntegerType(), IntegerType()),
    "int3": (24, IntegerType(), IntegerType()),
    "int": (32, IntegerType(), LongType()), "integer": (32, IntegerType(), LongType()),
    "int4": (32, IntegerType(), LongType()),
    "bigint": (64, LongType(), LongType()), "int8": (64, LongType(), LongType()),  # unsigned: _UNSIGNED_64
}
_DECIMALS = ("decimal", "numeric", "dec", "fixed")
_TEXTS = ("char", "varchar", "character", "nchar", "nvarchar", "national", "tinytext", "text", "mediumtext",
          "longtext", "long", "enum", "json", "varchar2", "clob")
_BINARIES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "raw", "geometry", "point",
             "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection")
_TYPE = re.compile(r"^([a-z0-9_]+)(?:\s+(?:precision|varying|byte))?\s*(?:\((.*)\))?(.*)$", re.S)


def column_type(data_type: str, tz: tzinfo = _UTC, binary_format: str = "base64") -> ColumnType:
    """The Spark type of a column of ``data_type`` (as gate's DDL payloads carry it) and its converter;
    ``tz`` and ``binary_format`` are the channel's settings ``timezone`` and ``binary_format``."""
    match = _TYPE.match(data_type.strip().lower())
    name, args, rest = (match.group(1), match.group(2), match.group(3)) if match else ("", None, "")
    numbers = [int(n) for n in re.findall(r"\d+", args or "")] if name not in ("enum", "set") else []
    if name == "serial":
        return _UNSIGNED_64
    if name in _INTEGERS:
        bits, signed, unsigned = _INTEGERS[name]
        if "unsigned" in rest:
            return _UNSIGNED_64 if bits == 64 else _integer(unsigned, 0, 2**bits - 1)
        return _integer(signed, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if name in _DECIMALS:
        precision, scale = (numbers + [10, 0][len(numbers):])[:2] if numbers else (10, 0)
        if precision > MAX_PRECISION:
            return ColumnType(StringType(), str)
        return ColumnType(DecimalType(precision, scale), _decimal(precision, scale))
    if name in ("float", "real", "double", "float4", "float8"):
        single = name in ("float", "float4") and not (len(numbers) == 1 and numbers[0] > 24)
        return ColumnType(FloatType() if single else DoubleType(), _float)
    if name == "date":
        return ColumnType(DateType(), to_date)
    if name == "datetime":
        return ColumnType(TimestampNTZType(), to_datetime)
    if name == "timestamp":
        return ColumnType(TimestampType(), timestamp_converter(tz))
    if name == "time":
        return ColumnType(DayTimeIntervalType(DayTimeIntervalType.DAY, DayTimeIntervalType.SECOND), to_time)
    if name == "year":
        return _integer(ShortType(), 0, 2155)
    if name == "bit":
        return _bit(numbers[0] if numbers else 1)
    if name == "set":
        return ColumnType(ArrayType(StringType()), lambda text: text.split(",") if text else [])
    if name in _BINARIES or name.endswith("blob"):
        return ColumnType(BinaryType(), bytes_converter(binary_format))
    if name == "uuid":
        return ColumnType(StringType(), _sized(bytes_converter(binary_format), 16, lambda raw: str(uuid.UUID(bytes=raw))))
    if name == "inet6":
        return ColumnType(StringType(), _sized(bytes_converter(binary_format), 16, inet6_text))
    if name == "inet4":
        return ColumnType(StringType(), _sized(bytes_converter(binary_format), 4, _inet4))
    return ColumnType(StringType(), str)  # _TEXTS and any other type: the DC's text as it is
