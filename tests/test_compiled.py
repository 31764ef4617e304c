"""Compiled decoders against the library: the same row events, decoded both ways, give identical JSON text.

Every event comes from a real binlog. Each is rebuilt twice from its raw bytes, as a decoder process
rebuilds it, and translated once by the library's path (its per-value decoding and ImageRenderer) and
once by the compiled decoder of its table map; the texts must be equal, row by row. The rows are the
type matrix's (every column type gate supports, extreme, zero and NULL values) and rows hypothesis
generates (NULL patterns, extreme values, every fractional precision, DECIMAL precisions and scales,
multi-byte charsets, BIT widths, ENUM/SET, JSON, BLOB/TEXT sizes), under column rules, both binary
formats and a zone other than UTC. Tables and events the compiled form leaves to the library (old
temporal formats, partial row images) are checked to take that path and give the same text.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from datetime import timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from gate.capture.compiled import build
from gate.capture.libshim import Ctl, StreamFormat, fix_library_charsets, raw_packet, rebuild_rows_event, row_data
from gate.capture.reader import ROW_EVENTS, BinlogReader, Idle, Rows, current_position
from gate.capture.translate import TableFilter, Translator
from gate.capture.values import BinaryFormat
from gate.common.columns import ColumnRule
from gate.devtools.sandbox import Sandbox
from tests.replay import server_config
from tests.test_type_matrix import (
    BIT_WIDTHS,
    COLUMNS,
    MAX_ROW,
    MIN_ROW,
    MIXED_ROWS,
    ZERO_ROW,
    _random_rows,
    _set_all,
    binlog_position,
)

_server_ids = itertools.count(7401)
KEY_ENV = "GATE_TEST_HASH_KEY"
RULES = (ColumnRule("exclude", "*.*.bl"), ColumnRule("mask", "*.*.en"), ColumnRule("hash", "*.*.vc_u", key_env=KEY_ENV),
         ColumnRule("hash", "*.*.bn", key_env=KEY_ENV), ColumnRule("truncate", "*.*.tx_u", length=3),
         ColumnRule("truncate", "*.*.vb", length=2), ColumnRule("mask", "*.*.dt3"),
         ColumnRule("truncate", "*.*.st", length=1), ColumnRule("hash", "*.*.dte", key_env=KEY_ENV))


def both_ways(server: Any, schema: str, start: tuple[str, int], tz: tzinfo, binary_format: BinaryFormat,
              rules: Sequence[ColumnRule] = ()) -> tuple[int, int]:
    """Decode every row event of ``schema`` since ``start`` both ways and assert equal texts.
    Returns (events the compiled decoders decoded, events left to the library)."""
    fix_library_charsets()
    library = Translator(tz, binary_format, TableFilter(), rules=rules)
    compiled = Translator(tz, binary_format, TableFilter(), rules=rules, compiled=True)
    stream = BinLogStreamReader(
        connection_settings=server.connection_settings(), server_id=next(_server_ids), resume_stream=True,
        log_file=start[0], log_pos=start[1], blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], only_schemas=[schema])
    counts = [0, 0]
    try:
        for event in stream:
            fmt = StreamFormat.of(stream)  # known once the stream is connected
            ctl = Ctl(fmt)
            raw, table = raw_packet(event), event.table_map[event.table_id]
            optype = ROW_EVENTS[type(event)]
            by_library = library.rows(Rows(optype, rebuild_rows_event(raw, table, fmt, ctl)))
            again = rebuild_rows_event(raw, table, fmt, ctl)
            decoder = compiled._decoder(again)
            probe = rebuild_rows_event(raw, table, fmt, ctl)
            took = decoder is not None and decoder.changes(probe, *row_data(probe)) is not None
            counts[0 if took else 1] += 1
            by_compiled = compiled.rows(Rows(optype, again))
            assert len(by_compiled) == len(by_library)
            for n, (got, want) in enumerate(zip(by_compiled, by_library)):
                assert got == want, f"{optype} on {event.table}, row {n} of the event"
    finally:
        stream.close()
    return counts[0], counts[1]


def _insert(cur: pymysql.cursors.Cursor, table: str, rows: Sequence[dict[str, Any]]) -> None:
    for names in dict.fromkeys(tuple(r) for r in rows):
        batch = [r for r in rows if tuple(r) == names]
        marks = ", ".join(["(" + ", ".join(["%s"] * len(names)) + ")"] * len(batch))
        cur.execute(f"INSERT INTO `{table}` ({', '.join(f'`{n}`' for n in names)}) VALUES {marks}",
                    [r[n] for r in batch for n in names])


def test_type_matrix_decodes_the_same_both_ways(sandbox: Sandbox, unique_name: str,
                                                source_cursor: pymysql.cursors.Cursor,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The type matrix's rows (min, max, zero, NULL, mixed, 200 random numbers and times) inserted,
    updated and deleted: the compiled decoders decode every event, to the library's text, under no
    rules and under rules of every kind, in base64 and hex, in UTC (both ways of naming it), Asia/Tokyo and
    America/New_York."""
    monkeypatch.setenv(KEY_ENV, "compiled-test-key")
    cur = source_cursor
    cur.execute("CREATE TABLE everything (" + ", ".join(f"`{n}` {d}" for n, d, _ in COLUMNS) + ")")
    cur.execute("CREATE TABLE numbers (id INT NOT NULL PRIMARY KEY, d DOUBLE, f FLOAT, dec65_30 DECIMAL(65,30), "
                "dec10_2 DECIMAL(10,2), dec20_9 DECIMAL(20,9), dec5_0 DECIMAL(5,0), "
                + ", ".join(f"tm{k} TIME({k})" for k in range(7)) + ", dt6 DATETIME(6), ts3 TIMESTAMP(3) NULL)")
    start = binlog_position(cur)
    _insert(cur, "everything", [{"id": 1, **MIN_ROW}, {"id": 2, **MAX_ROW}])
    cur.execute("SET SESSION sql_mode = ''")
    _insert(cur, "everything", [{"id": 3, **ZERO_ROW}])
    cur.execute("UPDATE everything SET dt3 = '0000-00-00 00:00:00', st = '', yr = 0, ts6 = 0, dte = '2024-00-15' "
                "WHERE id = 3")
    cur.execute("SET SESSION sql_mode = DEFAULT")
    _insert(cur, "everything", [{"id": 4}])
    _insert(cur, "everything", [{"id": 5 + n, **row} for n, row in enumerate(MIXED_ROWS)])
    assignments, params = _set_all(MAX_ROW)
    cur.execute(f"UPDATE everything SET {assignments} WHERE id = 4", params)
    assignments, params = _set_all({})
    cur.execute(f"UPDATE everything SET {assignments} WHERE id = 1", params)
    _insert(cur, "numbers", _random_rows(__import__("random").Random(7), 200))
    cur.execute("UPDATE numbers SET d = -d, f = -f, dec65_30 = -dec65_30 WHERE id <= 50")
    cur.execute("DELETE FROM everything WHERE id IN (2, 3, 5)")
    cur.execute("DELETE FROM numbers WHERE id > 150")
    cases: list[tuple[tzinfo, BinaryFormat, tuple[ColumnRule, ...]]] = [
        (timezone.utc, "base64", ()), (ZoneInfo("Asia/Tokyo"), "hex", ()), (timezone.utc, "base64", RULES),
        (ZoneInfo("America/New_York"), "hex", RULES), (ZoneInfo("UTC"), "base64", ())]  # gate's default zone
    for tz, binary_format, rules in cases:
        compiled, library = both_ways(sandbox.source, unique_name, start, tz, binary_format, rules)
        assert (compiled, library) == (21, 0)


