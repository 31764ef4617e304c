"""Snapshot readers: processes that read a table's rows from the source in chunks, each chunk exact at a
binlog position, and render them to SNAPSHOT rows.

A chunk is one short transaction at REPEATABLE READ (forced: under READ COMMITTED MariaDB does not pin
the snapshot): ``START TRANSACTION WITH CONSISTENT SNAPSHOT``, then MariaDB's ``binlog_snapshot_file``
and ``binlog_snapshot_position``, the binlog position whose state the read view shows exactly, and
``BINLOG_GTID_POS`` of it. The reader sends that position to gate's main process and waits for its
verdict: "go" when the binlog stream can still put the chunk there (it holds its numbering at that
point until the rows arrive), "stale" when the stream has already numbered a transaction after it (the
reader then opens a new snapshot). Then one keyset page: ``WHERE key > last AND key <= bound ORDER BY
key LIMIT n``, the composite comparison spelled out as ``a > ? OR (a = ? AND b > ?)`` (the row
constructor ``(a, b) > (?, ?)`` makes MariaDB read far more rows), never OFFSET. No lock is taken
beyond the metadata lock of the SELECT, and nothing is written to the source.

A table without a key is read one of two ways the request chose: whole (the key ``[]``), in one read
view as one chunk of at most ``Task.rows`` rows (more cancels it); or paged on columns the user named,
where each chunk also counts the rows and distinct keys of its range, since no index enforces them.

Values are rendered by the binlog path's rules (:func:`gate.capture.values.text_renderer`). Where the text
protocol would show other text than the binlog holds, the SELECT asks for the bytes (``CAST(c AS
BINARY)``) and renders them as the binlog path renders that column: MariaDB's UUID, INET4 and INET6
(the binlog holds their 16 or 4 bytes, written as binary) and text in a character set other than
utf8mb4/utf8mb3 (decoded with the binlog path's codec, or written as binary where Python has none).

The table's columns are read before the snapshot and after the SELECT: a DDL in between (an instant
ADD/DROP COLUMN changes what the SELECT of an older read view returns; a rebuilding ALTER or TRUNCATE
fails it with error 1412) makes the chunk be read again.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

import pymysql
import pymysql.converters

from gate.capture.libshim import fix_library_charsets
from gate.capture.values import BinaryFormat, ImageRenderer, binlog_codec, text_renderer
from gate.common import checksum
from gate.common.columns import ColumnRule, chain, matching, rule_keys
from gate.common.config import ServerConfig
from gate.common.dc import connect, one_row
from gate.common.errors import GateError
from gate.common.process import start_child
from gate.common.retry import error_code, is_transient, refusal

LOCK_WAIT = 2  # seconds a chunk's SELECT waits for a metadata lock
MAX_STALE = 200  # snapshots opened in a row that the stream had already passed before the chunk is given up
TABLE_DEFINITION_CHANGED, NO_SUCH_TABLE, LOCK_WAIT_TIMEOUT, BAD_FIELD = 1412, 1146, 1205, 1054
Key = list[Any]  # key values as the text protocol gives them: str, or bytes for binary columns
RAW_TYPES = ("uuid", "inet4", "inet6")  # MariaDB type plugins: bytes in the binlog, text in a SELECT
TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
UTF8 = ("utf8mb4", "utf8mb3")  # the session's character set: these arrive as the binlog holds them
OTHER_COLUMNS = "the SELECT returned other columns than the table had when it was opened"


@dataclass(frozen=True)
class Column:
    name: str
    nullable: str
    key: str
    column_type: str
    data_type: str
    fsp: int
    binary: bool  # values come as bytes, written as binary: binary strings, GEOMETRY, BIT, RAW_TYPES, ...
    charset: str | None = None

    @property
    def raw(self) -> bool:
        """Whether the SELECT asks for the value's bytes (``CAST(c AS BINARY)``): the text protocol's text
        is not what the binlog holds."""
        return self.data_type in RAW_TYPES or (self.data_type in TEXT_TYPES and self.charset not in UTF8)

    @property
    def codec(self) -> str | None:
        """For text selected as bytes, the codec the binlog path decodes it with."""
        return binlog_codec(self.charset) if self.raw and self.charset and not self.binary else None

    def select(self) -> str:
        """The column in the chunk's SELECT list."""
        return f"CAST({quote(self.name)} AS BINARY) AS {quote(self.name)}" if self.raw else quote(self.name)

    def describe(self) -> dict[str, str]:
        """The column as a CREATETABLE payload lists it."""
        return {"field_name": self.name, "nullable": "Yes" if self.nullable == "YES" else "No",
                "primary_key": "Yes" if self.key == "PRI" else "No", "data_type": self.column_type}


