"""Row values as text: what the MySQL client shows for ``SELECT col`` (docs/reference/dc-format.md, "Row changes").

python-mysql-replication decodes each row image into Python values; this module turns them into the
strings of the DC's JSON. An :class:`ImageRenderer` is built once per table map and holds one small
function per column, so the per-row path does no type dispatch.

What the library (1.0.17) hands over, measured against MariaDB 10.11, and what is done about it here:

- negative TIME(1..6) with a fraction is decoded wrongly (``-12:34:56.7`` arrives as ``-12:34:56.3``):
  :func:`correct_negative_time2` undoes the error exactly;
- a zero TIMESTAMP arrives as ``1970-01-01 00:00:00`` with no none_source (a real TIMESTAMP can never
  be that instant) and YEAR ``0000`` as 1900 (YEAR's range is 1901..2155): both render as zero;
- zero DATE/DATETIME values and the empty SET arrive as None with a none_source other than ``null``;
- BINARY(n) loses its trailing 0x00 bytes (padded back from the column's byte length) and an empty
  binary string arrives as ``''`` (str);
- FLOAT arrives as the double nearest the stored float; MariaDB shows it with at most 6 significant
  digits (``1.23457``), DOUBLE with the shortest digits that round-trip (:func:`render_float64`);
- latin1 text holding 0x81/0x8D/0x8F/0x90/0x9D raises UnicodeDecodeError inside the library, and
  utf16/utf32/ucs2/utf16le text is garbled, raises or arrives as bytes, unless the reader calls
  :func:`gate.capture.libshim.fix_library_charsets` first.

Still lost inside the library (pinned by xfail tests in tests/test_type_matrix.py): dates with a zero
month or day (``2024-00-15``) or year 0 arrive as None like a zero date, and ENUM/SET labels that are
not valid UTF-8 (non-ASCII labels of a latin1 column) arrive as ``''``.
"""

from __future__ import annotations

import binascii
import codecs
import json
from collections.abc import Callable, Sequence
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) uses for strings
from typing import Any, Literal, cast

from pymysqlreplication.column import Column
from pymysqlreplication.constants import CHARSET, FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.row_event import RowsEvent

from gate.common.columns import Transform

BinaryFormat = Literal["base64", "hex"]
Renderer = Callable[[Any], str]

_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1)  # how the library returns TIMESTAMP 0000-00-00 00:00:00
_YEAR_ZERO = 1900  # how the library returns YEAR 0000 (stored 0, plus 1900)
_ONE_US = timedelta(microseconds=1)
_NULL = NONE_SOURCE.NULL
_INTEGER_TYPES = frozenset(
    {FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.INT24, FIELD_TYPE.LONG, FIELD_TYPE.LONGLONG}
)
_STRING_TYPES = frozenset(
    {FIELD_TYPE.STRING, FIELD_TYPE.VAR_STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.BLOB}
)
# Beyond these decimal exponents MariaDB's my_gcvt() switches to the 'e' format (MAX_DECPT_FOR_F_FORMAT).
_MAX_DECPT_FOR_F_FORMAT = 15
_FLT_DIG = 6
_TIMESPECS = {0: "seconds", 3: "milliseconds", 6: "microseconds"}  # isoformat() lays these out itself


