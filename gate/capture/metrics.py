"""``gate run --metrics-port``: the channel's figures in the Prometheus text format, and its health.

The main loop only stamps a few times and counts (per item, transaction, chunk or checkpoint, never
per row); the figures are read when a scraper asks, from a thread of this process. The writer
processes report what each chunk held and how long its DC transaction took on the outbox they
already report on, so nothing needs Prometheus' multiprocess mode (its files on disk, its cleanup).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from gate.capture.checkpoint import Checkpointer
from gate.capture.lag import lag_seconds
from gate.capture.retention import ConsumerInfo, RetentionFigures
from gate.capture.stall import DcWatch
from gate.common.dc import ResumeState
from gate.common.errors import MetricsPortBusy

log = logging.getLogger(__name__)

BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
VISIBLE_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
# transactions read and not yet checkpointed whose start times the lag keeps; past this many (a stalled DC while
# the reader reads on) the newest entry covers the later ones with its older time: the lag reads high, never low
UNSETTLED_MAX = 10_000
AT_END_FRESH = 5.0  # seconds a heartbeat's finding "at the source's end" holds (the source sends one every 0.1 s)


class Queue(Protocol):
    """A stage's bounded inbox, as :class:`~gate.common.process.WorkerPool` exposes it."""

    @property
    def queued(self) -> int: ...

    @property
    def capacity(self) -> int: ...


class Source(Protocol):
    """What the metrics read of the binlog reader."""

    connected: bool
    disconnects: int


@dataclass
class Stage:
    """What one run on one source has going: the reader, the two pools, the checkpointer and the DC's
    stall watch."""

    reader: Source
    decoders: Queue
    writers: Queue
    checkpointer: Checkpointer
    dc: DcWatch | None = None

    @property
    def checkpoint(self) -> ResumeState:
        """The checkpoint last stored in the DC."""
        return self.checkpointer.state

    @property
    def pending(self) -> int:
        """Chunks dispatched whose checkpoint has not been stored."""
        return self.checkpointer.pending


