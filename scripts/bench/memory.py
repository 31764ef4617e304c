"""Memory per channel: RSS and PSS of ``gate run``'s whole process tree, idle, at a moderate rate, saturated.

    .venv/bin/python scripts/bench/benchmark.py --only memory         # in the benchmark's run
    .venv/bin/python scripts/bench/memory.py [--rate 600] [--seconds 20] [--burst-rows 100000] [--writers N]

One channel runs as users run it (``gate --config FILE run CHANNEL``, the console script, so its children
start as they do in production) on a table of its own, through four phases: idle (streaming, nothing
to read), moderate (a paced load of ``rate`` rows/s in 10-row transactions), saturated (``burst_rows``
rows committed as fast as the source takes them, until gate has caught up) and idle again. Every
250 ms each process of gate's tree is read from /proc/PID/smaps_rollup: RSS counts the pages shared
between gate's processes once per process, PSS divides each page among the processes that map it,
so the tree's PSS sum is what the channel adds to the host. Per phase: the tree's peak and median
PSS, its peak RSS, and each process at the peak. Target: peak PSS <= 100 MiB at the moderate rate.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from benchmark import drop_channel, master_position, new_channel
from monitors import CheckpointPoller, Position, _role
from workloads import LAG_DDL, lag_load

from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import Sandbox

MiB = 1024 * 1024
TARGET_PSS_MIB = 100.0  # the whole tree at the moderate rate
DB = "bench_mem"
CHANNEL = "bench_mem_ch"
GATE = str(Path(sys.executable).with_name("gate"))  # the console script, as users start gate


def smaps_rollup(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in bytes, from /proc/PID/smaps_rollup."""
    rss = pss = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    return rss, pss


Sample = list[tuple[int, str, int, int]]  # (pid, role, RSS, PSS) per process of the tree


class MemorySampler(threading.Thread):
    """Samples the tree under ``pid`` every ``interval`` s into the list of the current :attr:`phase`."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.phase: str | None = None
        self.samples: dict[str, list[Sample]] = {}
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def once(self) -> Sample:
        main = psutil.Process(self.pid)
        out: Sample = []
        for proc in [main] + main.children(recursive=True):
            try:
                rss, pss = smaps_rollup(proc.pid)
                out.append((proc.pid, _role(proc, self.pid), rss, pss))
            except (OSError, psutil.Error):
                continue  # a child that just left
        return out

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            phase = self.phase
            if phase is None:
                continue
            try:
                sample = self.once()
            except psutil.Error:
                return
            self.samples.setdefault(phase, []).append(sample)


def summarise(samples: list[Sample]) -> dict[str, Any]:
    """The tree's peak and median PSS, its peak RSS and the processes of the sample with the peak PSS."""
    pss = [sum(p[3] for p in s) for s in samples]
    peak = samples[pss.index(max(pss))]
    return {
        "samples": len(samples),
        "peak_pss_mib": max(pss) / MiB, "median_pss_mib": statistics.median(pss) / MiB,
        "peak_rss_mib": max(sum(p[2] for p in s) for s in samples) / MiB,
        "processes": max(len(s) for s in samples),
        "at_peak": [{"pid": pid, "role": r, "rss_mib": round(rss / MiB, 1), "pss_mib": round(p / MiB, 1)}
                    for pid, r, rss, p in sorted(peak, key=lambda p: (p[1] != "main", p[1], p[0]))],
    }