def test_library_keeps_what_the_compiled_form_does_not_cover(sandbox: Sandbox, unique_name: str,
                                                             source_cursor: pymysql.cursors.Cursor) -> None:
    """Old temporal formats (tables created with mysql56_temporal_format off) are decoded by the
    library for the whole table; partial row images (binlog_row_image MINIMAL) by the library for
    the event. Both give the library's text; the other events of the same table stay compiled."""
    cur = source_cursor
    cur.execute("SET @old_format = @@GLOBAL.mysql56_temporal_format")
    cur.execute("SET GLOBAL mysql56_temporal_format = OFF")
    try:
        cur.execute("CREATE TABLE legacy (id INT NOT NULL PRIMARY KEY, dt DATETIME, ts TIMESTAMP NULL, tm TIME, "
                    "v VARCHAR(10))")
    finally:
        cur.execute("SET GLOBAL mysql56_temporal_format = @old_format")
    cur.execute("CREATE TABLE modern (id INT NOT NULL PRIMARY KEY, v VARCHAR(10), n INT)")
    start = binlog_position(cur)
    _insert(cur, "legacy", [{"id": 1, "dt": "2024-05-06 07:08:09", "ts": "2024-05-06 07:08:09", "tm": "12:34:56",
                             "v": "é"}, {"id": 2}])
    _insert(cur, "modern", [{"id": 1, "v": "a", "n": 5}])
    cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
    cur.execute("UPDATE modern SET n = 6 WHERE id = 1")
    cur.execute("SET SESSION binlog_row_image = DEFAULT")
    cur.execute("DELETE FROM modern")
    # compiled: the INSERT and the DELETE of modern; the library: legacy's two INSERTs, the MINIMAL UPDATE
    assert both_ways(sandbox.source, unique_name, start, timezone.utc, "base64") == (2, 3)


