"""``gate run`` for one channel: reader -> translate/decoders -> ordering -> sequencer -> writers -> checkpoint.

Start-up makes the DC consistent before reading: it takes the channel's lock (one gate per
channel), removes rows above the checkpoint (a crashed run may have left a partial transaction
there) and resumes the binlog at the checkpoint's transaction boundary. The same binlog from the
same boundary yields the same ids and tids, so a restart continues exactly where the DC stands.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TypeVar
from zoneinfo import ZoneInfo

import pymysql
from pymysql.constants import CLIENT

from gate.capture import snapshot, xa
from gate.capture.checkpoint import Checkpointer
from gate.capture.ddl import UNLOGGED, snapshot_tables, unlogged_tables
from gate.capture.ddl_tokens import ColumnDescriber
from gate.capture.decoder import DecoderPool
from gate.capture.failover import (
    DedupeMarker,
    Deduper,
    StandbySampler,
    marker_from,
    marker_query,
    plan_switch,
    record_source_server_id,
    without_held,
)
from gate.capture.holder import TABLES as HOLDER_TABLES
from gate.capture.holder import (
    Fence,
    Heartbeat,
    HolderState,
    Me,
    confirm,
    deposed_message,
    holder_from,
    holder_query,
    holder_state,
    leave,
    log_takeover,
    record_takeover,
    stand_by,
    takeover_reason,
)
from gate.capture.holder import ensure_tables as ensure_holder_tables
from gate.capture.metrics import MetricsServer, RunMetrics, Stage
from gate.capture.ordering import Ordering
from gate.capture.reader import (
    Begin,
    BinlogReader,
    Commit,
    Idle,
    Item,
    Position,
    Rows,
    SourceDown,
    Statement,
    current_position,
)
from gate.capture.retention import Retainer
from gate.capture.sequencer import DCRow, Sequencer
from gate.capture.snapshot import Note, SnapshotEngine
from gate.capture.stall import DcWatch
from gate.capture.stopped import StopRecord, clear_stop, record_stop, refused_transaction
from gate.capture.translate import Change, Decoded, TableFilter, Translator
from gate.capture.writer import PACKET_QUERY, DcLink, WriterPool, forget_stuck, stuck_from, stuck_query
from gate.common.columns import rule_keys
from gate.common.config import ServerConfig
from gate.common.connection import set_names
from gate.common.dc import (
    REMOVE_BATCH,
    ChannelSettings,
    ResumeState,
    Runner,
    connect,
    in_one_round_trip,
    lock_from,
    lock_query,
    migrate,
    one_row,
    q,
    read_settings,
    read_together,
    record_runner,
    remove_above_checkpoint,
    resume_from,
    resume_query,
    schema_version,
    settings_from,
    settings_query,
    table_set,
    tables_query,
    usable_version,
    version_query,
    write_resume,
)
from gate.common.errors import (
    ChannelBusy,
    ConnectionFailed,
    Deposed,
    DrainAbandoned,
    GateError,
    SchemaVersionError,
    ServerRefused,
    TransactionRefused,
    UnhandledEvent,
)
from gate.common.process import start_forkserver
from gate.common.retry import backoff, is_transient, raise_unless_transient, refusal, refusals
from gate.common.server import VERSION_QUERY, check_mariadb, require_mariadb

log = logging.getLogger(__name__)

PROGRESS_EVERY = 10.0
FILTER_EVERY = 2.0  # seconds between reads of the channel's filter lists by a running gate
CTL_IDLE_PING = 5.0  # seconds the control connection may stay unused before a use checks it with a ping
STARTING = ("the start-up transaction (the DELETE of the rows above the checkpoint from transfer_data, the REPLACE of "
            "gate's runner record (host, pid, metrics address) into gate_meta, the removal of the last run's notes)")
ABANDON_WITHIN = 3.0  # seconds gate may take to end after a second stop signal, whatever the network does
T = TypeVar("T")


@dataclass(frozen=True)
class StartReads:
    """What start-up reads of a channel in one DC round trip (:meth:`Pipeline._start_reads`)."""

    version: int  # its schema version, checked
    settings: ChannelSettings
    state: ResumeState
    stuck: list[int]  # ids of stuck_row notes
    marker: DedupeMarker | None  # a switch's dedupe marker
    snapshots_waiting: bool  # gate_snapshot may hold requests
    holder: HolderState | None  # the channel's recorded holder (gate_holder), None: none yet


@dataclass
class RunStats:
    rows: int = 0
    transactions: int = 0
    started: float = 0.0


def describe_columns(server: ServerConfig, retry_for: float, stopping: threading.Event) -> ColumnDescriber:
    """CREATE TABLE ... LIKE (and ... SELECT without a column list): the table's columns, read from the
    source's information_schema when gate reads the statement. The source unreachable is handled as
    the reader handles it: retried with backoff for ``retry_for`` seconds, then :class:`SourceDown`; an error
    that is not transient stops gate."""

    def describe(db: str, table: str) -> list[dict[str, str]]:
        failing_since: float | None = None
        while True:
            try:
                with connect(server, "source", connect_timeout=3) as conn, conn.cursor() as cur:
                    cur.execute(
                        "SELECT column_name, is_nullable, column_key, column_type FROM information_schema.columns "
                        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (db, table))
                    return [
                        {"field_name": name, "nullable": "Yes" if nullable == "YES" else "No",
                         "primary_key": "Yes" if key == "PRI" else "No", "data_type": ctype}
                        for name, nullable, key, ctype in cur.fetchall()
                    ]
            except (GateError, pymysql.err.MySQLError) as exc:
                raise_unless_transient(exc, "source", server, f"reading the columns of {db}.{table}")
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since >= retry_for or stopping.is_set():
                    raise SourceDown(
                        f"The source {server.address} has been unreachable for {now - failing_since:.0f} s while "
                        f"gate read the columns of {db}.{table} for a CREATE TABLE statement ({exc})."
                    ) from exc
                log.warning("source %s unreachable while reading the columns of %s.%s (%s); retrying",
                            server.address, db, table, exc)
                time.sleep(backoff(int(now - failing_since)))

    return describe


_ER_UNKNOWN_SYSTEM_VARIABLE = 1193


def binlog_expire_seconds(cur: pymysql.cursors.Cursor) -> float:
    """How long the source keeps its binary logs (binlog_expire_logs_seconds, else expire_logs_days on
    servers without it); 0: until purged by hand."""
    try:
        cur.execute("SELECT @@binlog_expire_logs_seconds")
    except pymysql.err.OperationalError as exc:
        if exc.args[0] != _ER_UNKNOWN_SYSTEM_VARIABLE:
            raise
        cur.execute("SELECT @@expire_logs_days * 86400")
    return float(one_row(cur)[0])


@dataclass
class PreparedInDC:
    """The ordering's store of prepared XA changes: gate_xa_pending, through the pipeline's control
    connection, retried while the DC is unreachable."""

    pipeline: Pipeline
    checkpointer: Checkpointer
    pool: WriterPool

    def prepare(self, xid: str) -> None:
        """An xid used again waits until a checkpoint has deleted the stored changes of its earlier use;
        whatever else is stored under it (this group's own changes from an interrupted run, or what a
        moved start position left) goes."""
        pipeline, checkpointer = self.pipeline, self.checkpointer
        while checkpointer.resolving(xid) and not pipeline._abandon.is_set():
            checkpointer.committed(self.pool.acks(timeout=0.1))
            pipeline._checkpoint(checkpointer)
        pipeline._on_dc(lambda conn: xa.discard(conn, pipeline.channel, xid))

    def store(self, xid: str, first_seq: int, changes: list[tuple[Change | Decoded, int]]) -> None:
        self.pipeline._on_dc(lambda conn: xa.store(conn, self.pipeline.channel, xid, first_seq, changes))

    def read(self, xid: str, after_seq: int, limit: int) -> list[tuple[int, Change]]:
        return self.pipeline._on_dc(lambda conn: xa.read(conn, self.pipeline.channel, xid, after_seq, limit))


class Pipeline:
    """Runs one channel in the foreground until :meth:`stop` (or SIGTERM/SIGINT)."""

    def __init__(self, dc: ServerConfig, channel: str, preflight: bool = True, metrics_port: int | None = None,
                 metrics_address: str | None = None, standby: bool = False,
                 held: tuple[pymysql.Connection, str] | None = None) -> None:
        q(channel)
        self.dc = dc
        self.channel = channel
        self.preflight = preflight
        self.metrics_port = metrics_port  # None: the channel's setting
        self.metrics_address = metrics_address
        self.stats = RunStats()
        self.metrics = RunMetrics(channel, lambda: self.stats.transactions)
        self.metrics_server: MetricsServer | None = None
        self._stopping = threading.Event()
        self._abandon = threading.Event()  # a second stop: do not wait for the writers or the DC
        self._reader: BinlogReader | None = None
        self._ctl: pymysql.Connection | None = None
        self._tables: set[str] = set()  # the channel database's tables, as the control connection last read them
        self._ctl_mutex = threading.RLock()  # one user of the control connection at a time: the control thread's
        self._ctl_used = 0.0  # checkpoints and settings, the reading thread's rare work (XA, snapshots, start-up)
        self._fresh: ChannelSettings | None = None  # settings read by the control thread, for the next transaction
        self._snapshots_waiting = True  # whether gate_snapshot may hold requests, as the control thread last saw
        self._retainer: Retainer | None = None
        self._watch: DcWatch | None = None  # the run's DC stall warnings
        self._failure: GateError | None = None  # what stopped a thread beside the main loop, raised by the loop
        self._stuck: list[int] = []  # ids of stuck_row notes above the checkpoint, left by an earlier run
        self._on_rows_without_events = "snapshot"  # the channel's setting, read at start and with the filter
        self.standby = standby  # wait until the channel has no live holder, then take it over
        self._waited = held  # a standby that waited already (holder.stand_by_until_free): its lock and reason
        self.me = Me.here()
        self._epoch: int | None = None  # this run's epoch in gate_holder, once it holds the channel
        self._claim: int | None = None  # the epoch start-up takes, read with the lock held, until it is committed
        self._dc_link: DcLink | None = None  # the control connection's round trip and the DC's max_allowed_packet
        self._reason: str | None = None  # why a standby takes the channel over
        self._heartbeat: Heartbeat | None = None

    def fail(self, exc: GateError) -> None:
        """A thread beside the main loop (retention, the standby sampler) met an error that stops gate; the
        main loop raises it at its next turn."""
        if self._failure is None:
            self._failure = exc

    def stop(self) -> None:
        """The first call drains the writers and stores the checkpoint (waiting for the DC if it is
        down); a second one gives up waiting."""
        if self._stopping.is_set() and not self._abandon.is_set():
            self._abandon.set()
            log.warning("second stop signal: not waiting for the writers and the DC any more")
        self._stopping.set()
        if self._reader is not None:
            self._reader.stop()

    def _signalled(self) -> None:
        """SIGTERM or SIGINT of the gate process: :meth:`stop`; from the second one on, gate ends within
        ABANDON_WITHIN seconds even if a connection hangs (its read timeout is far longer): the process
        exits as after kill -9, and the next run removes and rewrites what lies above the checkpoint."""
        self.stop()
        if self._abandon.is_set():
            timer = threading.Timer(ABANDON_WITHIN, self._exit_now)
            timer.daemon = True
            timer.start()

    def _exit_now(self) -> None:
        log.error("channel %s did not end within %g s of the second stop signal (a server does not answer); "
                  "exiting now. The next 'gate run %s' removes the rows above the checkpoint and reads them "
                  "again, so nothing is lost.", self.channel, ABANDON_WITHIN, self.channel)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(DrainAbandoned.exit_code)

    # --- DC control connection: holds the channel lock and writes checkpoints -------------------

    def _open_ctl(self, announce: bool = True) -> pymysql.Connection:
        """A control connection (it takes multi-statement queries: the checkpoint is one), the DC checked to be
        MariaDB and the channel's lock taken in one round trip, which reads the channel's tables too. With
        ``announce`` (a reopened connection) the channel's schema is checked and the runner record written;
        at start-up, :meth:`_start_reads` and :meth:`_prepare` do that in their round trips."""
        return self._lock_ctl(announce, [])[0]

    def _lock_ctl(self, announce: bool, reads: list[tuple[str, tuple[object, ...]]]
                  ) -> tuple[pymysql.Connection, list[list[tuple[object, ...]]]]:
        """:meth:`_open_ctl` (the connection's SET NAMES in that round trip too, not one of its own after the
        login), with the answers of ``reads`` sent in the same round trip, after the lock (they are
        of use only when it is taken). Should one of them fail (a table of theirs missing), the connection is
        opened again without them, and their answers are [] (the caller reads what the tables allow)."""
        conn = connect(self.dc, "DC", self.channel, client_flag=CLIENT.MULTI_STATEMENTS, names_later=True)
        try:
            try:
                started = time.monotonic()
                _names, server, lock, tables, packet, *found = read_together(conn, [
                    (set_names(conn), ()), (VERSION_QUERY, ()), lock_query(self.channel), tables_query(self.channel),
                    (PACKET_QUERY, ()), *reads])
                self._dc_link = DcLink(time.monotonic() - started, int(packet[0][0]))
            except pymysql.err.ProgrammingError:
                if not reads:
                    raise
                conn.close()
                return self._lock_ctl(announce, [])
            check_mariadb("DC", self.dc.address, *server[0])
            holder = lock_from(lock)
            if holder is not None:
                if self._epoch is not None:  # this run held the channel: was it taken over meanwhile?
                    with conn.cursor() as cur:
                        found_holder = holder_state(cur, self.channel)
                    if found_holder is None or found_holder.epoch != self._epoch:
                        raise Deposed(deposed_message(self.channel, self._epoch, None if found_holder is None else (
                            found_holder.epoch, found_holder.host, found_holder.pid)))
                raise ChannelBusy(
                    f"Channel '{self.channel}' is already being run by another gate process (DC connection "
                    f"{holder}). Stop that one first, or start this one as a standby ('gate run {self.channel} "
                    f"--standby'); 'gate status {self.channel}' shows it."
                )
            self._tables = table_set(tables)
            if announce:
                self._reopened(conn)
        except BaseException:
            conn.close()
            raise
        return conn, found

    def _reopened(self, conn: pymysql.Connection) -> None:
        """A control connection opened again (the DC restarted, a link broke) holds the lock again: the channel
        checked, this run confirmed as its holder (else :class:`Deposed`), then who runs it said."""
        schema_version(conn, self.channel)  # a channel of this gate's schema: only then say who runs it there
        if self._epoch is not None:
            confirm(conn, self.channel, self._epoch)
        elif self._claim is not None:  # another gate may have taken it over since the epoch was read
            raise GateError(f"Channel '{self.channel}': the DC connection holding its lock broke during start-up; "
                            f"run 'gate run {self.channel}' again.")
        self._announce(conn)

    def _held(self, conn: pymysql.Connection, reason: str) -> pymysql.Connection:
        """The connection a standby waited on holds the channel's lock: the control connection; start-up takes
        the channel over (:meth:`_prepare`) for ``reason``."""
        try:
            started = time.monotonic()
            tables, packet = read_together(conn, [tables_query(self.channel), (PACKET_QUERY, ())])
            self._dc_link = DcLink(time.monotonic() - started, int(packet[0][0]))
            self._tables = table_set(tables)
        except BaseException:
            conn.close()
            raise
        self._reason = reason
        return conn

    def _fence(self) -> Fence:
        """What this run's other DC connections check in each write transaction: its epoch (before the
        start-up transaction commits it, the one it claims: their first check waits for that transaction)."""
        epoch = self._epoch if self._epoch is not None else self._claim
        assert epoch is not None
        return Fence(self.channel, epoch)

    def _deposed(self, exc: GateError) -> None:
        """The heartbeat found another holder: the main loop stops on it; should it not end soon (waiting on a
        hung DC connection), the process exits anyway. Nothing of it can land in the DC (every write is fenced)."""
        self.fail(exc)
        timer = threading.Timer(ABANDON_WITHIN + 2 * (self._heartbeat.lease if self._heartbeat else 5.0),
                                self._exit_deposed, (exc,))
        timer.daemon = True
        timer.start()

    def _exit_deposed(self, exc: GateError) -> None:
        log.error("%s", exc)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(Deposed.exit_code)

    def _announce(self, conn: pymysql.Connection) -> None:
        """Record who holds the lock, for 'gate channel list': this DC connection, host, pid, metrics address."""
        with refusals("DC", self.dc, "the REPLACE of gate's runner record (host, pid, metrics address) into "
                      "gate_meta", self.channel), conn.cursor() as cur:
            record_runner(cur, self.channel, self._runner(conn))

    def _runner(self, conn: pymysql.Connection) -> Runner:
        server = self.metrics_server
        return Runner(conn.thread_id(), socket.gethostname(), os.getpid(),
                      f"{server.address}:{server.port}" if server else None)

    def _ctl_conn(self) -> pymysql.Connection:
        """The control connection, reopened (and the lock retaken) after a DC restart. It is checked with a
        ping only after CTL_IDLE_PING seconds unused: a use that finds it broken drops it (:meth:`_drop_ctl`)
        and the retry reopens it. The caller holds ``_ctl_mutex``."""
        now = time.monotonic()
        if self._ctl is not None and now - self._ctl_used >= CTL_IDLE_PING:
            try:
                self._ctl.ping(reconnect=False)
            except pymysql.err.Error:
                self._drop_ctl()
        self._ctl_used = now
        if self._ctl is None:
            self._ctl = self._open_ctl()
        return self._ctl

    def _drop_ctl(self) -> None:
        """Forget a control connection that failed (closed quietly): the next use opens a new one."""
        conn, self._ctl = self._ctl, None
        _close(conn)

    # --- start-up ----------------------------------------------------------------------------

    def _start_reads(self) -> StartReads:
        """What start-up reads of the channel, in the round trip that takes the channel's lock when the control
        connection opens (else in one of its own, as for a channel of an older schema): its schema version,
        settings, resume state, stuck-row notes, a switch's dedupe marker and whether snapshot requests wait. A
        channel gate cannot use as it stands is refused by :func:`schema_version`, which names the problem."""
        channel = self.channel
        queries = [version_query(channel), settings_query(channel), resume_query(channel), stuck_query(channel),
                   marker_query(channel)]
        every = [*queries, holder_query(channel), snapshot.waiting_query(channel)]  # a channel of this gate's schema
        with self._ctl_mutex:
            found: list[list[tuple[object, ...]]] = []
            if self._ctl is None:  # the lock and these reads in one round trip
                self._ctl, found = self._lock_ctl(False, every)
                self._ctl_used = time.monotonic()
            conn = self._ctl_conn()
            held = set(HOLDER_TABLES) <= self._tables  # a channel made before them: they come with _prepare
            waiting = {snapshot.TABLE, snapshot.VERIFY_TABLE} <= self._tables  # else made by _prepare, polled once
            try:
                if not (found and held and waiting):
                    found = read_together(conn, queries + ([holder_query(channel)] if held else []) + (
                        [snapshot.waiting_query(channel)] if waiting else []))
                version = usable_version(self._tables, found[0])
            except pymysql.err.ProgrammingError:  # a table or the database is missing
                version = None
            if version is None:
                schema_version(conn, channel)  # raises, naming what is wrong
                raise GateError(f"Channel '{channel}' changed while gate started; run 'gate run {channel}' again.")
        holder = holder_from(found[5]) if held else None
        if self._epoch is None:  # the lock is held: no other gate can take the channel over until it is let go
            self._claim = (0 if holder is None else holder.epoch) + 1
        return StartReads(version, settings_from(channel, found[1]), resume_from(found[2]), stuck_from(found[3]),
                          marker_from(found[4]), bool(found[-1]) if waiting else True, holder)

    def _prepare(self, settings: ChannelSettings, start: StartReads, source_server_id: int | None = None) -> ResumeState:
        """Make the DC consistent before reading, in one round trip (and one per migration, for a channel of an
        older schema): the tables a channel of an older gate lacks, the channel taken over (the first time: a
        new epoch, the takeover recorded), the runner record, the rows above the checkpoint removed, the last
        run's error and the notes of stuck rows the checkpoint passed forgotten, and the source's server_id
        recorded (for failover fingerprints)."""
        conn = self._ctl_conn()
        state = start.state
        source = settings.source
        if state.instance_name and state.instance_name != source.address:
            raise GateError(
                f"Channel '{self.channel}' resumes from a position on {state.instance_name}, but its source is "
                f"now {source.address}: binlog positions of one server mean nothing on another. Set a start "
                f"position on the new source with 'gate channel set-position {self.channel} ...'."
            )
        if not state.log_file and not state.gtid_pos:
            with refusals("source", source, "SHOW MASTER STATUS (its binlog position to start from)"):
                now = current_position(source)
            state = state.moved(log_file=now.log_file, log_pos=now.log_pos, gtid_pos=now.gtid_pos,
                                instance_name=source.address)
            self._store(state)
            log.info("channel %s had no start position; starting at the source's current one, %s",
                     self.channel, now.describe())
        migrate(conn, self.channel, start.version)
        if not {xa.TABLE, snapshot.TABLE, snapshot.VERIFY_TABLE} <= self._tables:
            with conn.cursor() as cur:
                xa.ensure_table(cur)
                snapshot.ensure_table(cur)
            self._tables |= {xa.TABLE, snapshot.TABLE, snapshot.VERIFY_TABLE}
        if not set(HOLDER_TABLES) <= self._tables:
            with conn.cursor() as cur:
                ensure_holder_tables(cur, self.channel)
            self._tables |= set(HOLDER_TABLES)
        stuck = start.stuck
        runner = self._runner(conn)
        claim = self._claim if self._epoch is None else None
        reason = self._reason or takeover_reason(start.holder)
        first = [0]  # the index of the DELETE's count

        def statements(cur: pymysql.cursors.Cursor) -> None:
            if claim is not None:  # first: it waits for the previous holder's fenced transactions in flight
                first[0] = record_takeover(cur, self.channel, self.me, claim, self.standby, reason, start.holder)
            remove_above_checkpoint(cur, self.channel, state.id)  # a batch's cursor: its first DELETE alone
            record_runner(cur, self.channel, runner)
            clear_stop(cur, self.channel)
            forget_stuck(cur, self.channel, [row_id for row_id in stuck if row_id <= state.id])
            if source_server_id is not None:
                record_source_server_id(cur, self.channel, source_server_id)

        with refusals("DC", self.dc, STARTING, self.channel):
            removed = in_one_round_trip(conn, statements)[first[0]]
        if claim is not None:
            self._took_over(claim, reason, start.holder, settings.defaults.lease_seconds)
        if removed >= REMOVE_BATCH:
            with conn.cursor() as cur:
                removed += remove_above_checkpoint(cur, self.channel, state.id)
        self._stuck = [row_id for row_id in stuck if row_id > state.id]  # they go with the checkpoint passing them
        if removed:
            log.info("removed %d rows above the checkpoint (id %d), left by an interrupted run", removed, state.id)
        return state

    def _took_over(self, epoch: int, reason: str, previous: HolderState | None, lease: float) -> None:
        """The start-up transaction made this run the channel's holder: its heartbeat and retention start."""
        self._epoch = epoch
        log_takeover(self.channel, self.me, epoch, self.standby, reason)
        self._heartbeat = heartbeat = Heartbeat(self.dc, self.channel, self.me, epoch, lease, self._deposed)
        heartbeat.start()
        self.metrics.epoch, self.metrics.standbys = epoch, lambda: heartbeat.standbys
        if self.standby:
            self.metrics.took_over_at = time.time()
            self.metrics.took_over_from = "" if previous is None else f"{previous.host} pid {previous.pid}"
        self._retainer = Retainer(self.dc, self.channel, self.metrics.retention, self.fail, self._fence())
        self._retainer.start()  # removal runs beside the capture, fenced

    def _store(self, state: ResumeState) -> None:
        conn = self._ctl_conn()
        conn.begin()
        with conn.cursor() as cur:
            write_resume(cur, self.channel, state)
        conn.commit()

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> RunStats:
        """Run until stopped; when the source stays down and a standby is set, switch to it and go on."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._signalled())
        try:
            if self.standby and self._waited is not None:
                self._ctl = self._held(*self._waited)
            elif self.standby:
                self.metrics.standing_by = True
                if self.metrics_port:  # given on the command line: served while standing by too
                    self.metrics_server = MetricsServer(self.metrics, self.metrics_address or "127.0.0.1",
                                                        self.metrics_port)
                found = stand_by(self.dc, self.channel, self.me, self._stopping)
                self.metrics.standing_by = False
                if found is None:
                    log.info("channel %s: stopped while standing by", self.channel)
                    return self.stats
                self._ctl = self._held(*found)
            start_forkserver(["gate.capture.children"])  # it loads the children's modules while gate starts up
            with refusals("DC", self.dc, "a statement of gate's control connection", self.channel):
                stats = self._run()
            self._leave()
            return stats
        except (GateError, pymysql.err.MySQLError) as exc:
            self._record_stop(exc)
            raise
        finally:
            if self._heartbeat is not None:
                self._heartbeat.stop()
            if self._retainer is not None:
                self._retainer.stop()
            if self.metrics_server is not None:
                self.metrics_server.close()
            if self._ctl is not None:
                self._ctl.close()

    def _record_stop(self, exc: BaseException) -> None:
        """Leave the error that stops gate in gate_meta for 'gate status' (the next start removes it), while the
        channel's lock is still held; a DC that cannot take it leaves it in the log alone. Servers that could
        not be reached are the log's alone (a restart retries them)."""
        if self._ctl is None or is_transient(exc) or isinstance(exc, (DrainAbandoned, ChannelBusy, Deposed,
                                                                      SchemaVersionError)):
            return  # not this run's channel (any more, or not one gate may write to), a deliberate stop, or a DC
            # that may not answer now
        exit_status = exc.exit_code if isinstance(exc, GateError) else ServerRefused.exit_code  # as the CLI exits
        try:
            transaction = exc.transaction if isinstance(exc, TransactionRefused) else None
            record_stop(self._ctl, self.channel, StopRecord(type(exc).__name__, str(exc), exit_status,
                                                            transaction=transaction))
        except pymysql.err.MySQLError as failed:
            log.warning("channel %s: the error that stops gate was not recorded in the DC (%s)", self.channel, failed)

    def _leave(self) -> None:
        """A clean stop: a standby takes the channel over at once."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self._ctl is not None and self._epoch is not None:
            try:
                leave(self._ctl, self.channel, self.me)
            except pymysql.err.MySQLError as exc:
                log.warning("channel %s: not marked as stopped cleanly in the DC (%s); a standby takes over once "
                            "lease_seconds pass", self.channel, exc)

    def _serve_metrics(self, settings: ChannelSettings) -> None:
        """Start the metrics and health endpoints if the command line or the channel's settings ask."""
        self.metrics.stuck_after = settings.defaults.stuck_after_seconds
        self.metrics.ready_lag = settings.defaults.ready_lag_seconds
        port = settings.defaults.metrics_port if self.metrics_port is None else self.metrics_port
        if port and self.metrics_server is None:
            self.metrics_server = MetricsServer(self.metrics, self.metrics_address or settings.defaults.metrics_address,
                                                port)  # the runner record that names it goes with _prepare

    def _run(self) -> RunStats:
        while True:
            start = self._start_reads()
            settings = start.settings
            self._snapshots_waiting = start.snapshots_waiting
            rule_keys(settings.columns)  # a hash rule's key missing from the environment: refuse to start
            self._serve_metrics(settings)
            if self.preflight:
                from gate.admin.catalog import cascade_problems, cascade_query
                from gate.admin.preflight import require_channel

                try:  # the source's checks and its cascading foreign keys in one round trip after its login
                    problems, (cascades,) = require_channel(settings, [cascade_query()])
                    if not any(p.setting == f"the source {settings.source.address}" for p in problems):
                        problems += cascade_problems(settings, cascades)[1]  # the source answers
                except GateError:
                    if not self._stopping.is_set():
                        raise
                    problems = []  # a stop signal came while the checks waited: stopping matters now
                for problem in problems:
                    log.warning("preflight: %s", problem)
            if self._stopping.is_set():
                log.info("channel %s stopped during its start-up checks; nothing was read", self.channel)
                return self.stats
            try:
                self._run_source(settings, start)
                return self.stats
            except SourceDown as exc:
                if settings.standby is None or self._stopping.is_set():
                    raise
                log.error("%s Failing over to the standby %s.", exc, settings.standby.address)
                self.metrics.begin(None)
                state = self._prepare(settings, self._start_reads())  # the standby rewrites the rows above the checkpoint
                plan_switch(self._ctl_conn(), settings, state, self._origin_server_id(), str(exc))
                self.metrics.failovers += 1

    def _origin_server_id(self) -> int:
        """The source's server_id as recorded at the last start (fingerprints need it after its death)."""
        with self._ctl_conn().cursor() as cur:
            cur.execute(f"SELECT value FROM {q(self.channel)}.gate_meta WHERE name = 'source_server_id'")
            row = cur.fetchone()
        return int(row[0]) if row else 0

    def _source_start(self, source: ServerConfig, resume_file: str | None) -> tuple[int | None, list[str] | None]:
        """What start-up asks the source before reading: its server_id (for failover fingerprints; None: unreachable
        now, the reader will say so), its binlog expiry (into the metrics) and, with ``resume_file``, its binary
        logs (whether it still has the resume position; None: not read). One connection, one round trip after
        the login; should that query fail (an older server without binlog_expire_logs_seconds, binary logging
        off), they are asked one by one as before, and their errors are those of those queries."""
        try:
            with connect(source, "source", connect_timeout=3, client_flag=CLIENT.MULTI_STATEMENTS,
                         names_later=True) as conn:
                _names, server, found, *files = read_together(conn, [
                    (set_names(conn), ()), (VERSION_QUERY, ()), ("SELECT @@server_id, @@binlog_expire_logs_seconds", ()),
                    *([("SHOW BINARY LOGS", ())] if resume_file else [])])
        except pymysql.err.MySQLError as exc:
            if is_transient(exc):
                return None, None
            return self._source_server_id(source), None
        except GateError as exc:
            raise_unless_transient(exc, "source", source, "reading its server_id and binlog expiry")
            return None, None
        check_mariadb("source", source.address, *server[0])  # before gate reads its binlog, preflight or not
        self.metrics.binlog_expire = float(found[0][1])
        return int(found[0][0]), [row[0] for row in files[0]] if files else None

    def _source_server_id(self, source: ServerConfig) -> int | None:
        """The source's server_id (for failover fingerprints; None: unreachable now, the reader will say so);
        its binlog expiry goes into the metrics."""
        try:
            with connect(source, "source", connect_timeout=3) as conn, conn.cursor() as cur:
                require_mariadb(conn, "source", source.address)  # before gate reads its binlog, preflight or not
                cur.execute("SELECT @@server_id")
                server_id = int(one_row(cur)[0])
                self.metrics.binlog_expire = binlog_expire_seconds(cur)
        except (GateError, pymysql.err.MySQLError) as exc:
            raise_unless_transient(exc, "source", source, "reading its server_id and binlog expiry")
            return None
        return server_id

    def _run_source(self, settings: ChannelSettings, start: StartReads) -> None:
        source = settings.source
        defaults = settings.defaults
        self._on_rows_without_events = defaults.on_rows_without_events
        retry_for = defaults.failover_after_seconds if settings.standby else float("inf")

        def reader_from(state: ResumeState) -> BinlogReader:
            return BinlogReader(source, settings.server_id, Position(state.log_file, state.log_pos, state.gtid_pos),
                                retry_for=retry_for, channel=self.channel)

        with ExitStack() as not_started:  # the binlog stream, the source's questions and the children at once
            resume = start.state
            early: BinlogReader | None = None
            if (resume.log_file or resume.gtid_pos) and resume.instance_name in (None, "", source.address):
                self._reader = early = reader_from(resume)  # the position _prepare keeps: read it while it works
                early.open_now()
                not_started.callback(early.discard)  # unless the loop reads it
            with ThreadPoolExecutor(1, thread_name_prefix="gate-source-start") as asking:  # while the children start
                asked = asking.submit(self._source_start, source, resume.log_file if start.marker is None else None)
                pool = WriterPool(self.dc, self.channel, defaults.writers, cancel=self._abandon,
                                  on_written=self._chunk_written, fence=self._fence(), link=self._dc_link)
                not_started.callback(pool.close, graceful=False)
                decoders = DecoderPool(defaults.timezone, defaults.binary_format, defaults.decoders)
                not_started.callback(decoders.close)
                server_id, files = asked.result()
            state = self._prepare(settings, start, server_id)
            assert early is None or state is resume, "_prepare moves only a channel without a position"
            self._reader = reader = early or reader_from(state)
            translator = Translator(ZoneInfo(defaults.timezone), defaults.binary_format,
                                    TableFilter(settings.allow, settings.deny),
                                    describe_columns(source, retry_for, self._stopping),
                                    lambda: f"{reader.stream.log_file}:{reader.stream.log_pos}",
                                    settings.columns, channel=self.channel)
            marker = start.marker
            items: Iterator[Item] = iter(reader)
            if marker is not None:  # the Deduper's reads: a connection of its own, beside the control thread's
                dedupe = connect(self.dc, "DC", self.channel)
                not_started.callback(dedupe.close)
                items = without_held(items, Deduper(marker, dedupe, self.channel), translator, settings)
            else:
                try:
                    with refusals("source", source, "SHOW BINARY LOGS (whether it still has the resume position)"):
                        reader.check_position(files if state.log_file == start.state.log_file else None)
                except (ConnectionFailed, pymysql.err.MySQLError):
                    if settings.standby is None:
                        raise  # else the reader retries, and the channel fails over if the source stays down
            closing = not_started.pop_all()  # from here on _finish closes the children, the end the Deduper's connection
        sequencer = Sequencer(state.id, state.tid, source.address)
        checkpointer = Checkpointer(self.channel, state, defaults.checkpoint_interval_ms / 1000,
                                    marker_pending=marker is not None, stuck=self._stuck, fence=self._fence())
        sampler = (StandbySampler(self.dc, self.channel, settings.standby, defaults.standby_sample_seconds, self.fail,
                                  self._fence())
                   if settings.standby else None)
        log.info("channel %s: reading %s from %s, checkpoint id=%d tid=%d, %d decoders, %d writers%s",
                 self.channel, source.address, reader.boundary.describe(), state.id, state.tid, defaults.decoders,
                 defaults.writers, f", standby {settings.standby.address}" if settings.standby else "")
        if sampler is not None:
            sampler.start()
        self._watch = watch = DcWatch(self.dc.address, lambda: _waiting(pool, checkpointer))
        watch.start()
        self.metrics.begin(Stage(reader, decoders, pool, checkpointer, watch))
        self.stats.started = time.monotonic()
        clean = abandoned = partial = False
        refused: TransactionRefused | None = None
        engine = SnapshotEngine(self.channel, source, defaults, self._on_dc, lambda op, after: False,
                                Position(state.log_file, state.log_pos, state.gtid_pos))
        engine.requests = lambda: self._snapshots_waiting
        control_done = threading.Event()
        control = threading.Thread(target=self._control, args=(checkpointer, control_done), name="gate-control",
                                   daemon=True)
        control.start()
        threading.Thread(target=self._read_settings, args=(control_done,), name="gate-settings", daemon=True).start()
        try:
            partial = self._loop(items, reader, translator, sequencer, checkpointer, pool, decoders,
                                 defaults.batch_rows, engine)
            clean = True
        except SourceDown:
            clean = True  # what the writers have is good: drain it and checkpoint before the switch
            raise
        except DrainAbandoned:
            abandoned = True  # a second signal while a chunk waited for a writer: _finish says so
        except TransactionRefused as exc:
            refused, clean = exc, True  # what was complete before it lands and is checkpointed first
            partial = exc.transaction is not None  # refused inside its transaction: chunks of it may be written
            raise
        finally:
            control_done.set()  # _finish stores the last checkpoint itself
            if sampler is not None:
                sampler.stop()
            decoders.close()
            engine.close()
            try:
                self._finish(checkpointer, pool, drain=clean, abandoned=abandoned)
            finally:
                watch.stop()
                control.join(timeout=0 if self._abandon.is_set() else ABANDON_WITHIN)
            if partial:  # a clean stop, or a refusal, inside a transaction: none of it stays above the checkpoint
                self._remove_partial(checkpointer.state)
            if refused is not None:
                self._stopped_at(refused, checkpointer.state)
            closing.close()

    def _loop(self, items: Iterator[Item], reader: BinlogReader, translator: Translator, sequencer: Sequencer,
              checkpointer: Checkpointer, pool: WriterPool, decoders: DecoderPool, batch_rows: int,
              engine: SnapshotEngine) -> bool:
        """Read items into the ordering (row events of captured tables, transaction starts and ends,
        translated statements, snapshot chunks at their binlog positions); its chunks go to the writers
        and its boundaries to the checkpointer. True when it stopped inside a transaction (the reader lost
        the source after a stop signal, or a second signal came): chunks of it may be written."""

        def emit(chunk_no: int, rows: list[DCRow], boundary: ResumeState | None, resolved: list[str],
                 notes: list[Note]) -> None:
            checkpointer.add(chunk_no, boundary, bool(rows), resolved, notes)
            if rows:
                pool.submit(chunk_no, rows)
            self.stats.rows += len(rows)

        ordering = Ordering(sequencer, reader.server.address, decoders, emit, batch_rows,
                            PreparedInDC(self, checkpointer, pool), start=checkpointer.state,
                            snapshots=lambda timeout: engine.collect(timeout))
        engine.place = ordering.snapshot
        engine.hold_back = lambda seconds: setattr(ordering, "hold_back", seconds)
        engine.tables = lambda count: setattr(self.metrics, "snapshot_tables", count)
        engine.filter, engine.rules = translator.filter, translator.rules
        metrics = self.metrics
        ordering.set_rules(translator.rules)
        next_progress = time.monotonic() + PROGRESS_EVERY
        logged = checkpointer.state
        open_txn = False  # a transaction's start read without its end: a stop waits for the end
        begin: Begin | None = None  # the start of the last transaction read
        try:
            for item in items:
                if type(item) is Rows:
                    if translator.filter.passes(item.event.schema, item.event.table):
                        translator.check_metadata(item)
                        translator.check_image(item)
                        translator.check_rules(item)
                        ordering.rows(item, reader.stream)
                elif type(item) is Begin:
                    begin = item
                    if self._fresh is not None:  # between transactions: a changed filter applies from here
                        self._apply_settings(translator, reader.boundary.describe())
                        ordering.set_rules(translator.rules)
                        engine.filter, engine.rules = translator.filter, translator.rules
                    open_txn = True
                    ordering.begin(item.xid)
                    engine.begin()
                    metrics.transaction_read(item.timestamp)
                elif type(item) is Commit:
                    open_txn = False
                    self.stats.transactions += 1
                    metrics.last_event_time = item.timestamp
                    metrics.transaction_ended(item.position.log_file, item.position.log_pos)
                    ordering.commit(item)
                    engine.at_boundary(reader.boundary, item.timestamp)
                elif type(item) is Statement:
                    for change in translator.statement(item):
                        ordering.statement(change, item.timestamp)
                        if change[2] == "ALTERTABLE" and UNLOGGED in change[3]:  # a cheap test, _unlogged parses
                            self._unlogged(change, translator, engine, translator.position())
                        if change[2] in ("RENAME", "DROPTABLE"):
                            what = "renamed" if change[2] == "RENAME" else "dropped"
                            engine.cancel(change[0], change[1], f"the table was {what} while it was snapshotted "
                                          f"(after binlog position {reader.boundary.describe()})")
                engine.turn(time.monotonic())
                if type(item) is Idle:
                    engine.at_boundary(reader.boundary)
                    ordering.drain()
                    if not pool.in_flight and checkpointer.pending == 0 and checkpointer.target is None:
                        metrics.caught_up()
                else:
                    ordering.apply()
                if pool.in_flight:
                    checkpointer.committed(pool.acks())
                if self._failure is not None:
                    raise self._failure
                if self._stopping.is_set() and (not open_txn or self._abandon.is_set()):
                    break  # between transactions, where the reader ends its stream too; at once on a second stop
                metrics.loop_at = now = time.monotonic()
                if now >= next_progress and checkpointer.state is not logged:
                    next_progress = now + PROGRESS_EVERY
                    state = logged = checkpointer.state
                    log.info("checkpoint id=%d tid=%d at %s; %d rows in %.0f s",
                             state.id, state.tid, state.describe(), self.stats.rows, now - self.stats.started)
        except TransactionRefused as refused:  # what was read before its transaction is numbered and sent
            if open_txn and begin is not None:
                at = reader.boundary  # the end of the transaction before it
                refused.transaction = refused_transaction(begin.gtid, at.log_file, at.log_pos, at.gtid_pos,
                                                          begin.timestamp, refused.tables, type(refused).__name__,
                                                          str(refused), xid=begin.xid)
            engine.abandon()
            ordering.drain(whole_transactions=True)
            raise
        engine.abandon()
        ordering.drain(whole_transactions=True)
        return open_txn

    def _remove_partial(self, state: ResumeState) -> None:
        """A stop inside a transaction (a stop signal, or a transaction refused): its rows the writers have
        already committed lie above the stored checkpoint. They go now, so that a clean stop leaves nothing
        above it (the next run reads the transaction again from the checkpoint's boundary)."""

        def remove(conn: pymysql.Connection) -> int:
            with conn.cursor() as cur:
                return remove_above_checkpoint(cur, self.channel, state.id)

        removed = self._on_dc(remove, "the DELETE of the rows above the checkpoint from transfer_data")
        if removed:
            log.info("channel %s: removed the %d rows above the checkpoint (id %d) of the transaction it stopped "
                     "in", self.channel, removed, state.id)

    def _stopped_at(self, refused: TransactionRefused, state: ResumeState) -> None:
        """The writers have drained after ``refused``: with the checkpoint at its transaction's start, its
        message names the way past it, else (its start unknown, the checkpoint short of it) that of a restart."""
        refused_at = refused.transaction
        if refused_at is None and isinstance(refused, UnhandledEvent) and refused.after == (state.log_file,
                                                                                           state.log_pos):
            refused.args = (f"{refused} It lies between transactions, and everything before it is in the DC and "
                            f"checkpointed (id={state.id} tid={state.tid}, at {state.describe()}); gate stops at it "
                            f"again until it is dealt with. {refused.way_past}",)
            return
        if refused_at is None or (refused_at["log_file"], refused_at["log_pos"]) != (state.log_file, state.log_pos):
            refused.transaction = None
            refused.args = (f"{refused} The checkpoint stands at {state.describe()}, short of the refused "
                            f"transaction: run 'gate run {self.channel}' again to write what lies before it.",)
            return
        name, tables = refused_at["name"], refused.tables
        refused.stopped_at(refused_at, (
            f"Everything before this transaction is in the DC and checkpointed (id={state.id} tid={state.tid}); "
            f"gate stops here again until it is dealt with. To go on without it, run 'gate channel skip "
            f"{self.channel} --transaction {name}': it moves the channel past exactly this transaction (from "
            f"{state.log_file}:{state.log_pos}) and writes a SKIPPED row naming it; its changes are then missing "
            "from the DC, and a snapshot ('gate snapshot "
            f"{self.channel} --table {tables[0][0] + '.' + tables[0][1] if tables else 'DB.TABLE'}') brings the "
            "consumers' copy of the table level with the source."))
        log.info("channel %s: checkpoint at the start of refused transaction %s", self.channel, name)

    def _unlogged(self, change: Change, translator: Translator, engine: SnapshotEngine, at: str) -> None:
        """A statement changed rows without row events: with on_rows_without_events 'snapshot', request a
        snapshot of each captured table it changed, so that the fold converges again."""
        data = json.loads(change[3])
        if UNLOGGED not in data:  # the name only stood in the statement's text (a column, a comment)
            return
        tables = [table for table in unlogged_tables(data) if translator.filter.passes(*table)]
        log.warning("channel %s: a statement at %s changed rows of %s without row events (%s)", self.channel, at,
                    ", ".join(f"{db}.{table}" for db, table in tables) or "no captured table",
                    ", ".join(sorted({entry["by"] for entry in data[UNLOGGED]})))
        again = [table for table in snapshot_tables(data) if table in tables]
        if again and self._on_rows_without_events == "snapshot":
            by = ", ".join(sorted({entry["by"] for entry in data[UNLOGGED]}))
            engine.again(again, f"rows changed without row events: {by[:120]} at {at}")

    def _on_dc(self, work: Callable[[pymysql.Connection], T], doing: str = "a statement of gate's control "
               "connection") -> T:
        """Run ``work`` on the control connection, retried while the DC is unreachable (until a second stop);
        an error that is not transient stops gate, naming ``doing``."""
        while True:
            try:
                with self._ctl_mutex:
                    try:
                        return work(self._ctl_conn())
                    except (GateError, pymysql.err.MySQLError) as exc:
                        if is_transient(exc):
                            self._drop_ctl()
                        raise
            except (GateError, pymysql.err.MySQLError) as exc:
                raise_unless_transient(exc, "DC", self.dc, doing, self.channel)
                if self._abandon.is_set():
                    raise DrainAbandoned(f"stopped while the DC was unreachable ({exc})") from exc
                log.warning("DC unreachable (%s); retrying", exc)
                time.sleep(0.5)

    def _read_settings(self, done: threading.Event) -> None:
        """The settings thread, on a DC connection of its own: every FILTER_EVERY seconds it reads the channel's
        settings, for the reading thread to apply at its next transaction, and whether gate_snapshot holds
        requests (the snapshot engine reads the table only then), so that neither waits for the DC."""
        conn: pymysql.Connection | None = None
        while not done.wait(FILTER_EVERY / 2 if conn is None else FILTER_EVERY):
            try:
                conn = conn or connect(self.dc, "DC", self.channel)
                settings = read_settings(conn, self.channel)
                with conn.cursor() as cur:
                    waiting = bool(cur.execute(*snapshot.waiting_query(self.channel)))
                self._fresh, self._snapshots_waiting = settings, waiting
            except (GateError, pymysql.err.Error) as exc:
                log.warning("channel %s: filter not re-read (%s); the current one stays until the next try",
                            self.channel, exc)
                _close(conn)
                conn = None
        _close(conn)

    def _control(self, checkpointer: Checkpointer, done: threading.Event) -> None:
        """The checkpoint thread: stores the checkpoint when due (:meth:`Checkpointer.wait_due`,
        :meth:`Checkpointer.write`), so that the reading thread never waits for the DC's round trips for it. An
        error that stops gate goes to the reading thread (:meth:`fail`)."""
        try:
            while checkpointer.wait_due(done):
                self._checkpoint(checkpointer)
        except GateError as exc:
            self.fail(exc)
        except pymysql.err.MySQLError as exc:
            self.fail(refusal(exc, "DC", self.dc, "a statement of gate's control thread", self.channel))

    def _apply_settings(self, translator: Translator, at: str) -> None:
        """Apply the channel's allow and deny lists, column rules, health limits and on_rows_without_events as
        the control thread last read them ('gate channel filter', 'columns' or 'set' while gate runs). Rules
        whose key is missing stop gate (MissingSecret)."""
        settings, self._fresh = self._fresh, None
        if settings is None:
            return
        self.metrics.stuck_after = settings.defaults.stuck_after_seconds  # 'gate channel set' while gate runs
        self.metrics.ready_lag = settings.defaults.ready_lag_seconds
        self._on_rows_without_events = settings.defaults.on_rows_without_events
        new, old = TableFilter(settings.allow, settings.deny), translator.filter
        if new != old:
            translator.filter = new
            log.info("channel %s: filter changed to allow %s, deny %s (was allow %s, deny %s); applied from %s on",
                     self.channel, list(new.allow), list(new.deny), list(old.allow), list(old.deny), at)
        if settings.columns != translator.rules:
            translator.set_rules(settings.columns)
            log.info("channel %s: column rules changed to %s; applied from %s on", self.channel,
                     [rule.describe() for rule in settings.columns] or "none", at)

    def _chunk_written(self, optypes: dict[str, int], seconds: float) -> None:
        self.metrics.chunk_written(optypes, seconds)
        if self._watch is not None:
            self._watch.moved()

    def _checkpoint(self, checkpointer: Checkpointer) -> bool:
        before = checkpointer.state
        try:
            with self._ctl_mutex:
                stored = checkpointer.write(self._ctl_conn())
                if not stored:
                    self._drop_ctl()
        except (GateError, pymysql.err.MySQLError) as exc:  # the DC unreachable while reconnecting, or refusing
            if is_transient(exc):
                with self._ctl_mutex:
                    self._drop_ctl()
            raise_unless_transient(exc, "DC", self.dc, "the checkpoint's UPDATE of transfer_checkpoint and "
                                   "gate_resume (with the snapshot progress in gate_snapshot)", self.channel)
            log.warning("checkpoint not stored (%s); retrying", exc)
            stored = False
        self.metrics.dc_connected = stored
        if stored and checkpointer.state is not before and self._watch is not None:
            self._watch.moved()
        if checkpointer.state is not before:
            self.metrics.checkpointed(checkpointer.state)
        return stored

    def _finish(self, checkpointer: Checkpointer, pool: WriterPool, drain: bool, abandoned: bool = False) -> None:
        """Wait for the writers (when stopping cleanly), store the last checkpoint, close everything.
        Raises DrainAbandoned when a second stop signal cut that short (or ``abandoned`` says it did)."""
        cut_short = abandoned
        try:
            if drain:
                while pool.in_flight and not self._abandon.is_set():
                    checkpointer.committed(pool.acks(timeout=0.5))
                while not self._checkpoint(checkpointer) and not self._abandon.is_set():
                    time.sleep(0.5)
                cut_short = self._abandon.is_set()
            else:
                try:
                    self._checkpoint(checkpointer)
                except Deposed:  # the cause: a takeover (e.g. the source then refused this second reader with the
                    raise  # same server_id), so the exit status is Deposed's, which systemd does not restart
                except GateError as exc:  # the error that stops gate is already on its way
                    log.warning("channel %s: last checkpoint not stored (%s)", self.channel, exc)
        finally:
            pool.close(graceful=drain and not cut_short)
        state = checkpointer.state
        if cut_short:
            raise DrainAbandoned(
                f"Channel {self.channel} stopped at the second signal without draining its writers. The "
                f"checkpoint stored in the DC is at most id={state.id} tid={state.tid}; the next 'gate run "
                f"{self.channel}' removes the rows above it and reads them again, so nothing is lost.")
        log.info("channel %s stopped at checkpoint id=%d tid=%d, resume at %s",
                 self.channel, state.id, state.tid, state.describe())


def _close(conn: pymysql.Connection | None) -> None:
    """Close a connection that may have failed, quietly."""
    if conn is not None:
        try:
            conn.close()
        except (pymysql.err.Error, OSError):
            pass


def _waiting(pool: WriterPool, checkpointer: Checkpointer) -> str:
    """What waits for the DC now, in words ('' when nothing does)."""
    waits = [f"{pool.in_flight} chunk(s) for the writers"] if pool.in_flight else []
    target = checkpointer.target
    if target is not None:
        waits.append(f"the checkpoint at id {target.id}")
    return " and ".join(waits)
