"""Table images check the VERIFY rows they pass: is the image's table, in the chunk's key range, the source's?

A VERIFY row (docs/reference/dc-format.md, "Verify rows") carries a chunk's key range, its source row count
and checksum at its place in the stream. An update of an image that applies the row checks it against the
image it commits: each of the table's rows in that range rendered back to the DC's text (the reverse of the
typed columns' conversion, ``_invalid``'s text where the value was not representable), its digest
(gate.common.checksum), their count and XOR. That image is the image as of the VERIFY row only where the
update's later rows change no key in the range: a VERIFY row followed in the same update by a change of a
key in its range, or by DDL, a TRUNCATE or a snapshot of its table, is passed unchecked, as is one of a table
whose key is not the verification's, or with a FLOAT or DOUBLE column (whose text the image cannot give
back exactly), or one the image skips.

Each table's outcome is kept in the image's state (``verified``): chunks matched, passed unchecked, and the
chunks that differ (the VERIFY row, the range, both row counts), until a rebuild (``--heal``, ``--full``)
replaces them with its own.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from gate.common.checksum import KeyValues, combine, digest, in_range, sort_key
from spark_readers.image_types import INVALID
from spark_readers.session import session_conf

log = logging.getLogger(__name__)

Render = Callable[[Any], str]
LATER_KEYS = 100_000  # keys changed after a table's first VERIFY row in one update, at most, brought to the driver
DIFFERENT = 5  # exit status of an image job whose image differs from the source (as gate verify's)


@dataclass(frozen=True)
class Verify:
    """One VERIFY row an update applies: its id, table name and payload (``ddl.VERIFY``)."""

    id: int
    table: str
    info: dict[str, Any]

    def bounds(self) -> tuple[KeyValues | None, KeyValues | None]:
        after, upto = self.info.get("after"), self.info.get("upto")
        return (None if after is None else sort_key(after)), (None if upto is None else sort_key(upto))

    def outcome(self, image_rows: int | None = None) -> dict[str, Any]:
        return {"row": self.id, "verification": self.info["id"], "chunk": self.info["chunk"],
                "after": self.info["after"], "upto": self.info["upto"], "source_rows": self.info["rows"],
                "image_rows": image_rows}


def _datetime(fsp: int) -> Render:
    def render(value: Any) -> str:
        text: str = value.strftime("%Y-%m-%d %H:%M:%S")
        return text + (f".{value.microsecond:06d}"[:fsp + 1] if fsp else "")
    return render


def _zoned(fsp: int) -> Render:
    """A TIMESTAMP, which :func:`_texts` gives as its wall-clock text in the channel's time zone, to microseconds."""
    return lambda value: value[:20 + fsp] if fsp else value[:19]


def renderer(kind: DataType, data_type: str | None, binary_format: str) -> Render | None:
    """The DC's text of a non-null value of a column of Spark type ``kind`` (source type ``data_type``) as a
    row of :func:`_texts` holds it; None for a type whose text the image cannot give back exactly (FLOAT,
    DOUBLE)."""
    fsp = int(m.group(1)) if data_type and (m := re.search(r"\((\d)\)", data_type)) else 0
    if isinstance(kind, StringType):
        return str
    if isinstance(kind, (ByteType, ShortType, IntegerType, LongType)):
        return str
    if isinstance(kind, DecimalType):
        return lambda value: format(value, "f")
    if isinstance(kind, BooleanType):
        return lambda value: "1" if value else "0"
    if isinstance(kind, DateType):
        return lambda value: value.isoformat()
    if isinstance(kind, TimestampNTZType):
        return _datetime(fsp)
    if isinstance(kind, TimestampType):
        return _zoned(fsp)
    if isinstance(kind, BinaryType):
        return (lambda value: bytes(value).hex()) if binary_format == "hex" else (
            lambda value: base64.b64encode(bytes(value)).decode("ascii"))
    if isinstance(kind, ArrayType):
        return lambda value: ",".join(value)
    return None


def _sums(columns: list[str], renders: list[Render], key: list[str], ranges: list[tuple[Any, Any]]
          ) -> Callable[[Iterable[Row]], Iterable[tuple[int, int, str]]]:
    """The function of a mapPartitions over an image table's rows: per range, its rows' count and the XOR of their
    digests."""
    def run(rows: Iterable[Row]) -> Iterator[tuple[int, int, str]]:
        counts, sums = [0] * len(ranges), [0] * len(ranges)
        for row in rows:
            values = row.asDict()
            invalid = values.get(INVALID) or {}
            text = {c: invalid.get(c) if values[c] is None else render(values[c]) for c, render in zip(columns, renders)}
            at = sort_key([text[c] for c in key])
            value = digest(text)
            for i, (after, upto) in enumerate(ranges):
                if in_range(at, after, upto):
                    counts[i] += 1
                    sums[i] ^= value
        yield from ((i, counts[i], f"{sums[i]:064x}") for i in range(len(ranges)))
    return run