# --- generated rows ---------------------------------------------------------------------------------

FSPS = range(7)
GEN_COLUMNS: list[tuple[str, str]] = [
    ("id", "INT NOT NULL PRIMARY KEY"),
    ("ti", "TINYINT"), ("tiu", "TINYINT UNSIGNED"), ("mi", "MEDIUMINT"), ("miu", "MEDIUMINT UNSIGNED"),
    ("bi", "BIGINT"), ("biu", "BIGINT UNSIGNED"), ("f", "FLOAT"), ("db", "DOUBLE"),
    *[(f"dec{p}_{s}", f"DECIMAL({p},{s})") for p, s in ((1, 0), (9, 0), (10, 0), (18, 9), (19, 1), (30, 30),
                                                          (38, 10), (65, 0), (65, 30), (12, 3), (4, 2))],
    *[(f"dt{n}", f"DATETIME({n})") for n in FSPS], *[(f"ts{n}", f"TIMESTAMP({n}) NULL") for n in FSPS],
    *[(f"tm{n}", f"TIME({n})") for n in FSPS], ("dte", "DATE"), ("yr", "YEAR"),
    *[(f"bit{n}", f"BIT({n})") for n in BIT_WIDTHS],
    ("en", "ENUM('a','b','é','😀')"), ("st", "SET('zz','y','x','é')"), ("js", "JSON"),
    ("en_big", "ENUM(" + ",".join(f"'e{n}'" for n in range(300)) + ")"),  # 2-byte index
    ("st_big", "SET(" + ",".join(f"'s{n}'" for n in range(64)) + ")"),  # 8-byte bit mask
    ("c_u", "CHAR(10) CHARACTER SET utf8mb4"), ("vc_u", "VARCHAR(300) CHARACTER SET utf8mb4"),
    ("c_l", "CHAR(10) CHARACTER SET latin1"), ("vc_l", "VARCHAR(20) CHARACTER SET latin1"),
    ("vc_16", "VARCHAR(20) CHARACTER SET utf16"), ("vc_32", "VARCHAR(20) CHARACTER SET utf32"),
    ("vc_ucs2", "VARCHAR(20) CHARACTER SET ucs2"), ("c_big", "CHAR(100) CHARACTER SET utf8mb4"),
    ("tx_u", "TEXT CHARACTER SET utf8mb4"), ("mt_u", "MEDIUMTEXT CHARACTER SET utf8mb4"),
    ("bn", "BINARY(4)"), ("bn_big", "BINARY(255)"), ("vb", "VARBINARY(300)"), ("tb", "TINYBLOB"), ("bl", "BLOB"),
    ("lb", "LONGBLOB"), ("geo", "GEOMETRY"),
]


def _decimal(precision: int, scale: int) -> st.SearchStrategy[str]:
    def text(n: int) -> str:
        digits = str(abs(n)).rjust(scale + 1, "0")
        return ("-" if n < 0 else "") + (digits[:-scale] + "." + digits[-scale:] if scale else digits)

    limit = 10**precision - 1
    return st.integers(-limit, limit).map(text)


