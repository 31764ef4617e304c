"""Who holds a channel, fenced, and the standby that waits to take it over (docs/dba/several-hosts.md).

The gate running a channel holds its named lock (``gate:CHANNEL``) on its control connection, and a row in
``gate_holder`` whose ``epoch`` grows at every start. The lock alone cannot fence: it belongs to one DC
connection, and the writers, retention and the standby sampler write on their own. So every write
transaction of those reads the epoch LOCK IN SHARE MODE first and stops with :class:`Deposed` when it is not
its own any more (a writer's chunk and a checkpoint send that read as the :func:`guard` statement of their
one multi-statement query; retention and the sampler :func:`check` it); a takeover raises the epoch with the
row locked FOR UPDATE, so it waits for the write transactions in flight and every later one sees the new
epoch.

A running gate beats its heartbeat (``gate_process.seen``, the DC's clock) every ``lease_seconds / 5``. A
standby waits for the lock (GET_LOCK with a timeout: the DC wakes it when the lock is freed); a lock freed
by a clean stop is taken at once, one freed otherwise (the holder was killed, or its connection broke, or
the DC restarted: it may come back) once the holder's heartbeat is older than ``lease_seconds``. When the
lock stays held but its holder's heartbeat is that old (its host is down, cut off, or the process
stopped), the standby ends the holder's DC connections (KILL: every connection of a running gate tags
itself with a session lock ``gate:CHANNEL:sN``, so the standby finds them) and takes the lock.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.constants import CLIENT

import dc_schema
from gate.common.config import ChannelDefaults, ServerConfig
from gate.common.dc import channel_exists, connect, lock_name, one_row, q, schema_version
from gate.common.errors import Deposed, GateError, MissingPrivileges, SchemaVersionError
from gate.common.retry import is_transient

log = logging.getLogger(__name__)

TABLES = ("gate_holder", "gate_process", "gate_takeover")
SESSION_SLOTS = 64 * 16 + 16  # session locks gate:CHANNEL:s0.. : writers (at most 64) of up to 16 lanes each (3 now)
# (writer.MAX_LANES), retention, heartbeat, sampler
BEATS_PER_LEASE = 5  # heartbeats per lease_seconds
STANDBY_SEEN = 3.0  # a standby whose heartbeat is older than this many leases is not counted
_ER_NO_SUCH_THREAD = 1094
_ER_KILL_DENIED = 1095


@dataclass(frozen=True)
class Me:
    """This gate process, as the DC's tables name it."""

    host: str
    pid: int

    @classmethod
    def here(cls) -> Me:
        return cls(socket.gethostname(), os.getpid())

    def __str__(self) -> str:
        return f"{self.host} pid {self.pid}"


def ensure_tables(cur: pymysql.cursors.Cursor, channel: str) -> None:
    """Channels created before these tables lack them."""
    cur.execute(f"USE {q(channel)}")
    for table in TABLES:
        cur.execute(dc_schema.table_ddl(table))


def tag_expression(channel: str) -> tuple[str, tuple[Any, ...]]:
    """The first try of :func:`tag_session`, for a session to send with its set-up: the slot of its
    CONNECTION_ID() modulo SESSION_SLOTS (1: taken), free unless sessions 1,040 connections apart meet."""
    return "GET_LOCK(CONCAT(%s, CONNECTION_ID() %% %s), 0)", (f"{lock_name(channel)}:s", SESSION_SLOTS)


def tag_session(conn: pymysql.Connection, channel: str, tagged: bool | None = None) -> None:
    """Take a free session lock ``gate:CHANNEL:sN``: a standby that takes the channel over finds this
    connection by it and ends it (a writer stopped in the middle of a transaction would hold its locks).
    First the slot of :func:`tag_expression` (``tagged``: its answer, when the caller sent it with its own
    query), then the others in turn: one query, or none, for a session of a writer's many (its lanes)."""
    with conn.cursor() as cur:
        if tagged is None:
            expression, args = tag_expression(channel)
            cur.execute(f"SELECT {expression}", args)
            tagged = one_row(cur)[0] == 1
        if tagged:
            return
        for slot in range(SESSION_SLOTS):
            cur.execute("SELECT GET_LOCK(%s, 0)", (f"{lock_name(channel)}:s{slot}",))
            if one_row(cur)[0] == 1:
                return
    log.warning("channel %s: all %d session locks are taken; a takeover may wait for this connection",
                channel, SESSION_SLOTS)