def _shortest_digits(x: float) -> tuple[str, int]:
    """Shortest round-trip digits of ``abs(x)`` (x != 0) and the point position: x = 0.DIGITS * 10**decpt."""
    mantissa, _, exponent = repr(abs(x)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    raw = whole + fraction
    digits = raw.lstrip("0")
    decpt = len(whole) + int(exponent or 0) - (len(raw) - len(digits))
    return digits.rstrip("0"), decpt


def _gcvt(digits: str, decpt: int, negative: bool) -> str:
    """Lay out significant digits as MariaDB's my_gcvt() does with a wide field: 'f' or 'e' format."""
    n = len(digits)
    if decpt >= 1 - _MAX_DECPT_FOR_F_FORMAT and (decpt <= _MAX_DECPT_FOR_F_FORMAT or n > decpt):
        if decpt <= 0:
            text = "0." + "0" * -decpt + digits
        elif decpt < n:
            text = digits[:decpt] + "." + digits[decpt:]
        else:
            text = digits + "0" * (decpt - n)
    else:
        text = digits[0] + ("." + digits[1:] if n > 1 else "") + "e" + str(decpt - 1)
    return "-" + text if negative else text


def render_float64(x: float) -> str:
    """DOUBLE as MariaDB shows it: shortest round-trip digits, ``1e20``, ``0.0000001``, ``-1.5e300``."""
    if 1e-4 <= abs(x) < 1e15:  # repr() lays these out as my_gcvt() does, bar a trailing ".0"
        text = repr(x)
        return text[:-2] if text.endswith(".0") else text
    if x == 0:
        return "0"
    digits, decpt = _shortest_digits(x)
    return _gcvt(digits, decpt, x < 0)


def render_float32(x: float) -> str:
    """FLOAT (given as the double the library unpacked) as MariaDB shows it: at most 6 significant digits.

    The value rounded to 6 digits in one format call: when its shortest round-trip digits are 6 or fewer,
    they are that rounding without its trailing zeros (the double lies within half an ulp of them, far
    inside the 6-digit grid's half step), so they need not be looked for first (3 times the time). Where
    that rounding lies in [1e-4, 1e6), format's ``g`` lays it out as my_gcvt() does (plain notation, no
    trailing zeros) at a quarter of the cost; outside it (an exponent, inf, nan) the digits are laid out here."""
    if x == 0:
        return "0"
    text = f"{x:.{_FLT_DIG}g}"
    if "e" not in text and "n" not in text:
        return text
    mantissa, _, exponent = f"{abs(x):.{_FLT_DIG - 1}e}".partition("e")
    if not exponent:  # inf, nan: as the shortest digits give them
        digits, decpt = _shortest_digits(x)
        return _gcvt(digits, decpt, x < 0)
    return _gcvt(mantissa.replace(".", "").rstrip("0"), int(exponent) + 1, x < 0)


def render_decimal(d: Decimal) -> str:
    """DECIMAL in plain notation with the scale the library kept: ``12.340000``, ``-0.50``, ``0E-30`` → zeros."""
    return format(d, "f")


def datetime_renderer(fsp: int) -> Renderer:
    """DATETIME: ``YYYY-MM-DD HH:MM:SS`` plus exactly ``fsp`` fractional digits."""
    timespec = _TIMESPECS.get(fsp)
    if timespec is not None:
        return lambda v: v.isoformat(" ", timespec)
    width = 20 + fsp
    return lambda v: v.isoformat(" ", "microseconds")[:width]


def timestamp_renderer(fsp: int, tz: tzinfo) -> Renderer:
    """TIMESTAMP (a naive UTC datetime from the library) in zone ``tz``, laid out as DATETIME."""
    layout = datetime_renderer(fsp)
    zero = zero_datetime(fsp)
    if tz is _UTC:
        return lambda v: zero if v == _EPOCH else layout(v)
    return lambda v: zero if v == _EPOCH else layout(v.replace(tzinfo=_UTC).astimezone(tz).replace(tzinfo=None))


def zero_datetime(fsp: int) -> str:
    """The zero DATETIME/TIMESTAMP as MariaDB shows it for a column of ``fsp`` fractional digits."""
    return "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")


