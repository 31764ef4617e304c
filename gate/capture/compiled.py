"""Compiled decoders: a row event's bytes straight to the DC's JSON text, one function per table map.

python-mysql-replication decodes every value through one generic method that dispatches on the
column type, reads through two layers of packet objects and builds dicts of Python values, which
:mod:`gate.capture.values` then renders to text. That is most of a decoder process's CPU. For each
table map, :func:`build` instead writes Python source for exactly that table's columns (fixed
offsets, ``struct`` formats, the NULL bitmap read once as an integer, labels and JSON keys
precomputed), compiles it once and runs it on the raw row data.

The library stays the reader of the stream and parses each event's header (table id, flags, the
columns-present bitmaps); only the row data is read here. Every value comes out as the text
:class:`~gate.capture.values.ImageRenderer` makes of the library's values (tests/test_compiled.py
checks that, event by event, on a real binlog and on generated rows). The renderers of
:mod:`gate.capture.values` are reused wherever a value needs more than a format. That includes
what the library loses (a date with a zero month or day comes out as the zero date, as the library's
None does): the bytes would allow better, but both paths must write the same rows.

What stays with the library: tables with a column type that MariaDB 10.3+ does not write (the old
DATETIME, TIMESTAMP and TIME formats, VAR_STRING) or that only MySQL writes (binary JSON), for which
:func:`build` returns None, and events the compiled form does not cover (partial row images, MySQL's
partial JSON updates), for which :meth:`TableDecoder.changes` returns None.
"""

from __future__ import annotations

import pickle
import struct
from binascii import b2a_base64 as b2a
from collections.abc import Callable, Sequence
from datetime import date, datetime, timezone, tzinfo
from json.encoder import encode_basestring
from typing import Any

from pymysqlreplication.column import Column
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from gate.capture.values import (
    _ENCODERS,
    BinaryFormat,
    _binary_padding,
    column_renderer,
    render_base64,
    render_float32,
    render_float64,
    render_hex,
    render_microseconds,
)
from gate.common.columns import Transform

_INTS = {  # type -> (struct format signed, unsigned, size)
    FIELD_TYPE.TINY: ("b", "B", 1), FIELD_TYPE.SHORT: ("<h", "<H", 2), FIELD_TYPE.LONG: ("<i", "<I", 4),
    FIELD_TYPE.LONGLONG: ("<q", "<Q", 8),
}
_TEXT = frozenset({FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB})
_SUPPORTED = frozenset({
    *_INTS, FIELD_TYPE.INT24, FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE, FIELD_TYPE.NEWDECIMAL, *_TEXT,
    FIELD_TYPE.GEOMETRY, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.TIME2, FIELD_TYPE.DATE,
    FIELD_TYPE.YEAR, FIELD_TYPE.ENUM, FIELD_TYPE.SET, FIELD_TYPE.BIT,
})
_ROW_EVENTS = {
    BINLOG.WRITE_ROWS_EVENT_V1: "NEW", BINLOG.WRITE_ROWS_EVENT_V2: "NEW",
    BINLOG.DELETE_ROWS_EVENT_V1: "OLD", BINLOG.DELETE_ROWS_EVENT_V2: "OLD",
    BINLOG.UPDATE_ROWS_EVENT_V1: "UPDATE", BINLOG.UPDATE_ROWS_EVENT_V2: "UPDATE",
}
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a group of 0..9 leftover digits
_FSP_BYTES = (0, 1, 1, 2, 2, 3, 3)
_TIMESPECS = {0: "seconds", 3: "milliseconds", 6: "microseconds"}
_DIGITS2 = tuple(f"{i:02d}" for i in range(1024))  # at least two digits: TIME's hours (10 bits), minutes, seconds
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_UTC_KEYS = ("UTC", "Etc/UTC")  # zoneinfo names of UTC: TIMESTAMP needs no conversion


class _Texts(dict[int, Any]):
    """The text of a key made once by ``make`` (at most 16,384 kept): the date parts of temporal values,
    which repeat across rows far more than whole values do. ``make`` raising stores nothing. One per kind
    of date in a process, shared by every column and table (about 2 MB at most each)."""

    def __init__(self, make: Callable[[int], Any]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: int) -> Any:
        if len(self) >= 16384:
            self.clear()
        text = self[key] = self.make(key)
        return text