def _build_version() -> str:
    try:
        return version("gate")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class RunMetrics:
    """One channel's figures. The pipeline stamps ``loop_at`` every turn of its loop, ``caught_up``
    when a heartbeat finds nothing pending, ``checkpointed`` when the checkpoint moves."""

    channel: str
    transactions: Callable[[], int]  # source transactions read so far
    stuck_after: float = 120.0
    ready_lag: float = 60.0
    stage: Stage | None = None
    earlier_disconnects: int = 0  # binlog streams lost by the readers of earlier sources (before a switch)
    failovers: int = 0
    epoch: int = 0  # this run's epoch in gate_holder (see gate.capture.holder)
    standbys: Callable[[], int] = lambda: 0  # gates standing by for the channel, as the heartbeat counts them
    took_over_at: float = 0.0  # Unix time this run took the channel over from another gate (0: it did not)
    took_over_from: str = ""  # HOST pid N of the gate it took over from
    standing_by: bool = False  # gate run --standby, waiting to take the channel over
    snapshot_tables: int = 0  # table snapshots running in this run
    last_event_time: int = 0
    binlog_expire: float = 0.0  # how long the source keeps its binlogs (0: until purged by hand)
    dc_connected: bool = True
    written: dict[str, int] = field(default_factory=dict)
    loop_at: float = field(default_factory=time.monotonic)
    progress_at: float = field(default_factory=time.monotonic)
    caught_up_at: float = 0.0  # wall clock: when the reader last stood at the source's end with nothing pending
    at_end: bool = False  # no transaction read since then
    # source times of the transactions read and not checkpointed yet, by where each ends in the binlog
    unsettled: deque[tuple[tuple[int, str, int], int]] = field(default_factory=deque)
    open_since: int | None = None  # source time of the transaction being read (its start read, not its end)
    started_at: float = field(default_factory=time.time)
    retention: RetentionFigures = field(default_factory=RetentionFigures)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self._batch = Histogram("gate_write_batch_duration_seconds", "Seconds a writer took to store one chunk "
                                "in the DC, in one transaction", ["channel"], registry=self.registry,
                                buckets=BATCH_BUCKETS).labels(self.channel)
        self._visible = Histogram("gate_commit_to_checkpoint_seconds", "Seconds from a transaction's commit on "
                                  "the source to the checkpoint that makes it visible in the DC", ["channel"],
                                  registry=self.registry, buckets=VISIBLE_BUCKETS).labels(self.channel)
        self.registry.register(_Figures(self))
        ProcessCollector(registry=self.registry)  # process_start_time_seconds: restarts show as its changes

    # --- what the pipeline reports ----------------------------------------------------------

    def begin(self, stage: Stage | None) -> None:
        """Follow ``stage`` (None while the channel switches to the standby)."""
        if self.stage is not None:
            self.earlier_disconnects += self.stage.reader.disconnects
        self.stage = stage
        self.unsettled.clear()
        self.open_since = None
        self.loop_at = self.progress_at = time.monotonic()

    def chunk_written(self, optypes: dict[str, int], seconds: float) -> None:
        for optype, count in optypes.items():
            self.written[optype] = self.written.get(optype, 0) + count
        self._batch.observe(seconds)

    def checkpointed(self, state: ResumeState) -> None:
        self.progress_at = time.monotonic()
        unsettled, at = self.unsettled, _binlog_order(state.log_file, state.log_pos)
        while unsettled and unsettled[0][0] <= at:
            unsettled.popleft()
        if state.event_time:
            self._visible.observe(max(0.0, time.time() - state.event_time))

    def caught_up(self) -> None:
        self.progress_at = time.monotonic()
        self.caught_up_at = time.time()
        self.at_end = True

    def transaction_read(self, timestamp: int) -> None:
        """A transaction's start: gate is not at the source's end until a heartbeat finds it checkpointed."""
        self.at_end = False
        self.open_since = timestamp

    def transaction_ended(self, log_file: str | None, log_pos: int | None) -> None:
        """The open transaction ended at ``log_file:log_pos``: it counts until a checkpoint passes that."""
        if self.open_since is None:
            return
        unsettled, end = self.unsettled, _binlog_order(log_file, log_pos)
        if len(unsettled) >= UNSETTLED_MAX:  # a DC that stalls while the reader reads on: the list stays bounded
            unsettled[-1] = (end, unsettled[-1][1])  # the newest entry stretches to this end and keeps its older time
        else:
            unsettled.append((end, self.open_since))
        self.open_since = None

    # --- what the endpoints say -------------------------------------------------------------

    def lag(self) -> float:
        """:func:`~gate.capture.lag.lag_seconds`: 0 while the source's last heartbeat (at most AT_END_FRESH
        seconds ago, with the stream open) found gate at its end with everything checkpointed; else the age
        of the oldest transaction read and not checkpointed. With none such (gate has not read what follows
        the checkpoint yet: it starts, or the source is unreachable), the time since gate last stood at the
        source's end (since gate started, if it has not yet): the least the lag can be."""
        stage, now = self.stage, time.time()
        if stage is None:
            return 0.0
        at_end = self.at_end and stage.reader.connected and now - self.caught_up_at <= AT_END_FRESH
        try:  # the main thread pops settled transactions while this (the HTTP thread) reads
            oldest: int | None = self.unsettled[0][1]
        except IndexError:
            oldest = self.open_since
        lag = lag_seconds(at_end, now, oldest)
        return max(0.0, now - (self.caught_up_at or self.started_at)) if lag is None else lag

    def health(self) -> tuple[bool, str]:
        stage, now = self.stage, time.monotonic()
        if stage is None:
            return True, ("standing by: another gate runs the channel" if self.standing_by else
                          "starting: the channel's checks and start-up run")
        if not stage.reader.connected:
            return True, "the source is unreachable; gate reconnects (/readyz says 503 meanwhile)"
        turned, moved = now - self.loop_at, now - self.progress_at
        if turned > self.stuck_after:
            return False, (f"stuck: gate's main loop has not turned for {turned:.0f} s (limit {self.stuck_after:g} "
                           "s); it waits on the DC (locked tables, a full disk?) or on its writers")
        if moved > self.stuck_after:
            return False, (f"stuck: the checkpoint has not moved for {moved:.0f} s (limit {self.stuck_after:g} s) "
                           f"while {stage.pending} chunk(s) wait for the DC writers")
        return True, f"ok: checkpoint id={stage.checkpoint.id}, progress {moved:.1f} s ago"

    def readiness(self) -> tuple[bool, str]:
        stage = self.stage
        if stage is None:
            return False, "starting: not reading the source yet"
        if not stage.reader.connected:
            return False, "not connected to the source"
        if not self.dc_connected:
            return False, "the DC is unreachable: the last checkpoint could not be stored"
        lag = self.lag()
        if lag > self.ready_lag:
            return False, f"lagging: {lag:.0f} s behind the source (limit {self.ready_lag:g} s)"
        return True, f"ready: connected to the source and the DC, {lag:.1f} s behind"