def _datetime(fsp: int, lo: int = 1000, hi: int = 9999) -> st.SearchStrategy[str]:
    return st.builds(lambda y, mo, d, h, mi, s, us: f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}.{us:06d}"[
        :20 + fsp if fsp else 19], st.integers(lo, hi), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23),
        st.integers(0, 59), st.integers(0, 59), st.integers(0, 999999))


def _time(fsp: int) -> st.SearchStrategy[str]:
    return st.builds(lambda neg, h, m, s, us: f"{'-' if neg else ''}{h}:{m:02d}:{s:02d}.{us:06d}"[
        :None if fsp else -7], st.booleans(), st.integers(0, 838), st.integers(0, 59), st.integers(0, 59),
        st.integers(0, 999999))


TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
LATIN1 = st.text(st.sampled_from(list("abc ÀÿÇé€‚ƒ„…†‡ˆ‰Š‹ŒŽ''\"\"•–—˜™š›œžŸ\\\n\t")), max_size=10)
BMP = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=10)


def _values(name: str, definition: str) -> st.SearchStrategy[Any]:
    kind = definition.split("(")[0].split(" ")[0]
    ints = {"TINYINT": 8, "MEDIUMINT": 24, "BIGINT": 64}
    if kind in ints:
        bits = ints[kind]
        if "UNSIGNED" in definition:
            return st.integers(0, 2**bits - 1)
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if kind == "FLOAT":
        return st.floats(width=32, allow_nan=False, allow_infinity=False).map(repr)
    if kind == "DOUBLE":
        return st.floats(allow_nan=False, allow_infinity=False).map(repr)
    if kind == "DECIMAL":
        precision, scale = (int(x) for x in definition[8:-1].split(","))
        return _decimal(precision, scale)
    if kind in ("DATETIME", "TIMESTAMP", "TIME"):
        fsp = int(definition.split("(")[1][0])
        if kind == "TIME":
            return _time(fsp)
        return _datetime(fsp) if kind == "DATETIME" else _datetime(fsp, 1971, 2037)
    if kind == "DATE":
        return _datetime(0).map(lambda s: s[:10])
    if kind == "YEAR":
        return st.integers(1901, 2155)
    if kind == "BIT":
        return st.integers(0, 2 ** int(definition[4:-1]) - 1)
    if kind == "ENUM":
        return st.sampled_from([f"e{n}" for n in range(300)] if name == "en_big" else ["a", "b", "é", "😀"])
    if kind == "SET":
        return st.sets(st.sampled_from([f"s{n}" for n in range(64)] if name == "st_big" else ["zz", "y", "x", "é"]),
                       max_size=10).map(",".join)
    if kind == "JSON":
        return st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                            max_leaves=6).map(lambda v: __import__("json").dumps(v, ensure_ascii=False))
    if kind in ("BINARY", "VARBINARY", "TINYBLOB", "BLOB", "LONGBLOB"):
        size = {"BINARY": int(definition[7:-1]) if kind == "BINARY" else 0, "VARBINARY": 300, "TINYBLOB": 255}
        return st.binary(max_size=size.get(kind) or 3000)
    if kind == "GEOMETRY":
        return st.tuples(st.floats(-1e9, 1e9), st.floats(-1e9, 1e9)).map(lambda xy: f"POINT({xy[0]!r} {xy[1]!r})")
    if "latin1" in definition:
        return LATIN1
    if "utf16" in definition or "ucs2" in definition:
        return BMP if "ucs2" in definition else TEXT
    if kind == "MEDIUMTEXT":
        return st.text(st.characters(exclude_categories=("Cs",)), max_size=20).map(lambda s: s * 100)
    return TEXT


ROW = st.fixed_dictionaries({}, optional={name: st.none() | _values(name, d) for name, d in GEN_COLUMNS[1:]})


@pytest.fixture(scope="module")
def generated(sandbox: Sandbox) -> Iterator[pymysql.cursors.Cursor]:
    conn = sandbox.source.connect()
    cur = conn.cursor()
    cur.execute("CREATE DATABASE IF NOT EXISTS gen_compiled")
    cur.execute("USE gen_compiled")
    cur.execute("SET time_zone = '+00:00'")
    cur.execute("CREATE TABLE IF NOT EXISTS g (" + ", ".join(f"`{n}` {d}" for n, d in GEN_COLUMNS) + ")")
    yield cur
    cur.execute("DROP DATABASE gen_compiled")
    conn.close()