def _date_text(n: int) -> str | None:
    """DATE's 3 bytes as a number: its text, None for a zero part (the library's None); an impossible
    date raises ValueError, as the library's decoding does."""
    y, m, d = n >> 9 & 0x7FFF, n >> 5 & 15, n & 31
    return date(y, m, d).isoformat() if y and m and d else None


def _datetime_day(n: int) -> str:
    """DATETIME2's date bits (year * 13 + month, day) as ``YYYY-MM-DD `` (space included), or '' where
    ``datetime()`` refuses them (the library's None: the zero text)."""
    ym = n >> 5
    try:
        return date(ym // 13, ym % 13, n & 31).isoformat() + " "
    except ValueError:
        return ""


def _epoch_day(n: int) -> str:
    """Day ``n`` after 1970-01-01 as ``YYYY-MM-DD `` (space included)."""
    return date.fromordinal(_EPOCH_DAY + n).isoformat() + " "


_DATE_TEXTS = _Texts(_date_text)
_DATETIME_DAYS = _Texts(_datetime_day)
_EPOCH_DAYS = _Texts(_epoch_day)


def _is_utc(tz: tzinfo) -> bool:
    return tz == timezone.utc or getattr(tz, "key", None) in _UTC_KEYS


def _fraction_lines(fsp: int) -> list[str]:
    """Lines setting ``f`` to the ``fsp`` fractional digits of ``us`` microseconds (0 when negative, as
    ``replace(microsecond=us)`` is skipped then)."""
    return [f"f = str(1000000 + us)[1:{1 + fsp}] if us > 0 else {'0' * fsp!r}"]


def supported(columns: Sequence[Column]) -> bool:
    """Whether every column's type has a compiled form (else the table is decoded by the library)."""
    return all(column.type in _SUPPORTED for column in columns)


def columns_shape(columns: Sequence[Column]) -> bytes:
    """Everything a table map says of its columns, hashable: equal shapes decode alike. Pickled, a third
    of the cost of a tuple built attribute by attribute (a decoder process does this for every table of
    every job); equal bytes are equal attributes, and equal attributes pickled apart would at worst
    compile a decoder twice."""
    return pickle.dumps([vars(column) for column in columns], pickle.HIGHEST_PROTOCOL)


class _Source:
    """Python source of one image function, with the objects it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}

    def const(self, value: Any) -> str:
        name = f"k{len(self.names)}"
        self.names[name] = value
        return name

    def add(self, indent: int, *lines: str) -> None:
        self.lines.extend("    " * indent + line for line in lines)


def _fsp_lines(fsp: int) -> list[str]:
    """Lines setting ``us`` to the fraction of a DATETIME2/TIMESTAMP2 as the library reads it
    (big-endian, signed, tenths dropped for an odd ``fsp``)."""
    size = _FSP_BYTES[fsp]
    if not size:
        return ["us = 0"]
    scale = 10 ** (6 - fsp)
    read = f"int.from_bytes(data[p:p + {size}], 'big', signed=True)"
    value = f"int({read} / 10)" if fsp % 2 else read
    return [f"us = {value} * {scale}", f"p += {size}"]


def _value_lines(src: _Source, column: Column, tz: tzinfo, binary_format: BinaryFormat,
                 plain: bool) -> tuple[list[str], str | None]:
    """Lines that read one non-NULL value at ``p`` (advancing it) and set ``t`` to its text, plus a
    note on the text: "safe" when it needs no JSON escaping, else None. ``z`` is set instead of ``t``
    for values the library returns as None that are not NULL (zero dates, the empty SET)."""
    t = column.type
    fsp: int = getattr(column, "fsp", 0)
    if t in _INTS:
        signed, unsigned, size = _INTS[t]
        unpack = src.const(struct.Struct(unsigned if column.unsigned else signed).unpack_from)
        # without a rule the cell's f-string formats the int as str() would; a rule is given the text
        return [f"t = {unpack}(data, p)[0]" if plain else f"t = str({unpack}(data, p)[0])", f"p += {size}"], "safe"
    if t == FIELD_TYPE.INT24:
        return [f"t = str(int.from_bytes(data[p:p + 3], 'little', signed={not column.unsigned}))", "p += 3"], "safe"
    if t == FIELD_TYPE.YEAR:
        return ["t = str(data[p] + 1900) if data[p] else '0000'", "p += 1"], "safe"
    if t == FIELD_TYPE.FLOAT:
        unpack = src.const(struct.Struct("<f").unpack_from)
        return [f"t = {src.const(render_float32)}({unpack}(data, p)[0])", "p += 4"], "safe"
    if t == FIELD_TYPE.DOUBLE:
        unpack = src.const(struct.Struct("<d").unpack_from)
        return [f"t = {unpack}(data, p)[0]", "p += 8", *_double_lines(src)], "safe"
    if t == FIELD_TYPE.NEWDECIMAL:
        return _decimal_lines(src, column), "safe"
    if t == FIELD_TYPE.BIT:
        size = (column.bits + 7) // 8
        mask = (1 << column.bits) - 1
        return [f"t = str(int.from_bytes(data[p:p + {size}], 'big') & {mask})", f"p += {size}"], "safe"
    if t == FIELD_TYPE.ENUM:
        if not column.enum_values:  # no labels in the table map: the library gives None (NULL)
            return [f"p += {column.size}"], "null"
        # without a column rule the labels are kept JSON-encoded already
        labels = src.const(tuple(encode_basestring(label) if plain else label for label in column.enum_values))
        return ([f"t = {labels}[{_little(column.size)}]", f"p += {column.size}"],
                "json" if plain else None)
    if t == FIELD_TYPE.SET:
        return _set_lines(src, column), None
    if t == FIELD_TYPE.DATE:
        dates = src.const(_DATE_TEXTS)
        return [f"t = {dates}[data[p] | data[p + 1] << 8 | data[p + 2] << 16]", "p += 3",
                "if t is None: z = 1"], "safe"
    if t == FIELD_TYPE.DATETIME2:
        return _datetime_lines(src, fsp), "safe"
    if t == FIELD_TYPE.TIMESTAMP2:
        stamp, _ = column_renderer(column, tz, binary_format)
        utc = src.const(datetime.utcfromtimestamp)
        general = [f"v = {utc}(s)", "if us > 0: v = v.replace(microsecond=us)", f"t = {src.const(stamp)}(v)"]
        lines = ["s = int.from_bytes(data[p:p + 4], 'big', signed=True)", "p += 4", *_fsp_lines(fsp)]
        if not _is_utc(tz):
            return [*lines, *general], "safe"
        # in UTC the text is the day's and the second's, laid out here; 0 (the zero text or the epoch)
        # and a fraction datetime refuses take the general way
        days, digits = src.const(_EPOCH_DAYS), src.const(_DIGITS2)
        clock = f"{{{days}[d]}}{{{digits}[s // 3600]}}:{{{digits}[s // 60 % 60]}}:{{{digits}[s % 60]}}"
        return [*lines, f"if s{' and us < 1000000' if fsp else ''}:", "    d, s = divmod(s, 86400)",
                *(["    " + line for line in _fraction_lines(fsp)] if fsp else []),
                f"    t = f'{clock}{'.{f}' if fsp else ''}'",
                "else:", *("    " + line for line in general)], "safe"
    if t == FIELD_TYPE.TIME2:
        return _time_lines(src, fsp), "safe"
    if t in _TEXT or t == FIELD_TYPE.GEOMETRY:
        return _string_lines(src, column), None
    raise ValueError(f"column {column.name!r}: MySQL type {t} has no compiled form")


def _double_lines(src: _Source) -> list[str]:
    """Lines rendering the DOUBLE ``t`` as :func:`render_float64` does, its usual case (a magnitude in
    [1e-4, 1e15): repr without a trailing ``.0``) without the call."""
    return ["if 0.0001 <= t < 1e15 or -1e15 < t <= -0.0001:", "    t = repr(t)", "    if t[-2:] == '.0': t = t[:-2]",
            f"else: t = {src.const(render_float64)}(t)"]


def _little(size: int) -> str:
    """The expression of the little-endian unsigned integer of ``size`` bytes at ``p``."""
    return "data[p]" if size == 1 else f"int.from_bytes(data[p:p + {size}], 'little')"


def _decimal_lines(src: _Source, column: Column) -> list[str]:
    """DECIMAL(precision, scale): MySQL's binary form (groups of 9 digits in 4 bytes big-endian, the
    leftover digits in fewer bytes, all bits inverted for a negative value, the top bit flipped) read
    as one integer, laid out as format(Decimal, 'f') lays out what the library builds."""
    scale = column.decimals
    integral = column.precision - scale
    int_groups, int_rest = divmod(integral, 9)
    frac_groups, frac_rest = divmod(scale, 9)
    size = _DECIMAL_BYTES[int_rest] + 4 * int_groups + 4 * frac_groups + _DECIMAL_BYTES[frac_rest]
    top = 1 << (8 * size - 1)
    everything = (1 << (8 * size)) - 1
    lines = [f"n = int.from_bytes(data[p:p + {size}], 'big')", f"p += {size}",
             f"if n & {top}: n ^= {top}; sign = ''",
             f"else: n ^= {everything ^ top}; sign = '-'"]
    # fraction: the leftover digits are the lowest bytes, full groups above them
    frac_parts = []
    shift = 0
    if frac_rest:
        bits = 8 * _DECIMAL_BYTES[frac_rest]
        frac_parts.append(f"(n & {(1 << bits) - 1})")
        shift += bits
    for k in range(frac_groups):
        frac_parts.append(f"(n >> {shift} & 4294967295) * {10 ** (frac_rest + 9 * k)}")
        shift += 32
    int_parts = []
    for k in range(int_groups):
        int_parts.append(f"(n >> {shift} & 4294967295) * {10 ** (9 * k)}")
        shift += 32
    if int_rest:
        int_parts.append(f"(n >> {shift}) * {10 ** (9 * int_groups)}")
    whole = " + ".join(int_parts) or "0"
    if not scale:
        return [*lines, f"t = sign + str({whole})"]
    return [*lines, f"t = sign + str({whole}) + '.' + format({' + '.join(frac_parts)}, '0{scale}d')"]


def _set_lines(src: _Source, column: Column) -> list[str]:
    """SET: its labels comma-joined, the empty SET the zero text; computed once per bit mask, exactly
    as the library's set of labels is rendered (duplicate labels included)."""
    labels = tuple(column.set_values or ())
    texts: dict[int, str | None] = {}

    def text(mask: int) -> str | None:
        found = texts.get(mask, "")
        if found == "":
            chosen = {label for i, label in enumerate(labels) if mask & (1 << i)}
            found = texts[mask] = ",".join([label for label in labels if label in chosen]) if chosen else None
        return found

    return [f"t = {src.const(text)}({_little(column.size)})", f"p += {column.size}",
            "if t is None: z = 1"]