class _Figures(Collector):
    """The gauges and counters, read from :class:`RunMetrics` when scraped."""

    def __init__(self, metrics: RunMetrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        m, ch = self.m, [self.m.channel]

        def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, text, labels=["channel"])
            family.add_metric(ch, value)
            return family

        def counter(name: str, text: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, text, labels=["channel"])
            family.add_metric(ch, value)
            return family

        info = GaugeMetricFamily("gate_build_info", "gate's version (always 1)", labels=["channel", "version"])
        info.add_metric([m.channel, _build_version()], 1)
        yield info
        rows = CounterMetricFamily("gate_rows_written_total", "Rows the writers committed to transfer_data",
                                   labels=["channel", "optype"])
        for optype, count in sorted(dict(m.written).items()):
            rows.add_metric([m.channel, optype], count)
        yield rows
        yield counter("gate_transactions_total", "Source transactions read", m.transactions())
        yield counter("gate_failovers_total", "Switches to the standby by this process", m.failovers)
        yield gauge("gate_holder_epoch", "The channel's epoch this gate holds it with: one more at every start or "
                    "takeover", m.epoch)
        yield gauge("gate_standing_by", "1 while this gate stands by (gate run --standby) and another runs the "
                    "channel", int(m.standing_by))
        yield gauge("gate_standby_gates", "Gates standing by to take the channel over (gate run --standby, "
                    "heartbeat within 3 leases)", m.standbys())
        took = GaugeMetricFamily("gate_takeover_timestamp_seconds", "When this gate, standing by, took the channel "
                                 "over (Unix time; 0: it started it)", labels=["channel", "from_gate"])
        took.add_metric([m.channel, m.took_over_from], m.took_over_at)
        yield took
        yield gauge("gate_snapshot_tables", "Table snapshots running (their SNAPSHOTEND not numbered yet)",
                    m.snapshot_tables)
        yield gauge("gate_last_event_timestamp_seconds", "Source commit time of the last transaction read "
                    "(Unix time)", m.last_event_time)
        yield gauge("gate_replication_lag_seconds", "Seconds the checkpoint is behind the source (0 at its end)",
                    m.lag())
        yield from _retention(m.channel, m.retention)
        yield gauge("gate_source_binlog_expire_seconds", "How long the source keeps its binary logs "
                    "(binlog_expire_logs_seconds; 0: until purged by hand)", m.binlog_expire)
        stage = m.stage
        if stage is None:
            return
        yield gauge("gate_checkpoint_id", "transfer_checkpoint id: every row at or below it is complete",
                    stage.checkpoint.id)
        yield gauge("gate_checkpoint_tid", "transfer_checkpoint tid", stage.checkpoint.tid)
        yield gauge("gate_source_connected", "1 while the binlog stream is open", int(stage.reader.connected))
        yield gauge("gate_dc_stalled_seconds", "Seconds the DC has made no progress while the writers or the "
                    "checkpoint wait for it, once gate has warned of it (0: not stalled)",
                    stage.dc.stalled_for if stage.dc is not None else 0.0)
        yield counter("gate_source_disconnects_total", "Binlog streams lost",
                      m.earlier_disconnects + stage.reader.disconnects)
        for kind, pool in (("decoder", stage.decoders), ("writer", stage.writers)):
            yield gauge(f"gate_{kind}_queue_length", f"Jobs waiting for the {kind} processes", pool.queued)
            yield gauge(f"gate_{kind}_queue_capacity", f"Jobs the {kind} queue holds before the reader waits",
                        pool.capacity)


