"""gate's initial snapshot (or a verification): rows/s against a plain streamed SELECT, stalls on the source, RSS,
stream lag.

    .venv/bin/python scripts/bench/snapshot.py [--rows 1000000 5000000] [--readers 2] [--verify] [--json FILE]

On private sandbox servers (a source and a DC, in a temporary folder, stopped at the end) it fills
bench_a.t (the benchmark's workload-a column mix) to each --rows size and then, per size:

- baseline: one streamed ``SELECT *`` of the table, read through PyMySQL's text protocol and rendered to
  the DC's JSON by the same renderers the snapshot uses, in this process: rows/s;
- gate: ``gate run`` (scripts/bench/gate_runner.py) on a channel that streams the source, a snapshot of
  the table requested in gate_snapshot; rows/s from the request until its SNAPSHOTEND is checkpointed,
  as a ratio of the baseline (target >= 0.8); ``running_ratio`` counts from when gate took the request up
  (it polls gate_snapshot every 2 s) to the SNAPSHOTEND's checkpoint; CPU µs per row per process (gate's
  readers, main and writers, the source and DC servers) for gate and the baseline;
- meanwhile a probe session commits a one-row UPDATE every 10 ms on the source and times each (the
  longest stall another session saw, against the same probe before the snapshot), a paced load
  writes --lag-rate rows/s (default 2,000, in transactions of 100 rows) into another table, whose lag
  (source commit to checkpoint) p99 is reported, and gate's process tree is sampled for its peak RSS.

With --verify the table is verified instead (a gate_verify request, as ``gate verify`` makes): rows/s
verified, the lag p99 of the paced load meanwhile, CPU per row; no DC ceiling (one VERIFY row per chunk).

Figures are printed, never asserted; the machine's busy share is printed with them.
"""

from __future__ import annotations

import argparse
import bisect
import json
import multiprocessing as mp
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pymysql
import pymysql.converters
import pymysql.cursors
from benchmark import GateProcess, drop_channel, master_position, new_channel  # beside this script
from ceiling import cpu_bound, measure_ceiling
from monitors import CheckpointPoller, busy_percent, machine_busy, percentile
from workloads import A_DDL, A_SELECT, LAG_DDL, lag_load

from gate.capture.snapshot_reader import read_columns
from gate.capture.values import ImageRenderer, text_renderer
from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import Sandbox

MB = 1 << 20
LAG_ROWS_PER_TXN = 100


