"""Initial snapshots in ``gate run``: requests from gate_snapshot, chunks placed in the binlog stream, progress.

Each chunk a reader process reads is the table's exact state at a binlog position P (see
:mod:`gate.capture.snapshot_reader`). The engine places it in the stream at P: it becomes a transaction
of its own, numbered after every transaction before P and before every transaction after it, so a
consumer applying rows in id order converges to the source. The engine compares P, as a GTID position
(or, failing that, a binlog file and offset), with the stream's last transaction boundary:

- equal, between two transactions: the chunk's slot goes into the ordering now;
- ahead (the stream has not read so far yet): the reader waits until a transaction boundary reaches P;
- behind, or a transaction after P begun: the slot goes in right after the transaction end at P if the
  ordering still holds it (and so everything after it, not numbered yet: while snapshots run, the
  ordering keeps each operation HOLD_BACK seconds before applying it, for read views reported late,
  longer, up to MAX_HOLD_BACK, while read views keep coming too late);
  else the chunk is stale and the reader opens a new read view.

The ordering holds its numbering at a slot until the chunk's rows arrive (the reader waits for the
verdict before its SELECT, so that is one SELECT's time). SNAPSHOTSTART goes with the first chunk, and
SNAPSHOTEND with the last, each a transaction of its own. The progress of each table (key, bound,
last key, rows) is noted on the chunk and stored in the DC transaction that moves the checkpoint past
it: a killed gate resumes at most one chunk back per table. A table read whole (key ``[]``) is one
transaction, SNAPSHOTSTART to SNAPSHOTEND: a killed gate reads it again from the start.
"""

from __future__ import annotations

import json
import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql

import dc_schema
from gate.capture.reader import Position
from gate.capture.snapshot_reader import Chunk, Key, Task, decode_key, encode_key, reader_main
from gate.capture.translate import Change, TableFilter, dumps
from gate.common.columns import ColumnRule
from gate.common.config import ChannelDefaults, ServerConfig
from gate.common.dc import q
from gate.common.errors import SnapshotReaderFailed
from gate.common.process import _CTX

log = logging.getLogger(__name__)

TABLE = "gate_snapshot"
VERIFY_TABLE = "gate_verify"  # verifications: the same machinery, VERIFY rows instead of SNAPSHOT rows
POLL_EVERY = 2.0  # seconds between reads of gate_snapshot by a running gate
MAX_LAG = 10.0  # no chunk is started while the stream is further behind the source than this (seconds)
RETRY_AFTER = 1.0  # seconds before a chunk that must be read again is dispatched
HOLD_BACK = 0.05  # seconds the ordering keeps operations before applying them while snapshots run ...
MAX_HOLD_BACK = 1.0  # ... doubled (up to this) at each read view reported too late, halved at each placed one
WHOLE: list[str] = []  # the key of a table snapshotted whole, in one read view (requested with --whole-table)


def waiting_query(channel: str, verify: bool = True) -> tuple[str, tuple[Any, ...]]:
    """A row when gate_snapshot (or, with ``verify``, gate_verify) holds requests or running snapshots or
    verifications: the engine reads the tables only then."""
    tables = [TABLE, VERIFY_TABLE] if verify else [TABLE]
    return " UNION ALL ".join(f"(SELECT 1 FROM {q(channel)}.{table} WHERE state IN ('requested', 'running') LIMIT 1)"
                              for table in tables), ()


def ensure_table(cur: pymysql.cursors.Cursor) -> None:
    """Channels created before snapshots (or verifications) lack the tables; the cursor's database is the
    channel's."""
    cur.execute(dc_schema.table_ddl(TABLE))
    cur.execute(dc_schema.table_ddl(VERIFY_TABLE))


@dataclass
class Note:
    """Progress of one table snapshot, stored with the checkpoint that passes the rows it describes."""

    snap_id: int
    kind: str  # "start", "chunk", "end", or "whole" (the three at once: a table read whole)
    key: list[str] | None = None
    bound: str | None = None
    last: str | None = None
    rows: int = 0
    state: str | None = None
    reason: str | None = None
    estimate: int | None = None  # start: the source's TABLE_ROWS for the table
    after: str | None = None  # verify: the chunk's last key as the DC renders it (JSON)


