"""Retention benchmark: a channel's lag while 5,000,000 old rows leave transfer_data, by two methods.

    .venv/bin/python scripts/bench/retention.py [--rows 5000000] [--rate 5000] [--seconds 600] [--json FILE]

One run on private sandbox servers (a source and a DC with a row-format binlog, as a DC that feeds
replicas has), three phases of the same channel, one after the other:

  baseline   transfer_data preloaded with --rows old rows (30 days old, ids 1..N); gate runs the
             channel under a paced load of --rate rows/s (100-row transactions) for --seconds; nothing
             is removed.
  delete     the same, and retain_days 1: gate run's retention removes the old rows while the load
             runs (gate.capture.retention: primary-key range DELETEs of PURGE_BATCH rows, one
             transaction each, at READ COMMITTED, each followed by a pause of PURGE_PAUSE times its
             duration).
  partition  the same table RANGE-partitioned by id (--partition-rows per partition, a MAXVALUE one
             for the new rows); the benchmark drops the old partitions (ALTER TABLE ... DROP PARTITION,
             moving purged_through first) while the load runs.

For each phase: the lag p50/p99/max (each source transaction: the first checkpoint that covers it
minus its COMMIT's return, counted once per row, as scripts/bench/benchmark.py measures it), the
rows/s the load reached, how long the removal took, and CPU seconds of the DC's mariadbd and of the
machine. Figures are printed as ratios against the baseline of the same run.
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
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import pymysql
from benchmark import GateProcess, drop_channel, master_position, new_channel
from monitors import CheckpointPoller, busy_percent, machine_busy, mariadbd_cpu, percentile
from workloads import LAG_DDL

from gate.admin.channel import set_retention
from gate.capture.retention import PURGE_BATCH, PURGE_PAUSE
from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import MariaDBServer, Sandbox

CHANNEL = "bench_ret_ch"
ROWS_PER_TXN = 100
DC_ARGS = ("--log-bin=dc-bin", "--binlog-format=ROW", "--innodb-log-file-size=256M")


def paced_load(port: int, stop: EventType, seconds: float, txn_per_s: int, out: str) -> None:
    """``txn_per_s`` transactions of ROWS_PER_TXN rows each second until ``stop`` or ``seconds``; writes
    [(txn, commit wall time)] as JSON to ``out``."""
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True, charset="utf8mb4")
    sql = ("INSERT INTO bench_lag.t (txn, seq, name, amount, created, note) SELECT %s, seq, CONCAT('lag ', seq), "
           f"seq * 1.5, NOW(3), REPEAT('n', 40) FROM bench_lag.seq_1_to_{ROWS_PER_TXN}")
    commits: list[tuple[int, float]] = []
    start = time.time() + 0.05
    with conn.cursor() as cur:
        for k in range(1, int(seconds * txn_per_s) + 1):
            if stop.is_set():
                break
            delay = start + (k - 1) / txn_per_s - time.time()
            if delay > 0:
                time.sleep(delay)
            cur.execute(sql, (k,))
            commits.append((k, time.time()))
    conn.close()
    Path(out).write_text(json.dumps(commits))


def preload(dc: MariaDBServer, rows: int, partition_rows: int | None) -> float:
    """``rows`` old rows in transfer_data (ids 1..rows, 100 per tid, 30 days old) and the checkpoint at the
    last; RANGE partitions by id first when ``partition_rows``. Not binlogged. Returns the seconds taken."""
    t0 = time.time()
    with dc.connect(CHANNEL) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        if partition_rows:
            bounds = list(range(partition_rows, rows + 1, partition_rows))
            parts = ", ".join(f"PARTITION p{n} VALUES LESS THAN ({b + 1})" for n, b in enumerate(bounds))
            cur.execute(f"ALTER TABLE transfer_data PARTITION BY RANGE (id) ({parts}, "
                        "PARTITION pnew VALUES LESS THAN MAXVALUE)")
        step = 250_000
        for first in range(1, rows + 1, step):
            last = min(rows, first + step - 1)
            cur.execute(
                "INSERT INTO transfer_data SELECT seq, (seq + 99) DIV 100, 'bench_lag', 't', "
                "NOW() - INTERVAL 30 DAY, 'old:3306', 'INSERT', CONCAT('{\"NEW\": [{\"id\": \"', seq, "
                "'\"}, {\"txn\": \"', (seq + 99) DIV 100, '\"}, {\"seq\": \"', seq MOD 100, '\"}, {\"name\": "
                "\"lag ', seq MOD 100, '\"}, {\"amount\": \"1.500\"}, {\"created\": \"2024-01-01 00:00:00.000\"}, "
                f"{{\"note\": \"', REPEAT('n', 40), '\"}}]}}') FROM seq_{first}_to_{last}")
        tid = (rows + ROWS_PER_TXN - 1) // ROWS_PER_TXN
        cur.execute("UPDATE transfer_checkpoint SET id = %s, tid = %s", (rows, tid))
        cur.execute("UPDATE gate_resume SET id = %s, tid = %s", (rows, tid))
    return time.time() - t0


class PartitionDropper(threading.Thread):
    """Drops the partitions that hold only old rows, oldest first, moving purged_through before each."""

    def __init__(self, dc: MariaDBServer, rows: int, partition_rows: int) -> None:
        super().__init__(daemon=True)
        self.dc, self.rows, self.partition_rows = dc, rows, partition_rows
        self.done_at: float | None = None

    def run(self) -> None:
        with self.dc.connect(CHANNEL) as conn, conn.cursor() as cur:
            for n, bound in enumerate(range(self.partition_rows, self.rows + 1, self.partition_rows)):
                cur.execute("REPLACE INTO gate_meta (name, value) VALUES ('purged_through', %s)", (str(bound),))
                cur.execute(f"ALTER TABLE transfer_data DROP PARTITION p{n}")
        self.done_at = time.time()


def purged_through(dc: MariaDBServer) -> int:
    with dc.connect(CHANNEL) as conn, conn.cursor() as cur:
        cur.execute("SELECT value FROM gate_meta WHERE name = 'purged_through'")
        row = cur.fetchone()
    return int(row[0]) if row else 0


def lags(dc: MariaDBServer, rows: int, commits: dict[int, float], trace: list[tuple[float, int]]) -> list[float]:
    """Per row of the load: when the checkpoint first covered its transaction minus the commit's return."""
    with dc.connect(CHANNEL) as conn, conn.cursor() as cur:
        cur.execute("SELECT t.id, m.mx, t.data FROM transfer_data t JOIN (SELECT tid, MIN(id) AS mn, MAX(id) AS mx "
                    "FROM transfer_data WHERE id > %s GROUP BY tid) m ON t.id = m.mn", (rows,))
        firsts = cur.fetchall()
    times, ids = [t for t, _ in trace], [i for _, i in trace]
    found: list[float] = []
    for first_id, last_id, data in firsts:
        txn = int(next(cell["txn"] for cell in json.loads(data)["NEW"] if "txn" in cell))
        k = bisect.bisect_left(ids, int(first_id))
        if k == len(ids) or txn not in commits:
            raise RuntimeError(f"transaction {txn} (id {first_id}) was never covered by the checkpoint")
        found.extend([times[k] - commits[txn]] * (int(last_id) - int(first_id) + 1))
    return found