def deposed_message(channel: str, epoch: int, holder: tuple[int, str, int] | None) -> str:
    by = f"{holder[1]} pid {holder[2]} (epoch {holder[0]})" if holder else "no gate (the channel was reset)"
    return (f"Channel '{channel}' was taken over by {by} while this gate (epoch {epoch}) was silent for longer "
            "than lease_seconds (its host paused, cut off from the DC, or hung): this gate wrote nothing after that "
            "and stops (exit status 5; its systemd unit does not restart it). 'gate status "
            f"{channel}' shows who runs the channel now and why; once this host is sound again, start it as a "
            f"standby: 'gate run {channel} --standby'.")


def _holder_row(cur: pymysql.cursors.Cursor, channel: str, lock: str = "") -> tuple[int, str, int] | None:
    """The holder's (epoch, host, pid), read with ``lock`` (e.g. " LOCK IN SHARE MODE"); None: no row."""
    cur.execute(f"SELECT epoch, host, pid FROM {q(channel)}.gate_holder WHERE singleton = 1{lock}")
    row = cur.fetchone()
    return None if row is None else (int(row[0]), str(row[1]), int(row[2]))


def check(cur: pymysql.cursors.Cursor, channel: str, epoch: int) -> None:
    """The fence of a write transaction, its first statement: the holder's row read LOCK IN SHARE MODE (kept
    until the transaction ends, so no takeover passes it). Not ``epoch``: the transaction is rolled back and
    :class:`Deposed` raised."""
    row = _holder_row(cur, channel, " LOCK IN SHARE MODE")
    if row is None or int(row[0]) != epoch:
        cur.connection.rollback()
        raise Deposed(deposed_message(channel, epoch, row))


DEPOSED_SIGNAL = "gate: deposed (the channel has another epoch)"  # the guard's error message
_ER_SIGNAL_EXCEPTION = 1644  # a SIGNAL SQLSTATE '45000'


def guard(channel: str, epoch: int) -> str:
    """The fence as one statement, the first of a write transaction sent in one multi-statement query: it
    reads the holder's row LOCK IN SHARE MODE (kept until the transaction ends, as :func:`check`) and, when
    the epoch is not ``epoch`` (or the row is gone), raises an error (SIGNAL). The server stops a
    multi-statement query at its first error, so none of the statements after it runs, the COMMIT included:
    no round trip of its own, and nothing written when deposed (:func:`refused` tells its error)."""
    return (f"BEGIN NOT ATOMIC DECLARE e BIGINT; SELECT epoch INTO e FROM {q(channel)}.gate_holder WHERE singleton "
            f"= 1 LOCK IN SHARE MODE; IF e IS NULL OR e <> {int(epoch)} THEN SIGNAL SQLSTATE '45000' SET "
            f"MESSAGE_TEXT = '{DEPOSED_SIGNAL}'; END IF; END")


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the error of a :func:`guard` that found another epoch."""
    return (isinstance(exc, pymysql.err.MySQLError) and len(exc.args) > 1 and exc.args[0] == _ER_SIGNAL_EXCEPTION
            and exc.args[1] == DEPOSED_SIGNAL)


@dataclass(frozen=True)
class Fence:
    """A running gate's channel and epoch, which its write transactions check first: :meth:`guard` as the
    first statement of a multi-statement transaction, :meth:`check` as a query of its own."""

    channel: str
    epoch: int

    def check(self, cur: pymysql.cursors.Cursor) -> None:
        check(cur, self.channel, self.epoch)

    def guard(self) -> str:
        return guard(self.channel, self.epoch)

    def deposed(self, conn: pymysql.Connection, exc: BaseException) -> None:
        """After an error of a transaction that began with :meth:`guard` (rolled back): when the guard
        refused it, raise :class:`Deposed` naming the holder now; else return."""
        if refused(exc):
            with conn.cursor() as cur:
                row = _holder_row(cur, self.channel)
            conn.rollback()
            raise Deposed(deposed_message(self.channel, self.epoch, row)) from None


def lease_of(cur: pymysql.cursors.Cursor, channel: str) -> float:
    """The channel's lease_seconds setting."""
    cur.execute(f"SELECT value FROM {q(channel)}.gate_settings WHERE name = 'lease_seconds'")
    row = cur.fetchone()
    return float(row[0]) if row else ChannelDefaults.lease_seconds