def record(cur: pymysql.cursors.Cursor, channel: str, notes: list[Note]) -> None:
    """Apply notes to gate_snapshot and gate_verify (the caller owns the transaction: the checkpoint's)."""
    table = f"{q(channel)}.{TABLE}"
    for note in notes:
        if note.kind == "verify":  # a verification's chunk (and its end with the last one)
            cur.execute(f"UPDATE {q(channel)}.{VERIFY_TABLE} SET snap_started = 1, snap_key = %s, snap_last = %s, "
                        "snap_after = %s, rows_done = rows_done + %s, chunks_done = chunks_done + 1, "
                        "rows_estimate = COALESCE(%s, rows_estimate), state = COALESCE(%s, state), "
                        "finished_at = IF(%s IS NULL, finished_at, NOW(3)) WHERE id = %s",
                        (json.dumps(note.key), note.last, note.after, note.rows, note.estimate, note.state,
                         note.state, note.snap_id))
        elif note.kind == "start":
            cur.execute(f"UPDATE {table} SET snap_started = 1, snap_key = %s, snap_bound = %s, snap_last = NULL, "
                        "rows_done = 0, chunks_done = 0, rows_estimate = %s WHERE id = %s",
                        (json.dumps(note.key), note.bound, note.estimate, note.snap_id))
        elif note.kind == "whole":
            cur.execute(f"UPDATE {table} SET snap_started = 1, snap_key = %s, rows_done = %s, chunks_done = 1, "
                        "rows_estimate = %s, state = %s, finished_at = NOW(3) WHERE id = %s",
                        (json.dumps(note.key), note.rows, note.estimate, note.state, note.snap_id))
        elif note.kind == "chunk":
            cur.execute(f"UPDATE {table} SET snap_last = %s, rows_done = rows_done + %s, chunks_done = chunks_done + 1 "
                        "WHERE id = %s", (note.last, note.rows, note.snap_id))
        else:
            cur.execute(f"UPDATE {table} SET state = %s, finished_at = NOW(3), message = COALESCE(%s, message) "
                        "WHERE id = %s", (note.state, note.reason, note.snap_id))


def request_again(conn: pymysql.Connection, channel: str, tables: list[tuple[str, str]], reason: str) -> None:
    """A snapshot request for each of ``tables`` that has none in state requested (``reason`` cut to the
    column's 255 characters), committed at once."""
    with conn.cursor() as cur:
        for db, table in tables:
            cur.execute(f"INSERT INTO {q(channel)}.{TABLE} (dbname, tablename, reason) SELECT %s, %s, %s FROM DUAL "
                        f"WHERE NOT EXISTS (SELECT 1 FROM {q(channel)}.{TABLE} WHERE dbname = %s AND tablename = %s "
                        "AND state = 'requested')", (db, table, reason[:255], db, table))


@dataclass(slots=True)
class SnapshotOp:
    """A chunk's slot in the ordering: its transactions (changes and the note that goes with them), None
    until the reader has read them; [] when there is nothing to number after all."""

    txns: list[tuple[list[Change], Note]] | None = None
    timestamp: int = 0


@dataclass
class _Table:
    snap_id: int
    db: str
    table: str
    reason: str
    started: bool  # its SNAPSHOTSTART is numbered (in this run, or at or below the checkpoint)
    key: list[str] | None = None
    bound: Key | None = None
    last: Key | None = None
    rows: int = 0  # SNAPSHOT rows numbered
    chunk_rows: int = 0
    busy: bool = False
    not_before: float = 0.0
    cancel: str | None = None
    verify: bool = False  # a verification (gate_verify): VERIFY rows, no SNAPSHOTSTART/END
    images: bool = False  # a verification's narrowing: its VERIFY rows carry the source's rows
    after_text: list[Any] | None = None  # verify: the last key as the DC renders it
    upto_text: list[Any] | None = None  # verify: a narrowing's last key as the DC renders it
    chunks: int = 0  # verify: chunks numbered
    rate: int = 0  # verify: rows per second at most (0: no cap)

    @property
    def ref(self) -> tuple[bool, int]:
        return self.verify, self.snap_id

    @property
    def kind(self) -> str:
        return "verification" if self.verify else "snapshot"