def _datetime_lines(src: _Source, fsp: int) -> list[str]:
    """DATETIME2: 40 bits big-endian (sign, year*13+month, day, hour, minute, second), then the fraction;
    an invalid date (zero month or day, year 0) is the library's None, the zero text.

    A valid date (its text made once per day), a valid time of day and a fraction below a second are
    laid out here; anything else goes the general way, through ``datetime`` as the library does."""
    new = src.const(datetime)
    timespec = _TIMESPECS.get(fsp)
    layout = f"v.isoformat(' ', '{timespec}')" if timespec else f"v.isoformat(' ', 'microseconds')[:{20 + fsp}]"
    days, digits = src.const(_DATETIME_DAYS), src.const(_DIGITS2)
    clock = f"{{t}}{{{digits}[h]}}:{{{digits}[m]}}:{{{digits}[s]}}" + (".{f}" if fsp else "")
    return ["n = int.from_bytes(data[p:p + 5], 'big')", "p += 5", *_fsp_lines(fsp),
            f"t = {days}[n >> 17 & 4194303]", "h = n >> 12 & 31; m = n >> 6 & 63; s = n & 63",
            f"if t and h < 24 and m < 60 and s < 60{' and us < 1000000' if fsp else ''}:",
            *(["    " + line for line in _fraction_lines(fsp)] if fsp else []),
            f"    t = f'{clock}'",
            "else:",
            "    ym = n >> 22 & 131071",
            f"    try: v = {new}(ym // 13, ym % 13, n >> 17 & 31, h, m, s)",
            "    except ValueError: z = 1",
            "    else:",
            "        if us > 0: v = v.replace(microsecond=us)",
            f"        t = {layout}"]


