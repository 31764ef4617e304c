"""Retention of transfer_data: remove the oldest rows once every registered consumer has read them and
they are older than the channel's ``retain_days``, so that a channel can run for months.

The bound: rows with ``id <= B`` may go, B = min(checkpoint, every cursor in ``gate_consumer``), lowered
to the last row older than ``retain_days`` (walking up by id from the oldest kept row: ids stay
contiguous from the oldest kept row to the checkpoint) and to the end of a whole source transaction.
Removal is by primary-key range, ascending, in batches of :data:`PURGE_BATCH` rows, one DC transaction
each, which first moves ``gate_meta.purged_through`` to the batch's end (readers compare their cursor
with it); after each batch it pauses :data:`PURGE_PAUSE` times as long as the batch took (pt-archiver's
way), so that removing a large backlog takes at most half of what the DC can do. The session runs at
READ COMMITTED: a range DELETE then locks only the rows it removes, no gap or supremum, so the writers'
INSERTs above the checkpoint and the checkpoint's UPDATE never wait for it.

A consumer is *stale* when its cursor is behind the checkpoint and has not moved for longer than the
channel's ``consumer_max_idle_days``: it is reported (log, ``gate status``, metrics), never removed; it
keeps pinning the bound until ``gate consumer drop`` forgets it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pymysql

from gate.capture.holder import Fence, tag_session
from gate.common.config import ChannelDefaults, ServerConfig
from gate.common.dc import PURGED_KEY, connect, one_row, purged_through, q, read_settings
from gate.common.errors import GateError
from gate.common.retry import raise_unless_transient

log = logging.getLogger(__name__)

PURGE_BATCH = 5000  # rows per DELETE: short transactions, few undo records each (see scripts/bench/retention.py)
PURGE_PAUSE = 1.0  # after each batch, wait this many times as long as it took: the DC keeps room for the writers
DAY = 86_400.0


@dataclass(frozen=True)
class ConsumerInfo:
    """One row of gate_consumer, judged against the checkpoint and the idle limit."""

    name: str
    cursor_id: int
    cursor_tid: int
    moved_at: float  # Unix time of the cursor's last move (gate_consumer.updated_at)
    idle_seconds: float  # the DC clock now minus moved_at
    behind: int  # rows between the cursor and the checkpoint
    stale: bool

    def as_row(self) -> dict[str, object]:
        return {"name": self.name, "cursor_id": self.cursor_id, "cursor_tid": self.cursor_tid,
                "last_move_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.moved_at)),
                "rows_behind": self.behind, "stale": self.stale}


def read_consumers(cur: pymysql.cursors.Cursor, channel: str, checkpoint_id: int,
                   max_idle_days: float) -> list[ConsumerInfo]:
    """Every registered consumer, by name."""
    cur.execute(f"SELECT name, id, tid, UNIX_TIMESTAMP(updated_at), UNIX_TIMESTAMP(NOW(3)) - UNIX_TIMESTAMP(updated_at) "
                f"FROM {q(channel)}.gate_consumer ORDER BY name")
    found = []
    for name, id_, tid, moved_at, idle in cur.fetchall():
        behind = max(0, checkpoint_id - int(id_))
        found.append(ConsumerInfo(name, int(id_), int(tid), float(moved_at), float(idle), behind,
                                  behind > 0 and float(idle) > max_idle_days * DAY))
    return found


@dataclass(frozen=True)
class Plan:
    """What retention may remove now, and what holds it back."""

    channel: str
    retain_days: int
    checkpoint: int
    purged_through: int
    bound: int  # rows with id <= bound may go
    pinned_by: str
    consumers: list[ConsumerInfo]

    @property
    def removable(self) -> int:
        """Rows a purge would remove now (ids are gap-free up to the checkpoint)."""
        return self.bound - self.purged_through

    @property
    def oldest_kept_id(self) -> int:
        return self.purged_through + 1


def plan(conn: pymysql.Connection, channel: str, defaults: ChannelDefaults) -> Plan:
    """The bound of ``channel``'s retention now, from its checkpoint, consumers and ``retain_days``."""
    days = defaults.retain_days
    with conn.cursor() as cur:
        cur.execute(f"SELECT id FROM {q(channel)}.transfer_checkpoint")
        checkpoint = int(one_row(cur)[0])
        purged = purged_through(conn, channel)
        consumers = read_consumers(cur, channel, checkpoint, defaults.consumer_max_idle_days)
        if not days:
            return Plan(channel, days, checkpoint, purged, purged, "retention off (retain_days 0)", consumers)
        bound, pinned = checkpoint, f"the checkpoint (id {checkpoint})"
        for consumer in sorted(consumers, key=lambda c: c.cursor_id):
            if consumer.cursor_id < bound:
                bound, pinned = consumer.cursor_id, f"consumer '{consumer.name}' (cursor id {consumer.cursor_id})"
        if bound > purged:
            cur.execute(f"SELECT id FROM {q(channel)}.transfer_data FORCE INDEX (PRIMARY) WHERE id > %s AND id <= %s "
                        "AND create_time >= NOW() - INTERVAL %s DAY ORDER BY id LIMIT 1", (purged, bound, days))
            young = cur.fetchone()
            if young is not None:
                bound, pinned = int(young[0]) - 1, f"retain_days {days} (row {young[0]} is newer than {days} days)"
        if purged < bound < checkpoint:
            bound = _transaction_start(cur, channel, purged, bound)
    return Plan(channel, days, checkpoint, purged, max(bound, purged), pinned, consumers)