@dataclass(frozen=True)
class HolderState:
    """The recorded holder and how long ago (DC clock) its process beat its heartbeat; None: no row."""

    epoch: int
    host: str
    pid: int
    connection: int
    silent: float | None  # seconds since its heartbeat; None: its process row is gone (a takeover removed it)
    stopped: bool  # it stopped cleanly (it releases the lock as it exits)


def holder_query(channel: str) -> tuple[str, tuple[Any, ...]]:
    """The recorded holder and its heartbeat's age (:func:`holder_from` reads the answer); its silence counts
    only while the DC server was up (after a DC restart the holder gets a whole lease to come back)."""
    return (f"SELECT h.epoch, h.host, h.pid, h.connection, LEAST(TIMESTAMPDIFF(MICROSECOND, p.seen, "
            "UTC_TIMESTAMP(6)), 1000000 * (SELECT CAST(variable_value AS UNSIGNED) FROM "
            "information_schema.global_status WHERE variable_name = 'UPTIME')), p.role = 'stopped' "
            f"FROM {q(channel)}.gate_holder h LEFT JOIN {q(channel)}.gate_process p "
            "ON p.host = h.host AND p.pid = h.pid WHERE h.singleton = 1", ())


def holder_from(rows: list[tuple[Any, ...]]) -> HolderState | None:
    """The holder of :func:`holder_query`'s answer; None: no row."""
    if not rows:
        return None
    row = rows[0]
    return HolderState(int(row[0]), row[1], int(row[2]), int(row[3]), None if row[4] is None else float(row[4]) / 1e6,
                       bool(row[5]))


def holder_state(cur: pymysql.cursors.Cursor, channel: str) -> HolderState | None:
    """The recorded holder (see :func:`holder_query`)."""
    cur.execute(*holder_query(channel))
    return holder_from(list(cur.fetchall()))


def takeover_reason(previous: HolderState | None) -> str:
    """Why a plain start holds the channel now, after ``previous``."""
    if previous is None:
        return "first run of the channel"
    if previous.stopped:
        return f"{previous.host} pid {previous.pid} had stopped cleanly"
    return (f"{previous.host} pid {previous.pid} had ended without a clean stop (its DC connection closed: killed, "
            "crashed, or its connection was ended)")


