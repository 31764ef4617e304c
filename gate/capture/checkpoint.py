"""Checkpointer: moves transfer_checkpoint to the end of the longest committed prefix of whole
transactions, with the matching resume state, in one DC transaction.

Chunks are numbered in the order the sequencer filled them. A chunk may carry transaction
boundaries (the id, tid and binlog position right after a transaction). Once every chunk up to and
including a chunk is committed by the writers, that chunk's last boundary may become the checkpoint.
A chunk also names the XA transactions whose outcome (commit or rollback) it passes: their stored
prepared changes are deleted in the transaction that moves the checkpoint past it, and the snapshot
progress notes a chunk's boundary carries are stored in it, as is the removal of ``stuck_row`` notes an
earlier run left for rows the checkpoint passes.

The reading thread records chunks (:meth:`Checkpointer.add`, :meth:`Checkpointer.committed`) while the
pipeline's control thread stores the checkpoint (:meth:`Checkpointer.write`, its DC work in one function
and one round trip); a lock keeps the two apart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import pymysql

from gate.capture.failover import clear_marker
from gate.capture.holder import Fence
from gate.capture.snapshot import Note, record
from gate.capture.writer import forget_stuck
from gate.capture.xa import forget
from gate.common.dc import ResumeState, in_one_round_trip, write_resume
from gate.common.retry import is_transient

log = logging.getLogger(__name__)


@dataclass
class _Chunk:
    seq: int
    boundary: ResumeState | None
    resolved: list[str]
    notes: list[Note]
    committed: bool = False


@dataclass
class Checkpointer:
    channel: str
    state: ResumeState
    interval: float = 0.1
    marker_pending: bool = False  # a switch's dedupe marker goes with the first checkpoint on the new source
    stuck: list[int] = field(default_factory=list)  # ids of stuck_row notes above the checkpoint, left by a killed run
    fence: Fence | None = None  # checked first in each checkpoint's transaction (see gate.capture.holder)
    _chunks: deque[_Chunk] = field(default_factory=deque)
    _index: dict[int, _Chunk] = field(default_factory=dict)
    _target: ResumeState | None = None
    _resolved: list[str] = field(default_factory=list)  # xids resolved at or below _target
    _notes: list[Note] = field(default_factory=list)  # snapshot progress at or below _target
    _written_at: float = 0.0  # when the last checkpoint write began (when a failed one ended)
    _moved: threading.Event = field(default_factory=threading.Event)  # a new boundary became reachable
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the reading thread's records, the writes

    def add(self, seq: int, boundary: ResumeState | None, has_rows: bool, resolved: list[str] | None = None,
            notes: list[Note] | None = None) -> None:
        """Record a dispatched chunk; one without rows counts as committed at once."""
        chunk = _Chunk(seq, boundary, resolved or [], notes or [], committed=not has_rows)
        with self._lock:
            self._chunks.append(chunk)
            self._index[seq] = chunk
            self._advance()

    def committed(self, seqs: list[int]) -> None:
        if not seqs:
            return
        with self._lock:
            for seq in seqs:
                self._index.pop(seq).committed = True
            self._advance()

    def _advance(self) -> None:
        while self._chunks and self._chunks[0].committed:
            chunk = self._chunks.popleft()
            self._index.pop(chunk.seq, None)
            if chunk.boundary is not None:
                self._target = chunk.boundary
                self._moved.set()
            self._resolved.extend(chunk.resolved)
            self._notes.extend(chunk.notes)

    def resolving(self, xid: str) -> bool:
        """Whether the stored changes of ``xid`` still wait for a checkpoint to delete them."""
        with self._lock:
            return xid in self._resolved or any(xid in chunk.resolved for chunk in self._chunks)

    @property
    def pending(self) -> int:
        return len(self._chunks)

    @property
    def target(self) -> ResumeState | None:
        """The newest boundary every chunk up to which is committed, not yet stored."""
        return self._target

    def due(self) -> bool:
        return self._target is not None and time.monotonic() - self._written_at >= self.interval

    def wait_due(self, stop: threading.Event) -> bool:
        """Wait until a checkpoint is due (True) or ``stop`` is set (False): as soon as a new boundary is
        reachable, but at most one write begun per ``interval``; a write that takes longer than that (a long round
        trip to the DC) is followed at once by the next, not a poll later."""
        while not stop.is_set():
            if self._target is not None:
                left = self._written_at + self.interval - time.monotonic()
                if left <= 0:
                    return True
                stop.wait(left)
            else:
                self._moved.wait(self.interval)
                self._moved.clear()
        return False

    def write(self, conn: pymysql.Connection) -> bool:
        """Store the newest reachable boundary in one DC transaction, sent in one round trip (``conn`` takes
        multi-statement queries); False (retried later) if the DC connection broke. Any other error of the
        DC is raised. With a fence, its check goes first in the same query (see gate.capture.holder.guard)."""
        with self._lock:
            target, resolved, notes = self._target, self._resolved[:], self._notes[:]
        if target is None:
            return True
        begun = time.monotonic()
        marker = self.marker_pending
        passed = [row_id for row_id in self.stuck if row_id <= target.id]

        def statements(cur: pymysql.cursors.Cursor) -> None:
            write_resume(cur, self.channel, target)
            forget(cur, self.channel, resolved)
            record(cur, self.channel, notes)
            if marker:
                clear_marker(cur, self.channel)
            if passed:
                forget_stuck(cur, self.channel, passed)

        try:
            in_one_round_trip(conn, statements, None if self.fence is None else self.fence.guard())
        except pymysql.err.MySQLError as exc:
            self._written_at = time.monotonic()
            if self.fence is not None:
                self.fence.deposed(conn, exc)
            if not is_transient(exc):
                raise  # the pipeline stops on it, naming the DC server
            log.warning("checkpoint not stored, DC unreachable (%s); retrying", exc)
            return False
        with self._lock:
            self.state = target
            del self._resolved[:len(resolved)]
            del self._notes[:len(notes)]
            self.marker_pending = False
            self.stuck = [row_id for row_id in self.stuck if row_id > target.id]
            if self._target is target:
                self._target = None
            self._written_at = begun
        return True
