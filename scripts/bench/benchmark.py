"""gate benchmark: gate end to end against the bare binlog decoder, lag under steady load, peak RSS.

    .venv/bin/python scripts/bench/benchmark.py [--quick] [--json FILE]

Everything runs on private sandbox servers (a source and a DC) started in a temporary folder and
stopped at the end. For each workload the source is loaded first; then the same binlog range is
read twice: by a bare python-mysql-replication BinLogStreamReader (the baseline, in this process)
and by gate (a separate process, scripts/bench/gate_runner.py, running gate.capture.pipeline.Pipeline on a channel
whose start position is the workload's first position). See scripts/bench/README.md for the figures.

Workloads:
  a  single-table inserts in 100-row transactions (--rows, 200k)
  b  mixed insert/update/delete over 10 tables with 20-column rows of mixed types (--mixed-rows, 100k)
  c  one transaction of --big-rows rows (1M)
  lag  a paced load of --lag-rate rows/s (100-row transactions) for --lag-seconds while gate runs

Targets (issue 6) are printed as pass/fail marks, never asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from gate.common.config import ChannelDefaults, Secret, ServerConfig
from gate.common.dc import ChannelSettings, connect, create_channel
from gate.devtools.sandbox import MariaDBServer, Sandbox

BENCH_DIR = Path(__file__).resolve().parent
RUNNER = BENCH_DIR / "gate_runner.py"
MB = 1024 * 1024

TARGET_RATIO = 0.8
TARGET_LAG_P99 = 1.0
TARGET_RSS_MB = 300.0

Position = tuple[str, int]


# --- servers ---------------------------------------------------------------------------------

def server_config(server: MariaDBServer) -> ServerConfig:
    return ServerConfig("127.0.0.1", server.port, "root", Secret(""))


def master_position(conn: pymysql.Connection) -> Position:
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return row[0], int(row[1])


def machine_busy() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, wall time): all processes, gate's and everyone else's."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + t.steal, time.time()


def busy_percent(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The machine's CPU use between two machine_busy() samples, in % of one core (200 = both cores)."""
    return round((after[0] - before[0]) / (after[1] - before[1]) * 100, 1)


def wait_quiet(max_wait: float, threshold: float = 30.0) -> float:
    """Wait (at most ``max_wait`` s) for a second in which the machine is less than ``threshold``% busy
    (of 200): other work on the machine skews every figure here. Returns the last second's busy %."""
    deadline = time.time() + max_wait
    while True:
        before = machine_busy()
        time.sleep(1.0)
        busy = busy_percent(before, machine_busy())
        if busy < threshold or time.time() >= deadline:
            return busy


def mariadbd_cpu(server: MariaDBServer) -> float:
    pid = server.pid()
    if pid is None:
        return 0.0
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


# --- workloads -------------------------------------------------------------------------------

A_DDL = ("CREATE TABLE bench_a.t (id INT NOT NULL PRIMARY KEY, name VARCHAR(40) CHARACTER SET utf8mb4, "
         "amount DECIMAL(12,3), ratio DOUBLE, created DATETIME(3), flag TINYINT UNSIGNED, "
         "payload VARBINARY(64), note TEXT) ENGINE=InnoDB")
A_SELECT = ("SELECT seq, CONCAT('row ', seq, ' délta 数据'), (seq % 100000) * 1.125, seq / 7, "
            "TIMESTAMPADD(MICROSECOND, seq * 1001000, '2024-01-01 00:00:00'), seq % 256, "
            "UNHEX(SHA1(seq)), REPEAT('lorem ipsum ', 1 + seq % 8) FROM bench_a.seq_{lo}_to_{hi}")


def load_inserts(conn: pymysql.Connection, rows: int, per_txn: int = 100) -> int:
    """(a) ``rows`` single-table inserts, ``per_txn`` rows per (autocommitted) statement."""
    with conn.cursor() as cur:
        for lo in range(1, rows + 1, per_txn):
            hi = min(rows, lo + per_txn - 1)
            cur.execute("INSERT INTO bench_a.t " + A_SELECT.format(lo=lo, hi=hi))
    return rows