def _retention(channel: str, figures: RetentionFigures) -> Iterator[Metric]:
    """The retention's series (label channel) and one series per registered consumer (labels channel, consumer)."""
    for name, text, value, family in (
            ("gate_retention_purged_through_id", "Highest transfer_data id retention has removed (0: none)",
             figures.purged_through, GaugeMetricFamily),
            ("gate_retention_oldest_kept_id", "purged_through + 1: the oldest id transfer_data keeps",
             figures.oldest_kept_id, GaugeMetricFamily),
            ("gate_retention_rows_removed_total", "Rows retention removed from transfer_data (this process)",
             figures.removed_total, CounterMetricFamily),
            ("gate_retention_errors_total", "Retention passes that failed", figures.errors_total, CounterMetricFamily),
            ("gate_retention_last_run_timestamp_seconds", "When the last retention pass ended without error "
             "(Unix time)", figures.last_run, GaugeMetricFamily)):
        single = family(name, text, labels=["channel"])
        single.add_metric([channel], value)
        yield single
    consumers = list(figures.consumers)
    per_consumer: tuple[tuple[str, str, Callable[[ConsumerInfo], float]], ...] = (
            ("gate_consumer_cursor_id", "A registered consumer's cursor id (gate_consumer)", lambda c: c.cursor_id),
            ("gate_consumer_lag_rows", "Rows between a registered consumer's cursor and the checkpoint",
             lambda c: c.behind),
            ("gate_consumer_last_move_timestamp_seconds", "When a registered consumer's cursor last moved (Unix "
             "time)", lambda c: c.moved_at),
            ("gate_consumer_stale", "1 when a consumer behind the checkpoint has not moved for longer than "
             "consumer_max_idle_days", lambda c: int(c.stale)))
    for name, text, read in per_consumer:
        per = GaugeMetricFamily(name, text, labels=["channel", "consumer"])
        for consumer in consumers:
            per.add_metric([channel, consumer.name], read(consumer))
        yield per


def running_figure(address: str, name: str, channel: str) -> float | None:
    """The figure ``name`` of ``channel`` as the gate serving its metrics on ``address`` (HOST:PORT) has it
    now; None when that gate does not answer within a second or has no such figure."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=1.0) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("channel") == channel:
                return float(sample.value)
    return None


class MetricsServer:
    """/metrics, /healthz and /readyz on ``address:port``, from a daemon thread, until :meth:`close`."""

    def __init__(self, metrics: RunMetrics, address: str, port: int) -> None:
        routes = {"/healthz": metrics.health, "/readyz": metrics.readiness}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, CONTENT_TYPE_LATEST, generate_latest(metrics.registry))
                elif path in routes:
                    ok, why = routes[path]()
                    self._reply(200 if ok else 503, "text/plain; charset=utf-8", (why + "\n").encode())
                else:
                    self._reply(404, "text/plain; charset=utf-8", b"not found: try /metrics, /healthz or /readyz\n")

            def _reply(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
                pass  # a scrape every few seconds is not worth a log line

        try:
            self._server = ThreadingHTTPServer((address, port), Handler)
        except OSError as exc:
            raise MetricsPortBusy(
                f"gate cannot serve its metrics on {address}:{port} ({exc}). Choose a free port with "
                "--metrics-port (or the channel's metrics_port; 0 turns the endpoints off) and an address of "
                "this host with --metrics-address."
            ) from exc
        self._server.daemon_threads = True
        self.address = address
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="gate-metrics", daemon=True)
        self._thread.start()
        log.info("channel %s: metrics on http://%s:%d/metrics, health on /healthz and /readyz",
                 metrics.channel, address, self.port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _binlog_order(log_file: str | None, log_pos: int | None) -> tuple[int, str, int]:
    """A binlog position as a key that sorts as the binlog does (mysql-bin.999999 before mysql-bin.1000000)."""
    name = log_file or ""
    return len(name), name, log_pos or 0
