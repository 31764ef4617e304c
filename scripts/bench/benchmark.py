"""gate benchmark: gate end to end against the bare binlog decoder, lag under steady load, peak RSS.

    .venv/bin/python scripts/bench/benchmark.py [--quick] [--json FILE]

Everything runs on private sandbox servers (a source and a DC) started in a temporary folder and
stopped at the end. For each workload the source is loaded first; then the same binlog range is
read twice: by a bare python-mysql-replication BinLogStreamReader (the baseline, in this process)
and by gate (a separate process, scripts/bench/gate_runner.py, running gate.capture.pipeline.Pipeline on a channel
whose start position is the workload's first position). See scripts/bench/README.md for the figures.

With --tls, workloads a, b and c run a second time on sandbox servers that accept only TLS (their own
CA; gate, the baseline and every connection verify the certificate and the host name), and the
figures of both runs are printed side by side.

Workloads:
  a  single-table inserts in 100-row transactions (--rows, 200k)
  b  mixed insert/update/delete over 10 tables with 20-column rows of mixed types (--mixed-rows, 100k)
  c  one transaction of --big-rows rows (1M)
  lag  a paced load of --lag-rate rows/s (100-row transactions) for --lag-seconds while gate runs

Targets are printed as pass/fail marks, never asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import peers_harness
import psutil
import pymysql
from ceiling import ceiling_figures, measure_ceiling
from monitors import (  # beside this script: python puts its folder first on sys.path
    CheckpointPoller,
    Position,
    TreeMonitor,
    TreeSample,
    busy_percent,
    innodb_state,
    machine_busy,
    mariadbd_cpu,
    percentile,
    wait_quiet,
)
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)
from report import peers_report, report
from workloads import (
    A_DDL,
    C_DDL,
    LAG_DDL,
    WIDE_DDL,
    WIDE_TABLES,
    lag_load,
    load_big,
    load_inserts,
    load_mixed,
)

from gate.common.columns import ColumnRule
from gate.common.config import ChannelDefaults
from gate.common.dc import ChannelSettings, connect, create_channel, write_start_position
from gate.devtools.sandbox import MariaDBServer, Sandbox

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(1, str(BENCH_DIR.parents[1]))  # the repository: tests.linkproxy, the proxy of the link tests
from tests.linkproxy import LinkProxy  # noqa: E402

RUNNER = BENCH_DIR / "gate_runner.py"
MB = 1024 * 1024
DC_ARGS = ("--innodb-log-file-size=256M",)  # the DC's redo log: the sandbox's 8 MB (small for the tests' many
# servers) made the DC server flush its pages all the time under an ingest of 60,000 rows/s and more, and spend
# the more CPU a row the more writer transactions ran at once (MariaDB's default is 96 MB; a DC is sized larger)




@dataclass
class Links:
    """Proxies between gate and the DC and between gate and the source (tests.linkproxy), adding latency."""

    dc: LinkProxy
    source: LinkProxy

    def set(self, dc_ms: float, source_ms: float) -> None:
        """Round trips longer by ``dc_ms`` and ``source_ms`` milliseconds (half each way)."""
        self.dc.delay, self.source.delay = dc_ms / 2000, source_ms / 2000

    def close(self) -> None:
        self.dc.close()
        self.source.close()


def latencies(option: str | None) -> list[int]:
    """--dc-latency / --source-latency: comma-separated milliseconds."""
    return [int(ms) for ms in option.split(",") if ms.strip()] if option else []


# --- servers ---------------------------------------------------------------------------------

def master_position(conn: pymysql.Connection) -> Position:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return row[0], int(row[1])


# --- baseline: a bare BinLogStreamReader ------------------------------------------------------

def baseline(source: MariaDBServer, start: Position, end: Position, repeat: int = 1) -> dict[str, Any]:
    """Read [start, end) with a bare BinLogStreamReader (file/pos, non-blocking), iterating every
    row's values; the median of ``repeat`` runs."""
    runs = []
    cpus = []
    rows = 0
    busy0 = machine_busy()
    for _ in range(repeat):
        rows = 0
        t0 = time.perf_counter()
        c0 = time.process_time()
        stream = BinLogStreamReader(
            connection_settings=source.connection_settings(), server_id=99, resume_stream=True,
            log_file=start[0], log_pos=start[1], blocking=False,
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent])
        try:
            for event in stream:
                if type(event) is XidEvent:
                    if (stream.log_file, stream.log_pos) >= end:
                        break
                    continue
                for row in event.rows:
                    for image in (row.get("values"), row.get("before_values"), row.get("after_values")):
                        if image is not None:
                            for _v in image.values():
                                pass
                    rows += 1
        finally:
            stream.close()
        runs.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    seconds = statistics.median(runs)
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "runs_s": runs,
            "cpu_us_per_row": statistics.median(cpus) / max(1, rows) * 1e6,
            "machine_busy_percent": busy_percent(busy0, machine_busy())}


# --- gate as a separate process ---------------------------------------------------------------

# --column-rules: three rules on each 20-column table of workload (b); the key is the benchmark's own
BENCH_RULES = (ColumnRule("exclude", "bench_b.*.c_blob"), ColumnRule("hash", "bench_b.*.c_vc", key_env="GATE_BENCH_KEY"),
               ColumnRule("truncate", "bench_b.*.c_text", length=20))


