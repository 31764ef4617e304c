"""Unit tests of gate.capture.values: exact texts, as MariaDB 10.11 shows them (checked against the server in
tests/test_type_matrix.py), from the values python-mysql-replication 1.0.17 hands over."""

from __future__ import annotations

import base64
import json
import struct
import time
from datetime import date, datetime, timedelta, timezone
from datetime import time as dtime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysqlreplication.column import Column
from pymysqlreplication.constants import FIELD_TYPE as T
from pymysqlreplication.row_event import RowsEvent

from gate.capture.libshim import fix_library_charsets
from gate.capture.values import (
    ImageRenderer,
    correct_negative_time2,
    datetime_renderer,
    render_base64,
    render_bit,
    render_decimal,
    render_float32,
    render_float64,
    render_hex,
    render_json,
    render_timedelta,
    timestamp_renderer,
    zero_datetime,
)

US = timedelta(microseconds=1)


def f32(x: float) -> float:
    """The double the library unpacks for a FLOAT column holding x."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


@pytest.mark.parametrize(("x", "text"), [
    (0.0, "0"), (-0.0, "0"), (1.0, "1"), (-1.0, "-1"), (100.0, "100"), (1.1, "1.1"), (-12.5, "-12.5"),
    (0.1 + 0.2, "0.30000000000000004"), (1 / 3, "0.3333333333333333"),
    (1e-4, "0.0001"), (1e-5, "0.00001"), (1.5e-5, "0.000015"), (1e-7, "0.0000001"), (-1e-7, "-0.0000001"),
    (1e-14, "0.00000000000001"), (1e-15, "0.000000000000001"), (1.25e-15, "0.00000000000000125"),
    (1e-16, "1e-16"), (-2.5e-16, "-2.5e-16"),
    (1e14, "100000000000000"), (999999999999999.9, "999999999999999.9"), (123456789012345.6, "123456789012345.6"),
    (1e15, "1e15"), (1.5e15, "1.5e15"), (1234567890123456.8, "1234567890123456.8"), (2.0**53, "9.007199254740992e15"),
    (1e16, "1e16"), (1.2345678901234568e17, "1.2345678901234568e17"), (1e20, "1e20"), (1e21, "1e21"),
    (1e100, "1e100"), (-1.5e300, "-1.5e300"), (1.5e-300, "1.5e-300"), (-2.5e-223, "-2.5e-223"),
    (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e308"),
    (-1.7976931348623157e308, "-1.7976931348623157e308"),
])
def test_render_float64(x: float, text: str) -> None:
    assert render_float64(x) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_render_float64_round_trips(x: float) -> None:
    text = render_float64(x)
    assert float(text) == x
    assert "+" not in text and not text.endswith(".0")


@pytest.mark.parametrize(("x", "text"), [
    (0.0, "0"), (-0.0, "0"), (1.1, "1.1"), (-1.1, "-1.1"), (0.5, "0.5"), (100.0, "100"), (0.1 + 0.2, "0.3"),
    (1.2345678, "1.23457"), (1 / 3, "0.333333"), (2 / 3, "0.666667"), (3.141592653589793, "3.14159"),
    (12345.678, "12345.7"), (999999.9, "1000000"), (1234567.0, "1234570"), (16777217.0, "16777200"),
    (123456789.0, "123457000"), (123456789012345.6, "123457000000000"), (1234567890123456.7, "1.23457e15"),
    (1e15, "1e15"), (1e-7, "0.0000001"), (1.5e-5, "0.000015"), (0.000123457, "0.000123457"),
    (3.4028234663852886e38, "3.40282e38"), (-3.40282e38, "-3.40282e38"), (1.17549435e-38, "1.17549e-38"),
    (1e-40, "9.99995e-41"), (1.4e-45, "1.4013e-45"), (5e-324, "0"),
])
def test_render_float32(x: float, text: str) -> None:
    assert render_float32(f32(x)) == text


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_render_float32_keeps_six_significant_digits(x: float) -> None:
    text = render_float32(x)
    digits = text.lstrip("-").split("e")[0].replace(".", "").strip("0")  # trailing zeros of 1000000 are not significant
    assert len(digits) <= 6
    assert abs(float(text) - x) <= abs(x) * 5e-6


@pytest.mark.parametrize(("d", "text"), [
    (Decimal("12.340000"), "12.340000"), (Decimal("-12.30"), "-12.30"), (Decimal("-0.50"), "-0.50"),
    (Decimal("0.00"), "0.00"), (Decimal("0."), "0"), (Decimal("12345."), "12345"), (Decimal("-99999"), "-99999"),
    (Decimal("0.000000000000000000000000000000"), "0." + "0" * 30),
    (Decimal("0.000000012000000000000000000000"), "0.000000012000000000000000000000"),
    (Decimal("-0.000000000000000000000000000001"), "-0.000000000000000000000000000001"),
    (Decimal("9" * 35 + "." + "9" * 30), "9" * 35 + "." + "9" * 30),
])
def test_render_decimal(d: Decimal, text: str) -> None:
    assert render_decimal(d) == text


@pytest.mark.parametrize(("fsp", "text"), [
    (0, "2024-02-29 01:02:03"), (1, "2024-02-29 01:02:03.4"), (2, "2024-02-29 01:02:03.45"),
    (3, "2024-02-29 01:02:03.456"), (4, "2024-02-29 01:02:03.4567"), (5, "2024-02-29 01:02:03.45678"),
    (6, "2024-02-29 01:02:03.456789"),
])
def test_datetime_renderer(fsp: int, text: str) -> None:
    assert datetime_renderer(fsp)(datetime(2024, 2, 29, 1, 2, 3, 456789)) == text


@pytest.mark.parametrize(("fsp", "text"), [
    (0, "0001-01-01 00:00:00"), (1, "0001-01-01 00:00:00.0"), (3, "0001-01-01 00:00:00.000"),
    (6, "0001-01-01 00:00:00.000000"),
])
def test_datetime_renderer_pads_year_and_fraction(fsp: int, text: str) -> None:
    assert datetime_renderer(fsp)(datetime(1, 1, 1)) == text


@pytest.mark.parametrize(("fsp", "text"), [
    (0, "0000-00-00 00:00:00"), (1, "0000-00-00 00:00:00.0"), (2, "0000-00-00 00:00:00.00"),
    (6, "0000-00-00 00:00:00.000000"),
])
def test_zero_datetime(fsp: int, text: str) -> None:
    assert zero_datetime(fsp) == text


NEW_YORK = ZoneInfo("America/New_York")
SHANGHAI = ZoneInfo("Asia/Shanghai")


@pytest.mark.parametrize(("utc", "fsp", "tz", "text"), [
    (datetime(2024, 5, 6, 7, 8, 9, 123000), 3, timezone.utc, "2024-05-06 07:08:09.123"),
    (datetime(2024, 1, 1), 0, SHANGHAI, "2024-01-01 08:00:00"),
    (datetime(2024, 1, 1), 0, timezone(timedelta(hours=8)), "2024-01-01 08:00:00"),
    (datetime(2024, 1, 1), 2, timezone(-timedelta(hours=3, minutes=30)), "2023-12-31 20:30:00.00"),
    (datetime(2024, 3, 10, 6, 59, 59, 999999), 6, NEW_YORK, "2024-03-10 01:59:59.999999"),
    (datetime(2024, 3, 10, 7), 0, NEW_YORK, "2024-03-10 03:00:00"),
    (datetime(2024, 11, 3, 5, 30), 0, NEW_YORK, "2024-11-03 01:30:00"),  # EDT
    (datetime(2024, 11, 3, 6, 30), 0, NEW_YORK, "2024-11-03 01:30:00"),  # EST: the same wall time again
    (datetime(1970, 1, 1, 0, 0, 0, 500000), 1, timezone.utc, "1970-01-01 00:00:00.5"),  # a real TIMESTAMP
    (datetime(1970, 1, 1, 0, 0, 0, 500000), 1, SHANGHAI, "1970-01-01 08:00:00.5"),
    (datetime(1970, 1, 1), 0, timezone.utc, "0000-00-00 00:00:00"),  # the library's zero TIMESTAMP
    (datetime(1970, 1, 1), 4, NEW_YORK, "0000-00-00 00:00:00.0000"),
])
def test_timestamp_renderer(utc: datetime, fsp: int, tz: Any, text: str) -> None:
    assert timestamp_renderer(fsp, tz)(utc) == text


def test_timestamp_renderer_ignores_the_host_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        assert timestamp_renderer(0, timezone.utc)(datetime(2024, 1, 1, 12)) == "2024-01-01 12:00:00"
        assert timestamp_renderer(0, NEW_YORK)(datetime(2024, 1, 1, 12)) == "2024-01-01 07:00:00"
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(("td", "fsp", "text"), [
    (timedelta(0), 0, "00:00:00"), (timedelta(0), 3, "00:00:00.000"),
    (timedelta(days=-35, seconds=3601), 0, "-838:59:59"),
    (timedelta(hours=838, minutes=59, seconds=59), 0, "838:59:59"),
    (timedelta(hours=838, minutes=59, seconds=59, microseconds=999999), 6, "838:59:59.999999"),
    (timedelta(days=1, hours=1), 0, "25:00:00"),
    (timedelta(microseconds=-500000), 1, "-00:00:00.5"),
    (timedelta(microseconds=-1), 6, "-00:00:00.000001"),
    (timedelta(seconds=-1), 0, "-00:00:01"),
    (timedelta(hours=12, microseconds=1), 6, "12:00:00.000001"),
    *[(-timedelta(hours=12, minutes=34, seconds=56, microseconds=789012), fsp, "-12:34:56" + dec)
      for fsp, dec in enumerate(["", ".7", ".78", ".789", ".7890", ".78901", ".789012"])],
])
def test_render_timedelta(td: timedelta, fsp: int, text: str) -> None:
    assert render_timedelta(td, fsp) == text


MAX_TIME_US = (839 * 3600 - 1) * 1_000_000 + 999_999


@given(st.integers(-MAX_TIME_US, MAX_TIME_US))
def test_render_timedelta_parses_back(us: int) -> None:
    text = render_timedelta(us * US, 6)
    sign = -1 if text.startswith("-") else 1
    hours, minutes, seconds = text.lstrip("-").split(":")
    assert sign * ((int(hours) * 60 + int(minutes)) * 60_000_000 + round(float(seconds) * 1_000_000)) == us


def library_time2(true_us: int) -> timedelta:
    """What python-mysql-replication 1.0.17 returns for a TIME2 value of ``true_us`` microseconds."""
    magnitude = abs(true_us)
    whole, fraction = divmod(magnitude, 1_000_000)
    if true_us >= 0 or fraction == 0:
        return true_us * US
    return -(whole * 1_000_000 + 1_000_000 - fraction) * US


@pytest.mark.parametrize(("library", "true"), [
    (-timedelta(hours=12, minutes=34, seconds=56, microseconds=300000),
     -timedelta(hours=12, minutes=34, seconds=56, microseconds=700000)),
    (-timedelta(hours=1, microseconds=999000), -timedelta(hours=1, microseconds=1000)),
    (timedelta(microseconds=-1000), timedelta(microseconds=-999000)),
    (-timedelta(seconds=1, microseconds=999999), -timedelta(seconds=1, microseconds=1)),
    (timedelta(microseconds=-500000), timedelta(microseconds=-500000)),
    (timedelta(days=-35, seconds=3601), timedelta(days=-35, seconds=3601)),
    (timedelta(hours=1, microseconds=1), timedelta(hours=1, microseconds=1)),
    (timedelta(0), timedelta(0)),
])
def test_correct_negative_time2(library: timedelta, true: timedelta) -> None:
    assert correct_negative_time2(library) == true


@given(st.integers(-MAX_TIME_US, MAX_TIME_US))
def test_correct_negative_time2_undoes_the_library(us: int) -> None:
    assert correct_negative_time2(library_time2(us)) == us * US


@pytest.mark.parametrize(("bits", "text"), [
    ("0", "0"), ("1", "1"), ("0000000000", "0"), ("1010101010", "682"), ("1111111111", "1023"),
    ("1" * 64, "18446744073709551615"), ("1" + "0" * 62 + "1", "9223372036854775809"),
])
def test_render_bit(bits: str, text: str) -> None:
    assert render_bit(bits) == text


@pytest.mark.parametrize(("b", "b64", "hexa"), [
    (b"", "", ""), (b"\x00", "AA==", "00"), (b"\x00\xff", "AP8=", "00ff"),
    (b"\x01\x02\x00\x00", "AQIAAA==", "01020000"), (b"\xde\xad\xbe\xef\x01", "3q2+7wE=", "deadbeef01"),
])
def test_render_binary(b: bytes, b64: str, hexa: str) -> None:
    assert render_base64(b) == b64
    assert render_hex(b) == hexa


def test_render_binary_every_byte() -> None:
    every = bytes(range(256)) * 3
    assert render_base64(every) == base64.b64encode(every).decode()
    assert render_hex(every) == "".join(f"{b:02x}" for b in every)


@pytest.mark.parametrize(("v", "text"), [
    ({b"a": 1, b"b": [1, 2]}, '{"a": 1, "b": [1, 2]}'),
    ({}, "{}"), ([], "[]"), (None, "null"), (True, "true"), (False, "false"), (-7, "-7"),
    (b'x"y\\z\n\xc3\xa9\xf0\x9f\x98\x80', '"x\\"y\\\\z\\né😀"'),
    ([1.5, 1e20, 2.5e-7, Decimal("2.50")], "[1.5, 1e20, 0.00000025, 2.50]"),
    ({b"k": {b"n": None, b"l": [True, b"s"]}}, '{"k": {"n": null, "l": [true, "s"]}}'),
    (datetime(2015, 1, 15, 23, 24, 25), '"2015-01-15 23:24:25.000000"'),
    (date(2015, 1, 15), '"2015-01-15"'), (dtime(12, 0, 1, 5), '"12:00:01.000005"'),
])
def test_render_json(v: Any, text: str) -> None:
    assert render_json(v) == text


def test_render_json_refuses_what_it_cannot_lay_out() -> None:
    with pytest.raises(TypeError, match="partial JSON"):
        render_json([object()])


def col(name: str | None, type: int, **attributes: Any) -> Column:
    """A Column as the library builds it from a TableMapEvent with FULL metadata."""
    defaults = {"unsigned": False, "character_set_name": None, "enum_values": None, "set_values": None}
    return Column(type=type, name=name, **{**defaults, **attributes})


COLUMNS = [
    col("id", T.LONG), col("big", T.LONGLONG, unsigned=True), col("tiny", T.TINY), col("small", T.SHORT),
    col("medium", T.INT24), col("price", T.NEWDECIMAL, precision=10, decimals=2), col("f", T.FLOAT, size=4),
    col("d", T.DOUBLE, size=8), col("dt", T.DATETIME2, fsp=3), col("ts", T.TIMESTAMP2, fsp=0),
    col("day", T.DATE), col("tm", T.TIME2, fsp=1), col("yr", T.YEAR), col("flags", T.BIT, bits=10, bytes=2),
    col("color", T.ENUM, enum_values=["", "red", "green"], size=1),
    col("tags", T.SET, set_values=["zz", "y", "x"], size=1), col("doc", T.JSON, length_size=4),
    col("name", T.VARCHAR, character_set_name="utf8", max_length=400),
    col("latin", T.STRING, character_set_name="cp1252", max_length=10),
    col("code", T.STRING, character_set_name="binary", max_length=4),
    col("raw", T.VARCHAR, character_set_name="binary", max_length=10),
    col("blob", T.BLOB, character_set_name="binary", length_size=2),
    col("legacy", T.STRING, character_set_name="swe7", max_length=8),
    col("shape", T.GEOMETRY, character_set_name="binary", length_size=4),
]


def render(values: dict[str, Any], none_sources: dict[str, str] | None = None, **options: Any) -> list[dict]:
    return ImageRenderer(COLUMNS, **options).render(values, none_sources or {})


VALUES = {
    "id": -1, "big": 18446744073709551615, "tiny": -128, "small": 32767, "medium": -8388608,
    "price": Decimal("-12.30"), "f": f32(1.1), "d": 0.1 + 0.2, "dt": datetime(2024, 2, 29, 1, 2, 3, 450000),
    "ts": datetime(2038, 1, 19, 3, 14, 7), "day": date(2024, 2, 29),
    "tm": -timedelta(hours=12, minutes=34, seconds=56, microseconds=300000), "yr": 2024, "flags": "1010101010",
    "color": "green", "tags": {"x", "zz"}, "doc": {b"a": 1, b"b": [1, 2]}, "name": "héllo 😀", "latin": "àé€",
    "code": b"\x01\x02", "raw": b"\x00\x01\x00", "blob": bytes(range(256)), "legacy": b"\x5b\x5d",
    "shape": b"\x00\x00\x00\x00\x01\x01\x00\x00\x00",
}
EXPECTED = [
    {"id": "-1"}, {"big": "18446744073709551615"}, {"tiny": "-128"}, {"small": "32767"}, {"medium": "-8388608"},
    {"price": "-12.30"}, {"f": "1.1"}, {"d": "0.30000000000000004"}, {"dt": "2024-02-29 01:02:03.450"},
    {"ts": "2038-01-19 03:14:07"}, {"day": "2024-02-29"}, {"tm": "-12:34:56.7"}, {"yr": "2024"},
    {"flags": "682"}, {"color": "green"}, {"tags": "zz,x"}, {"doc": '{"a": 1, "b": [1, 2]}'},
    {"name": "héllo 😀"}, {"latin": "àé€"}, {"code": "AQIAAA=="}, {"raw": "AAEA"},
    {"blob": base64.b64encode(bytes(range(256))).decode()}, {"legacy": "W10="}, {"shape": "AAAAAAEBAAAA"},
]


def test_image_renderer_renders_every_type() -> None:
    assert render(VALUES) == EXPECTED


def test_image_renderer_hex() -> None:
    image = render(VALUES, binary_format="hex")
    assert image[19:] == [{"code": "01020000"}, {"raw": "000100"}, {"blob": bytes(range(256)).hex()},
                          {"legacy": "5b5d"}, {"shape": "000000000101000000"}]
    assert image[:19] == EXPECTED[:19]


def test_image_renderer_nulls() -> None:
    values = dict.fromkeys(VALUES)
    assert render(values, dict.fromkeys(VALUES, "null")) == [{name: None} for name in VALUES]


def test_image_renderer_zero_values() -> None:
    """Zero dates and the empty set come as None with a none_source other than 'null'; zero YEAR as 1900;
    zero TIMESTAMP as the epoch; invalid ENUM as ''; BINARY(n) all zero bytes and empty strings as ''."""
    values = {**VALUES, "dt": None, "ts": datetime(1970, 1, 1), "day": None, "tm": timedelta(0), "yr": 1900,
              "flags": "0000000000", "color": "", "tags": None, "code": "", "raw": "", "blob": "", "f": 0.0,
              "d": 0.0, "price": Decimal("0.00")}
    none_sources = {"dt": "out of datetime2 range", "day": "out of date range", "tags": "empty set"}
    image = dict(pair for column in render(values, none_sources) for pair in column.items())
    assert {k: image[k] for k in ("dt", "ts", "day", "tm", "yr", "flags", "color", "tags", "code", "raw", "blob",
                                  "f", "d", "price")} == {
        "dt": "0000-00-00 00:00:00.000", "ts": "0000-00-00 00:00:00", "day": "0000-00-00", "tm": "00:00:00.0",
        "yr": "0000", "flags": "0", "color": "", "tags": "", "code": "AAAAAA==", "raw": "", "blob": "",
        "f": "0", "d": "0", "price": "0.00",
    }
    assert render(values, none_sources, binary_format="hex")[19] == {"code": "00000000"}


@given(st.text(), st.text(), st.sampled_from(["null", "out of date range", "empty set"]))
def test_image_json_is_exactly_what_json_dumps_makes_of_the_image(name: str, latin: str, source: str) -> None:
    """The decoders build the JSON text directly; it must be json.dumps's, byte for byte (quotes, control
    characters, non-BMP text, NULLs and zero values included)."""
    renderer = ImageRenderer(COLUMNS)
    for values, none_sources in [({**VALUES, "name": name, "latin": latin}, {}),
                                 ({**VALUES, "name": None, "day": None, "tags": None},
                                  {"name": "null", "day": source, "tags": source}),
                                 (dict.fromkeys(VALUES), dict.fromkeys(VALUES, "null"))]:
        assert renderer.image_json(values, none_sources) == json.dumps(
            renderer.render(values, none_sources), ensure_ascii=False, separators=(",", ":"))


def test_image_renderer_channel_zone() -> None:
    image = render(VALUES, tz=SHANGHAI)
    assert image[9] == {"ts": "2038-01-19 11:14:07"}
    assert image[8] == EXPECTED[8]  # DATETIME has no zone


def test_image_renderer_keys_unnamed_columns_as_the_library_does() -> None:
    renderer = ImageRenderer([col(None, T.LONG), col(None, T.VARCHAR, character_set_name="utf8", max_length=4)])
    assert renderer.render({"UNKNOWN_COL0": 5, "UNKNOWN_COL1": "x"}, {}) == [{"UNKNOWN_COL0": "5"},
                                                                          {"UNKNOWN_COL1": "x"}]


def test_image_renderer_rejects_unknown_format_and_type() -> None:
    with pytest.raises(ValueError, match="binary_format"):
        ImageRenderer(COLUMNS, binary_format="base32")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="type 6"):
        ImageRenderer([col("n", T.NULL)])


def test_fix_library_charsets() -> None:
    fix_library_charsets()
    fix_library_charsets()  # idempotent
    to_codec = RowsEvent.charset_to_encoding
    assert to_codec.__name__ == "_gate_charset_to_encoding"
    latin1 = bytes(range(256)).decode(to_codec("cp1252"))
    assert latin1[0x80] == "€" and latin1[0x81] == "\x81" and latin1[0x9d] == "\x9d" and latin1[0xe9] == "é"
    assert "àé€\x81".encode(to_codec("cp1252")) == b"\xe0\xe9\x80\x81"
    assert "Ø😀".encode("utf-16-be").decode(to_codec("utf16")) == "Ø😀"
    assert "Ø😀".encode("utf-32-be").decode(to_codec("utf32")) == "Ø😀"
    assert "Ø€".encode("utf-16-be").decode(to_codec("ucs2")) == "Ø€"
    assert "Ø😀".encode("utf-16-le").decode(to_codec("utf16le")) == "Ø😀"
    assert to_codec("utf8") == "utf8"
    assert to_codec("sjis") == "sjis"