WIDE_TABLES = 10
WIDE_DDL = """CREATE TABLE bench_b.w{n} (
  id INT UNSIGNED NOT NULL PRIMARY KEY,
  c_tiny TINYINT, c_small SMALLINT UNSIGNED, c_int INT, c_big BIGINT UNSIGNED,
  c_dec DECIMAL(14,4), c_double DOUBLE, c_float FLOAT,
  c_vc VARCHAR(64) CHARACTER SET utf8mb4, c_char CHAR(8),
  c_dt DATETIME(6), c_ts TIMESTAMP(3) NULL DEFAULT NULL, c_date DATE, c_time TIME, c_year YEAR,
  c_text TEXT CHARACTER SET utf8mb4, c_blob BLOB, c_enum ENUM('new','paid','shipped','void'),
  c_set SET('a','b','c'), c_json JSON
) ENGINE=InnoDB"""
WIDE_SELECT = """SELECT {base} + seq, (seq % 200) - 100, seq % 65536, ({base} + seq) * 7 - 1000000,
  18446744073709551615 - ({base} + seq), ({base} + seq) * 3.1416, ({base} + seq) / 3, ({base} + seq) / 7,
  CONCAT('wide ', {base} + seq, ' ünïcödé 数据 🚀'), LPAD(seq, 8, 'x'),
  TIMESTAMPADD(MICROSECOND, ({base} + seq) * 1234567, '2020-01-01 00:00:00'),
  IF(seq % 10 = 0, NULL, TIMESTAMPADD(SECOND, {base} + seq, '2023-06-01 12:00:00')),
  DATE_ADD('2000-01-01', INTERVAL seq DAY), SEC_TO_TIME((seq * 37) % 86400), 1990 + seq % 60,
  REPEAT(CONCAT('text ', seq, ' '), 10), UNHEX(SHA2(seq, 256)), ELT(1 + seq % 4, 'new','paid','shipped','void'),
  ELT(1 + seq % 4, '', 'a', 'a,b', 'a,c'), JSON_OBJECT('id', {base} + seq, 'tags', JSON_ARRAY('x', seq % 10), 'ok', true)
FROM (SELECT CAST(seq AS SIGNED) AS seq FROM bench_b.seq_1_to_{n}) s"""


def load_mixed(conn: pymysql.Connection, rows: int, seed: int = 6) -> int:
    """(b) transactions over 2 of 10 wide tables: per table 20 inserts, 10 updates, 4 deletes.
    Returns the number of changed rows (one DC row each), which reaches at least ``rows``."""
    rng = random.Random(seed)
    lo = [1] * WIDE_TABLES  # oldest live id per table
    nxt = [1] * WIDE_TABLES  # next id to insert
    changed = 0
    txn = 0
    with conn.cursor() as cur:
        while changed < rows:
            txn += 1
            conn.begin()
            for t in rng.sample(range(WIDE_TABLES), 2):
                changed += cur.execute(f"INSERT INTO bench_b.w{t} " + WIDE_SELECT.format(base=nxt[t] - 1, n=20))
                nxt[t] += 20
                start = rng.randrange(lo[t], nxt[t] - 10)
                changed += cur.execute(
                    f"UPDATE bench_b.w{t} SET c_int = c_int + 1, c_vc = CONCAT('upd ', %s, ' ✓'), "
                    "c_dt = TIMESTAMPADD(SECOND, %s, c_dt), c_dec = c_dec * 2, "
                    "c_json = JSON_SET(c_json, '$.v', %s) WHERE id BETWEEN %s AND %s",
                    (txn, txn, txn, start, start + 9))
                if nxt[t] - lo[t] > 100:
                    changed += cur.execute(f"DELETE FROM bench_b.w{t} WHERE id BETWEEN %s AND %s", (lo[t], lo[t] + 3))
                    lo[t] += 4
            conn.commit()
    return changed


C_DDL = ("CREATE TABLE bench_c.t (id INT NOT NULL PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,3), "
         "created DATETIME(3), note VARCHAR(64)) ENGINE=InnoDB")