def _texts(frame: DataFrame) -> DataFrame:
    """The image table's rows with each TIMESTAMP column as its wall-clock text in the session's time zone (the
    channel's, set by :func:`check`), to microseconds."""
    return frame.select(*[F.date_format(F.col(f"`{f.name}`"), "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(f.name)
                          if isinstance(f.dataType, TimestampType) else F.col(f"`{f.name}`") for f in frame.schema.fields])


def _refusal(table: Any, typed: bool, pk: list[str], info: dict[str, Any], kinds: dict[str, DataType],
             binary_format: str) -> tuple[str | None, list[Render]]:
    """Why the table cannot be checked against this verification (None: it can), and each column's renderer."""
    if table is None:
        return "the image does not hold the table", []
    if list(info.get("key") or []) != pk:
        return f"the image's key {pk} is not the verification's {info.get('key')}", []
    renders = []
    for position, column in enumerate(table.columns):
        render = renderer(kinds[column], table.types[position] if typed else None, binary_format)
        if render is None:
            return f"column {column} is {table.types[position]}, whose text the image cannot give back exactly", []
        renders.append(render)
    return None, renders


def check(spark: SparkSession, url: Callable[[str], str], tables: dict[str, Any], verifies: list[Verify],
          barriers: dict[str, list[int]], later_keys: Callable[[str, int], list[tuple[int, list[str | None]]]],
          typing: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Check ``verifies`` against the image's ``tables`` (name -> TableImage, at the versions being committed;
    ``url``: a table folder's URL). ``barriers``: per table name, the ids of its rows after which the image is
    not the one at an earlier VERIFY row (DDL, TRUNCATE, snapshots); ``later_keys(name, id)``: the (id, key)
    of each key of the table the update changes last after row ``id`` (:data:`LATER_KEYS` + 1 at most).
    Returns per table: {"matched", "unchecked", "differing": [...], "reasons": [...]}."""
    timezone = (typing or {}).get("timezone", "UTC")
    binary_format = (typing or {}).get("binary_format", "base64")
    out: dict[str, dict[str, Any]] = {}
    by_table: dict[str, list[Verify]] = {}
    for verify in verifies:
        by_table.setdefault(verify.table, []).append(verify)
    for name, rows in by_table.items():
        result = out.setdefault(name, {"matched": 0, "unchecked": 0, "differing": [], "reasons": []})
        table = tables.get(name)
        frame = spark.read.format("delta").load(url(table.path)) if table is not None else None  # its latest version
        kinds = {f.name: f.dataType for f in frame.schema.fields} if frame is not None else {}
        pk = list(table.key) if table is not None else []
        changed = later_keys(name, min(v.id for v in rows)) if table is not None else []
        crowded = len(changed) > LATER_KEYS  # not brought to the driver: none of the table's chunks is checked
        checkable: list[Verify] = []
        renders: list[Render] = []
        for verify in rows:
            reason, renders_now = _refusal(table, table is not None and table.types is not None, pk, verify.info,
                                           kinds, binary_format)
            if reason is None and any(b > verify.id for b in barriers.get(name, [])):
                reason = "DDL, a TRUNCATE or a snapshot of the table follows it in the same update"
            after, upto = verify.bounds()
            if reason is None and crowded:
                reason = f"more than {LATER_KEYS} keys of the table change after it in the same update"
            if reason is None and any(i > verify.id and in_range(sort_key(k), after, upto) for i, k in changed):
                reason = "a key in its range changes after it in the same update"
            if reason is not None:
                result["unchecked"] += 1
                if reason not in result["reasons"]:
                    result["reasons"].append(reason)
                continue
            checkable.append(verify)
            renders = renders_now
        if not checkable or table is None or frame is None:
            continue
        ranges = [v.bounds() for v in checkable]
        with session_conf(spark, {"spark.sql.session.timeZone": timezone}):
            found = _texts(frame).rdd.mapPartitions(_sums(list(table.columns), renders, pk, ranges)).collect()
        for i, verify in enumerate(checkable):
            count = sum(rows for chunk, rows, _ in found if chunk == i)
            value = combine(int(xor, 16) for chunk, _, xor in found if chunk == i)
            if (count, value) == (verify.info["rows"], verify.info["checksum"]):
                result["matched"] += 1
            else:
                result["differing"].append(verify.outcome(count))
                log.warning("the image of %s differs from the source at VERIFY row %d (verification %s chunk %s, keys "
                            "after %s up to %s): source %d rows, image %d rows", name, verify.id, verify.info["id"],
                            verify.info["chunk"], verify.info["after"], verify.info["upto"], verify.info["rows"], count)
    return out


def merged(before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The image's ``verified`` state: ``before``'s counts and differing chunks plus ``now``'s."""
    out = {name: {**state, "differing": list(state["differing"]), "reasons": list(state.get("reasons", []))}
           for name, state in before.items()}
    for name, state in now.items():
        into = out.setdefault(name, {"matched": 0, "unchecked": 0, "differing": [], "reasons": []})
        into["matched"] += state["matched"]
        into["unchecked"] += state["unchecked"]
        into["differing"] += state["differing"]
        into["reasons"] += [r for r in state["reasons"] if r not in into["reasons"]]
    return out


def later_keys(latest: DataFrame, table_keys: dict[str, int]) -> Callable[[str, int], list[tuple[int, list[str | None]]]]:
    """``later_keys`` of :func:`check` over the update's last change per key (materialise's ``latest``);
    ``table_keys``: each table name's number there."""
    def keys(name: str, after: int) -> list[tuple[int, list[str | None]]]:
        if name not in table_keys:
            return []
        rows = latest.filter((F.col("table") == table_keys[name]) & (F.col("id") > after)).select(
            "id", "key").limit(LATER_KEYS + 1).collect()
        return [(int(r["id"]), list(r["key"])) for r in rows]
    return keys


def describe(verified: dict[str, dict[str, Any]], heal: str) -> list[str]:
    """A line per chunk that differs, then the fix (``heal``: the command that heals); [] when none differs."""
    lines = [f"image differs: {name} chunk {c['chunk']} of verification {c['verification']} (VERIFY row {c['row']}, "
             f"keys after {c['after']} up to {c['upto'] or 'the end'}): source {c['source_rows']} rows, image "
             f"{c['image_rows']} rows" for name, state in sorted(verified.items()) for c in state["differing"]]
    return lines + [f"fix: {heal} (rebuilds the image from the whole history)"] if lines else []