def _transaction_start(cur: pymysql.cursors.Cursor, channel: str, purged: int, bound: int) -> int:
    """``bound`` lowered to the end of a whole transaction, so that the kept rows start with one."""
    cur.execute(f"SELECT tid FROM {q(channel)}.transfer_data WHERE id = %s", (bound + 1,))
    following = one_row(cur)[0]
    cur.execute(f"SELECT id FROM {q(channel)}.transfer_data WHERE id > %s AND id <= %s AND tid < %s "
                "ORDER BY id DESC LIMIT 1", (purged, bound, following))
    row = cur.fetchone()
    return int(row[0]) if row else purged


def purge(conn: pymysql.Connection, channel: str, bound: int, on_batch: Callable[[int, int], None] | None = None,
          stopping: threading.Event | None = None, pause: float = PURGE_PAUSE, fence: Fence | None = None) -> int:
    """Remove rows up to ``bound`` in ascending batches of PURGE_BATCH rows, each one DC transaction that
    moves purged_through first, each followed by a pause of ``pause`` times its duration; returns how many
    rows went. ``on_batch(purged_through, rows)`` follows each batch; ``stopping`` ends the work between
    two batches; ``fence`` (gate run's) is checked first in each batch's transaction."""
    removed = 0
    halt = stopping or threading.Event()
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.execute(f"INSERT IGNORE INTO {q(channel)}.gate_meta (name, value) VALUES (%s, '0')", (PURGED_KEY,))
        while not halt.is_set():
            began = time.monotonic()
            conn.begin()
            if fence is not None:
                fence.check(cur)
            cur.execute(f"SELECT value FROM {q(channel)}.gate_meta WHERE name = %s FOR UPDATE", (PURGED_KEY,))
            start = int(one_row(cur)[0])
            end = min(bound, start + PURGE_BATCH)
            if end <= start:
                conn.rollback()
                break
            cur.execute(f"UPDATE {q(channel)}.gate_meta SET value = %s WHERE name = %s", (str(end), PURGED_KEY))
            rows = cur.execute(f"DELETE FROM {q(channel)}.transfer_data WHERE id > %s AND id <= %s", (start, end))
            conn.commit()
            removed += rows
            if on_batch is not None:
                on_batch(end, rows)
            halt.wait(pause * (time.monotonic() - began))
    return removed