_ids = itertools.count(1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=st.lists(ROW, min_size=1, max_size=6), change=ROW)
def test_generated_rows_decode_the_same_both_ways(sandbox: Sandbox, generated: pymysql.cursors.Cursor,
                                                  rows: list[dict[str, Any]], change: dict[str, Any]) -> None:
    """Generated rows inserted, one of them updated with other generated values, then deleted."""
    cur = generated
    start = binlog_position(cur)
    ids = [next(_ids) for _ in rows]
    for id_, row in zip(ids, rows):
        names = ["id", *row]
        params = [id_, *row.values()]
        exprs = ["ST_GeomFromText(%s)" if n == "geo" and v is not None else "%s" for n, v in zip(names, params)]
        cur.execute(f"INSERT INTO g ({', '.join(f'`{n}`' for n in names)}) VALUES ({', '.join(exprs)})", params)
    if change:
        sets = ", ".join(f"`{n}` = " + ("ST_GeomFromText(%s)" if n == "geo" and v is not None else "%s")
                         for n, v in change.items())
        cur.execute(f"UPDATE g SET {sets} WHERE id = %s", [*change.values(), ids[0]])
    cur.execute(f"DELETE FROM g WHERE id IN ({', '.join(['%s'] * len(ids))})", ids)
    compiled, library = both_ways(sandbox.source, "gen_compiled", start, ZoneInfo("Europe/Berlin"), "base64")
    assert library == 0
    assert compiled >= len(rows) + 1  # large rows split events; an UPDATE changing nothing logs none


def test_build_declines_types_it_has_no_form_for() -> None:
    """MySQL's binary JSON (type 245) and the old temporal types have no compiled form: the table stays with the library."""
    from pymysqlreplication.column import Column
    from pymysqlreplication.constants import FIELD_TYPE

    assert build([Column(name="j", type=FIELD_TYPE.JSON, length_size=4)], timezone.utc, "base64") is None
    assert build([Column(name="d", type=FIELD_TYPE.DATETIME)], timezone.utc, "base64") is None
    decoder = build([Column(name="i", type=FIELD_TYPE.LONG, unsigned=True)], timezone.utc, "base64")
    assert decoder is not None and decoder.image(b"\x00\xff\xff\xff\xff", 0) == ('[{"i":"4294967295"}]', 5)
    assert decoder.image(b"\x01", 0) == ('[{"i":null}]', 1)


def test_a_table_map_seen_before_is_not_parsed_again(sandbox: Sandbox, unique_name: str,
                                                     source_cursor: pymysql.cursors.Cursor) -> None:
    """The reader parses each distinct TableMap once: the same table map in later transactions is the
    same Table object; after an ALTER the TableMap differs and is parsed again (the new column shows)."""
    cur = source_cursor
    cur.execute("CREATE TABLE t (id INT NOT NULL PRIMARY KEY, v VARCHAR(10))")
    start = current_position(server_config(sandbox.source))
    for n in (1, 2):
        cur.execute("INSERT INTO t VALUES (%s, 'x')", (n,))
    cur.execute("ALTER TABLE t ADD COLUMN w INT")
    cur.execute("INSERT INTO t VALUES (3, 'y', 7)")
    reader = BinlogReader(server_config(sandbox.source), next(_server_ids), start)
    translator = Translator(timezone.utc, "base64", TableFilter(), compiled=True)
    tables, texts = [], []
    for item in reader:
        if type(item) is Rows and item.event.schema == unique_name:
            tables.append(item.event.table_map[item.event.table_id])
            texts += [change[3] for change in translator.rows(item)]
        if type(item) is Idle:
            reader.stop()
    assert tables[0] is tables[1] and tables[2] is not tables[1]
    assert texts == ['{"NEW":[{"id":"1"},{"v":"x"}]}', '{"NEW":[{"id":"2"},{"v":"x"}]}',
                     '{"NEW":[{"id":"3"},{"v":"y"},{"w":"7"}]}']