@dataclass
class Task:
    """Read the next chunk of a table: keys after ``last`` (None: from the start) up to ``bound``
    (None: the first chunk, which finds the bound in its own read view)."""

    snap_id: int
    db: str
    table: str
    rows: int
    last: Key | None = None
    bound: Key | None = None
    key: list[str] | None = None
    rules: tuple[ColumnRule, ...] = ()
    verify: bool = False  # a verification: no bound unless given (the last chunk runs to the table's end), a checksum
    images: bool = False  # a verification's narrowing: the chunk's rows are kept too


@dataclass
class Chunk:
    """What a reader found; ``outcome`` is "rows", "retry" (read it again), "gone" (the table is not there)
    or "refused" (it cannot be snapshotted: ``reason`` says why and what to do)."""

    outcome: str
    reason: str = ""
    data: list[str] = field(default_factory=list)
    columns: list[dict[str, str]] = field(default_factory=list)
    key: list[str] = field(default_factory=list)
    bound: Key | None = None
    last: Key | None = None
    done: bool = False  # no keys left after ``last`` up to the bound
    clock: int = 0  # the source's UNIX_TIMESTAMP() in the chunk's transaction
    next_rows: int = 0  # the page size that would take the target time
    seconds: float = 0.0
    estimate: int | None = None  # the first chunk's: the source's TABLE_ROWS for the table when it started
    checksum: str = ""  # a verification's: of the chunk's rows (:mod:`gate.common.checksum`); data then empty
    rows: int = 0  # a verification's: rows in the chunk
    last_text: list[str | None] | None = None  # a verification's: the last row's key as the DC renders it


