"""The compiled decoders' temporal values on any bytes, valid or not, against the general way.

The compiled decoders lay out DATE, DATETIME2, TIMESTAMP2 (in UTC) and TIME2 values themselves when
their fields are in range, and go through ``datetime`` and the renderers of gate.capture.values (as the
library's values do) otherwise. Here every field takes values in and out of range (hour 24 to 31,
minute 60 to 63, day 29 to 31 of every month, year 0 and above 9999, fractions of a second or more,
negative TIMEs with and without fractions) and the text must be what the general way makes of the
same bytes (the real binlog's values are compared with the library's in tests/test_compiled.py).
"""

from __future__ import annotations

from datetime import date, datetime, timezone, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysqlreplication.column import Column
from pymysqlreplication.constants import FIELD_TYPE

from gate.capture.compiled import build
from gate.capture.values import datetime_renderer, render_microseconds, timestamp_renderer, zero_datetime

FSP_BYTES = (0, 1, 1, 2, 2, 3, 3)
FSPS = st.integers(0, 6)


def image(column: Column, value: bytes, tz: tzinfo = timezone.utc) -> str:
    """The text of ``value`` as the one column of a row without NULLs, and that the bytes were all read."""
    decoder = build([column], tz, "base64")
    assert decoder is not None
    text, end = decoder.image(b"\x00" + value, 0)
    assert end == 1 + len(value)
    prefix = '[{"' + str(column.name) + '":"'
    assert text.startswith(prefix) and text.endswith('"}]')
    return text[len(prefix):-3]


def fraction(fsp: int, raw: bytes) -> int:
    """The microseconds of a DATETIME2/TIMESTAMP2 fraction as the library reads them."""
    read = int.from_bytes(raw, "big", signed=True)
    return (int(read / 10) if fsp % 2 else read) * 10 ** (6 - fsp)


def general_datetime(n: int, us: int, fsp: int) -> str:
    ym = n >> 22 & 131071
    try:
        v = datetime(ym // 13, ym % 13, n >> 17 & 31, n >> 12 & 31, n >> 6 & 63, n & 63)
    except ValueError:
        return zero_datetime(fsp)
    return datetime_renderer(fsp)(v.replace(microsecond=us) if us > 0 else v)


years = st.one_of(st.integers(0, 10082), st.sampled_from([0, 1, 1900, 2000, 2024, 2100, 9999, 10000]))
days = st.integers(0, 31)


@settings(max_examples=400, deadline=None)
@given(fsp=FSPS, sign=st.integers(0, 1), year=years, month=st.integers(0, 12), day=days, hour=st.integers(0, 31),
       minute=st.integers(0, 63), second=st.integers(0, 63), raw=st.binary(min_size=3, max_size=3))
def test_datetime2_any_fields(fsp: int, sign: int, year: int, month: int, day: int, hour: int, minute: int,
                              second: int, raw: bytes) -> None:
    n = sign << 39 | (year * 13 + month) % 131072 << 22 | day << 17 | hour << 12 | minute << 6 | second
    frac = raw[:FSP_BYTES[fsp]]
    column = Column(name="dt", type=FIELD_TYPE.DATETIME2, fsp=fsp)
    us = fraction(fsp, frac)
    try:
        want = general_datetime(n, us, fsp)
    except ValueError:  # a fraction datetime refuses on a valid date: the decoder stops as the library does
        with pytest.raises(ValueError):
            image(column, n.to_bytes(5, "big") + frac)
        return
    assert image(column, n.to_bytes(5, "big") + frac) == want


@settings(max_examples=300, deadline=None)
@given(fsp=FSPS, seconds=st.one_of(st.integers(-2**31, 2**31 - 1), st.sampled_from([0, 1, -1, 86399, 86400])),
       raw=st.binary(min_size=3, max_size=3), tz=st.sampled_from([timezone.utc, ZoneInfo("UTC"), ZoneInfo("Etc/UTC")]))
def test_timestamp2_in_utc(fsp: int, seconds: int, raw: bytes, tz: tzinfo) -> None:
    frac = raw[:FSP_BYTES[fsp]]
    column = Column(name="ts", type=FIELD_TYPE.TIMESTAMP2, fsp=fsp)
    value = seconds.to_bytes(4, "big", signed=True) + frac
    us = fraction(fsp, frac)
    v = datetime.utcfromtimestamp(seconds)
    if us >= 1_000_000:
        with pytest.raises(ValueError):
            image(column, value, tz)
        return
    want = timestamp_renderer(fsp, timezone.utc)(v.replace(microsecond=us) if us > 0 else v)
    assert image(column, value, tz) == want


@settings(max_examples=400, deadline=None)
@given(fsp=FSPS, raw=st.one_of(st.binary(min_size=6, max_size=6),
                               st.builds(lambda h, m, s, rest: ((1 << 23) + (h << 12 | m << 6 | s)).to_bytes(3, "big")
                                         + rest, st.integers(-1023, 1023), st.integers(0, 63), st.integers(0, 63),
                                         st.binary(min_size=3, max_size=3))))
def test_time2_any_bytes(fsp: int, raw: bytes) -> None:
    size = FSP_BYTES[fsp]
    if size == 3:
        x = int.from_bytes(raw[:6], "big") - 140737488355328
    else:
        i = int.from_bytes(raw[:3], "big") - 8388608
        f = int.from_bytes(raw[3:3 + size], "big")
        if size and i < 0 and f:
            i, f = i + 1, f - (0x100 if size == 1 else 0x10000)
        x = (i << 24) + f * (10000 if size == 1 else 100)
    a = -x if x < 0 else x
    h = a >> 24
    us = (((h >> 12 & 1023) * 60 + (h >> 6 & 63)) * 60 + (h & 63)) * 1000000 + (a & 16777215)
    column = Column(name="tm", type=FIELD_TYPE.TIME2, fsp=fsp)
    assert image(column, raw[:3 + size]) == render_microseconds(-us if x < 0 else us, fsp)


@settings(max_examples=300, deadline=None)
@given(year=years.map(lambda y: y % 32768), month=st.integers(0, 15), day=days)
def test_date_any_fields(year: int, month: int, day: int) -> None:
    column = Column(name="d", type=FIELD_TYPE.DATE)
    value = (year << 9 | month << 5 | day).to_bytes(3, "little")
    if not (year and month and day):
        assert image(column, value) == "0000-00-00"
        return
    try:
        want = date(year, month, day).isoformat()
    except ValueError:  # an impossible date stops the decoder, as it stops the library
        with pytest.raises(ValueError):
            image(column, value)
        return
    assert image(column, value) == want
