"""The checksum of VERIFY rows: a chunk of a table's rows as one 64-hex-digit value any consumer can compute.

A row's digest is the SHA-256 of its canonical text: its NEW image (``[{"col": "v"}, ...]``, values JSON
strings or null) as one JSON object whose members are sorted by column name (Unicode code points), no
whitespace, each string written with only ``"``, ``\\`` and the control characters U+0000-U+001F escaped
(``\\b \\f \\n \\r \\t``, the others as ``\\u00xx``, lower-case hex), everything else as its UTF-8 bytes. A
chunk's checksum is the bitwise XOR of its rows' digests (64 zeros for no row): it does not depend on the
order the rows are taken in, so a consumer can fold its copy in any order.

A VERIFY row covers the keys after ``after`` up to ``upto`` (each a list of the key columns' values as the
DC renders them; null: from the start, to the end), ordered as :func:`sort_key` orders them: NULL first,
values that are decimal numbers as numbers, other text by code point.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

EMPTY = "0" * 64
Row = Mapping[str, "str | None"]


def canonical(row: Row) -> str:
    """The canonical text of one row (column -> text or None): ``json.dumps`` without ASCII escapes escapes
    exactly ``"``, ``\\`` and U+0000-U+001F, as the canonical form does (one call: 4 µs a row of 8 columns
    against 15 µs for a call per name and value)."""
    return json.dumps(dict(sorted(row.items())), separators=(",", ":"), ensure_ascii=False)


def digest(row: Row) -> int:
    """The SHA-256 of the row's canonical text, as an integer."""
    return int.from_bytes(hashlib.sha256(canonical(row).encode("utf-8")).digest(), "big")


def combine(digests: Iterable[int]) -> str:
    """The XOR of ``digests`` as 64 lower-case hex digits."""
    total = 0
    for value in digests:
        total ^= value
    return f"{total:064x}"


def checksum(rows: Iterable[Row]) -> str:
    return combine(digest(row) for row in rows)


def image(cells: list[dict[str, str | None]]) -> dict[str, str | None]:
    """A NEW image of the DC's JSON (``[{"c1": "v"}, ...]``) as one mapping."""
    return {name: value for cell in cells for name, value in cell.items()}


def _order(value: str | None) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    try:
        number = Decimal(value)
    except InvalidOperation:
        return (2, value)
    return (1, number) if number.is_finite() else (2, value)


KeyValues = tuple[tuple[int, Any], ...]


def sort_key(values: Sequence[str | None]) -> KeyValues:
    """Key values (as the DC renders them) as they sort for a VERIFY row's range."""
    return tuple(_order(v) for v in values)


def in_range(key: KeyValues, after: KeyValues | None, upto: KeyValues | None) -> bool:
    return (after is None or key > after) and (upto is None or key <= upto)