@dataclass
class RetentionFigures:
    """What gate run's retention reports to /metrics; every figure starts at 0."""

    purged_through: int = 0
    oldest_kept_id: int = 0
    removed_total: int = 0
    errors_total: int = 0
    last_run: float = 0.0  # Unix time the last pass ended without error
    consumers: list[ConsumerInfo] = field(default_factory=list)

    def removed(self, purged: int, rows: int) -> None:
        self.purged_through, self.oldest_kept_id = purged, purged + 1
        self.removed_total += rows


class Retainer:
    """gate run's retention: a daemon thread with its own DC connection that every
    ``retention_interval_seconds`` reads the consumers (stale ones are logged once as they turn stale) and,
    when the channel has a ``retain_days``, removes what :func:`plan` allows."""

    def __init__(self, dc: ServerConfig, channel: str, figures: RetentionFigures,
                 on_fatal: Callable[[GateError], None] = lambda exc: None, fence: Fence | None = None) -> None:
        self.dc = dc
        self.fence = fence
        self.channel = channel
        self.figures = figures
        self.on_fatal = on_fatal  # told the error that stops gate; the thread ends
        self._stopping = threading.Event()
        self._conn: pymysql.Connection | None = None
        self._stale: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="gate-retention", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the batch in hand (a batch is one short DC transaction)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        interval = ChannelDefaults.retention_interval_seconds
        while not self._stopping.is_set():
            try:
                interval = self.run_once() or interval
            except GateError as exc:
                self.on_fatal(exc)
                return
            self._stopping.wait(interval)

    def run_once(self) -> float | None:
        """One pass; returns the channel's interval (None when the pass failed before reading it). An error
        of the DC that is not transient (a privilege revoked, the channel dropped) is raised: gate stops."""
        try:
            if self._conn is None:
                self._conn = connect(self.dc, "DC", self.channel)
                tag_session(self._conn, self.channel)
            defaults = read_settings(self._conn, self.channel).defaults
            found = plan(self._conn, self.channel, defaults)
            self._report(found, defaults)
            if found.removable > 0:
                removed = purge(self._conn, self.channel, found.bound, self.figures.removed, self._stopping,
                                fence=self.fence)
                log.info("channel %s: retention removed %d rows, now up to id %d (bound: %s)", self.channel,
                         removed, self.figures.purged_through, found.pinned_by)
            self.figures.last_run = time.time()
            return defaults.retention_interval_seconds
        except Exception as exc:  # noqa: BLE001 (any failure is counted; a transient one is retried at the next pass)
            self.figures.errors_total += 1
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if isinstance(exc, (GateError, pymysql.err.MySQLError)):
                raise_unless_transient(exc, "DC", self.dc, "retention's statements (the DELETE of old rows from "
                                       "transfer_data, gate_meta's purged_through, the consumers)", self.channel)
            log.error("channel %s: retention pass failed (%s); retrying at the next pass", self.channel, exc)
            return None

    def _report(self, found: Plan, defaults: ChannelDefaults) -> None:
        figures = self.figures
        figures.purged_through, figures.oldest_kept_id = found.purged_through, found.oldest_kept_id
        figures.consumers = found.consumers
        stale = {c.name: c for c in found.consumers if c.stale}
        for name in sorted(stale.keys() - self._stale):
            c = stale[name]
            log.warning("channel %s: consumer '%s' has not moved for %.1f days (limit %g) and is %d rows behind the "
                        "checkpoint; retention keeps every row after its cursor id %d. If it is gone, forget it "
                        "with 'gate consumer drop %s %s'.", self.channel, name, c.idle_seconds / DAY,
                        defaults.consumer_max_idle_days, c.behind, c.cursor_id, self.channel, name)
        for name in sorted(self._stale - stale.keys()):
            log.info("channel %s: consumer '%s' is no longer stale", self.channel, name)
        self._stale = set(stale)