def phase(box: Sandbox, workdir: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One channel, preloaded, under the paced load, with ``mode``'s removal (or none)."""
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS bench_lag")
        cur.execute("CREATE DATABASE bench_lag")
        cur.execute(LAG_DDL)
        start = master_position(conn)
    drop_channel(box.dc, CHANNEL)
    new_channel(box.dc, box.source, CHANNEL, start, ChannelDefaults(retention_interval_seconds=1.0), ("bench_lag.*",))
    preload_s = preload(box.dc, args.rows, args.partition_rows if mode == "partition" else None)
    print(f"  {mode}: preloaded {args.rows} rows in {preload_s:.0f} s", flush=True)
    poller = CheckpointPoller(box.dc, CHANNEL)
    gate = GateProcess(box.dc, CHANNEL, workdir)
    out = workdir / f"commits-{mode}.json"
    stop = mp.get_context("spawn").Event()
    removal_started = removal_done = None
    try:
        poller.start()
        gate.started_at()
        with box.source.connect() as conn, conn.cursor() as cur:
            deadline = time.time() + 30
            while not cur.execute("SELECT 1 FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'"):
                gate.check()
                if time.time() > deadline:
                    raise RuntimeError(f"gate did not connect to the source; see {gate.log}")
                time.sleep(0.02)
        time.sleep(0.5)
        dc_cpu0, busy0, t0 = mariadbd_cpu(box.dc), machine_busy(), time.time()
        loader = mp.get_context("spawn").Process(
            target=paced_load, args=(box.source.port, stop, args.seconds, args.rate // ROWS_PER_TXN, str(out)))
        loader.start()
        time.sleep(2.0)  # the load runs alone first
        removal_started = time.time()
        dropper = None
        if mode == "delete":
            set_retention(box.dc.config(), CHANNEL, retain_days=1)
        elif mode == "partition":
            dropper = PartitionDropper(box.dc, args.rows, args.partition_rows)
            dropper.start()
        while loader.is_alive():
            gate.check()
            if removal_done is None and mode != "baseline" and purged_through(box.dc) >= args.rows:
                removal_done = dropper.done_at if dropper is not None and dropper.done_at else time.time()
            loader.join(0.25)
        load_wall = time.time() - t0
        with box.source.connect() as conn:
            end = master_position(conn)
        gate.wait_position(poller, end)
        dc_cpu, busy = mariadbd_cpu(box.dc) - dc_cpu0, busy_percent(busy0, machine_busy())
    finally:
        stop.set()
        gate.stop()
        poller.stop()
    commits = dict(json.loads(out.read_text()))
    found = lags(box.dc, args.rows, commits, poller.trace)
    removed = purged_through(box.dc) if mode != "baseline" else 0
    return {"mode": mode, "preload_s": round(preload_s, 1), "load_rows": len(found),
            "load_rows_per_s": round(len(found) / load_wall), "lag_p50_s": round(percentile(found, 50), 3),
            "lag_p99_s": round(percentile(found, 99), 3), "lag_max_s": round(max(found), 3),
            "removed_rows": removed, "removal_s": (round(removal_done - removal_started, 1)
                                                   if removal_done and removal_started else None),
            "dc_cpu_s": round(dc_cpu, 1), "machine_busy_percent": busy}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="old rows to remove (default 5,000,000)")
    parser.add_argument("--rate", type=int, default=5000, help="rows/s of the channel's load (default 5000)")
    parser.add_argument("--seconds", type=float, default=600.0, help="seconds of load per phase (default 600)")
    parser.add_argument("--partition-rows", type=int, default=500_000, help="rows per partition (default 500,000)")
    parser.add_argument("--only", default="baseline,delete,partition", help="comma-separated phases")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gate-retention-bench-") as tmp:
        workdir = Path(tmp)
        box = Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True, dc_args=DC_ARGS)
        box.up()
        try:
            print(f"retention benchmark: {args.rows} old rows, load {args.rate} rows/s for {args.seconds:.0f} s per "
                  f"phase, DELETE batches of {PURGE_BATCH} rows with pauses of {PURGE_PAUSE:g}x their time, partitions of "
                  f"{args.partition_rows} rows", flush=True)
            for mode in args.only.split(","):
                results.append(phase(box, workdir, mode, args))
                print("  " + json.dumps(results[-1]), flush=True)
        finally:
            box.down()
    base = next((r for r in results if r["mode"] == "baseline"), None)
    print(f"\n{'phase':<10} {'load r/s':>9} {'lag p50':>8} {'lag p99':>8} {'p99/base':>9} {'lag max':>8} "
          f"{'removed':>9} {'removal s':>10} {'DC cpu s':>9} {'busy %':>7}")
    for r in results:
        ratio = f"{r['lag_p99_s'] / base['lag_p99_s']:.2f}" if base and base["lag_p99_s"] else "-"
        print(f"{r['mode']:<10} {r['load_rows_per_s']:>9} {r['lag_p50_s']:>8.3f} {r['lag_p99_s']:>8.3f} {ratio:>9} "
              f"{r['lag_max_s']:>8.3f} {r['removed_rows']:>9} {r['removal_s'] if r['removal_s'] is not None else '-':>10} "
              f"{r['dc_cpu_s']:>9} {r['machine_busy_percent']:>7}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