def new_channel(dc: MariaDBServer, source: MariaDBServer, name: str, start: Position | None,
                defaults: ChannelDefaults, allow: tuple[str, ...], columns: tuple[ColumnRule, ...] = (),
                source_port: int | None = None) -> None:
    """A channel reading ``source`` (through 127.0.0.1:``source_port``, a proxy, when given)."""
    config = source.config()
    if source_port is not None:
        config = replace(config, host="127.0.0.1", port=source_port)
    with connect(dc.config(), "DC") as conn:
        create_channel(conn, ChannelSettings(name, config, server_id=4242, allow=allow,
                                             columns=columns, defaults=defaults))
        if start is not None:
            with conn.cursor() as cur:
                write_start_position(cur, name, start[0], start[1], None, config.address)


def dc_checksum(dc: MariaDBServer, name: str) -> str:
    """A fingerprint of transfer_data, to tell that two runs wrote the same rows."""
    with dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT COUNT(*), SUM(CRC32(CONCAT_WS('|', id, tid, dbname, tablename, create_time, "
                    "optype, data))) FROM transfer_data")
        count, crc = cur.fetchone()
    return f"{count}:{crc}"


def sink_checksum(sink_dir: Path) -> str:
    """The fingerprint of a --capture-only run's rows, as :func:`dc_checksum` gives it for the rows in the DC:
    the counting writers' totals added up (a sum of CRC32s, as the DC's SUM)."""
    totals = [json.loads(f.read_text()) for f in sorted(sink_dir.glob("sink-*.json"))]
    count, crc = sum(t["rows"] for t in totals), sum(t["crc"] for t in totals)
    return f"{count}:{crc if count else None}"


def drop_channel(dc: MariaDBServer, name: str) -> None:
    with dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


class GateProcess:
    """scripts/bench/gate_runner.py for one channel, with its tree monitored; without gate run's preflight
    unless ``preflight`` (--preflight) is set."""

    preflight = False

    def __init__(self, dc: MariaDBServer, channel: str, workdir: Path, profile_dir: Path | None = None,
                 py_spy: Path | None = None, dc_port: int | None = None, sink_dir: Path | None = None) -> None:
        self.stamp = workdir / f"{channel}.stamp"
        self.log = workdir / f"{channel}.log"
        cmd = [sys.executable, str(RUNNER), "--dc-port", str(dc_port or dc.port), "--channel", channel,
               "--stamp", str(self.stamp), *([] if self.preflight else ["--no-preflight"])]
        if dc.tls.ca:
            cmd += ["--dc-tls-ca", dc.tls.ca]
        if profile_dir is not None:
            cmd += ["--profile-dir", str(profile_dir)]
        if sink_dir is not None:
            cmd += ["--capture-only", str(sink_dir)]
        if py_spy is not None:
            spy = Path(sys.executable).with_name("py-spy")
            cmd = [str(spy), "record", "--rate", "200", "--format", "raw", "--subprocesses", "--idle", "--threads",
                   "-o", str(py_spy),
                   "--"] + cmd
        self.launched = time.time()
        self._log_file = open(self.log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log_file, stderr=subprocess.STDOUT, cwd=BENCH_DIR.parents[1])
        gate_pid = self.proc.pid
        if py_spy is not None:  # the runner is py-spy's child
            deadline = time.time() + 10
            while time.time() < deadline:
                kids = psutil.Process(self.proc.pid).children()
                if kids:
                    gate_pid = kids[0].pid
                    break
                time.sleep(0.01)
        self.pid = gate_pid
        self.monitor = TreeMonitor(gate_pid)
        self.monitor.start()

    def started_at(self, timeout: float = 30.0) -> float:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                return float(self.stamp.read_text())
            except (OSError, ValueError):
                self.check()
                time.sleep(0.01)
        raise RuntimeError(f"gate did not start within {timeout} s; see {self.log}")

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"gate exited with code {self.proc.returncode}; see {self.log}:\n"
                               + self.log.read_text()[-3000:])

    def wait_position(self, poller: CheckpointPoller, end: Position, timeout: float = 120.0) -> None:
        """Until the channel's checkpointed position (as ``poller`` sees it) reaches ``end``."""
        deadline = time.time() + timeout
        while poller.position is None or poller.position < end:
            self.check()
            if time.time() > deadline:
                raise RuntimeError(f"gate did not catch up within {timeout:.0f} s; see {self.log}")
            time.sleep(0.05)

    def stop(self, timeout: float = 120.0) -> TreeSample:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        sample = self.monitor.stop()
        self._log_file.close()
        return sample


STEADY = ("steady", "landed_steady", "written_steady")  # the steady rates: by the checkpoint, the highest id
# committed and the rows the DC server inserted (see monitors.CheckpointPoller)


def steady_rate(trace: list[tuple[float, int]], rows: int) -> float | None:
    """Rows/s of a trace of (time, id) between 10 % and 90 % of ``rows``: without start-up and end."""
    if len(trace) < 4 or rows < 1000:
        return None
    t10, i10 = next(((t, i) for t, i in trace if i >= rows * 0.1), (None, 0))
    t90, i90 = next(((t, i) for t, i in trace if i >= rows * 0.9), (None, 0))
    return (i90 - i10) / (t90 - t10) if t10 is not None and t90 is not None and t90 > t10 else None


def run_gate(box: Sandbox, channel: str, start: Position, end: Position, rows: int, workdir: Path,
             defaults: ChannelDefaults, allow: tuple[str, ...], timeout: float,
             profile_dir: Path | None = None, py_spy: Path | None = None,
             columns: tuple[ColumnRule, ...] = (), links: Links | None = None,
             capture_only: bool = False) -> dict[str, Any]:
    """gate over [start, end): rows/s from Pipeline.run() to the checkpoint reaching ``end``. With ``links``,
    gate reaches the DC and the source through their proxies (the DC's ceiling is not measured then). With
    ``capture_only`` its writer processes count the rows instead of writing them (gate_runner.py
    --capture-only): the fingerprint of the rows comes from them, and no ceiling is measured."""
    new_channel(box.dc, box.source, channel, start, defaults, allow, columns,
                links.source.port if links else None)
    poller = CheckpointPoller(box.dc, channel, end)
    innodb0 = innodb_state(box.dc)
    cpu0 = {"source": mariadbd_cpu(box.source), "dc": mariadbd_cpu(box.dc)}
    busy0 = machine_busy()
    sink_dir = workdir / f"{channel}.sink" if capture_only else None
    gate = GateProcess(box.dc, channel, workdir, profile_dir, py_spy, links.dc.port if links else None, sink_dir)
    try:
        poller.start()
        t_run = gate.started_at()
        deadline = time.time() + timeout
        early: tuple[int, dict[str, float]] | None = None  # (checkpoint id, CPU by role) once 10% is done
        while not poller.reached.wait(0.05):
            gate.check()
            if early is None and poller.trace and poller.trace[-1][1] >= rows * 0.1:
                early = (poller.trace[-1][1], gate.monitor.snapshot_cpu())
            if time.time() > deadline:
                raise RuntimeError(f"gate did not reach {end} within {timeout} s (at {poller.position}); see {gate.log}")
        t_done = poller.reached_at
        assert t_done is not None
        cpu_gate = gate.monitor.snapshot_cpu()
        cpu1 = {"source": mariadbd_cpu(box.source), "dc": mariadbd_cpu(box.dc)}
        busy1 = machine_busy()
        innodb1 = innodb_state(box.dc)
    finally:
        sample = gate.stop()
        poller.stop()
    final_id = poller.trace[-1][1] if poller.trace else 0
    seconds = t_done - t_run
    trace = [(t, i) for t, i in poller.trace if i > 0]
    steady = steady_rate(trace, rows)
    wall = t_done - t_run
    cpu = {role: round(s / wall * 100, 1) for role, s in cpu_gate.items()}
    cpu.update({f"mariadbd_{k}": round((cpu1[k] - cpu0[k]) / wall * 100, 1) for k in cpu0})
    per_row = {role: round(s / max(1, final_id) * 1e6, 2) for role, s in cpu_gate.items()}
    per_row.update({f"mariadbd_{k}": round((cpu1[k] - cpu0[k]) / max(1, final_id) * 1e6, 2) for k in cpu0})
    steady_cpu = None  # CPU µs per row of gate's processes after 10% of the rows: without start-up (imports, spawns)
    if early is not None and final_id > early[0]:
        steady_cpu = {role: round((s - early[1].get(role, 0.0)) / (final_id - early[0]) * 1e6, 2)
                      for role, s in cpu_gate.items()}
    if sink_dir is not None:
        checksum, ceiling = sink_checksum(sink_dir), None
    else:
        checksum = dc_checksum(box.dc, channel)
        ceiling = None if links else measure_ceiling(box.dc, channel)  # the DC's LOAD DATA rate for these very rows
    drop_channel(box.dc, channel)
    return {
        "dc_checksum": checksum, "ceiling": ceiling, "capture_only": capture_only,
        "rows": final_id, "expected_rows": rows, "complete": final_id == rows,
        "seconds": seconds, "rows_per_s": final_id / seconds, "startup_s": (trace[0][0] - t_run) if trace else None,
        "launch_to_done_s": t_done - gate.launched, "steady_rows_per_s": steady,
        "landed_steady_rows_per_s": steady_rate([(t, i) for t, i in poller.landed if i > 0], rows),
        "written_steady_rows_per_s": steady_rate(poller.written, rows),
        "peak_rss_mb": sample.peak_tree_rss / MB, "peak_main_rss_mb": sample.peak_main_rss / MB,
        "cpu_percent": cpu, "cpu_us_per_row": per_row, "steady_cpu_us_per_row": steady_cpu,
        "cpu_us_per_row_gate": round(sum(v for k, v in per_row.items() if not k.startswith("mariadbd_")), 2),
        "steady_cpu_us_per_row_gate": round(sum(steady_cpu.values()), 2) if steady_cpu else None,
        "machine_busy_percent": busy_percent(busy0, busy1),
        "dc_at_start": {"checkpoint_age_mb": round(innodb0["Innodb_checkpoint_age"] / MB, 1),
                        "dirty_pages": innodb0["Innodb_buffer_pool_pages_dirty"]},
        "dc_pages_flushed": innodb1["Innodb_buffer_pool_pages_flushed"] - innodb0["Innodb_buffer_pool_pages_flushed"],
        "exit_code": gate.proc.returncode,
    }


# --- lag -------------------------------------------------------------------------------------

def run_lag(box: Sandbox, workdir: Path, seconds: float, rate: int, rows_per_txn: int,
            defaults: ChannelDefaults, links: Links | None = None, label: str = "") -> dict[str, Any]:
    channel = f"bench_lag_ch{label}"
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS bench_lag")
        cur.execute("CREATE DATABASE bench_lag")
        cur.execute(LAG_DDL)
        start = master_position(conn)
    new_channel(box.dc, box.source, channel, start, defaults, ("bench_lag.*",),
                source_port=links.source.port if links else None)
    poller = CheckpointPoller(box.dc, channel)
    cpu0 = {"source": mariadbd_cpu(box.source), "dc": mariadbd_cpu(box.dc)}
    busy0 = machine_busy()
    gate = GateProcess(box.dc, channel, workdir, dc_port=links.dc.port if links else None)
    out = workdir / "lag_commits.json"
    try:
        poller.start()
        gate.started_at()
        with box.source.connect() as conn, conn.cursor() as cur:  # wait until gate streams the binlog
            deadline = time.time() + 30
            while not cur.execute("SELECT 1 FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'"):
                gate.check()
                if time.time() > deadline:
                    raise RuntimeError(f"gate did not connect to the source; see {gate.log}")
                time.sleep(0.02)
        time.sleep(0.5)
        t_load = time.time()
        loader = mp.get_context("spawn").Process(
            target=lag_load, args=(box.source.port, seconds, rate // rows_per_txn, rows_per_txn, str(out)))
        loader.start()
        loader.join()
        load_wall = time.time() - t_load
        with box.source.connect() as conn:
            end = master_position(conn)
        gate.wait_position(poller, end)
        time.sleep(0.05)
        wall = time.time() - t_load
        cpu_gate = gate.monitor.snapshot_cpu()
        cpu1 = {"source": mariadbd_cpu(box.source), "dc": mariadbd_cpu(box.dc)}
        busy1 = machine_busy()
    finally:
        sample = gate.stop()
        poller.stop()
    commits = dict(json.loads(out.read_text()))
    with box.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT t.id, m.mx, t.data FROM transfer_data t JOIN "
                    "(SELECT tid, MIN(id) AS mn, MAX(id) AS mx FROM transfer_data GROUP BY tid) m ON t.id = m.mn")
        firsts = cur.fetchall()
    trace = poller.trace
    times = [t for t, _ in trace]
    ids = [i for _, i in trace]
    import bisect

    lags: list[float] = []
    rows = 0
    for first_id, last_id, data in firsts:
        image = json.loads(data)["NEW"]
        txn = int(next(cell["txn"] for cell in image if "txn" in cell))
        k = bisect.bisect_left(ids, int(first_id))  # checkpoint ids only grow
        if k == len(ids) or txn not in commits:
            raise RuntimeError(f"transaction {txn} (id {first_id}) never covered by the checkpoint")
        lag = times[k] - commits[txn]
        n = int(last_id) - int(first_id) + 1
        lags.extend([lag] * n)  # every row of the transaction is covered at the same moment
        rows += n
    cpu = {role: round(s / wall * 100, 1) for role, s in cpu_gate.items()}
    cpu.update({f"mariadbd_{k}": round((cpu1[k] - cpu0[k]) / wall * 100, 1) for k in cpu0})
    drop_channel(box.dc, channel)
    return {
        "rows": rows, "transactions": len(firsts), "expected_transactions": len(commits),
        "source_rows_per_s": rows / load_wall,
        "lag_p50_s": percentile(lags, 50), "lag_p99_s": percentile(lags, 99), "lag_max_s": max(lags),
        "peak_rss_mb": sample.peak_tree_rss / MB, "peak_main_rss_mb": sample.peak_main_rss / MB,
        "cpu_percent": cpu, "machine_busy_percent": busy_percent(busy0, busy1), "exit_code": gate.proc.returncode,
    }


# --- the run ---------------------------------------------------------------------------------

WORKLOADS = {
    "a": ("a: inserts, 100-row txns", "bench_a", [A_DDL], load_inserts),
    "b": ("b: mixed i/u/d, 10 wide tables", "bench_b", [WIDE_DDL.format(n=n) for n in range(WIDE_TABLES)],
          load_mixed),
    "c": ("c: one big transaction", "bench_c", [C_DDL], load_big),
}


def measure_workload(box: Sandbox, key: str, rows: int, args: argparse.Namespace, workdir: Path,
                     defaults: ChannelDefaults, label: str = "") -> dict[str, Any]:
    title, db, ddl, load = WORKLOADS[key]
    label = label or key
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for statement in ddl:
            cur.execute(statement)
        cur.execute("FLUSH BINARY LOGS")  # each workload starts a binlog file of its own
        start = master_position(conn)
        t0 = time.perf_counter()
        changed = load(conn, rows)
        load_s = time.perf_counter() - t0
        end = master_position(conn)
    print(f"[{label}] loaded {changed} rows in {load_s:.1f} s ({changed / load_s:,.0f} rows/s); "
          f"binlog {start[0]}:{start[1]} .. {end[0]}:{end[1]}", flush=True)
    load1 = os.getloadavg()[0]
    if args.wait_quiet:
        wait_quiet(args.wait_quiet)
    base = baseline(box.source, start, end, args.repeat)
    print(f"[{label}] baseline: {base['rows']} rows in {base['seconds']:.2f} s = {base['rows_per_s']:,.0f} rows/s "
          f"(machine busy {base['machine_busy_percent']:.0f}% of 200)",
          flush=True)
    if base["rows"] != changed:
        print(f"[{label}] warning: the baseline read {base['rows']} rows, the workload changed {changed}")
    runs = []
    for n in range(args.repeat):
        profile_dir = workdir / f"profile-{key}" if args.profile == key else None
        spy = workdir / f"py-spy-{key}.txt" if args.py_spy == key else None
        if args.wait_quiet:
            wait_quiet(args.wait_quiet)
        result = run_gate(box, f"bench_{key}_ch{n}", start, end, changed, workdir, defaults, (f"{db}.*",),
                          timeout=max(300.0, changed / 1000), profile_dir=profile_dir, py_spy=spy)
        runs.append(result)
        print(f"[{label}] gate: {result['rows']} rows in {result['seconds']:.2f} s = {result['rows_per_s']:,.0f} rows/s"
              f" (steady {result['steady_rows_per_s'] or 0:,.0f}); peak RSS {result['peak_rss_mb']:.0f} MB tree, "
              f"{result['peak_main_rss_mb']:.0f} MB main; CPU % {result['cpu_percent']}, "
              f"machine busy {result['machine_busy_percent']:.0f}% of 200", flush=True)
        if profile_dir is not None:
            print(f"[{label}] cProfile output in {profile_dir}")
        if spy is not None:
            print(f"[{label}] py-spy output in {spy}")
    gate = median_run(runs)
    captures = []
    for n in range(args.repeat if args.capture_only else 0):
        if args.wait_quiet:
            wait_quiet(args.wait_quiet)
        result = run_gate(box, f"bench_{key}_cap{n}", start, end, changed, workdir, defaults, (f"{db}.*",),
                          timeout=max(300.0, changed / 1000), capture_only=True)
        result["same_rows"] = result["dc_checksum"] == gate["dc_checksum"]
        captures.append(result)
        print(f"[{label}] gate, capture only: {result['rows']} rows in {result['seconds']:.2f} s = "
              f"{result['rows_per_s']:,.0f} rows/s (steady {result['steady_rows_per_s'] or 0:,.0f}); CPU "
              f"{result['cpu_us_per_row_gate']:.1f} us/row; the same rows as written into the DC: "
              f"{result['same_rows']}; machine busy {result['machine_busy_percent']:.0f}% of 200", flush=True)
    capture = median_run(captures) if captures else None
    linked = latency_runs(box, key, db, start, end, changed, args, workdir, defaults, label, gate)
    peers, peer_runs = measure_peers(box, key, db, start, changed, args, workdir, label)
    ruled = None
    if args.column_rules and key == "b":
        os.environ.setdefault("GATE_BENCH_KEY", "bench-only-key")  # the gate runner inherits it
        if args.wait_quiet:
            wait_quiet(args.wait_quiet)
        ruled = run_gate(box, f"bench_{key}_rules", start, end, changed, workdir, defaults, (f"{db}.*",),
                         timeout=max(300.0, changed / 1000), columns=BENCH_RULES)
        print(f"[{label}] gate with {len(BENCH_RULES)} column rules: {ruled['rows']} rows in {ruled['seconds']:.2f} s "
              f"= {ruled['rows_per_s']:,.0f} rows/s (steady {ruled['steady_rows_per_s'] or 0:,.0f}) against "
              f"{gate['rows_per_s']:,.0f} rows/s without; decoder CPU {ruled['cpu_us_per_row'].get('decoder', 0)} "
              f"us/row against {gate['cpu_us_per_row'].get('decoder', 0)} without", flush=True)
    return {
        "gate_with_column_rules": ruled, "latency": linked,
        "workload": title, "key": key, "rows": changed, "load_rows_per_s": changed / load_s,
        "loadavg_1m_before": load1, "baseline": base, "gate": gate, "gate_runs": runs,
        "gate_capture": capture, "gate_capture_runs": captures,
        "peers": peers, "peer_runs": peer_runs,
        "ratio": gate["rows_per_s"] / base["rows_per_s"],
        **ceiling_figures(gate["rows_per_s"], [r["ceiling"] for r in runs]),
        "cpu_ratio": gate["cpu_us_per_row_gate"] / base["cpu_us_per_row"],
        "steady_cpu_ratio": (gate["steady_cpu_us_per_row_gate"] / base["cpu_us_per_row"]
                             if gate["steady_cpu_us_per_row_gate"] else None),
    }


def latency_runs(box: Sandbox, key: str, db: str, start: Position, end: Position, rows: int,
                 args: argparse.Namespace, workdir: Path, defaults: ChannelDefaults, label: str,
                 plain: dict[str, Any]) -> dict[str, Any]:
    """gate over the same range through the proxies: at 0 ms added, then at each --dc-latency (the source's
    link at 0) and each --source-latency (the DC's at 0); rows/s as ratios of the 0 ms run through the proxies.

    With ``--repeat N`` that is done in N rounds, each run compared with the 0 ms run of its own round (minutes
    apart, not the whole series: this machine's rate drifts by 10 to 20 % between runs); every second round runs
    the cases in the reverse order, 0 ms last, so that a drift within a round weighs on either side alike, not
    always on the runs after the 0 ms run. Each case's rounds are summed up by :func:`round_figures`."""
    links: Links | None = args.links
    cases = [("dc", ms) for ms in latencies(args.dc_latency)] + [("source", ms) for ms in latencies(args.source_latency)]
    if links is None or not cases:
        return {}
    rounds: dict[str, list[dict[str, Any]]] = {}
    for n in range(args.repeat):
        done: dict[str, dict[str, Any]] = {}
        order = [("none", 0)] + cases
        for link, ms in order if n % 2 == 0 else order[::-1]:
            links.set(ms if link == "dc" else 0, ms if link == "source" else 0)
            if args.wait_quiet:
                wait_quiet(args.wait_quiet)
            done[f"{link} {ms} ms"] = run_gate(box, f"bench_{key}_{link}{ms}_{n}", start, end, rows, workdir, defaults,
                                               (f"{db}.*",), timeout=max(600.0, rows / 100), links=links)
        zero = done["none 0 ms"]
        for link, ms in order:
            name = f"{link} {ms} ms"
            run = done[name]
            run["ratio_to_0ms"] = run["rows_per_s"] / zero["rows_per_s"]
            for steady in STEADY:
                run[f"{steady}_ratio_to_0ms"] = ((run[f"{steady}_rows_per_s"] or 0) / zero[f"{steady}_rows_per_s"]
                                                 if zero[f"{steady}_rows_per_s"] else None)
            run["extra_s"] = run["seconds"] - zero["seconds"]
            run["same_rows"] = run["dc_checksum"] == plain["dc_checksum"]
            rounds.setdefault(name, []).append(run)
            print(f"[{label}] gate, {name} added on the {link} link{f' (round {n + 1})' if args.repeat > 1 else ''}: "
                  f"{run['rows']} rows in {run['seconds']:.2f} s = {run['rows_per_s']:,.0f} rows/s, "
                  f"{run['ratio_to_0ms']:.2f} of 0 ms through the proxies (steady {run['steady_rows_per_s'] or 0:,.0f}, "
                  f"landed {run['landed_steady_rows_per_s'] or 0:,.0f}, "
                  f"written {run['written_steady_rows_per_s'] or 0:,.0f}); DC at its start: checkpoint age "
                  f"{run['dc_at_start']['checkpoint_age_mb']} MB, {run['dc_at_start']['dirty_pages']} dirty pages; "
                  f"{run['dc_pages_flushed']} pages flushed; "
                  f"DC rows identical: {run['same_rows']}", flush=True)
    links.set(0, 0)
    return round_figures(rounds)


def median_run(runs: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any] = lambda r: r["rows_per_s"]
               ) -> dict[str, Any]:
    """The run of the median ``key`` (rows/s unless given); of an even number, the lower of the two in the
    middle, so that two runs never report the better one."""
    return sorted(runs, key=key)[(len(runs) - 1) // 2]


def round_figures(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each case's runs of every round in one: the run of its median whole-run ratio (of an even number, the
    lower of the two in the middle), with the median ratios and extra seconds (of an even number, the mean of
    the two in the middle) and every round's ratios."""
    figures: dict[str, dict[str, Any]] = {}
    for name, runs in rounds.items():
        run = dict(median_run(runs, key=lambda r: (r["ratio_to_0ms"], r["rows_per_s"])))
        for steady in STEADY:
            ratios = [r[f"{steady}_ratio_to_0ms"] for r in runs]
            known = [ratio for ratio in ratios if ratio is not None]
            run[f"{steady}_ratio_to_0ms"] = statistics.median(known) if known else None
            run[f"round_{steady}_ratios"] = [None if ratio is None else round(ratio, 3) for ratio in ratios]
        run.update(round_ratios=[round(r["ratio_to_0ms"], 3) for r in runs],
                   extra_s=statistics.median(r["extra_s"] for r in runs),
                   same_rows=all(r["same_rows"] for r in runs))
        figures[name] = run
    return figures


def measure_peers(box: Sandbox, key: str, db: str, start: Position, rows: int, args: argparse.Namespace,
                  workdir: Path, label: str) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Each peer of ``args.peer_classpaths`` over the workload's range, ``args.repeat`` times (once more
    only while it completes); the median run of each."""
    medians: dict[str, Any] = {}
    all_runs: dict[str, list[dict[str, Any]]] = {}
    for name, classpath in args.peer_classpaths.items():
        runs: list[dict[str, Any]] = []
        for n in range(args.repeat):
            if args.wait_quiet:
                wait_quiet(args.wait_quiet)
            run = peers_harness.run_peer(name, classpath, box.source, db, start, rows, workdir, f"{key}{n}")
            runs.append(run)
            if not run["complete"]:
                print(f"[{label}] {name}: did not complete: {run['error']}", flush=True)
                break
            print(f"[{label}] {name}: {run['rows']} rows in {run['seconds']:.2f} s = {run['rows_per_s']:,.0f} rows/s "
                  f"(steady {run['steady_rows_per_s'] or 0:,.0f}); CPU {run['cpu_us_per_row']:.1f} us/row; "
                  f"peak RSS {run['peak_rss_mb']:.0f} MB; machine busy {run['machine_busy_percent']:.0f}% of 200",
                  flush=True)
        done = [r for r in runs if r["complete"]]
        medians[name] = median_run(done) if len(done) == len(runs) else runs[-1]
        all_runs[name] = runs
    return medians, all_runs


def run_tls(workdir: Path, keys: list[str], rows: dict[str, int], args: argparse.Namespace,
            defaults: ChannelDefaults) -> dict[str, Any]:
    """The workloads again, on servers that accept only TLS: every connection verifies the server."""
    workdir = workdir / "tls"  # the plaintext runs' stamps and logs have the same names
    args = argparse.Namespace(**{**vars(args), "peer_classpaths": {}})  # the peers' harnesses connect in plaintext
    workdir.mkdir()
    box = Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True, tls=True, dc_args=DC_ARGS)
    try:
        box.up()
        return {key: measure_workload(box, key, rows[key], args, workdir, defaults, label=f"{key}+tls")
                for key in keys}
    finally:
        box.down()


def latency_report(results: dict[str, Any]) -> str:
    """gate's rows/s over links with added latency, as ratios of the 0 ms run through the same proxies: of the
    whole run, and of its steady part (between 10 % and 90 % of the rows) by the checkpoint, by the highest id
    landed in transfer_data and by the rows the DC server inserted (the last two show a single large
    transaction, whose checkpoint moves once); and the whole run's extra seconds over the 0 ms run, also counted
    in round trips of the link (the fixed cost of start-up and end).

    The target (at least 0.9 of the 0 ms rate on a and c, 0.8 on b) is judged on the steady rate: by the
    checkpoint, for c by the rows the DC inserted (or, in results without that count, the highest id landed).
    A whole run also pays round trips of start-up and end once (see docs/benchmark.md, "Links with latency")."""
    targets = {"a": 0.9, "b": 0.8, "c": 0.9}
    lines = ["workload                         link, RTT added    rows/s  whole of 0 ms  steady of 0 ms  "
             "landed steady  written steady  target      extra s  round trips  first checkpoint s  same DC rows"]
    for key, r in results["workloads"].items():
        runs = r.get("latency") or {}
        zero = next((run for name, run in runs.items() if name.startswith("none")), None)
        for name, run in runs.items():
            rtt = int(name.split()[1]) / 1000
            steady, landed = run["steady_ratio_to_0ms"], run.get("landed_steady_ratio_to_0ms")
            written = run.get("written_steady_ratio_to_0ms")
            judged = next((ratio for ratio in (steady, written, landed) if ratio is not None), None)
            target = "" if not rtt or judged is None else (
                f">= {targets[key]} " + ("PASS" if judged >= targets[key] else "FAIL"))
            extra = run.get("extra_s", run["seconds"] - zero["seconds"] if zero is not None else 0.0)
            lines.append(f"{r['workload']:<32} {name:<16} {run['rows_per_s']:>9,.0f} {run['ratio_to_0ms']:>14.2f}  "
                         f"{'' if steady is None else f'{steady:.2f}':>14}  "
                         f"{'' if landed is None or not rtt else f'{landed:.2f}':>13}  "
                         f"{'' if written is None or not rtt else f'{written:.2f}':>14}  {target:<11} {extra:>7.2f}  "
                         f"{f'{extra / rtt:.1f}' if rtt else '':>11}  {run['startup_s'] or 0:>18.2f}  "
                         f"{run['same_rows']}")
    for name, lag in (results.get("lag_latency") or {}).items():
        bound = lag["rtt_added_ms"] / 1000 + 1
        lines.append(f"lag at {lag['source_rows_per_s']:,.0f} rows/s, {name}: p50 {lag['lag_p50_s']:.3f} s, p99 "
                     f"{lag['lag_p99_s']:.3f} s (target < {bound:.1f} s: {'PASS' if lag['lag_p99_s'] < bound else 'FAIL'})"
                     f", max {lag['lag_max_s']:.3f} s")
    return "\n".join(lines)


def tls_report(results: dict[str, Any]) -> str:
    """gate's rows/s and CPU per row in plaintext and over TLS, per workload."""
    lines = ["workload                         plaintext rows/s  TLS rows/s  ratio   CPU us/row plain  TLS   ratio"]
    for key, tls in results["tls_workloads"].items():
        plain = results["workloads"].get(key)
        if plain is None:
            continue
        p, t = plain["gate"], tls["gate"]
        lines.append(f"{tls['workload']:<32} {p['rows_per_s']:>16,.0f} {t['rows_per_s']:>11,.0f} "
                     f"{t['rows_per_s'] / p['rows_per_s']:>6.2f} {p['cpu_us_per_row_gate']:>17.1f} "
                     f"{t['cpu_us_per_row_gate']:>5.1f} {t['cpu_us_per_row_gate'] / p['cpu_us_per_row_gate']:>6.2f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description="gate benchmark")
    parser.add_argument("--quick", action="store_true", help="small sizes: 20k / 10k / 100k rows, 10 s of lag load")
    parser.add_argument("--rows", type=int, help="workload (a) rows (default 200000; quick 20000)")
    parser.add_argument("--mixed-rows", type=int, help="workload (b) changed rows (default 100000; quick 10000)")
    parser.add_argument("--big-rows", type=int, help="workload (c) rows in one transaction (default 1000000; quick 100000)")
    parser.add_argument("--lag-seconds", type=float, help="duration of the steady load (default 20; quick 10)")
    parser.add_argument("--lag-rate", type=int, default=5000, help="rows/s of the steady load (default 5000)")
    parser.add_argument("--only", default="a,b,c,lag,memory", help="comma-separated subset of a,b,c,lag,memory")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of baseline, gate and each peer per workload (median); with --dc-latency or "
                             "--source-latency, rounds of the runs over the links (median ratio)")
    parser.add_argument("--writers", type=int, help="channel setting 'writers' (default: gate's default)")
    parser.add_argument("--decoders", type=int, help="channel setting 'decoders' (default: gate's default)")
    parser.add_argument("--batch-rows", type=int, help="channel setting 'batch_rows' (default: gate's default)")
    parser.add_argument("--metrics-port", type=int, help="channel setting 'metrics_port': serve /metrics while measured")
    parser.add_argument("--profile", choices=["a", "b", "c"],
                        help="cProfile gate (main, decoders, writers) on this workload")
    parser.add_argument("--py-spy", choices=["a", "b", "c"], help="py-spy record gate on this workload")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each measurement wait up to SECONDS for the machine to be nearly idle")
    parser.add_argument("--column-rules", action="store_true",
                        help="workload (b) also with 3 column rules (exclude, hash, truncate), same range")
    parser.add_argument("--tls", action="store_true",
                        help="also run workloads a, b, c with the source and DC over TLS (verify-identity)")
    parser.add_argument("--peers", default=",".join(peers_harness.PEERS),
                        help="peers read each workload's range too: comma-separated subset of debezium,maxwell, "
                             "or 'none' (default: both; their artifacts come from scripts/setup.sh)")
    parser.add_argument("--no-capture-only", dest="capture_only", action="store_false",
                        help="do not run gate a second time on each workload without its DC writes (capture only)")
    parser.add_argument("--dc-latency", metavar="MS[,MS...]",
                        help="also run each workload (and the lag load) with MS milliseconds added to each round trip "
                             "to the DC, through a proxy; rates printed as ratios of the 0 ms run through it")
    parser.add_argument("--source-latency", metavar="MS[,MS...]",
                        help="the same with the latency on the link to the source")
    parser.add_argument("--preflight", action="store_true",
                        help="start gate with its preflight (the checks of the source 'gate run' makes first), "
                             "which the figures leave out by default")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, profiles)")
    parser.add_argument("--json", help="write the figures as JSON to this file")
    args = parser.parse_args()
    quick = args.quick
    GateProcess.preflight = args.preflight
    rows = {"a": args.rows or (20_000 if quick else 200_000),
            "b": args.mixed_rows or (10_000 if quick else 100_000),
            "c": args.big_rows or (100_000 if quick else 1_000_000)}
    lag_seconds = args.lag_seconds or (10.0 if quick else 20.0)
    only = set(args.only.split(","))
    overrides = {k: v for k, v in (("writers", args.writers), ("decoders", args.decoders),
                                   ("batch_rows", args.batch_rows), ("metrics_port", args.metrics_port)) if v}
    defaults = ChannelDefaults(**overrides)

    workdir = Path(tempfile.mkdtemp(prefix="gate-bench-"))
    results: dict[str, Any] = {
        "meta": {
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "quick": quick, "sizes": rows, "lag_seconds": lag_seconds,
            "lag_rate": args.lag_rate, "writers": defaults.writers, "decoders": defaults.decoders,
            "batch_rows": defaults.batch_rows,
            "checkpoint_interval_ms": defaults.checkpoint_interval_ms, "preflight": args.preflight,
            "dc_args": list(DC_ARGS),
            "loadavg_start": os.getloadavg(),
            "workdir": str(workdir),
        },
        "workloads": {},
    }
    print(f"gate benchmark: sizes {rows}, lag {args.lag_rate} rows/s for {lag_seconds:.0f} s, "
          f"writers={defaults.writers}, decoders={defaults.decoders}, batch_rows={defaults.batch_rows}"
          + f"; work folder {workdir}", flush=True)
    t_start = time.time()
    args.peer_classpaths = {}
    for name in [p for p in args.peers.split(",") if p and p != "none"]:
        if name not in peers_harness.PEERS:
            parser.error(f"--peers: unknown peer {name!r}; the peers are {', '.join(peers_harness.PEERS)} (or none)")
        try:
            args.peer_classpaths[name] = peers_harness.build(name, workdir)
        except peers_harness.PeerUnavailable as exc:
            results["meta"].setdefault("peers_unavailable", {})[name] = str(exc)
            print(f"peer {name} not measured: {exc}", flush=True)
    keep = args.keep or bool(args.profile) or bool(args.py_spy)
    box = Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True, dc_args=DC_ARGS)
    args.links = None
    try:
        try:
            box.up()
            if args.dc_latency or args.source_latency:
                args.links = Links(LinkProxy(box.dc.port), LinkProxy(box.source.port))
            if args.peer_classpaths:
                peers_harness.ensure_user(box.source)
            for key in ("a", "b", "c"):
                if key in only:
                    results["workloads"][key] = measure_workload(box, key, rows[key], args, workdir, defaults)
            if "lag" in only:
                lag = run_lag(box, workdir, lag_seconds, args.lag_rate, 100, defaults)
                results["lag"] = lag
                print(f"[lag] {lag['rows']} rows at {lag['source_rows_per_s']:,.0f} rows/s: p50 {lag['lag_p50_s']:.3f} s, "
                      f"p99 {lag['lag_p99_s']:.3f} s, max {lag['lag_max_s']:.3f} s", flush=True)
                for link, ms in ([("dc", ms) for ms in latencies(args.dc_latency)]
                                 + [("source", ms) for ms in latencies(args.source_latency)]):
                    args.links.set(ms if link == "dc" else 0, ms if link == "source" else 0)
                    linked = run_lag(box, workdir, lag_seconds, args.lag_rate, 100, defaults, args.links, f"_{link}{ms}")
                    linked["rtt_added_ms"], linked["link"] = ms, link
                    results.setdefault("lag_latency", {})[f"{link} {ms} ms"] = linked
                    print(f"[lag] {ms} ms added on the {link} link: p50 {linked['lag_p50_s']:.3f} s, p99 "
                          f"{linked['lag_p99_s']:.3f} s (target < {ms / 1000 + 1:.1f} s), max {linked['lag_max_s']:.3f} s",
                          flush=True)
                args.links and args.links.set(0, 0)
            if "memory" in only:  # scripts/bench/memory.py: one channel idle, at 600 rows/s, saturated
                from memory import run_memory

                results["memory"] = run_memory(box, workdir, defaults, **({"seconds": 10, "idle_seconds": 5,
                                                                            "burst_rows": 30_000} if quick else {}))
        finally:
            if args.links is not None:
                args.links.close()
            box.down()
        if args.tls:
            results["tls_workloads"] = run_tls(workdir, [k for k in ("a", "b", "c") if k in only], rows, args,
                                               defaults)
    finally:
        if keep:
            print(f"work folder kept: {workdir}")
        else:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    results["meta"]["seconds"] = time.time() - t_start
    results["meta"]["loadavg_end"] = os.getloadavg()
    print()
    print(report(results))
    if any(w.get("peers") or w.get("gate_capture") for w in results["workloads"].values()):
        print("\n" + peers_report(results))
    if results.get("tls_workloads"):
        print("\n" + tls_report(results))
    if any(w.get("latency") for w in results["workloads"].values()) or results.get("lag_latency"):
        print("\n" + latency_report(results))
    if results.get("memory"):
        from memory import memory_report

        print("\n" + memory_report(results["memory"]))
    print(f"\n(total {results['meta']['seconds']:.0f} s; 1-minute load average at start "
          f"{results['meta']['loadavg_start'][0]:.2f}, at end {results['meta']['loadavg_end'][0]:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        sys.path.insert(0, str(BENCH_DIR.parent / "docs"))  # the docs' chart code draws the benchmark's chart too
        from gen_charts import systems_chart

        chart = Path(args.json).with_suffix(".svg")
        chart.write_text(systems_chart(results))
        print(f"figures written to {args.json}, chart of rows/s per system to {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