def fill(box: Sandbox, rows: int) -> None:
    """bench_a.t up to ``rows`` rows (ids 1..rows), in statements of 20,000 rows."""
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS bench_a")
        cur.execute(A_DDL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
        cur.execute("SELECT COALESCE(MAX(id), 0) FROM bench_a.t")
        have = cur.fetchone()[0]
        for lo in range(have + 1, rows + 1, 20_000):
            cur.execute("INSERT INTO bench_a.t " + A_SELECT.format(lo=lo, hi=min(rows, lo + 19_999)))


def server_cpu(box: Sandbox) -> dict[str, float]:
    """CPU seconds (user + system) the source and DC servers have used so far."""
    out = {}
    for role, server in (("source_server", box.source), ("dc_server", box.dc)):
        pid = server.pid()
        times = psutil.Process(pid).cpu_times() if pid else None
        out[role] = times.user + times.system if times else 0.0
    return out


def per_row_us(before: dict[str, float], after: dict[str, float], rows: int) -> dict[str, float]:
    """CPU µs per row per role between two samples."""
    return {role: round((after[role] - before.get(role, 0.0)) * 1e6 / max(rows, 1), 1) for role in sorted(after)}


def baseline(box: Sandbox) -> tuple[float, dict[str, float]]:
    """rows/s of one streamed SELECT * rendered as SNAPSHOT data, in this process, and CPU µs per row
    (this process, the source server)."""
    conv = dict(pymysql.converters.encoders)
    conn = pymysql.connect(host="127.0.0.1", port=box.source.port, user="root", password="", conv=conv,
                           charset="utf8mb4", cursorclass=pymysql.cursors.SSCursor)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        columns = read_columns(cur, "bench_a", "t")
    image = ImageRenderer.of_text([(c.name, text_renderer(c.data_type, c.fsp, c.binary)) for c in columns])
    started = time.perf_counter()
    cpu0 = {**server_cpu(box), "select": time.process_time()}
    rows = 0
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM bench_a.t")
        for row in cur:
            _data = '{"NEW":' + image.row_json(row) + "}"
            rows += 1
    seconds = time.perf_counter() - started
    cpu1 = {**server_cpu(box), "select": time.process_time()}
    conn.close()
    cpu1.pop("dc_server")
    return rows / seconds, per_row_us(cpu0, cpu1, rows)


class Probe(threading.Thread):
    """Commits a one-row UPDATE every 10 ms on the source; keeps each one's duration."""

    def __init__(self, box: Sandbox) -> None:
        super().__init__(daemon=True)
        self.box = box
        self.times: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with self.box.source.connect() as conn, conn.cursor() as cur:
            while not self.halt.is_set():
                started = time.perf_counter()
                cur.execute("UPDATE bench_probe.p SET n = n + 1 WHERE id = 1")
                self.times.append(time.perf_counter() - started)
                time.sleep(0.01)

    def stop(self) -> list[float]:
        self.halt.set()
        self.join()
        return self.times


def lags(box: Sandbox, channel: str, poller: CheckpointPoller, commits: dict[int, float]) -> list[float]:
    """Per lag-load row: checkpoint time covering it minus its source commit time."""
    with box.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT MIN(id), MAX(id), MIN(data) FROM transfer_data WHERE dbname = 'bench_lag' GROUP BY tid")
        groups = cur.fetchall()
    times, ids = [t for t, _ in poller.trace], [i for _, i in poller.trace]
    out: list[float] = []
    for first, last, data in groups:
        txn = int(next(c["txn"] for c in json.loads(data)["NEW"] if "txn" in c))
        k = bisect.bisect_left(ids, int(first))
        if k < len(ids) and txn in commits:
            out += [times[k] - commits[txn]] * (int(last) - int(first) + 1)
    return out


def measure(box: Sandbox, rows: int, readers: int, lag_rate: int, workdir: Path,
            profile_dir: Path | None = None, verify: bool = False) -> dict[str, Any]:
    """One size; ``verify``: a verification of the table (gate_verify) instead of a snapshot."""
    requests = "gate_verify" if verify else "gate_snapshot"
    fill(box, rows)
    plain, plain_cpu = baseline(box)
    probe0 = Probe(box)
    probe0.start()
    time.sleep(3)
    quiet = probe0.stop()
    channel = f"bench_snap_{rows}"
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS bench_lag")
        cur.execute("CREATE DATABASE bench_lag")
        cur.execute(LAG_DDL)
        start = master_position(conn)
    new_channel(box.dc, box.source, channel, start, ChannelDefaults(snapshot_readers=readers),
                ("bench_a.*", "bench_lag.*"))
    gate = GateProcess(box.dc, channel, workdir, profile_dir=profile_dir)
    poller = CheckpointPoller(box.dc, channel)
    commits_file = workdir / f"lag_{rows}.json"
    busy0 = machine_busy()
    try:
        gate.started_at()
        poller.start()
        time.sleep(1.0)
        probe = Probe(box)
        probe.start()
        expected = rows / plain  # the paced load runs about as long as the snapshot should take
        loader = mp.get_context("spawn").Process(target=lag_load, args=(
            box.source.port, expected if lag_rate else 0, max(1, lag_rate // LAG_ROWS_PER_TXN), LAG_ROWS_PER_TXN,
            str(commits_file)))
        with box.dc.connect(channel) as conn, conn.cursor() as cur:
            requested = time.time()
            cpu0 = {**server_cpu(box), **gate.monitor.snapshot_cpu()}
            cur.execute(f"INSERT INTO {requests} (dbname, tablename, reason) VALUES ('bench_a', 't', 'benchmark')")
            loader.start()
            while True:
                cur.execute(f"SELECT state, rows_done FROM {requests}")
                state, done_rows = cur.fetchone()
                if state in ("done", "cancelled"):
                    break
                gate.check()
                time.sleep(0.05)
            took = time.time() - requested
            cur.execute(f"SELECT TIMESTAMPDIFF(MICROSECOND, started_at, finished_at) / 1e6 FROM {requests}")
            running = float(cur.fetchone()[0])
            cpu1 = {**server_cpu(box), **gate.monitor.snapshot_cpu()}
        stalls = probe.stop()
        busy1 = machine_busy()
        loader.join()
        time.sleep(2.0)  # the checkpoint passes the load's last transactions
    finally:
        sample = gate.stop()
        poller.stop()
    commits = dict(json.loads(commits_file.read_text()))
    lag = lags(box, channel, poller, {int(k): v for k, v in commits.items()})
    snap_cpu = per_row_us(cpu0, cpu1, done_rows)
    if verify:  # a VERIFY row per chunk: no DC ingest to compare with
        drop_channel(box.dc, channel)
        return {
            "rows": rows, "kind": "verify", "state": state, "verified_rows": done_rows, "seconds": round(took, 2),
            "verified_rows_per_s": round(done_rows / took), "running_seconds": round(running, 2),
            "running_rows_per_s": round(done_rows / running), "select_rows_per_s": round(plain),
            "probe_max_ms_during": round(max(stalls) * 1000, 1), "peak_rss_mb": round(sample.peak_tree_rss / MB),
            "lag_p99_s": round(percentile(lag, 99), 3) if lag else None, "lag_rows": len(lag),
            "machine_busy_percent": round(busy_percent(busy0, busy1)), "verify_cpu_us_per_row": snap_cpu}
    ceiling = measure_ceiling(box.dc, channel, "optype = 'SNAPSHOT'", repeat=3)  # the DC's LOAD DATA of those rows
    drop_channel(box.dc, channel)
    return {
        "rows": rows, "state": state, "snapshot_rows": done_rows, "seconds": round(took, 2),
        "snapshot_rows_per_s": round(done_rows / took), "select_rows_per_s": round(plain),
        "ratio": round(done_rows / took / plain, 2),
        "ceiling_rows_per_s": ceiling["rows_per_s"], "ceiling_ratio": round(done_rows / took / ceiling["rows_per_s"], 3),
        "running_ceiling_ratio": round(done_rows / running / ceiling["rows_per_s"], 3), "ceiling": ceiling,
        "running_seconds": round(running, 2), "running_ratio": round(done_rows / running / plain, 2),
        "probe_max_ms_quiet": round(max(quiet) * 1000, 1), "probe_max_ms_during": round(max(stalls) * 1000, 1),
        "probe_p99_ms_during": round(percentile(stalls, 99) * 1000, 1),
        "peak_rss_mb": round(sample.peak_tree_rss / MB), "peak_main_rss_mb": round(sample.peak_main_rss / MB),
        "lag_p99_s": round(percentile(lag, 99), 3) if lag else None, "lag_rows": len(lag),
        "machine_busy_percent": round(busy_percent(busy0, busy1)),
        "select_cpu_us_per_row": plain_cpu, "snapshot_cpu_us_per_row": snap_cpu,
        "ceiling_cpu_bound": round(cpu_bound(snap_cpu, ceiling["dc_cpu_us_per_row"], psutil.cpu_count() or 1), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--readers", type=int, default=ChannelDefaults().snapshot_readers)
    parser.add_argument("--lag-rate", type=int, default=2000, help="rows/s of the paced load (0: none)")
    parser.add_argument("--verify", action="store_true", help="a verification of the table (gate verify's) "
                        "instead of a snapshot: rows/s verified and the stream's lag meanwhile")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile-dir", type=Path, help="cProfile gate's processes into this folder")
    parser.add_argument("--dc-option", action="append", default=[],
                        help="an extra mariadbd option for the DC server, e.g. --dc-option=--innodb-log-file-size=256M")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="gate-snapbench-") as tmp:
        box = Sandbox(Path(tmp) / "sandbox", with_standby=False, dc_args=tuple(args.dc_option))
        box.up()
        try:
            with box.source.connect() as conn, conn.cursor() as cur:
                cur.execute("CREATE DATABASE bench_probe")
                cur.execute("CREATE TABLE bench_probe.p (id INT PRIMARY KEY, n INT)")
                cur.execute("INSERT INTO bench_probe.p VALUES (1, 0)")
            for rows in sorted(args.rows):
                result = measure(box, rows, args.readers, args.lag_rate, Path(tmp), args.profile_dir, args.verify)
                results.append(result)
                print(json.dumps(result), flush=True)
        finally:
            box.down()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