def _time_lines(src: _Source, fsp: int) -> list[str]:
    """TIME2 as MariaDB packs it (my_time_packed_from_binary): a 24-bit offset integer part and the
    fraction, a negative value with a fraction borrowing one second."""
    render = src.const(render_microseconds)
    size = _FSP_BYTES[fsp]
    lines = ["i = int.from_bytes(data[p:p + 3], 'big') - 8388608"]
    if size == 3:
        lines = ["x = int.from_bytes(data[p:p + 6], 'big') - 140737488355328", "p += 6"]
    elif size:
        unit, wrap = (10000, 0x100) if size == 1 else (100, 0x10000)
        lines += [f"f = int.from_bytes(data[p + 3:p + {3 + size}], 'big')", f"p += {3 + size}",
                  f"if i < 0 and f: i += 1; f -= {wrap}", f"x = (i << 24) + f * {unit}"]
    else:
        lines += ["p += 3", "x = i << 24"]
    # hours, minutes, seconds and a fraction in their ranges are laid out here (a negative value then
    # is not zero: the sign shows); anything else through the microseconds, as render_timedelta does
    digits = src.const(_DIGITS2)
    clock = f"{{{digits}[h >> 12]}}:{{{digits}[h >> 6 & 63]}}:{{{digits}[h & 63]}}"
    return [*lines, "a = -x if x < 0 else x", "h = a >> 24", "us = a & 16777215",
            "if h < 4194304 and (h >> 6 & 63) < 60 and (h & 63) < 60 and us < 1000000:",
            *(["    " + line for line in _fraction_lines(fsp)] if fsp else []),
            f"    t = ('-' if x < 0 else '') + f'{clock}{'.{f}' if fsp else ''}'",
            "else:",
            "    us = (((h >> 12 & 1023) * 60 + (h >> 6 & 63)) * 60 + (h & 63)) * 1000000 + us",
            f"    t = {render}(-us if x < 0 else us, {fsp})"]