def render_timedelta(td: timedelta, fsp: int) -> str:
    """TIME as ``[-]HH:MM:SS`` plus exactly ``fsp`` fractional digits; hours go up to 838."""
    return render_microseconds(td // _ONE_US, fsp)


def render_microseconds(us: int, fsp: int) -> str:
    """A TIME of ``us`` microseconds as :func:`render_timedelta` lays it out (the compiled decoders read
    the microseconds from the row's bytes: no timedelta made to be taken apart again)."""
    sign = "-" if us < 0 else ""
    seconds, fraction = divmod(abs(us), 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}:{seconds:02d}"
    return f"{text}.{fraction:06d}"[: len(text) + 1 + fsp] if fsp else text


def correct_negative_time2(td: timedelta) -> timedelta:
    """Undo the library's decoding of a negative TIME(1..6) with a fraction (exact, for 1.0.17).

    The binlog stores such a value as (integer part - 1) and (1 - fraction); the library negates the
    integer part but not the fraction, so -(I + f) arrives as -(I + 1 - f). Values without a fraction
    and non-negative values arrive right.
    """
    us = td // _ONE_US
    fraction = -us % 1_000_000
    if us >= 0 or fraction == 0:
        return td
    return timedelta(microseconds=us - 1_000_000 + 2 * fraction)


def render_bit(bits: str) -> str:
    """BIT(n), which the library gives as a string of '0'/'1', as its unsigned integer in decimal."""
    return str(int(bits, 2))


def render_base64(b: bytes) -> str:
    """Standard base64 with padding, no newline."""
    return binascii.b2a_base64(b, newline=False).decode("ascii")


def render_hex(b: bytes) -> str:
    """Lowercase hex."""
    return b.hex()


def render_json(v: Any) -> str:
    """A MySQL binary JSON value as the library decodes it (bytes keys and strings) in MySQL's layout.

    ``{"a": 1, "b": [1, 2]}``: ", " and ": " separators, non-ASCII unescaped. MariaDB's JSON is
    LONGTEXT and arrives as text, so this only serves MySQL sources.
    """
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, bytes):
        return json.dumps(v.decode(), ensure_ascii=False)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return render_float64(v)
    if isinstance(v, Decimal):
        return render_decimal(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{render_json(k)}: {render_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(render_json(x) for x in v) + "]"
    if isinstance(v, datetime):
        return json.dumps(v.isoformat(" ", "microseconds"))
    if isinstance(v, date):
        return json.dumps(v.isoformat())
    if isinstance(v, time):
        return json.dumps(v.isoformat("microseconds"))
    raise TypeError(f"no JSON text for a {type(v).__name__} (partial JSON updates are not supported)")


_ENCODERS: dict[str, Renderer] = {"base64": render_base64, "hex": render_hex}



def _year(v: int) -> str:
    return "0000" if v == _YEAR_ZERO else str(v)


def _library_codec(encoding: str) -> str | None:
    """The Python codec the library decodes a text column with, from the encoding name it files the
    column's character set under (``Column.character_set_name``); None when Python has none under
    that name (binary, armscii8, keybcs2, ...): such values stay bytes, written as binary ones."""
    codec: str = RowsEvent.charset_to_encoding(encoding)
    try:
        codecs.lookup(codec)
    except LookupError:
        return None
    return codec


def binlog_codec(charset: str) -> str | None:
    """:func:`_library_codec` of a MariaDB character set named as information_schema names it, as the
    library maps it (after :func:`gate.capture.libshim.fix_library_charsets`)."""
    known = CHARSET.charset_by_name(charset, "mariadb")
    return _library_codec(known.encoding if known else "utf8")


def _comes_as_bytes(column: Column) -> bool:
    """Whether the library hands this string column's values over undecoded (binary charset, or a
    charset Python has no codec for under the library's name), exactly as its __read_string decides."""
    charset = column.character_set_name
    return charset is not None and _library_codec(charset) is None


def _binary_renderer(encode: Renderer, pad_to: int) -> Renderer:
    if pad_to:
        return lambda v: encode((v or b"").ljust(pad_to, b"\0"))
    return lambda v: encode(v) if v else ""


def column_renderer(
    column: Column, tz: tzinfo = _UTC, binary_format: BinaryFormat = "base64"
) -> tuple[Renderer, str | None]:
    """The function rendering one column's non-None values, and the text for a None that is not NULL
    (zero date, empty set), or None when every None of this column is NULL."""
    t = column.type
    fsp: int = getattr(column, "fsp", 0)
    if t in _INTEGER_TYPES or t == FIELD_TYPE.ENUM:
        return str, None
    pad_to = _binary_padding(column)
    if pad_to is not None:  # binary strings and GEOMETRY
        return _binary_renderer(_ENCODERS[binary_format], pad_to), None
    if t in _STRING_TYPES:
        return str, None
    if t == FIELD_TYPE.NEWDECIMAL:
        return render_decimal, None
    if t == FIELD_TYPE.DOUBLE:
        return render_float64, None
    if t == FIELD_TYPE.FLOAT:
        return render_float32, None
    if t in (FIELD_TYPE.DATETIME2, FIELD_TYPE.DATETIME):
        return datetime_renderer(fsp), zero_datetime(fsp)
    if t in (FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.TIMESTAMP):
        return timestamp_renderer(fsp, tz), None
    if t == FIELD_TYPE.DATE:
        return date.isoformat, "0000-00-00"
    if t == FIELD_TYPE.TIME2:
        return (lambda v: render_timedelta(correct_negative_time2(v), fsp)), None
    if t == FIELD_TYPE.TIME:
        return (lambda v: render_timedelta(v, 0)), None
    if t == FIELD_TYPE.YEAR:
        return _year, None
    if t == FIELD_TYPE.BIT:
        return render_bit, None
    if t == FIELD_TYPE.SET:
        labels = tuple(column.set_values or ())
        return (lambda v: ",".join([label for label in labels if label in v])), ""
    if t == FIELD_TYPE.JSON:
        return render_json, None
    raise ValueError(f"column {column.name!r}: MySQL type {t} has no renderer")


def _binary_padding(column: Column) -> int | None:
    """For a column whose values arrive as bytes, the length BINARY(n) pads them to (0: none); else None."""
    t = column.type
    if t == FIELD_TYPE.GEOMETRY:
        return 0
    if t not in _STRING_TYPES or not _comes_as_bytes(column):
        return None
    return column.max_length if t == FIELD_TYPE.STRING and column.character_set_name == "binary" else 0


def transformed_renderer(column: Column, change: Transform, tz: tzinfo = _UTC,
                         binary_format: BinaryFormat = "base64") -> tuple[Renderer, str | None]:
    """:func:`column_renderer` with a column rule's ``change`` applied: to the text, or for a binary column
    to the bytes before their encoding (a result still bytes is then encoded)."""
    render, zero = column_renderer(column, tz, binary_format)
    if zero is not None:
        zero = cast(str, change(zero))
    pad_to = _binary_padding(column)
    if pad_to is None:
        return (lambda v: cast(str, change(render(v)))), zero
    encode = _ENCODERS[binary_format]

    def render_bytes(v: Any) -> str:
        out = change((v or b"").ljust(pad_to, b"\0"))
        return encode(out) if isinstance(out, bytes) else out

    return render_bytes, zero


def text_renderer(data_type: str, fsp: int, comes_as_bytes: bool, tz: tzinfo = _UTC,
                  binary_format: BinaryFormat = "base64", change: Transform | None = None,
                  codec: str | None = None) -> Renderer:
    """The function rendering one column's non-NULL value as the server's text protocol sends it (a
    session in time zone +00:00, values undecoded: ``str``, or ``bytes`` for binary strings, GEOMETRY and
    BIT), to the same text :func:`column_renderer` gives for the value read from the binlog. The text
    protocol already shows most types as the DC wants them; what differs follows the same rules: binary
    values base64/hex (BINARY(n) arrives padded), BIT its integer, TIMESTAMP moved from UTC into ``tz``.
    ``codec``: the value is text selected as its bytes, decoded with this codec as the binlog path does."""
    render: Renderer = str
    if codec is not None:
        render = lambda v: v.decode(codec)  # noqa: E731
    elif data_type == "bit":
        render = lambda v: str(int.from_bytes(v, "big"))  # noqa: E731
    elif data_type == "timestamp":
        layout = timestamp_renderer(fsp, tz)
        render = lambda v: v if v.startswith("0000") else layout(datetime.fromisoformat(v))  # noqa: E731
    elif comes_as_bytes:
        encode = _ENCODERS[binary_format]
        if change is None:
            return encode
        return lambda v: out if isinstance(out := change(v), str) else encode(out)
    if change is None:
        return render
    return lambda v: cast(str, change(render(v)))


class ImageRenderer:
    """Renders row images of one table map; build once per TableMapEvent / table_id."""

    __slots__ = ("_plan", "_json_plan")

    @classmethod
    def of_text(cls, plan: Sequence[tuple[str, Renderer]]) -> ImageRenderer:
        """A renderer of rows read through the text protocol: (name, :func:`text_renderer`) per column;
        :meth:`row_json` renders a row given as a sequence in that order, None for NULL."""
        self = cls.__new__(cls)
        self._plan = tuple((name, render, None) for name, render in plan)
        self._json_plan = tuple((name, render, None, "{" + encode_basestring(name) + ":") for name, render in plan)
        return self

    def __init__(self, columns: Sequence[Column], tz: tzinfo = _UTC, binary_format: BinaryFormat = "base64",
                 treatments: Sequence[tuple[bool, Transform | None]] = ()) -> None:
        """``treatments``, when given, holds per column (excluded, value transform) from its column rules."""
        if binary_format not in _ENCODERS:
            raise ValueError(f"binary_format must be 'base64' or 'hex', not {binary_format!r}")
        plan: list[tuple[str, Renderer, str | None]] = []
        for i, column in enumerate(columns):
            excluded, change = treatments[i] if treatments else (False, None)
            if excluded:
                continue
            if change is None:
                render, zero = column_renderer(column, tz, binary_format)
            else:
                render, zero = transformed_renderer(column, change, tz, binary_format)
            # the key the library files the value under (names are missing only without FULL metadata)
            plan.append((column.name or f"UNKNOWN_COL{i}", render, zero))
        self._plan: tuple[tuple[str, Renderer, str | None], ...] = tuple(plan)
        self._json_plan = tuple((name, render, zero, "{" + encode_basestring(name) + ":") for name, render, zero in plan)

    def render(self, values: dict[str, Any], none_sources: dict[str, str]) -> list[dict[str, str | None]]:
        """One ``{name: text}`` per column in table order; NULL is None."""
        image: list[dict[str, str | None]] = []
        append = image.append
        for name, render, zero in self._plan:
            v = values[name]
            if v is not None:
                append({name: render(v)})
            elif zero is None or none_sources.get(name, _NULL) == _NULL:
                append({name: None})
            else:
                append({name: zero})
        return image

    def row_json(self, row: Sequence[Any]) -> str:
        """:meth:`image_json` of a row given as a sequence of values in the plan's order (None: NULL)."""
        enc = encode_basestring
        return "[" + ",".join([key + "null}" if v is None else key + enc(render(v)) + "}"
                               for (_name, render, _zero, key), v in zip(self._json_plan, row)]) + "]"

    def image_json(self, values: dict[str, Any], none_sources: dict[str, str]) -> str:
        """``render``'s image as JSON text, exactly what json.dumps(..., ensure_ascii=False,
        separators=(",", ":")) makes of it, but built directly: the decoders' hot path."""
        enc = encode_basestring
        parts: list[str] = []
        append = parts.append
        for name, render, zero, key in self._json_plan:
            v = values[name]
            if v is not None:
                append(key + enc(render(v)) + "}")
            elif zero is None or none_sources.get(name, _NULL) == _NULL:
                append(key + "null}")
            else:
                append(key + enc(zero) + "}")
        return "[" + ",".join(parts) + "]"