def record_takeover(cur: pymysql.cursors.Cursor, channel: str, me: Me, epoch: int, standby: bool, reason: str,
                    previous: HolderState | None) -> int:
    """The statements of a takeover to ``epoch``, in the transaction that holds the channel's lock on its
    connection; returns how many. The first, gate_holder's row replaced, waits for the previous holder's
    write transactions in flight (their fence's share lock). gate_takeover's primary key is the epoch: a
    takeover that found an epoch already taken (another gate took the channel after it was read) fails there,
    and its transaction with it."""
    cur.execute(f"REPLACE INTO {q(channel)}.gate_holder (singleton, epoch, host, pid, connection, since) "
                "VALUES (1, %s, %s, %s, CONNECTION_ID(), UTC_TIMESTAMP(6))", (epoch, me.host, me.pid))
    cur.execute(f"INSERT INTO {q(channel)}.gate_takeover (epoch, at, host, pid, standby, from_host, from_pid, "
                "reason) VALUES (%s, UTC_TIMESTAMP(6), %s, %s, %s, %s, %s, %s)",
                (epoch, me.host, me.pid, int(standby), previous and previous.host, previous and previous.pid,
                 reason))
    if previous is not None:  # not running the channel any more, whatever it does
        cur.execute(f"DELETE FROM {q(channel)}.gate_process WHERE host = %s AND pid = %s",
                    (previous.host, previous.pid))
    cur.execute(f"INSERT INTO {q(channel)}.gate_process (host, pid, role, since, seen) VALUES "
                "(%s, %s, 'active', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE role = 'active', "
                "since = UTC_TIMESTAMP(6), seen = UTC_TIMESTAMP(6)", (me.host, me.pid))
    return 4 if previous is not None else 3


def take_over(conn: pymysql.Connection, channel: str, me: Me, standby: bool,
              reason: str | None = None) -> tuple[int, str]:
    """Become the channel's holder: the caller holds its lock on ``conn``. One transaction raises the
    epoch (waiting for the previous holder's write transactions in flight), records this process as active
    and the takeover; returns the new epoch and the previous holder ('HOST pid N', '' for none). (gate run
    folds the same statements into its start-up transaction.)"""
    with conn.cursor() as cur:
        ensure_tables(cur, channel)
        conn.begin()
        cur.execute(f"SELECT epoch FROM {q(channel)}.gate_holder WHERE singleton = 1 FOR UPDATE")
        row = cur.fetchone()
        previous = holder_state(cur, channel)
        epoch = (int(row[0]) if row else 0) + 1
        reason = reason or takeover_reason(previous)
        record_takeover(cur, channel, me, epoch, standby, reason, previous)
        conn.commit()
    log_takeover(channel, me, epoch, standby, reason)
    return epoch, "" if previous is None else f"{previous.host} pid {previous.pid}"


def log_takeover(channel: str, me: Me, epoch: int, standby: bool, reason: str) -> None:
    log.log(logging.INFO if standby else logging.DEBUG, "channel %s: %s holds it now (epoch %d): %s", channel, me,
            epoch, reason)


def confirm(conn: pymysql.Connection, channel: str, epoch: int) -> None:
    """The holder's control connection was opened again (the DC restarted, a link broke) and has the lock
    again: still the holder (else :class:`Deposed`), on this connection now."""
    with conn.cursor() as cur:
        conn.begin()
        check(cur, channel, epoch)
        cur.execute(f"UPDATE {q(channel)}.gate_holder SET connection = CONNECTION_ID() WHERE singleton = 1")
        conn.commit()


def leave(conn: pymysql.Connection, channel: str, me: Me) -> None:
    """A clean stop: marked, and the channel's lock let go in the same round trip (``conn`` takes
    multi-statement queries): a standby takes over at once, naming it, and so does a gate started right
    after. Left to the connection's close, the lock would go only once the server has seen the close."""
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {q(channel)}.gate_process SET role = 'stopped', seen = UTC_TIMESTAMP(6) WHERE host = %s "
                    "AND pid = %s; DO RELEASE_LOCK(%s)", (me.host, me.pid, lock_name(channel)))
        while cur.nextset():
            pass


@dataclass(frozen=True)
class Takeover:
    epoch: int
    at: str  # UTC
    host: str
    pid: int
    standby: bool
    from_host: str | None
    from_pid: int | None
    reason: str


def takeovers(cur: pymysql.cursors.Cursor, channel: str, last: int = 10) -> list[Takeover]:
    """The channel's last starts and takeovers, oldest first (none before a gate of this version ran it)."""
    if not cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = "
                       "'gate_takeover'", (channel,)):
        return []
    cur.execute(f"SELECT epoch, at, host, pid, standby, from_host, from_pid, reason FROM {q(channel)}.gate_takeover "
                "ORDER BY epoch DESC LIMIT %s", (last,))
    return [Takeover(int(e), at.isoformat(sep=" ", timespec="milliseconds"), h, int(p), bool(s), fh,
                     None if fp is None else int(fp), r) for e, at, h, p, s, fh, fp, r in reversed(cur.fetchall())]


