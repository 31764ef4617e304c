"""Ordering: puts decoded row events back in binlog order with everything between them, and numbers them.

The reader's process sends row events to decoder processes in jobs, and jobs finish in any order.
Everything else the binlog carries (a transaction's start and end, DDL statements) waits here, in
binlog order, in a queue of operations behind the row events read before it. The queue is applied
from its front, only as far as its row events are decoded: that numbers the rows (the sequencer),
cuts them into chunks for the writers and marks each transaction's end for the checkpointer,
exactly as if every event had been decoded where it was read.

This is the one place where ids, tids and checkpoint boundaries meet binlog order. Its rules:

- a chunk's rows are in id order, and chunk numbers follow id order;
- a boundary (the id, tid and binlog position after a transaction) is attached to the chunk that
  holds the transaction's last row, or to the next chunk when it has none, never to an earlier one;
- a chunk is emitted when a row event brings it to ``batch_rows`` rows or more, or at a transaction's end once its first
  row has waited ``flush_after`` seconds, or when the caller flushes (the source is idle, or stop);
- a snapshot chunk (:class:`~gate.capture.snapshot.SnapshotOp`) is a slot the snapshot engine puts
  between two transactions, at the binlog position its read view shows; the queue waits at it until
  the chunk's rows arrive, then numbers each of its transactions (SNAPSHOTSTART, the rows,
  SNAPSHOTEND) with a tid of its own, followed by a boundary at the binlog position of the last one
  that carries the chunk's progress notes to the checkpointer;
- the changes of an XA PREPARE group are not numbered: they go to a store (:class:`PreparedChanges`)
  before the group's boundary, and come back at the XA COMMIT, numbered there as one transaction; the
  chunk that holds an XA outcome (COMMIT or ROLLBACK) lists its xid, so that the checkpoint that
  passes it can delete the stored changes.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Protocol

from gate.capture.decoder import Job
from gate.capture.libshim import StreamFormat
from gate.capture.reader import Commit, Position, Rows
from gate.capture.sequencer import DCRow, Sequencer
from gate.capture.snapshot import Note, SnapshotOp
from gate.capture.translate import Change, Decoded
from gate.common.columns import ColumnRule
from gate.common.dc import ResumeState

FLUSH_AFTER = 0.02  # seconds a chunk (or a decoder job) may wait for more rows once a transaction has ended
JOB_BYTES = 256 * 1024  # bytes of raw row events per decoder job, at most (plus one event)
SNAPSHOT_BATCH_FACTOR = 10  # a snapshot chunk's rows go to the writers in batches of up to this x batch_rows ...
SNAPSHOT_BATCH_BYTES = 8 << 20  # ... of about this many bytes of data at most (fewer, larger DC transactions:
# measured, the writers' CPU per row fell by about a third at 10,000-row batches against 1,000)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RowsOp:
    """The ``index``-th row event of ``job``: its rows, once decoded."""

    job: Job
    index: int
    timestamp: int


@dataclass(slots=True)
class BeginOp:
    """A transaction starts: its first row takes a new tid. ``xid`` when it is an XA PREPARE group."""

    xid: str | None


@dataclass(slots=True)
class CommitOp:
    """A transaction ended; reading resumes at ``position`` after it."""

    position: Position
    timestamp: int
    xa: tuple[str, str] | None  # ("PREPARE" | "COMMIT" | "ROLLBACK", xid) when the group was an XA step


@dataclass(slots=True)
class StatementOp:
    """A DDL statement's row, translated when it was read."""

    change: Change
    timestamp: int


Op = RowsOp | BeginOp | CommitOp | StatementOp | SnapshotOp


class Decoding(Protocol):
    """What the ordering needs of the decoder pool."""

    def submit(self, job: Job) -> None: ...

    def collect(self, timeout: float = 0.0) -> None: ...


class PreparedChanges(Protocol):
    """Where the changes of prepared XA transactions wait for their outcome (kept across restarts)."""

    def prepare(self, xid: str) -> None:
        """A PREPARE group of ``xid`` starts: remove what is stored under it."""

    def store(self, xid: str, first_seq: int, changes: list[tuple[Change | Decoded, int]]) -> None:
        """Store (change, source time) pairs as seq ``first_seq`` on (storing again changes nothing)."""

    def read(self, xid: str, after_seq: int, limit: int) -> list[tuple[int, Change]]:
        """The next stored (seq, change) pairs of ``xid`` after ``after_seq``, in order."""


Emit = Callable[[int, list[DCRow], ResumeState | None, list[str], list[Note]], None]
"""Receives each chunk: its number, its rows (possibly none), the last transaction boundary in it, the
xids of the XA outcomes it holds and the snapshot progress notes its boundary passes."""