def load_big(conn: pymysql.Connection, rows: int) -> int:
    """(c) one transaction of ``rows`` inserts."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO bench_c.t SELECT seq, CONCAT('big ', seq), seq * 0.25, "
            "TIMESTAMPADD(MICROSECOND, seq * 1000, '2024-01-01'), REPEAT('x', 20 + seq % 40) "
            f"FROM bench_c.seq_1_to_{rows}")
    return rows


LAG_DDL = ("CREATE TABLE bench_lag.t (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, txn INT NOT NULL, "
           "seq INT NOT NULL, name VARCHAR(40), amount DECIMAL(12,3), created DATETIME(3), "
           "note VARCHAR(100)) ENGINE=InnoDB")


def lag_load(port: int, seconds: float, txn_per_s: int, rows_per_txn: int, out: str) -> None:
    """Paced load in its own process: ``txn_per_s`` transactions of ``rows_per_txn`` rows each second.
    Writes [(txn, commit wall time)] as JSON to ``out``."""
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True, charset="utf8mb4")
    sql = ("INSERT INTO bench_lag.t (txn, seq, name, amount, created, note) SELECT %s, seq, CONCAT('lag ', seq), "
           "seq * 1.5, NOW(3), REPEAT('n', 40) FROM bench_lag.seq_1_to_{n}").format(n=rows_per_txn)
    commits: list[tuple[int, float]] = []
    interval = 1.0 / txn_per_s
    total = int(seconds * txn_per_s)
    start = time.time() + 0.05
    with conn.cursor() as cur:
        for k in range(1, total + 1):
            due = start + (k - 1) * interval
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            cur.execute(sql, (k,))  # autocommit: one transaction, COMMIT returned with the OK packet
            commits.append((k, time.time()))
    conn.close()
    Path(out).write_text(json.dumps(commits))


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

@dataclass
class TreeSample:
    peak_tree_rss: int = 0
    peak_main_rss: int = 0
    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> (role, cpu seconds)


def _role(proc: psutil.Process, main_pid: int) -> str:
    if proc.pid == main_pid:
        return "main"
    try:
        name, cmd = proc.name(), " ".join(proc.cmdline())
    except psutil.Error:
        return "other"
    if name in ("gate-writer", "gate-decoder"):  # gate.common.process.name_process
        return name[5:]
    if "resource_tracker" in cmd:
        return "resource_tracker"
    return "other"


class TreeMonitor(threading.Thread):
    """Samples RSS (sum over gate's process tree, and the main process alone) and CPU times every 50 ms."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.sample = TreeSample()
        self._halt = threading.Event()
        self._roles: dict[int, str] = {}

    def stop(self) -> TreeSample:
        self._halt.set()
        self.join(timeout=5)
        return self.sample

    def snapshot_cpu(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for role, seconds in self.sample.cpu.values():
            out[role] = out.get(role, 0.0) + seconds
        return out

    def _once(self, main: psutil.Process) -> None:
        try:
            procs = [main] + main.children(recursive=True)
        except psutil.Error:
            return
        tree = 0
        for proc in procs:
            try:
                with proc.oneshot():
                    rss = proc.memory_info().rss
                    t = proc.cpu_times()
            except psutil.Error:
                continue
            role = self._roles.get(proc.pid)
            if role is None:
                role = _role(proc, self.pid)
                if role != "other":  # a child names itself only once it runs: ask again until it has
                    self._roles[proc.pid] = role
            tree += rss
            if proc.pid == self.pid:
                self.sample.peak_main_rss = max(self.sample.peak_main_rss, rss)
            self.sample.cpu[proc.pid] = (role, t.user + t.system)
        self.sample.peak_tree_rss = max(self.sample.peak_tree_rss, tree)

    def run(self) -> None:
        try:
            main = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._halt.is_set():
            self._once(main)
            self._halt.wait(self.interval)


class CheckpointPoller(threading.Thread):
    """Polls the channel's checkpoint and resume position every ``interval`` s, recording each change."""

    def __init__(self, dc: MariaDBServer, channel: str, end: Position | None = None, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.dc = dc
        self.channel = channel
        self.end = end
        self.interval = interval
        self.trace: list[tuple[float, int]] = []  # (wall time, checkpoint id), on change
        self.reached = threading.Event()
        self.reached_at: float | None = None
        self._halt = threading.Event()
        self.position: Position | None = None

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        conn = self.dc.connect(self.channel)
        last = -1
        try:
            with conn.cursor() as cur:
                while not self._halt.is_set():
                    cur.execute("SELECT c.id, r.log_file, r.log_pos FROM transfer_checkpoint c, gate_resume r")
                    cid, log_file, log_pos = cur.fetchone()
                    now = time.time()
                    if cid != last:
                        self.trace.append((now, int(cid)))
                        last = cid
                    if log_file is not None:
                        self.position = (log_file, int(log_pos))
                    if self.end is not None and not self.reached.is_set() and self.position is not None \
                            and self.position >= self.end:
                        self.reached_at = now
                        self.reached.set()
                    time.sleep(self.interval)
        finally:
            conn.close()


def new_channel(dc: MariaDBServer, source: MariaDBServer, name: str, start: Position | None,
                defaults: ChannelDefaults, allow: tuple[str, ...]) -> None:
    with connect(server_config(dc), "DC") as conn:
        create_channel(conn, ChannelSettings(name, server_config(source), server_id=4242, allow=allow,
                                             defaults=defaults))
        if start is not None:
            with conn.cursor() as cur:
                cur.execute(f"UPDATE `{name}`.gate_resume SET log_file=%s, log_pos=%s, instance_name=%s",
                            (start[0], start[1], source.address))


def dc_checksum(dc: MariaDBServer, name: str) -> str:
    """A fingerprint of transfer_data, to tell that two runs wrote the same rows."""
    with dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT COUNT(*), SUM(CRC32(CONCAT_WS('|', id, tid, dbname, tablename, create_time, "
                    "optype, data))) FROM transfer_data")
        count, crc = cur.fetchone()
    return f"{count}:{crc}"


def drop_channel(dc: MariaDBServer, name: str) -> None:
    with dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


class GateProcess:
    """scripts/bench/gate_runner.py for one channel, with its tree monitored."""

    def __init__(self, dc: MariaDBServer, channel: str, workdir: Path, profile_dir: Path | None = None,
                 py_spy: Path | None = None) -> None:
        self.stamp = workdir / f"{channel}.stamp"
        self.log = workdir / f"{channel}.log"
        cmd = [sys.executable, str(RUNNER), "--dc-port", str(dc.port), "--channel", channel,
               "--stamp", str(self.stamp), "--no-preflight"]
        if profile_dir is not None:
            cmd += ["--profile-dir", str(profile_dir)]
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


def run_gate(box: Sandbox, channel: str, start: Position, end: Position, rows: int, workdir: Path,
             defaults: ChannelDefaults, allow: tuple[str, ...], timeout: float,
             profile_dir: Path | None = None, py_spy: Path | None = None) -> dict[str, Any]:
    """gate over [start, end): rows/s from Pipeline.run() to the checkpoint reaching ``end``."""
    new_channel(box.dc, box.source, channel, start, defaults, allow)
    poller = CheckpointPoller(box.dc, channel, end)
    cpu0 = {"source": mariadbd_cpu(box.source), "dc": mariadbd_cpu(box.dc)}
    busy0 = machine_busy()
    gate = GateProcess(box.dc, channel, workdir, profile_dir, py_spy)
    try:
        poller.start()
        t_run = gate.started_at()
        deadline = time.time() + timeout
        while not poller.reached.wait(0.2):
            gate.check()
            if time.time() > deadline:
                raise RuntimeError(f"gate did not reach {end} within {timeout} s (at {poller.position}); see {gate.log}")
        t_done = poller.reached_at
        assert t_done is not None
        cpu_gate = gate.monitor.snapshot_cpu()
        cpu1 = {"source": mariadbd_cpu(box.source), "dc": mariadbd_cpu(box.dc)}
        busy1 = machine_busy()
    finally:
        sample = gate.stop()
        poller.stop()
    final_id = poller.trace[-1][1] if poller.trace else 0
    seconds = t_done - t_run
    trace = [(t, i) for t, i in poller.trace if i > 0]
    steady = None
    if len(trace) >= 4 and rows >= 1000:  # rows/s between 10% and 90% of the rows, without start-up
        t10 = next((t for t, i in trace if i >= rows * 0.1), None)
        t90 = next((t for t, i in trace if i >= rows * 0.9), None)
        if t10 is not None and t90 is not None and t90 > t10:
            i10 = next(i for t, i in trace if t == t10)
            i90 = next(i for t, i in trace if t == t90)
            steady = (i90 - i10) / (t90 - t10)
    wall = t_done - t_run
    cpu = {role: round(s / wall * 100, 1) for role, s in cpu_gate.items()}
    cpu.update({f"mariadbd_{k}": round((cpu1[k] - cpu0[k]) / wall * 100, 1) for k in cpu0})
    per_row = {role: round(s / max(1, final_id) * 1e6, 2) for role, s in cpu_gate.items()}
    per_row.update({f"mariadbd_{k}": round((cpu1[k] - cpu0[k]) / max(1, final_id) * 1e6, 2) for k in cpu0})
    checksum = dc_checksum(box.dc, channel)
    drop_channel(box.dc, channel)
    return {
        "dc_checksum": checksum,
        "rows": final_id, "expected_rows": rows, "complete": final_id == rows,
        "seconds": seconds, "rows_per_s": final_id / seconds, "startup_s": (trace[0][0] - t_run) if trace else None,
        "launch_to_done_s": t_done - gate.launched, "steady_rows_per_s": steady,
        "peak_rss_mb": sample.peak_tree_rss / MB, "peak_main_rss_mb": sample.peak_main_rss / MB,
        "cpu_percent": cpu, "cpu_us_per_row": per_row, "machine_busy_percent": busy_percent(busy0, busy1),
        "exit_code": gate.proc.returncode,
    }


# --- lag -------------------------------------------------------------------------------------

def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    f = int(k)
    return s[f] if f + 1 >= len(s) else s[f] + (s[f + 1] - s[f]) * (k - f)


def run_lag(box: Sandbox, workdir: Path, seconds: float, rate: int, rows_per_txn: int,
            defaults: ChannelDefaults) -> dict[str, Any]:
    channel = "bench_lag_ch"
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench_lag")
        cur.execute(LAG_DDL)
        start = master_position(conn)
    new_channel(box.dc, box.source, channel, start, defaults, ("bench_lag.*",))
    poller = CheckpointPoller(box.dc, channel)
    cpu0 = {"source": mariadbd_cpu(box.source), "dc": mariadbd_cpu(box.dc)}
    busy0 = machine_busy()
    gate = GateProcess(box.dc, channel, workdir)
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
        deadline = time.time() + 120
        while poller.position is None or poller.position < end:
            gate.check()
            if time.time() > deadline:
                raise RuntimeError(f"gate did not catch up within 120 s; see {gate.log}")
            time.sleep(0.05)
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
                     defaults: ChannelDefaults) -> dict[str, Any]:
    title, db, ddl, load = WORKLOADS[key]
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
    print(f"[{key}] loaded {changed} rows in {load_s:.1f} s ({changed / load_s:,.0f} rows/s); "
          f"binlog {start[0]}:{start[1]} .. {end[0]}:{end[1]}", flush=True)
    load1 = os.getloadavg()[0]
    if args.wait_quiet:
        wait_quiet(args.wait_quiet)
    base = baseline(box.source, start, end, args.repeat)
    print(f"[{key}] baseline: {base['rows']} rows in {base['seconds']:.2f} s = {base['rows_per_s']:,.0f} rows/s "
          f"(machine busy {base['machine_busy_percent']:.0f}% of 200)",
          flush=True)
    if base["rows"] != changed:
        print(f"[{key}] warning: the baseline read {base['rows']} rows, the workload changed {changed}")
    runs = []
    for n in range(args.repeat):
        profile_dir = workdir / f"profile-{key}" if args.profile == key else None
        spy = workdir / f"py-spy-{key}.txt" if args.py_spy == key else None
        if args.wait_quiet:
            wait_quiet(args.wait_quiet)
        result = run_gate(box, f"bench_{key}_ch{n}", start, end, changed, workdir, defaults, (f"{db}.*",),
                          timeout=max(300.0, changed / 1000), profile_dir=profile_dir, py_spy=spy)
        runs.append(result)
        print(f"[{key}] gate: {result['rows']} rows in {result['seconds']:.2f} s = {result['rows_per_s']:,.0f} rows/s"
              f" (steady {result['steady_rows_per_s'] or 0:,.0f}); peak RSS {result['peak_rss_mb']:.0f} MB tree, "
              f"{result['peak_main_rss_mb']:.0f} MB main; CPU % {result['cpu_percent']}, "
              f"machine busy {result['machine_busy_percent']:.0f}% of 200", flush=True)
        if profile_dir is not None:
            print(f"[{key}] cProfile output in {profile_dir}")
        if spy is not None:
            print(f"[{key}] py-spy output in {spy}")
    gate = sorted(runs, key=lambda r: r["rows_per_s"])[len(runs) // 2]  # the median run
    return {
        "workload": title, "key": key, "rows": changed, "load_rows_per_s": changed / load_s,
        "loadavg_1m_before": load1, "baseline": base, "gate": gate, "gate_runs": runs,
        "ratio": gate["rows_per_s"] / base["rows_per_s"],
    }


def mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def report(results: dict[str, Any]) -> str:
    head = ["workload", "rows", "baseline r/s", "gate r/s", "ratio", "lag p50/p99/max s", "peak RSS MB (tree/main)",
            "target", "result"]
    lines = [head]
    for key in ("a", "b", "c"):
        r = results["workloads"].get(key)
        if r is None:
            continue
        g = r["gate"]
        if key == "c":
            target = f"RSS < {TARGET_RSS_MB:.0f} MB, completes"
            ok = g["complete"] and g["peak_rss_mb"] < TARGET_RSS_MB
        else:
            target = f"ratio >= {TARGET_RATIO}"
            ok = r["ratio"] >= TARGET_RATIO and g["complete"]
        lines.append([r["workload"], f"{r['rows']:,}", f"{r['baseline']['rows_per_s']:,.0f}",
                      f"{g['rows_per_s']:,.0f}", f"{r['ratio']:.2f}", "-",
                      f"{g['peak_rss_mb']:.0f} / {g['peak_main_rss_mb']:.0f}", target, mark(ok)])
    lag = results.get("lag")
    if lag is not None:
        lines.append([f"lag: {lag['source_rows_per_s']:,.0f} rows/s steady", f"{lag['rows']:,}", "-", "-", "-",
                      f"{lag['lag_p50_s']:.3f} / {lag['lag_p99_s']:.3f} / {lag['lag_max_s']:.3f}",
                      f"{lag['peak_rss_mb']:.0f} / {lag['peak_main_rss_mb']:.0f}",
                      f"p99 < {TARGET_LAG_P99:.0f} s", mark(lag["lag_p99_s"] < TARGET_LAG_P99)])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    text = ["  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    cpu_lines = ["", "CPU while gate ran (% of one core, over gate's run): main / decoders / writers / resource_tracker / "
                 "mariadbd source / mariadbd DC / whole machine (all processes, of 200)"]
    for key in ("a", "b", "c"):
        r = results["workloads"].get(key)
        if r is not None:
            c = r["gate"]["cpu_percent"]
            cpu_lines.append(f"  {key}: {c.get('main', 0):.0f} / {c.get('decoder', 0):.0f} / {c.get('writer', 0):.0f} / "
                             f"{c.get('resource_tracker', 0):.0f} / {c.get('mariadbd_source', 0):.0f} / "
                             f"{c.get('mariadbd_dc', 0):.0f} / {r['gate']['machine_busy_percent']:.0f}"
                             f"   (baseline ran with the machine {r['baseline']['machine_busy_percent']:.0f}% busy; "
                             f"first checkpoint {r['gate']['startup_s'] or 0:.2f} s after start"
                             + (f", steady {r['gate']['steady_rows_per_s']:,.0f} rows/s)" if r['gate']['steady_rows_per_s']
                                else ")"))
    if lag is not None:
        c = lag["cpu_percent"]
        cpu_lines.append(f"  lag: {c.get('main', 0):.0f} / {c.get('decoder', 0):.0f} / {c.get('writer', 0):.0f}"
                         f" / {c.get('resource_tracker', 0):.0f}"
                         f" / {c.get('mariadbd_source', 0):.0f} / {c.get('mariadbd_dc', 0):.0f}"
                         f" / {lag['machine_busy_percent']:.0f}   (includes the load generator's process)")
    return "\n".join(text + cpu_lines)


def main() -> int:
    parser = argparse.ArgumentParser(description="gate benchmark (issue 6)")
    parser.add_argument("--quick", action="store_true", help="small sizes: 20k / 10k / 100k rows, 10 s of lag load")
    parser.add_argument("--rows", type=int, help="workload (a) rows (default 200000; quick 20000)")
    parser.add_argument("--mixed-rows", type=int, help="workload (b) changed rows (default 100000; quick 10000)")
    parser.add_argument("--big-rows", type=int, help="workload (c) rows in one transaction (default 1000000; quick 100000)")
    parser.add_argument("--lag-seconds", type=float, help="duration of the steady load (default 20; quick 10)")
    parser.add_argument("--lag-rate", type=int, default=5000, help="rows/s of the steady load (default 5000)")
    parser.add_argument("--only", default="a,b,c,lag", help="comma-separated subset of a,b,c,lag")
    parser.add_argument("--repeat", type=int, default=1, help="runs of baseline and gate per workload (median)")
    parser.add_argument("--writers", type=int, help="channel setting 'writers' (default: gate's default)")
    parser.add_argument("--decoders", type=int, help="channel setting 'decoders' (default: gate's default)")
    parser.add_argument("--batch-rows", type=int, help="channel setting 'batch_rows' (default: gate's default)")
    parser.add_argument("--profile", choices=["a", "b", "c"], help="cProfile gate (main, decoders, writers) on this workload")
    parser.add_argument("--py-spy", choices=["a", "b", "c"], help="py-spy record gate on this workload")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each measurement wait up to SECONDS for the machine to be nearly idle")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, profiles)")
    parser.add_argument("--json", help="write the figures as JSON to this file")
    args = parser.parse_args()
    quick = args.quick
    rows = {"a": args.rows or (20_000 if quick else 200_000),
            "b": args.mixed_rows or (10_000 if quick else 100_000),
            "c": args.big_rows or (100_000 if quick else 1_000_000)}
    lag_seconds = args.lag_seconds or (10.0 if quick else 20.0)
    only = set(args.only.split(","))
    overrides = {k: v for k, v in (("writers", args.writers), ("decoders", args.decoders),
                                   ("batch_rows", args.batch_rows)) if v}
    defaults = ChannelDefaults(**overrides)

    workdir = Path(tempfile.mkdtemp(prefix="gate-bench-"))
    results: dict[str, Any] = {
        "meta": {
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "quick": quick, "sizes": rows, "lag_seconds": lag_seconds,
            "lag_rate": args.lag_rate, "writers": defaults.writers, "decoders": defaults.decoders,
            "batch_rows": defaults.batch_rows,
            "checkpoint_interval_ms": defaults.checkpoint_interval_ms,
            "loadavg_start": os.getloadavg(),
            "workdir": str(workdir),
        },
        "workloads": {},
    }
    print(f"gate benchmark: sizes {rows}, lag {args.lag_rate} rows/s for {lag_seconds:.0f} s, "
          f"writers={defaults.writers}, decoders={defaults.decoders}, batch_rows={defaults.batch_rows}"
          + f"; work folder {workdir}", flush=True)
    t_start = time.time()
    keep = args.keep or bool(args.profile) or bool(args.py_spy)
    box = Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True)
    try:
        try:
            box.up()
            for key in ("a", "b", "c"):
                if key in only:
                    results["workloads"][key] = measure_workload(box, key, rows[key], args, workdir, defaults)
            if "lag" in only:
                lag = run_lag(box, workdir, lag_seconds, args.lag_rate, 100, defaults)
                results["lag"] = lag
                print(f"[lag] {lag['rows']} rows at {lag['source_rows_per_s']:,.0f} rows/s: p50 {lag['lag_p50_s']:.3f} s, "
                      f"p99 {lag['lag_p99_s']:.3f} s, max {lag['lag_max_s']:.3f} s", flush=True)
        finally:
            box.down()
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
    print(f"\n(total {results['meta']['seconds']:.0f} s; 1-minute load average at start "
          f"{results['meta']['loadavg_start'][0]:.2f}, at end {results['meta']['loadavg_end'][0]:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