def _string_lines(src: _Source, column: Column) -> list[str]:
    """Strings, BLOB/TEXT and GEOMETRY: a little-endian length, then the bytes; text decoded with the
    codec the library would use, binary values (BINARY(n) padded back to n bytes) kept as bytes."""
    t = column.type
    if t in (FIELD_TYPE.BLOB, FIELD_TYPE.GEOMETRY):
        width = column.length_size
    else:
        width = 2 if column.max_length > 255 else 1
    lines = [f"n = int.from_bytes(data[p:p + {width}], 'little')" if width > 2 else
             "n = data[p] | data[p + 1] << 8" if width == 2 else "n = data[p]",
             f"b = data[p + {width}:p + {width} + n]", f"p += {width} + n"]
    pad_to = _binary_padding(column)
    if pad_to is not None:
        return [*lines, f"t = b.ljust({pad_to}, b'\\0')" if pad_to else "t = b"]
    charset = column.character_set_name
    encoding = RowsEvent.charset_to_encoding(charset) if charset is not None else "utf-8"
    return [*lines, f"t = b.decode({encoding!r})"]


def _fstring(*parts: str) -> str:
    """An f-string expression joining ``parts`` in one step: ``@expression`` parts are evaluated (a str
    or an int: both formatted as ``str()`` would), the others are literal text (no quote or backslash)."""
    return "f'" + "".join("{" + part[1:] + "}" if part.startswith("@") else part.replace("{", "{{").replace("}", "}}")
                          for part in parts) + "'"