class Ordering:
    """Items in binlog order in (:meth:`rows`, :meth:`begin`, :meth:`commit`, :meth:`statement`),
    numbered chunks with their boundaries out, through ``emit``."""

    def __init__(self, sequencer: Sequencer, instance: str, decoders: Decoding, emit: Emit, batch_rows: int,
                 prepared: PreparedChanges, job_format: Callable[[Any], StreamFormat] = attrgetter("format"),
                 flush_after: float = FLUSH_AFTER, job_bytes: int = JOB_BYTES, start: ResumeState | None = None,
                 snapshots: Callable[[float], None] = lambda timeout: None) -> None:
        self.sequencer = sequencer
        self.instance = instance
        self.decoders = decoders
        self.emit = emit
        self.batch_rows = batch_rows
        self.job_format = job_format
        self.flush_after = flush_after
        self.job_bytes = job_bytes
        self.prepared = prepared
        self._ops: deque[Op] = deque()
        self._queued: deque[float] = deque()  # when each op of _ops was queued
        self.hold_back = 0.0  # seconds an op stays queued before it is applied (while snapshots run)
        self._job: Job | None = None  # the job being filled, not yet sent
        self._jobs = 0
        self._rows: list[DCRow] = []
        self._open_at: int | None = None  # where in _rows the transaction applied without its end yet starts
        self._boundary: ResumeState | None = None
        self._chunks = 0
        self._chunk_since = time.monotonic()
        self._resolved: list[str] = []  # xids whose outcome the chunk being filled holds
        self._xid: str | None = None  # the XA PREPARE group being applied
        self._unstored: list[tuple[Change | Decoded, int]] = []  # its changes not stored yet, with their source time
        self._stored = 0  # how many of its changes are stored
        self.rules: tuple[ColumnRule, ...] = ()  # the column rules new jobs carry to the decoders
        self._last = start or ResumeState()  # the last boundary applied: where a snapshot chunk's boundary points
        self._notes: list[Note] = []  # snapshot progress that goes with the chunk being filled
        self.snapshots = snapshots  # waits up to the given seconds for snapshot chunks' rows to arrive

    def set_rules(self, rules: tuple[ColumnRule, ...]) -> None:
        """Column rules for the row events read from now on (the job being filled goes with the old ones)."""
        if rules != self.rules:
            self._send()
            self.rules = rules

    @property
    def waiting(self) -> int:
        """Operations not applied yet."""
        return len(self._ops)

    # --- input, in binlog order ---------------------------------------------------------------

    def rows(self, item: Rows, stream: Any) -> None:
        """A captured row event read from ``stream``. A job holds the events of one format: another binlog
        file (whose checksum setting may differ) or a new stream after a reconnect starts a new job."""
        fmt = self.job_format(stream)
        if self._job is not None and self._job.fmt is not fmt:
            self._send()
        if self._job is None:
            self._jobs += 1
            self._job = Job(self._jobs, fmt, rules=self.rules)
        self._push(RowsOp(self._job, self._job.add(item), item.event.timestamp))
        if self._job.nbytes >= self.job_bytes:
            self._send()

    def begin(self, xid: str | None = None) -> None:
        self._push(BeginOp(xid))

    def commit(self, item: Commit) -> None:
        self._push(CommitOp(item.position, item.timestamp, item.xa))
        if self._job is not None and time.monotonic() - self._job.started >= self.flush_after:
            self._send()

    def statement(self, change: Change, timestamp: int) -> None:
        self._push(StatementOp(change, timestamp))

    def _push(self, op: Op) -> None:
        self._ops.append(op)
        self._queued.append(time.monotonic())

    def snapshot(self, op: SnapshotOp, after: Callable[[Position], bool] | None = None) -> bool:
        """A snapshot chunk's slot, between two transactions (its rows may come later): at the end, or right
        after the newest transaction end still waiting here whose position satisfies ``after``, before
        what was read since (False when there is none: its place has been numbered already)."""
        if after is None:
            self._push(op)
            return True
        ops = self._ops
        for at in range(len(ops) - 1, -1, -1):
            candidate = ops[at]
            if type(candidate) is CommitOp and after(candidate.position):
                at += 1
                while at < len(ops) and type(ops[at]) is SnapshotOp:
                    at += 1  # after the slots placed at this position before: a table's chunks stay in order
                ops.insert(at, op)
                self._queued.insert(at, self._queued[at - 1])
                return True
        return False

    # --- output --------------------------------------------------------------------------------

    def apply(self, wait: bool = False) -> None:
        """Apply operations from the front while their rows are decoded; with ``wait``, all of them."""
        self.decoders.collect()
        ops, sequencer = self._ops, self.sequencer
        hold_until = time.monotonic() - self.hold_back if self.hold_back and not wait else 0.0
        while ops:
            op = ops[0]
            if hold_until and self._queued[0] > hold_until:
                return  # kept a moment: a snapshot chunk read at an earlier position may still go in before it
            if type(op) is RowsOp:
                decoded = op.job.result
                if decoded is None:
                    if not wait:
                        return
                    if op.job is self._job:
                        self._send()
                    self.decoders.collect(timeout=0.5)
                    continue
                if self._xid is not None:
                    self._unstored.extend((change, op.timestamp) for change in decoded[op.index])
                    if len(self._unstored) >= self.batch_rows:
                        self._store_prepared()
                else:
                    self._number(decoded[op.index], op.timestamp)
            elif type(op) is BeginOp:
                self._open_at = len(self._rows)
                sequencer.begin()
                if op.xid is not None:
                    if op.xid in self._resolved:  # its earlier use is resolved in this chunk: emit it first
                        self.flush()
                    self.prepared.prepare(op.xid)
                self._xid, self._unstored, self._stored = op.xid, [], 0
            elif type(op) is CommitOp:
                self._open_at = None
                if op.xa is not None:
                    self._xa_step(*op.xa, op.timestamp)
                pos = op.position
                self._boundary = self._last = ResumeState(sequencer.id, sequencer.tid, pos.log_file, pos.log_pos,
                                                          pos.gtid_pos, self.instance, op.timestamp)
                if time.monotonic() - self._chunk_since >= self.flush_after:
                    self.flush()
                    self._chunk_since = time.monotonic()
            elif type(op) is SnapshotOp:
                if op.txns is None:
                    if not wait:
                        return
                    self.snapshots(0.5)
                    continue
                self._snapshot_chunk(op.txns, op.timestamp)
            else:
                assert type(op) is StatementOp
                self._rows.extend(sequencer.number([op.change], op.timestamp))
            ops.popleft()
            self._queued.popleft()

    def flush(self) -> None:
        """Emit the rows and boundary gathered so far as a chunk (nothing when there are neither)."""
        if not self._rows and self._boundary is None:
            return
        self._chunks += 1
        rows, boundary, resolved, notes = self._rows, self._boundary, self._resolved, self._notes
        self._rows, self._boundary, self._resolved, self._notes = [], None, [], []
        if self._open_at is not None:
            self._open_at = 0
        self.emit(self._chunks, rows, boundary, resolved, notes)

    def drain(self, whole_transactions: bool = False) -> None:
        """Apply every operation and emit the last chunk: all that was read is now numbered. With
        ``whole_transactions`` (gate stopping), a transaction read without its end is left out, as far as
        its rows are still here: its rows would lie above the last boundary, and the next run reads it
        again from that boundary."""
        if whole_transactions:
            ops = self._ops
            while ops and type(ops[-1]) in (RowsOp, StatementOp, BeginOp):
                self._queued.pop()
                if type(ops.pop()) is BeginOp:
                    break
        self.apply(wait=True)
        if whole_transactions and self._open_at is not None:
            del self._rows[self._open_at:]
            self._open_at = None
        self.flush()

    def _number(self, changes: Sequence[Change | Decoded], timestamp: int) -> None:
        if not self._rows:
            self._chunk_since = time.monotonic()
        self._rows.extend(self.sequencer.number(changes, timestamp))
        if len(self._rows) >= self.batch_rows:
            self.flush()

    def _snapshot_chunk(self, txns: list[tuple[list[Change], Note]], timestamp: int) -> None:
        """Number a snapshot chunk's transactions, each with a tid of its own, then a boundary at the last
        binlog position (the chunk lies between two transactions) that carries their notes."""
        if not txns:
            return
        for changes, _note in txns:
            self.sequencer.begin()
            step = self.batch_rows
            if len(changes) > step:  # rows of one table, of about the same size
                average = sum(len(change[3]) for change in changes) // len(changes) + 1
                step = max(step, min(step * SNAPSHOT_BATCH_FACTOR, SNAPSHOT_BATCH_BYTES // average))
            for at in range(0, len(changes), step):
                self._number(changes[at:at + step], timestamp)
        self.sequencer.begin()
        self._notes.extend(note for _changes, note in txns)  # with the boundary, never before it
        self._boundary = self._last = self._last.moved(id=self.sequencer.id, tid=self.sequencer.tid)

    def _store_prepared(self) -> None:
        if self._unstored:
            assert self._xid is not None
            self.prepared.store(self._xid, self._stored + 1, self._unstored)
            self._stored, self._unstored = self._stored + len(self._unstored), []

    def _xa_step(self, action: str, xid: str, timestamp: int) -> None:
        """PREPARE stores the group's changes; COMMIT numbers the stored ones as one transaction (the
        commit's); COMMIT and ROLLBACK are listed as resolved in the chunk."""
        if self._xid == xid:  # the end of the first phase (or, on MySQL, a one-phase commit)
            self._store_prepared()
        self._xid = None
        if action == "PREPARE":
            return
        if action == "COMMIT":
            seq = 0
            while batch := self.prepared.read(xid, seq, self.batch_rows):
                seq = batch[-1][0]
                self._number([change for _seq, change in batch], timestamp)
                if len(batch) < self.batch_rows:
                    break  # the last batch: no read that finds nothing (only gate writes the table)
            if not seq:
                log.info("XA COMMIT %s: no stored changes (its tables are filtered out, or its XA PREPARE lies "
                         "before the channel's start position, or 'gate channel skip' skipped it)", xid)
        self._resolved.append(xid)

    def _send(self) -> None:
        if self._job is not None:
            self.decoders.submit(self._job)
            self._job = None