def processes(cur: pymysql.cursors.Cursor, channel: str, lease: float) -> list[dict[str, object]]:
    """The gate processes of the channel whose heartbeat is recent (within STANDBY_SEEN leases): host, pid,
    role (active | standby), since (UTC) and seconds since their heartbeat."""
    if not cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = "
                       "'gate_process'", (channel,)):
        return []
    cur.execute(f"SELECT host, pid, role, since, TIMESTAMPDIFF(MICROSECOND, seen, UTC_TIMESTAMP(6)) "
                f"FROM {q(channel)}.gate_process WHERE role <> 'stopped' ORDER BY role, host, pid")
    return [{"host": h, "pid": int(p), "role": r, "since": s.isoformat(sep=" ", timespec="seconds"),
             "heartbeat_age_seconds": round(age / 1e6, 1)}
            for h, p, r, s, age in cur.fetchall() if age / 1e6 <= STANDBY_SEEN * lease]


class Heartbeat:
    """The running gate's heartbeat: a thread with its own DC connection that stamps ``gate_process.seen``
    every lease / BEATS_PER_LEASE seconds and reads the epoch: another one is :class:`Deposed`, told to
    ``on_deposed``. It also counts the live standbys (``standbys``)."""

    def __init__(self, dc: ServerConfig, channel: str, me: Me, epoch: int, lease: float,
                 on_deposed: Callable[[GateError], None]) -> None:
        self.dc, self.channel, self.me, self.epoch, self.lease = dc, channel, me, epoch, lease
        self.on_deposed = on_deposed
        self.standbys = 0
        self._halt = threading.Event()
        self._conn: pymysql.Connection | None = None
        self._thread = threading.Thread(target=self._run, name="gate-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.lease)

    def beat(self) -> None:
        if self._conn is None:
            self._conn = connect(self.dc, "DC", self.channel, read_timeout=max(1, int(self.lease)))
            tag_session(self._conn, self.channel)
        with self._conn.cursor() as cur:
            cur.execute("SELECT epoch, host, pid FROM gate_holder WHERE singleton = 1")
            row = cur.fetchone()
            if row is None or int(row[0]) != self.epoch:
                raise Deposed(deposed_message(self.channel, self.epoch, row))
            cur.execute("INSERT INTO gate_process (host, pid, role, since, seen) VALUES (%s, %s, 'active', "
                        "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE seen = UTC_TIMESTAMP(6)",
                        (self.me.host, self.me.pid))
            cur.execute("SELECT COUNT(*) FROM gate_process WHERE role = 'standby' AND seen >= UTC_TIMESTAMP(6) - "
                        "INTERVAL %s MICROSECOND", (int(STANDBY_SEEN * self.lease * 1e6),))
            self.standbys = int(one_row(cur)[0])

    def _run(self) -> None:
        while not self._halt.wait(self.lease / BEATS_PER_LEASE):
            try:
                self.beat()
            except Deposed as exc:
                self.on_deposed(exc)
                return
            except (GateError, pymysql.err.Error, OSError) as exc:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                log.warning("channel %s: heartbeat not stored (%s); retrying", self.channel, exc)
        if self._conn is not None:
            self._conn.close()


def _kill(cur: pymysql.cursors.Cursor, channel: str, ids: list[int]) -> None:
    for thread in ids:
        try:
            cur.execute(f"KILL CONNECTION {int(thread)}")
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] == _ER_NO_SUCH_THREAD:
                continue
            if exc.args and exc.args[0] == _ER_KILL_DENIED:
                cur.execute("SELECT CURRENT_USER()")
                raise MissingPrivileges(
                    f"Channel '{channel}': this standby cannot end the DC connections of the silent gate holding "
                    f"the channel ({exc.args[1]}), so it cannot take over safely. Run every gate of a channel as "
                    f"the same DC user, or grant this one CONNECTION ADMIN (SUPER before MariaDB 10.5): GRANT "
                    f"CONNECTION ADMIN ON *.* TO {one_row(cur)[0]}.") from None
            raise