def _cell(src: _Source, key: str, kind: str | None, binary: bool, change: Transform | None,
          encode: Callable[[bytes], str]) -> str:
    """The expression of a non-NULL value's JSON cell, ``{"name":"text"}``, from ``t``."""
    enc = src.const(encode_basestring)
    if kind == "null":
        return repr(key + "null}")
    if binary:
        if change is not None:
            return _fstring("@" + src.const(key), f"@{enc}({src.const(_ruled_binary(change, encode))}(t))", "}")
        # the binary formats' encoders, their bodies written out (no call)
        assert encode in (render_base64, render_hex)
        text = f"{src.const(b2a)}(t, newline=False).decode()" if encode is render_base64 else "t.hex()"
        return f"{_fstring('@' + src.const(key), chr(34), '@' + text, chr(34) + '}')} if t else {key + chr(34) * 2 + '}'!r}"
    if change is not None:
        return _fstring("@" + src.const(key), f"@{enc}({src.const(change)}(t))", "}")
    if kind == "json":
        return _fstring("@" + src.const(key), "@t", "}")
    if kind == "safe":  # digits, signs, points, dashes, colons, spaces: nothing to escape
        return _fstring("@" + src.const(key + chr(34)), "@t", '"}')
    return _fstring("@" + src.const(key), f"@{enc}(t)", "}")


_FIXED = {FIELD_TYPE.FLOAT: ("f", 4, render_float32), FIELD_TYPE.DOUBLE: ("d", 8, render_float64)}


def _fixed(column: Column) -> tuple[str, int, Callable[[Any], str]] | None:
    """The ``struct`` code, size and renderer of a column a run of fixed-width columns can unpack at once."""
    if column.type in _INTS:
        signed, unsigned, size = _INTS[column.type]
        return (unsigned if column.unsigned else signed)[-1], size, str
    return _FIXED.get(column.type)


def _image_source(columns: Sequence[Column], tz: tzinfo, binary_format: BinaryFormat,
                  treatments: Sequence[tuple[bool, Transform | None]]) -> _Source:
    """``def image(data, p)``: the JSON text of one row image at ``p`` and the position after it.

    Two bodies: straight-line code for an image without NULLs (the usual case), where runs of
    fixed-width columns are unpacked by one ``struct`` format, and a general one testing each
    column's bit in the NULL bitmap."""
    src = _Source()
    encode = _ENCODERS[binary_format]
    null_bytes = (len(columns) + 7) // 8
    plans = []  # per column: (excluded, value lines, the cell expression, the zero cell or None)
    for i, column in enumerate(columns):
        excluded, change = treatments[i] if treatments else (False, None)
        key = "{" + encode_basestring(column.name or f"UNKNOWN_COL{i}") + ":"
        lines, kind = _value_lines(src, column, tz, binary_format, change is None)
        cell = _cell(src, key, kind, _binary_padding(column) is not None, change, encode)
        zero_cell = None
        if any(line.endswith("z = 1") for line in lines):
            _, zero = column_renderer(column, tz, binary_format)
            assert zero is not None
            zero_cell = key + encode_basestring(zero if change is None else str(change(zero))) + "}"
        plans.append((excluded, lines, cell, zero_cell, key + "null}"))
    src.add(0, "def image(data, p):",
            f"    nulls = {_little(null_bytes)}",
            f"    p += {null_bytes}",
            f"    if not nulls & {(1 << len(columns)) - 1}:")  # bits past the last column may be set
    cells = []
    i = 0
    while i < len(columns):  # no NULL
        run = i
        while run < len(columns) and _fixed(columns[run]) is not None and _plain(treatments, run):
            run += 1
        if run - i >= 2:
            parts = [_fixed(columns[k]) for k in range(i, run)]
            unpack = src.const(struct.Struct("<" + "".join(part[0] for part in parts if part)).unpack_from)
            src.add(2, f"v = {unpack}(data, p)", f"p += {sum(part[1] for part in parts if part)}")
            for n, k in enumerate(range(i, run)):
                part = parts[n]
                assert part is not None
                excluded, _, cell, _, _ = plans[k]
                if not excluded:
                    # an int is formatted by the cell's f-string as str() would
                    if part[2] is render_float64:
                        src.add(2, f"t = v[{n}]", *_double_lines(src), f"c{k} = {cell}")
                    else:
                        src.add(2, f"t = v[{n}]" if part[2] is str else f"t = {src.const(part[2])}(v[{n}])",
                                f"c{k} = {cell}")
                    cells.append(f"c{k}")
            i = run
            continue
        excluded, lines, cell, zero_cell, _ = plans[i]
        if zero_cell is not None:
            src.add(2, "z = 0")
        src.add(2, *lines)
        if not excluded:
            src.add(2, f"c{i} = {zero_cell!r} if z else {cell}" if zero_cell is not None else f"c{i} = {cell}")
            cells.append(f"c{i}")
        i += 1
    src.add(2, f"return {_fstring('[', *[part for c in cells for part in (',', '@' + c)][1:], ']')}, p")
    src.add(1, "out = []", "put = out.append")
    for i, (excluded, lines, cell, zero_cell, null_cell) in enumerate(plans):  # some NULL
        src.add(1, f"if nulls & {1 << i}:", "    pass" if excluded else f"    put({null_cell!r})", "else:")
        if zero_cell is not None:
            src.add(2, "z = 0")
        src.add(2, *lines)
        if not excluded:
            src.add(2, f"put({zero_cell!r} if z else {cell})" if zero_cell is not None else f"put({cell})")
    src.add(1, "return '[' + ','.join(out) + ']', p")
    return src