def encode_key(key: Key | None) -> str | None:
    """Key values as JSON text for gate_snapshot (bytes as {"base64": ...})."""
    if key is None:
        return None
    return json.dumps([{"base64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v for v in key])


def decode_key(text: str | None) -> Key | None:
    if text is None:
        return None
    return [base64.b64decode(v["base64"]) if isinstance(v, dict) else v for v in json.loads(text)]


def quote(name: str) -> str:
    """A source identifier backquoted, whatever its characters."""
    return "`" + name.replace("`", "``") + "`"


def after(key: list[str], inclusive: bool = False, below: bool = False) -> str:
    """``key > ?`` for a composite key as an OR expansion (``<=`` with ``below`` and ``inclusive``)."""
    strict, last = ("<", "<=") if below else (">", ">=")
    terms = []
    for n, column in enumerate(key):
        equal = [f"{quote(c)} = %s" for c in key[:n]]
        op = last if inclusive and n == len(key) - 1 else strict
        terms.append("(" + " AND ".join([*equal, f"{quote(column)} {op} %s"]) + ")")
    return "(" + " OR ".join(terms) + ")"


def after_args(values: Key) -> list[Any]:
    """The parameters of :func:`after` for these key values."""
    return [v for n in range(len(values)) for v in values[: n + 1]]


def read_columns(cur: pymysql.cursors.Cursor, db: str, table: str) -> list[Column]:
    cur.execute(
        "SELECT column_name, is_nullable, column_key, column_type, data_type, COALESCE(datetime_precision, 0), "
        "character_set_name IS NULL AND data_type NOT IN ('int', 'tinyint', 'smallint', 'mediumint', 'bigint', "
        "'decimal', 'float', 'double', 'date', 'datetime', 'timestamp', 'time', 'year'), character_set_name "
        "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (db, table))
    return [Column(name, nullable, key, ctype, dtype, int(fsp),
                   binary in (1, "1") or (charset is not None and binlog_codec(charset) is None), charset)
            for name, nullable, key, ctype, dtype, fsp, binary, charset in cur.fetchall()]


def rows_estimate(cur: pymysql.cursors.Cursor, db: str, table: str) -> int | None:
    """The source's information_schema TABLE_ROWS of the table: exact for MyISAM, an estimate for InnoDB."""
    cur.execute("SELECT table_rows FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (db, table))
    row = cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def unique_indexes(cur: pymysql.cursors.Cursor, db: str, table: str) -> dict[str, list[str]]:
    """The table's primary and unique keys, each with its columns in key order, the primary key first."""
    cur.execute("SELECT index_name, column_name FROM information_schema.statistics WHERE table_schema = %s AND "
                "table_name = %s AND non_unique = 0 ORDER BY index_name = 'PRIMARY' DESC, index_name, seq_in_index",
                (db, table))
    indexes: dict[str, list[str]] = {}
    for index, column in cur.fetchall():
        indexes.setdefault(index, []).append(column)
    return indexes


def choose_key(cur: pymysql.cursors.Cursor, db: str, table: str, columns: list[Column]) -> list[str] | None:
    """The primary key's columns in key order; else those of the narrowest unique key whose columns are
    all NOT NULL; None when the table has neither."""
    indexes = unique_indexes(cur, db, table)
    if "PRIMARY" in indexes:
        return indexes["PRIMARY"]
    not_null = {c.name for c in columns if c.nullable == "NO"}
    usable = [cols for cols in indexes.values() if set(cols) <= not_null]
    return min(usable, key=len) if usable else None


class Reader:
    """One reader process's connection to the source and what it reads with."""

    def __init__(self, server: ServerConfig, timezone: str, binary_format: BinaryFormat, chunk_seconds: float,
                 min_rows: int, verdict: Any) -> None:
        self.server = server
        self.tz = ZoneInfo(timezone)
        self.binary_format = binary_format
        self.chunk_seconds = chunk_seconds
        self.min_rows = min_rows
        self.max_rows = max(min_rows, 50_000)
        self.verdict = verdict  # (gtid position, file, pos) -> True to read the chunk, False when stale
        fix_library_charsets()  # the codecs the binlog path decodes text with (binlog_codec)
        self._conn: pymysql.Connection | None = None
        self._renderers: dict[tuple[Any, ...], ImageRenderer] = {}

    def _cursor(self) -> pymysql.cursors.Cursor:
        if self._conn is None:
            # values undecoded: the text the server sends (str), bytes for binary ones; parameters escaped as usual
            conv = {k: v for k, v in pymysql.converters.encoders.items()}
            self._conn = connect(self.server, "source", conv=conv)
            with self._conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("SET time_zone = '+00:00'")
                # a SELECT queued behind a DDL's metadata lock fails soon (the chunk is read again) instead of
                # holding the stream at its slot for as long as the DDL waits
                cur.execute(f"SET SESSION lock_wait_timeout = {LOCK_WAIT}")
        return self._conn.cursor()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def read(self, task: Task) -> Chunk:
        try:
            return self._read(task)
        except (pymysql.err.Error, GateError) as exc:
            code = error_code(exc)
            self.close()
            if code == NO_SUCH_TABLE:
                return Chunk("gone", f"{task.db}.{task.table} was dropped or renamed while it was snapshotted")
            if code == TABLE_DEFINITION_CHANGED:
                return Chunk("retry", "its definition changed while the chunk was read (error 1412)")
            if code == BAD_FIELD:  # a column dropped or renamed between reading the columns and the SELECT
                return Chunk("retry", f"a column it selects was dropped or renamed before the chunk was read: {exc}")
            if code == LOCK_WAIT_TIMEOUT:
                return Chunk("retry", f"its metadata lock was not granted within {LOCK_WAIT} s (a DDL holds it or "
                                      "waits for it)")
            if not is_transient(exc):  # e.g. SELECT revoked: the snapshot ends with the server's answer and the fix
                return Chunk("refused", str(refusal(exc, "source", self.server,
                                                    f"the snapshot's read of {task.db}.{task.table}")))
            return Chunk("retry", f"the source failed the chunk: {exc}")

    def _read(self, task: Task) -> Chunk:
        cur = self._cursor()
        columns = read_columns(cur, task.db, task.table)
        if not columns:
            return Chunk("gone", f"{task.db}.{task.table} does not exist on the source {self.server.address}: it "
                                 "was dropped or renamed (the snapshot of a renamed table is not carried over: "
                                 "request one of the new name)")
        key = task.key if task.key is not None else choose_key(cur, task.db, task.table, columns)
        if key is None:
            return Chunk("refused", (
                f"{task.db}.{task.table} has neither a primary key nor a unique key on NOT NULL columns, so gate "
                "cannot read it in resumable chunks and does not snapshot it. Add one (e.g. ALTER TABLE ... ADD "
                "PRIMARY KEY (...)) and request the snapshot again, or request it read whole ('gate snapshot "
                f"CHANNEL --whole-table {task.db}.{task.table}'); until then its image holds only what streams."))
        names = [c.name for c in columns]
        if not set(key) <= set(names):
            return Chunk("retry", f"its key columns {key} are not all among its columns any more")
        # a key the user chose (--key) that no unique index enforces: each chunk counts its keys
        counted = bool(key) and not any(set(cols) <= set(key) for cols in unique_indexes(cur, task.db, task.table).values())
        null = [c.name for c in columns if counted and c.name in key and c.nullable == "YES"]
        if null:
            return Chunk("refused", (
                f"The key chosen for the snapshot of {task.db}.{task.table} ({', '.join(key)}) has NULL-able columns "
                f"now ({', '.join(null)}): a row whose key is NULL would never be read; gate does not go on with the "
                "snapshot. Choose NOT NULL columns (--key) or read it whole (--whole-table), and request it again."))
        keys = rule_keys(task.rules)
        plan, selected = [], []
        for column in columns:
            hits = matching(task.rules, task.db, task.table, column.name)
            if hits and column.name in key:
                return Chunk("refused", (
                    f"The column rule {hits[0].describe()} hits {task.db}.{task.table}.{column.name}, a column of the "
                    "key the snapshot pages on; gate does not snapshot the table. Narrow the rule and request the "
                    "snapshot again."))
            if any(rule.kind == "exclude" for rule in hits):
                continue
            selected.append(column)
            plan.append((column.name, text_renderer(column.data_type, column.fsp, column.binary, self.tz,
                                                    self.binary_format, chain(hits, keys), column.codec)))
        first = task.last is None if task.verify else task.bound is None
        estimate = rows_estimate(cur, task.db, task.table) if first else None
        stale = 0
        while True:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW SESSION STATUS WHERE variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')")
            status = {name.lower(): value for name, value in cur.fetchall()}
            if "binlog_snapshot_file" not in status:
                cur.execute("COMMIT")
                return Chunk("refused", (
                    f"The source {self.server.address} has no binlog_snapshot_file status variable (MariaDB and Percona "
                    "Server have it, MySQL does not), so gate cannot tell at which binlog position a consistent read "
                    "was taken; it does not snapshot tables of this source. Load the table's rows another way."))
            log_file, log_pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s), UNIX_TIMESTAMP()", (log_file, log_pos))
            gtid_pos, clock = one_row(cur)
            if self.verdict(gtid_pos, log_file, log_pos):
                break
            cur.execute("COMMIT")
            stale += 1
            if stale >= MAX_STALE:
                return Chunk("retry", f"the binlog stream passed {stale} read views in a row before they were placed")
        started = time.monotonic()
        try:
            bound = task.bound
            table = f"{quote(task.db)}.{quote(task.table)}"
            order = ", ".join(f"{table}.{quote(c)}" for c in key)  # the columns, not a CAST of the SELECT list
            if bound is None and key and not task.verify:
                cur.execute(f"SELECT {order} FROM {table} ORDER BY "
                            + ", ".join(f"{quote(c)} DESC" for c in key) + " LIMIT 1")
                top = cur.fetchone()
                bound = list(top) if top else None
            data: list[str] = []
            last = task.last
            if not key:  # the whole table in this one read view, as one chunk
                cur.execute(f"SELECT {', '.join(c.select() for c in columns)} FROM {table} LIMIT {int(task.rows) + 1}")
                rows = cur.fetchall()
                if len(rows) > task.rows:
                    cur.execute("COMMIT")
                    return Chunk("refused", (
                        f"{task.db}.{task.table} has more than {task.rows} rows, the most a whole-table snapshot reads "
                        "(the channel's snapshot_whole_table_rows); gate does not snapshot it. Add a primary key, or "
                        "raise the bound ('gate channel set CHANNEL --snapshot-whole-table-rows N'), and request it "
                        "again."))
                if [d[0] for d in cur.description][: len(names)] != names:
                    return Chunk("retry", OTHER_COLUMNS)
                data = self._render(plan, selected, names, rows)
            elif bound is not None or task.verify:
                start = after_args(last) if last is not None else []
                where = ([after(key)] if last is not None else []) + (
                    [after(key, inclusive=True, below=True)] if bound is not None else [])
                # key values as they compare: a key column selected as bytes comes once more as it is
                listed = [c.select() for c in columns]
                positions = []
                for name in key:
                    column = columns[names.index(name)]
                    if column.raw:
                        listed.append(quote(name))
                    positions.append(len(listed) - 1 if column.raw else names.index(name))
                cur.execute(f"SELECT {', '.join(listed)} FROM {table} WHERE {' AND '.join(where) or 'TRUE'} "
                            f"ORDER BY {order} LIMIT {int(task.rows)}", start + after_args(bound or []))
                rows = cur.fetchall()
                if [d[0] for d in cur.description][: len(names)] != names:
                    return Chunk("retry", OTHER_COLUMNS)
                data = self._render(plan, selected, names, rows)
                if rows:
                    last = [rows[-1][i] for i in positions]
                if counted and rows:  # no key of the page repeated, within it or just past it
                    cur.execute(f"SELECT COUNT(*), COUNT(DISTINCT {order}) FROM {table} WHERE {' AND '.join(where)}",
                                start + after_args([rows[-1][i] for i in positions]))
                    if [int(n) for n in one_row(cur)] != [len(rows), len(rows)]:  # (values come as text)
                        cur.execute("COMMIT")
                        return Chunk("refused", (
                            f"{task.db}.{task.table} has rows that repeat a value of the key chosen for its snapshot "
                            f"({', '.join(key)}), after {encode_key(task.last) or 'the start'} up to "
                            f"{encode_key(last)}: the key is not unique, so the snapshot would not be exact; gate "
                            "cancels it. Choose other columns (--key) or read it whole (--whole-table), and request "
                            "it again."))
            cur.execute("COMMIT")
        except BaseException:
            self.close()
            raise
        if read_columns(cur, task.db, task.table) != columns:
            return Chunk("retry", "its columns changed while the chunk was read")
        seconds = time.monotonic() - started
        done = not key or (bound is None and not task.verify) or len(data) < task.rows or last == bound
        target = task.rows * self.chunk_seconds / max(seconds, 1e-3)
        next_rows = int(min(self.max_rows, max(self.min_rows, task.rows / 2, min(target, task.rows * 2))))
        if task.verify:  # the chunk's checksum; its rows only for a narrowing
            images = [checksum.image(json.loads(text)["NEW"]) for text in data]
            last_text = [images[-1][k] for k in key] if images else None
            return Chunk("rows", data=data if task.images else [], key=key, bound=bound, last=last, done=done,
                         clock=int(clock), next_rows=next_rows, seconds=seconds, estimate=estimate,
                         checksum=checksum.checksum(images), rows=len(data), last_text=last_text)
        return Chunk("rows", data=data, columns=[c.describe() for c in selected], key=key, bound=bound, last=last,
                     done=done, clock=int(clock), next_rows=next_rows, seconds=seconds, estimate=estimate)

    def _render(self, plan: list[tuple[str, Any]], selected: list[Column], names: list[str],
                rows: Sequence[Sequence[Any]]) -> list[str]:
        """SNAPSHOT rows' data of the SELECT's ``rows`` (the table's ``names`` first), excluded columns left out."""
        image = self._image(plan)
        selected_at = [names.index(c.name) for c in selected]
        if selected_at == list(range(len(names))):  # no column excluded: the rows as they are
            return ['{"NEW":' + image.row_json(row) + "}" for row in rows]
        return ['{"NEW":' + image.row_json([row[i] for i in selected_at]) + "}" for row in rows]

    def _image(self, plan: list[tuple[str, Any]]) -> ImageRenderer:
        marker = tuple(name for name, _ in plan)
        image = self._renderers.get(marker)
        if image is None or len(self._renderers) > 256:
            self._renderers.clear()
            image = self._renderers[marker] = ImageRenderer.of_text(plan)
        return image


def reader_main(server: ServerConfig, timezone: str, binary_format: BinaryFormat, chunk_seconds: float,
                min_rows: int, number: int, inbox: Any, outbox: Any) -> None:
    """A reader process: tasks and verdicts come on its own ``inbox``; its position reports ("at", number,
    gtid, file, pos) and results ("chunk", number, Chunk) go to the shared ``outbox``."""
    start_child("gate-snapshot")

    def verdict(gtid_pos: str | None, log_file: str, log_pos: int) -> bool:
        outbox.put(("at", number, gtid_pos, log_file, log_pos))
        answer = inbox.get()
        return bool(answer)

    reader = Reader(server, timezone, binary_format, chunk_seconds, min_rows, verdict)
    while (task := inbox.get()) is not None:
        try:
            outbox.put(("chunk", number, reader.read(task)))
        except Exception as exc:  # reported; the main process retries the table later
            reader.close()
            outbox.put(("chunk", number, Chunk("retry", f"{type(exc).__name__}: {exc}")))
    reader.close()