def end_sessions(cur: pymysql.cursors.Cursor, channel: str, holder: int) -> list[int]:
    """KILL the control connection ``holder`` and every connection tagged with a session lock of the channel;
    returns their ids."""
    names = [f"{lock_name(channel)}:s{slot}" for slot in range(SESSION_SLOTS)]
    cur.execute("SELECT " + ", ".join(["IS_USED_LOCK(%s)"] * len(names)), names)
    ids = [holder] + [int(thread) for thread in one_row(cur) if thread is not None]
    _kill(cur, channel, ids)
    return ids


def _end_leftovers(cur: pymysql.cursors.Cursor, channel: str, previous: HolderState) -> None:
    """The holder that let go of the lock without a clean stop (killed, its host down) may leave statements
    running on the DC: the server ends a connection whose client is gone only when its statement ends, and
    until then that transaction holds the fence's share lock, which the takeover waits for. End them (the
    session-tagged connections of the channel; the takeover only waits for them without the privilege)."""
    try:
        ended = end_sessions(cur, channel, previous.connection)
    except MissingPrivileges as exc:
        log.warning("channel %s: %s The takeover waits for their statements to end.", channel, exc)
        return
    if len(ended) > 1:
        log.info("channel %s: ended %d DC connections left by %s pid %d", channel, len(ended) - 1, previous.host,
                 previous.pid)


def _usable(conn: pymysql.Connection, channel: str) -> bool:
    """Whether the channel exists in a schema this gate runs (False: wait for it; other errors raise)."""
    if not channel_exists(conn, channel):
        return False
    try:
        schema_version(conn, channel)
    except SchemaVersionError:
        return False  # being created (not complete yet) or damaged: a standby waits, 'gate run' would say why
    return True