def _plain(treatments: Sequence[tuple[bool, Transform | None]], i: int) -> bool:
    """Whether column ``i`` has no value transform (excluded columns are read, not rendered)."""
    return not treatments or treatments[i][1] is None


def _ruled_binary(change: Transform, encode: Callable[[bytes], str]) -> Callable[[bytes], str]:
    """A column rule on binary values: applied to the bytes, a result still bytes then encoded."""

    def apply(v: bytes) -> str:
        out = change(v)
        return encode(out) if isinstance(out, bytes) else out

    return apply


class TableDecoder:
    """The compiled decoder of one table map: row data to the contract rows' ``data`` JSON."""

    def __init__(self, columns: Sequence[Column], tz: tzinfo, binary_format: BinaryFormat,
                 treatments: Sequence[tuple[bool, Transform | None]] = (), label: str = "table") -> None:
        src = _image_source(columns, tz, binary_format, treatments)
        self.source = "\n".join(src.lines)
        namespace = dict(src.names)
        exec(compile(self.source, f"<gate compiled decoder for {label}>", "exec"), namespace)  # noqa: S102
        self.image: Callable[[bytes, int], tuple[str, int]] = namespace["image"]
        self.columns = len(columns)
        self._full = ((1 << len(columns)) - 1).to_bytes((len(columns) + 7) // 8, "little")

    def changes(self, event: Any, data: bytes, start: int, end: int) -> list[str] | None:
        """The ``data`` JSON of each row of ``event`` whose rows are ``data[start:end]``; None when the
        event is not one the compiled form covers (partial images, other event types)."""
        kind = _ROW_EVENTS.get(event.event_type)
        if kind is None or event.number_of_columns != self.columns or event.columns_present_bitmap != self._full:
            return None
        image = self.image
        out: list[str] = []
        p = start
        if kind == "UPDATE":
            if event.columns_present_bitmap2 != self._full:
                return None
            while p < end:
                old, p = image(data, p)
                new, p = image(data, p)
                out.append(f'{{"NEW":{new},"OLD":{old}}}')
        else:
            prefix = '{"' + kind + '":'
            while p < end:
                text, p = image(data, p)
                out.append(prefix + text + "}")
        if p != end:
            raise ValueError(f"row data of {event.schema}.{event.table} ends at byte {p}, the event at {end}")
        return out


def build(columns: Sequence[Column], tz: tzinfo, binary_format: BinaryFormat,
          treatments: Sequence[tuple[bool, Transform | None]] = (), label: str = "table") -> TableDecoder | None:
    """The compiled decoder of a table map, or None when one of its column types has no compiled form."""
    if not supported(columns):
        return None
    return TableDecoder(columns, tz, binary_format, treatments, label)