def _gtids(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for gtid in filter(None, (g.strip() for g in (text or "").split(","))):
        domain, _server, seq = gtid.split("-")
        out[domain] = int(seq)
    return out


def compare(at: tuple[str | None, str | None, int | None], stream: Position) -> int:
    """-1 when the read view at ``at`` = (gtid position, file, offset) is behind the stream's boundary, 0 at
    it, 1 ahead of it. GTID positions decide (binlog offsets differ between servers and non-transaction
    events move them); equal file and offset count as equal too."""
    gtid_pos, log_file, log_pos = at
    if log_file is not None and (log_file, log_pos) == (stream.log_file, stream.log_pos):
        return 0
    mine, theirs = _gtids(gtid_pos), _gtids(stream.gtid_pos)
    if mine or theirs:
        domains = mine.keys() | theirs.keys()
        if any(mine.get(d, 0) < theirs.get(d, 0) for d in domains):
            return -1
        return 0 if all(mine.get(d, 0) == theirs.get(d, 0) for d in domains) else 1
    if log_file is None or stream.log_file is None or stream.log_pos is None or log_pos is None:
        return 1
    return -1 if (log_file, log_pos) < (stream.log_file, stream.log_pos) else 1


class Readers:
    """The reader processes, started when the first snapshot needs them; each has its own inbox."""

    def __init__(self, server: ServerConfig, defaults: ChannelDefaults) -> None:
        self.outbox: Any = _CTX.Queue()
        self.inboxes: list[Any] = []
        self.procs: list[Any] = []
        for number in range(defaults.snapshot_readers):
            inbox = _CTX.Queue()
            proc = _CTX.Process(target=reader_main, name=f"gate-snapshot-{number}", daemon=True, args=(
                server, defaults.timezone, defaults.binary_format, defaults.snapshot_chunk_seconds,
                defaults.snapshot_chunk_rows, number, inbox, self.outbox))
            proc.start()
            self.inboxes.append(inbox)
            self.procs.append(proc)

    def check_alive(self) -> None:
        dead = [proc.name for proc in self.procs if not proc.is_alive()]
        if dead:
            raise SnapshotReaderFailed(
                f"Snapshot reader process(es) {', '.join(dead)} died (see the log above); the chunks they held "
                "would never come. gate stops; its next run goes on from the progress stored with the checkpoint.")

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.join()
        for box in (*self.inboxes, self.outbox):
            box.cancel_join_thread()
            box.close()


class SnapshotEngine:
    """Takes up requests, hands chunks to reader processes and places them in the stream through ``place``
    (which appends a :class:`SnapshotOp` to the ordering)."""

    def __init__(self, channel: str, server: ServerConfig, defaults: ChannelDefaults,
                 dc: Callable[[Callable[[pymysql.Connection], Any]], Any],
                 place: Callable[[SnapshotOp, Callable[[Position], bool] | None], bool],
                 boundary: Position) -> None:
        self.channel = channel
        self.server = server
        self.defaults = defaults
        self.dc = dc  # runs work on the DC control connection, retried while it is unreachable
        self.hold_back: Callable[[float], None] = lambda seconds: None
        self.tables: Callable[[int], None] = lambda count: None  # told how many table snapshots run
        self.requests: Callable[[], bool] = lambda: True  # whether gate_snapshot may hold requests or cancels
        self.place = place  # (slot, None: at the end | which queued transaction end it goes after) -> placed
        self.boundary = boundary  # the stream's last transaction boundary handed to the ordering
        self.in_txn = False  # the ordering has a transaction's start after that boundary
        self.behind = 0.0  # seconds the stream is behind the source, at its last commit
        self.filter = TableFilter()
        self.rules: tuple[ColumnRule, ...] = ()
        self.stopping = False
        self._tables: dict[tuple[bool, int], _Table] = {}  # by (verification?, id)
        self._ended: set[tuple[bool, int]] = set()  # ended in this run (their final state waits for a checkpoint)
        self._readers: Readers | None = None
        self._idle: list[int] = []
        self._working: dict[int, _Table] = {}  # reader number -> its table
        self._waiting: dict[int, tuple[str | None, str, int]] = {}  # reader -> read view not placed yet
        self._slots: dict[int, SnapshotOp] = {}  # reader -> its placed slot
        self._loose: list[SnapshotOp] = []  # ready transactions waiting for a boundary (cancellations)
        self._next_poll = 0.0
        self._next_check = 0.0  # when to look whether the reader processes live
        self._hold = HOLD_BACK
        self._rows = self._rows_logged = 0
        self._logged_at = time.monotonic()

    # --- the stream's side ------------------------------------------------------------------

    def begin(self) -> None:
        self.in_txn = True

    def at_boundary(self, boundary: Position, timestamp: int | None = None) -> None:
        """A transaction ended at ``boundary`` (or the stream is idle there): place what waits for it."""
        self.boundary, self.in_txn = boundary, False
        self.behind = 0.0 if timestamp is None else max(0.0, time.time() - timestamp)
        while self._loose:
            self.place(self._loose.pop(0), None)
        for number in list(self._waiting):
            self._judge(number)

    def _judge(self, number: int) -> None:
        """Answer a reader whose read view waits: go (its slot placed now), stale, or not yet."""
        at = self._waiting[number]
        verdict = compare(at, self.boundary)
        if verdict > 0:
            return
        slot = SnapshotOp()
        if verdict == 0 and not self.in_txn:
            self.place(slot, None)
        elif self.place(slot, lambda position: compare(at, position) == 0):
            verdict = 0  # the ordering still holds the transaction end at P and all that follows it
        else:
            verdict = -1  # a transaction after P has been numbered already
        if verdict == 0:
            self._hold = max(HOLD_BACK, self._hold / 2)
        else:  # reported later than the ordering holds operations (a busy machine): hold them longer
            self._hold = min(MAX_HOLD_BACK, self._hold * 2)
        log.debug("snapshot read view %s judged %d at %s (in_txn %s)", self._waiting[number], verdict, self.boundary,
                  self.in_txn)
        del self._waiting[number]
        assert self._readers is not None
        if verdict == 0:
            self._slots[number] = slot
        self._readers.inboxes[number].put(verdict == 0)

    # --- requests ---------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return bool(self._tables)

    def turn(self, now: float) -> None:
        """Poll for requests and cancels every POLL_EVERY seconds (while snapshots run, or ``requests`` says
        some may wait); take results; start chunks."""
        if now >= self._next_poll and (self._tables or self._loose or self.requests()):
            self._next_poll = now + POLL_EVERY
            self.dc(self._poll)
        self.hold_back(self._hold if self._tables else 0.0)
        self.tables(len(self._tables))
        if self._tables or self._loose:
            self.collect()
            self._dispatch(now)
            self._progress(now)

    def _poll(self, conn: pymysql.Connection) -> None:
        self._poll_table(conn, False)
        self._poll_table(conn, True)

    def _poll_table(self, conn: pymysql.Connection, verify: bool) -> None:
        table = f"{q(self.channel)}.{VERIFY_TABLE if verify else TABLE}"
        more = ", snap_after, snap_upto, chunks_done, max_rate, with_rows" if verify else ""
        kind = "verification" if verify else "snapshot"
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, dbname, tablename, reason, state, cancel, snap_started, snap_key, snap_bound, "
                        f"snap_last, rows_done{more} FROM {table} WHERE state IN ('requested', 'running') ORDER BY id")
            rows = cur.fetchall()
            for snap_id, db, name, reason, state, cancel, started, key, bound, last, rows_done, *extra in rows:
                known = self._tables.get((verify, snap_id))
                if known is not None:
                    if cancel and known.cancel is None:
                        known.cancel = f"cancelled by 'gate {'verify' if verify else 'snapshot'} --cancel'"
                    continue
                if (verify, snap_id) in self._ended:
                    continue
                if state == "requested" and any((t.db, t.table) == (db, name) for t in self._tables.values()):
                    continue  # the table's snapshot (or verification) still ends; this one starts after it
                if state == "requested":
                    if not cur.execute(f"UPDATE {table} SET state = 'running', started_at = NOW(3) "
                                       "WHERE id = %s AND state = 'requested'", (snap_id,)):
                        continue
                    log.info("%s %d of %s.%s started (%s)", kind, snap_id, db, name, reason)
                new = _Table(snap_id, db, name, reason, bool(started), chunk_rows=self.defaults.snapshot_chunk_rows,
                             verify=verify)
                if not self.filter.passes(db, name):
                    self._refuse(cur, new.ref, f"{db}.{name} is not captured by the channel's filters: its changes "
                                 "would not follow the snapshot. Widen the filter ('gate channel filter') and request "
                                 "it again.")
                    continue
                if key is not None:  # the key it pages on, stored by its first chunk or by the request
                    new.key = json.loads(key)
                if new.key == WHOLE:
                    new.chunk_rows = self.defaults.snapshot_whole_table_rows
                if started or verify:  # a verification's narrowing starts after snap_last, up to snap_bound
                    new.bound, new.last, new.rows = decode_key(bound), decode_key(last), rows_done
                if verify:
                    after_text, upto_text, new.chunks, new.rate, with_rows = extra
                    new.after_text = None if after_text is None else json.loads(after_text)
                    new.upto_text = None if upto_text is None else json.loads(upto_text)
                    new.rate, new.images = int(new.rate or 0), bool(with_rows)
                if cancel:
                    new.cancel = f"cancelled by 'gate {'verify' if verify else 'snapshot'} --cancel'"
                self._tables[new.ref] = new

    def _refuse(self, cur: pymysql.cursors.Cursor, ref: tuple[bool, int], message: str) -> None:
        """End a snapshot (or verification) that wrote no row: its state moves at once, with the reason."""
        verify, snap_id = ref
        log.error("%s %d refused: %s", "verification" if verify else "snapshot", snap_id, message)
        cur.execute(f"UPDATE {q(self.channel)}.{VERIFY_TABLE if verify else TABLE} SET state = 'cancelled', "
                    "finished_at = NOW(3), message = %s WHERE id = %s", (message, snap_id))
        self._tables.pop(ref, None)
        self._ended.add(ref)

    def _refuse_on(self, conn: pymysql.Connection, ref: tuple[bool, int], message: str) -> None:
        with conn.cursor() as cur:
            self._refuse(cur, ref, message)

    def again(self, tables: list[tuple[str, str]], reason: str) -> None:
        """Rows of ``tables`` changed without row events: request a snapshot of each (unless one is requested
        already) at once, before a checkpoint can pass the statement, and end the one that runs (its chunks
        before the change would leave the rows it removed in the fold); the new one starts after it."""
        for snap in self._tables.values():
            if (snap.db, snap.table) in tables and snap.cancel is None and not snap.verify:
                snap.cancel = f"restarted: {reason}"
        self.dc(lambda conn: request_again(conn, self.channel, tables, reason))

    def cancel(self, db: str, table: str, reason: str) -> None:
        """The stream dropped or renamed a table: its snapshot ends as cancelled."""
        for snap in self._tables.values():
            if (snap.db, snap.table) == (db, table) and snap.cancel is None:
                snap.cancel = reason

    # --- chunks -----------------------------------------------------------------------------

    def _dispatch(self, now: float) -> None:
        for snap in list(self._tables.values()):
            if snap.cancel is not None and not snap.busy:
                self._end_cancelled(snap)
        if self.stopping or self.behind > MAX_LAG:
            return
        for snap in self._tables.values():
            if snap.busy or snap.cancel is not None or now < snap.not_before:
                continue
            if self._readers is None:
                self._readers = Readers(self.server, self.defaults)
                self._idle = list(range(self.defaults.snapshot_readers))
            if not self._idle:
                return
            number = self._idle.pop()
            snap.busy = True
            self._working[number] = snap
            self._readers.inboxes[number].put(Task(snap.snap_id, snap.db, snap.table, snap.chunk_rows, snap.last,
                                                   snap.bound, snap.key, self.rules, snap.verify, snap.images))

    def collect(self, timeout: float = 0.0) -> None:
        """Take the readers' messages: read views to judge, chunks to fill their slots with."""
        if self._readers is None:
            return
        if timeout or time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + 1.0
            self._readers.check_alive()
        outbox = self._readers.outbox
        try:
            message = outbox.get(timeout=timeout) if timeout else outbox.get_nowait()
            while True:
                if message[0] == "at":
                    _, number, gtid_pos, log_file, log_pos = message
                    self._waiting[number] = (gtid_pos, log_file, log_pos)
                    self._judge(number)
                else:
                    self._chunk(message[1], message[2])
                message = outbox.get_nowait()
        except queue.Empty:
            pass

    def _chunk(self, number: int, chunk: Chunk) -> None:
        snap = self._working.pop(number)
        self._idle.append(number)
        snap.busy = False
        slot = self._slots.pop(number, SnapshotOp())
        slot.timestamp = chunk.clock
        if self.stopping or snap.ref not in self._tables:
            slot.txns = []
            return
        if chunk.outcome == "retry":
            log.info("%s %d of %s.%s: chunk after %s read again: %s", snap.kind, snap.snap_id, snap.db, snap.table,
                     encode_key(snap.last), chunk.reason)
            snap.not_before = time.monotonic() + RETRY_AFTER
            slot.txns = []
            return
        if chunk.outcome in ("gone", "refused"):
            slot.txns = []
            if not snap.started:
                self.dc(lambda conn: self._refuse_on(conn, snap.ref, chunk.reason))
            else:
                snap.cancel = chunk.reason
                self._end_cancelled(snap)
            return
        db, name = snap.db, snap.table
        if snap.verify:
            slot.txns = [self._verified(snap, chunk)]
            return
        if chunk.key == WHOLE:  # the whole table: SNAPSHOTSTART, its rows and SNAPSHOTEND in one transaction
            slot.txns = [self._whole(snap, chunk)]
            return
        txns: list[tuple[list[Change], Note]] = []
        if not snap.started:
            snap.started, snap.key, snap.bound, snap.rows = True, chunk.key, chunk.bound, 0
            start = {"NEW": chunk.columns, "SNAPSHOT": {"id": snap.snap_id, "reason": snap.reason, "key": chunk.key}}
            txns.append(([(db, name, "SNAPSHOTSTART", dumps(start))],
                         Note(snap.snap_id, "start", key=chunk.key, bound=encode_key(chunk.bound),
                              estimate=chunk.estimate)))
        if chunk.data:
            snap.last, snap.rows = chunk.last, snap.rows + len(chunk.data)
            txns.append(([(db, name, "SNAPSHOT", data) for data in chunk.data],
                         Note(snap.snap_id, "chunk", last=encode_key(chunk.last), rows=len(chunk.data))))
            self._rows += len(chunk.data)
        snap.chunk_rows = chunk.next_rows or snap.chunk_rows
        if chunk.done:
            txns.append(self._end(snap, "done", None))
        slot.txns = txns

    def _verified(self, snap: _Table, chunk: Chunk) -> tuple[list[Change], Note]:
        """A verification's chunk: one VERIFY row with its key range, row count and checksum (and the rows, for a
        narrowing); the verification is done with its last chunk."""
        snap.started, snap.key, snap.chunks = True, chunk.key, snap.chunks + 1
        snap.rows += chunk.rows
        self._rows += chunk.rows
        upto = snap.upto_text if chunk.done else chunk.last_text
        info: dict[str, Any] = {"id": snap.snap_id, "chunk": snap.chunks, "key": chunk.key, "after": snap.after_text,
                                "upto": upto, "rows": chunk.rows, "checksum": chunk.checksum, "last": chunk.done,
                                "source_after": json.loads(encode_key(snap.last) or "null"),
                                "source_upto": json.loads(encode_key(snap.bound if chunk.done else chunk.last)
                                                          or "null")}
        payload: dict[str, Any] = {"VERIFY": info}
        if snap.images:
            payload["ROWS"] = [json.loads(text)["NEW"] for text in chunk.data]
        if chunk.last_text is not None:
            snap.after_text, snap.last = chunk.last_text, chunk.last
        state = "done" if chunk.done else None
        if chunk.done:
            self._tables.pop(snap.ref, None)
            self._ended.add(snap.ref)
            log.info("verification %d of %s.%s read: %d rows in %d chunks", snap.snap_id, snap.db, snap.table,
                     snap.rows, snap.chunks)
        elif snap.rate:  # the cap on the source's load: the next chunk waits its rows' share of a second
            snap.not_before = time.monotonic() + chunk.rows / snap.rate
        note = Note(snap.snap_id, "verify", key=chunk.key, last=encode_key(snap.last), rows=chunk.rows, state=state,
                    estimate=chunk.estimate, after=None if snap.after_text is None else json.dumps(snap.after_text))
        return [(snap.db, snap.table, "VERIFY", dumps(payload))], note

    def _whole(self, snap: _Table, chunk: Chunk) -> tuple[list[Change], Note]:
        """A table read whole in one read view as one transaction, so that the checkpoint passes all of it
        or none: a killed gate reads it again from the start."""
        snap.started, snap.key, snap.rows = True, [], len(chunk.data)
        self._rows += len(chunk.data)
        start = {"NEW": chunk.columns, "SNAPSHOT": {"id": snap.snap_id, "reason": snap.reason, "key": WHOLE}}
        end, _note = self._end(snap, "done", None)
        changes = [(snap.db, snap.table, "SNAPSHOTSTART", dumps(start)),
                   *((snap.db, snap.table, "SNAPSHOT", data) for data in chunk.data), *end]
        return changes, Note(snap.snap_id, "whole", key=WHOLE, rows=len(chunk.data), state="done",
                             estimate=chunk.estimate)

    def _end(self, snap: _Table, state: str, reason: str | None) -> tuple[list[Change], Note]:
        self._tables.pop(snap.ref, None)
        self._ended.add(snap.ref)
        end = {"SNAPSHOT": {"id": snap.snap_id, "rows": snap.rows, "state": state, "reason": reason}}
        log.info("snapshot %d of %s.%s %s: %d rows%s", snap.snap_id, snap.db, snap.table, state, snap.rows,
                 f" ({reason})" if reason else "")
        return [(snap.db, snap.table, "SNAPSHOTEND", dumps(end))], Note(snap.snap_id, "end", state=state,
                                                                            reason=reason)

    def _end_cancelled(self, snap: _Table) -> None:
        reason = snap.cancel or "cancelled"
        if not snap.started or snap.verify:  # a verification's chunks need no end row
            self.dc(lambda conn: self._refuse_on(conn, snap.ref, reason))
            return
        op = SnapshotOp([self._end(snap, "cancelled", reason)], int(time.time()))
        if self.in_txn:
            self._loose.append(op)
        else:
            self.place(op, None)

    def abandon(self) -> None:
        """Stopping: slots still waiting for rows number nothing (the next run reads those chunks again)."""
        self.stopping = True
        for slot in self._slots.values():
            slot.txns = []
        self._slots.clear()
        self._waiting.clear()

    def close(self) -> None:
        self.abandon()
        if self._readers is not None:
            self._readers.close()
            self._readers = None

    def _progress(self, now: float) -> None:
        if now - self._logged_at >= 10.0 and self._rows != self._rows_logged:
            rate = (self._rows - self._rows_logged) / (now - self._logged_at)
            log.info("snapshot: %d rows read in this run (%.0f rows/s), %d table(s) left", self._rows, rate,
                     len(self._tables))
            self._rows_logged, self._logged_at = self._rows, now