def stand_by(dc: ServerConfig, channel: str, me: Me, stopping: threading.Event,
             suspect: Callable[[], None] = lambda: None) -> tuple[pymysql.Connection, str] | None:
    """Wait, on one DC connection, until the channel has no live holder; then return that connection, holding
    the channel's lock, and why the channel is free. None: ``stopping`` was set first. ``suspect`` is called
    whenever a takeover may come soon (the lock let go without a clean stop, or the holder silent for half
    its lease), and before returning."""
    conn: pymysql.Connection | None = None
    said = ""
    reason: str | None = None

    def say(level: int, text: str) -> None:
        nonlocal said
        if text != said:
            log.log(level, "channel %s: %s", channel, text)
            said = text

    while not stopping.is_set():
        lease = ChannelDefaults.lease_seconds
        try:
            if conn is None:  # multi-statement queries: it becomes the control connection of the run
                conn = connect(dc, "DC", client_flag=CLIENT.MULTI_STATEMENTS)
            if not _usable(conn, channel):
                say(logging.WARNING, "no such channel on the DC server (not created yet, dropped, or being created); "
                    "standing by until it exists")
                stopping.wait(1.0)
                continue
            with conn.cursor() as cur:
                ensure_tables(cur, channel)
                lease = lease_of(cur, channel)
                cur.execute(f"INSERT INTO {q(channel)}.gate_process (host, pid, role, since, seen) VALUES (%s, %s, "
                            "'standby', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
                            "seen = UTC_TIMESTAMP(6)", (me.host, me.pid))
                cur.execute("SELECT GET_LOCK(%s, %s), IS_USED_LOCK(%s)",
                            (lock_name(channel), max(1, min(int(lease / 4), 5)), lock_name(channel)))
                got, used_by = one_row(cur)
                if got == 1:
                    if _usable(conn, channel):
                        previous = holder_state(cur, channel)
                        if (previous is not None and not previous.stopped and previous.silent is not None
                                and previous.silent <= lease):  # gone a moment ago: killed, or a broken link
                            cur.execute("SELECT RELEASE_LOCK(%s)", (lock_name(channel),))
                            suspect()
                            say(logging.INFO, f"{previous.host} pid {previous.pid} let go of the channel without "
                                "a clean stop; standing by until its lease runs out, should it come back")
                            stopping.wait(1.0)
                            continue
                        if reason is None and previous is not None:
                            reason = (f"{previous.host} pid {previous.pid} had stopped cleanly"
                                      if previous.stopped else
                                      f"{previous.host} pid {previous.pid} ended without a clean stop (its DC "
                                      "connection closed: killed or crashed)")
                        if previous is not None and not previous.stopped:
                            _end_leftovers(cur, channel, previous)
                        suspect()
                        return conn, reason or "no gate had run the channel"
                    cur.execute("SELECT RELEASE_LOCK(%s)", (lock_name(channel),))
                    continue
                held = holder_state(cur, channel)
                if held is None or used_by is None or int(used_by) != held.connection:
                    say(logging.INFO, "the channel's lock is held by a gate command or a starting gate; standing by")
                    continue
                if held.silent is None or held.silent > lease / 2:
                    suspect()
                if held.silent is not None and held.silent <= lease:
                    say(logging.INFO, f"standing by: {held.host} pid {held.pid} runs the channel (epoch {held.epoch})")
                    continue
                ended = end_sessions(cur, channel, held.connection)
                silent = "no heartbeat" if held.silent is None else f"no heartbeat for {held.silent:.1f} s"
                reason = (f"{held.host} pid {held.pid} was silent ({silent}, lease_seconds {lease:g}): its host is "
                          f"down, cut off from the DC, or the process stopped; its {len(ended)} DC connections "
                          "were ended")
                log.warning("channel %s: %s", channel, reason)
        except MissingPrivileges as exc:
            say(logging.ERROR, str(exc))
            stopping.wait(lease)
        except (GateError, pymysql.err.Error, OSError) as exc:
            if not is_transient(exc):
                raise
            say(logging.WARNING, f"DC unreachable ({exc}); standing by, retrying")
            if conn is not None:
                conn.close()
                conn = None
            stopping.wait(1.0)
    if conn is not None:
        try:
            with conn.cursor() as cur:
                cur.execute(f"DELETE FROM {q(channel)}.gate_process WHERE host = %s AND pid = %s", (me.host, me.pid))
        except pymysql.err.Error:
            pass
        conn.close()
    return None


@dataclass(frozen=True)
class Waited:
    """What :func:`stand_by_until_free` waited for: the DC connection holding the channel's lock and why it
    was free (:func:`stand_by`'s answer), and whether a stop signal came since."""

    held: tuple[pymysql.Connection, str]
    stopping: threading.Event


def stand_by_until_free(dc: ServerConfig, channel: str, modules: tuple[str, ...]) -> Waited | None:
    """'gate run --standby' without metrics to serve: :func:`stand_by` in the main thread, before the capture's
    ``modules`` are imported (an idle standby stays small): a thread imports them once a takeover may come
    soon (the holder silent for half its lease, or gone), so that they are loaded when it comes. SIGTERM or
    SIGINT ends the wait (None); one that comes after it, while the capture loads, is in ``stopping``."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    loader = threading.Thread(target=lambda: [importlib.import_module(name) for name in modules],
                              name="gate-capture-import", daemon=True)

    def suspect() -> None:
        if loader.ident is None:
            log.debug("channel %s: a takeover may come soon; importing the capture", channel)
            loader.start()

    found = stand_by(dc, channel, Me.here(), stopping, suspect)
    if found is None:
        log.info("channel %s: stopped while standing by", channel)
        return None
    loader.join()  # stand_by started it before it returned
    return Waited(found, stopping)