def burst(box: Sandbox, rows: int) -> Position:
    """``rows`` rows in 100-row transactions as fast as the source takes them; returns the binlog end."""
    with box.source.connect() as conn, conn.cursor() as cur:
        for txn in range(rows // 100):
            cur.execute(f"INSERT INTO {DB}.t (txn, seq, name, amount, created, note) SELECT %s, seq, "
                        f"CONCAT('burst ', seq), seq * 1.5, NOW(3), REPEAT('n', 40) FROM {DB}.seq_1_to_100", (txn,))
        return master_position(conn)


def wait_streaming(box: Sandbox, gate: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    """Until gate's replica connection is in the source's processlist."""
    deadline = time.time() + timeout
    with box.source.connect() as conn, conn.cursor() as cur:
        while not cur.execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'"):
            if gate.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"gate is not streaming from the source (exit {gate.poll()}); see {log}")
            time.sleep(0.05)


def run_memory(box: Sandbox, workdir: Path, defaults: ChannelDefaults, rate: int = 600, seconds: float = 20.0,
               idle_seconds: float = 10.0, burst_rows: int = 100_000) -> dict[str, Any]:
    """One channel through the four phases; the figures per phase (see the module's docstring)."""
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(LAG_DDL.replace("bench_lag.t", f"{DB}.t"))
        start = master_position(conn)
    new_channel(box.dc, box.source, CHANNEL, start, defaults, (f"{DB}.*",))
    config = workdir / "memory-config.yaml"
    config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {box.dc.port}\n  user: root\n  password: ''\n")
    log = workdir / f"{CHANNEL}.log"
    poller = CheckpointPoller(box.dc, CHANNEL, interval=0.1)
    phases: dict[str, Any] = {}
    with open(log, "wb") as out:
        gate = subprocess.Popen([GATE, "--config", str(config), "run", CHANNEL, "--no-check"], stdout=out,
                                stderr=subprocess.STDOUT)
    sampler = MemorySampler(gate.pid)
    try:
        sampler.start()
        poller.start()
        wait_streaming(box, gate, log)
        deadline = time.time() + 30  # start-up done: every child runs (and has named itself)
        while any(p[1] == "other" for p in sampler.once()) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        sampler.phase = "idle"
        time.sleep(idle_seconds)
        sampler.phase = "moderate"
        loader = mp.get_context("spawn").Process(target=lag_load, args=(
            box.source.port, seconds, rate // 10, 10, str(workdir / "memory-commits.json"), DB))
        loader.start()
        loader.join()
        sampler.phase = "saturated"
        t0 = time.time()
        end = burst(box, burst_rows)
        while poller.position is None or poller.position < end:
            if gate.poll() is not None or time.time() - t0 > max(300.0, burst_rows / 500):
                raise RuntimeError(f"gate did not catch up with the burst (exit {gate.poll()}); see {log}")
            time.sleep(0.05)
        phases["saturated_rows_per_s"] = burst_rows / (time.time() - t0)
        sampler.phase = "idle_after"
        time.sleep(idle_seconds)
        sampler.phase = None
    finally:
        sampler.stop()
        poller.stop()
        gate.terminate()
        try:
            gate.wait(timeout=60)
        except subprocess.TimeoutExpired:
            gate.kill()
            gate.wait()
    drop_channel(box.dc, CHANNEL)
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {DB}")
    for phase in ("idle", "moderate", "saturated", "idle_after"):
        phases[phase] = summarise(sampler.samples[phase])
    phases["rate"], phases["target_pss_mib"] = rate, TARGET_PSS_MIB
    return phases


def memory_report(m: dict[str, Any]) -> str:
    """One line per phase, then the processes at each phase's peak."""
    labels = {"idle": "idle", "moderate": f"{m['rate']} rows/s",
              "saturated": f"saturated ({m['saturated_rows_per_s']:,.0f} rows/s)", "idle_after": "idle again"}
    lines = [f"memory per channel (gate run's whole tree, MiB; target: peak PSS <= {m['target_pss_mib']:.0f} "
             f"at {m['rate']} rows/s)",
             f"  {'phase':<30} {'PSS peak':>8} {'median':>7} {'RSS peak':>8} {'procs':>5}  result"]
    for phase, label in labels.items():
        p = m[phase]
        result = ("PASS" if p["peak_pss_mib"] <= m["target_pss_mib"] else "FAIL") if phase == "moderate" else ""
        lines.append(f"  {label:<30} {p['peak_pss_mib']:>8.1f} {p['median_pss_mib']:>7.1f} {p['peak_rss_mib']:>8.1f} "
                     f"{p['processes']:>5}  {result}")
    lines.append("  processes at the peak (role RSS/PSS):")
    for phase, label in labels.items():
        procs = ", ".join(f"{p['role']} {p['rss_mib']:.0f}/{p['pss_mib']:.0f}" for p in m[phase]["at_peak"])
        lines.append(f"    {label}: {procs}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=600, help="rows/s of the moderate phase (10-row transactions)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the moderate phase")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="length of each idle phase")
    parser.add_argument("--burst-rows", type=int, default=100_000, help="rows of the saturated phase")
    parser.add_argument("--writers", type=int, default=ChannelDefaults.writers, help="channel setting 'writers'")
    parser.add_argument("--decoders", type=int, default=ChannelDefaults.decoders, help="channel setting 'decoders'")
    parser.add_argument("--json", help="write the figures as JSON to this file")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gate-memory-"))
    box = Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True)
    try:
        box.up()
        figures = run_memory(box, workdir, ChannelDefaults(writers=args.writers, decoders=args.decoders), args.rate,
                             args.seconds, args.idle_seconds, args.burst_rows)
    finally:
        box.down()
    print(memory_report(figures))
    print(f"(work folder {workdir}; gate's log there)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
