"""A channel's gate on two "hosts": the cost of an idle standby, the takeover time, and the cost of fencing.

    .venv/bin/python scripts/bench/standby.py [--takeovers 10] [--lease 5] [--idle-seconds 30] [--json FILE]
        [--only idle|takeovers|fence] [--dc-latency MS]

On private sandbox servers (a source and a DC), under a steady load on the source (one small transaction
every 20 ms), two `gate run` processes of one channel, each with its own folder and config:

  idle       the active gate runs; a second one stands by (`gate run --standby`) for --idle-seconds: its
             PSS (and RSS) from /proc/PID/smaps_rollup and its CPU time over that time.
  takeovers  --takeovers times each: kill -9 of the active gate (its DC connections close: the standby's
             GET_LOCK wakes at once), and SIGSTOP of it (silent: the standby waits lease_seconds, ends its
             connections, takes over). From the signal to the new holder's takeover (gate_holder) and to
             the first checkpoint it stores (the channel moving again). The old one is then killed and
             started again as the next standby.
  fence      the writer's DC transaction of a 1000-row chunk without the fence, with it (the holder's row read
             LOCK IN SHARE MODE in the chunk's query, gate's way) and with it as a query of its own (the way
             before), in turns, 500 chunks each: rows/s of the median chunk of each; with --dc-latency MS also
             through a proxy adding MS to each round trip (--fence-chunks-at-latency chunks each).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pymysql
from memory import smaps_rollup  # beside this script

sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the repository: tests.linkproxy
from gate.capture.holder import Fence, take_over
from gate.capture.holder import Me as Holder
from gate.capture.reader import current_position
from gate.capture.writer import _dc_session, _write
from gate.common.config import ChannelDefaults
from gate.common.dc import ChannelSettings, connect, create_channel, take_lock, write_start_position
from gate.devtools.sandbox import MariaDBServer, Sandbox
from tests.linkproxy import LinkProxy  # noqa: E402

GATE = str(Path(sys.executable).with_name("gate"))
CHANNEL = "bench_standby"
DB = "bench_standby_src"


class Host:
    """One gate process of the channel in its own folder."""

    def __init__(self, workdir: Path, name: str, dc: MariaDBServer) -> None:
        self.home = workdir / name
        self.home.mkdir(parents=True, exist_ok=True)
        self.config = self.home / "config.yaml"
        self.config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {dc.port}\n  user: root\n  password: ''\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str) -> int:
        log = open(self.home / "gate.log", "ab")
        self.proc = subprocess.Popen([GATE, "--config", str(self.config), "run", CHANNEL, "--no-check", *args],
                                     stdout=log, stderr=log, start_new_session=True)
        return self.proc.pid

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def holder(conn: pymysql.Connection) -> tuple[int, int]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT epoch, pid FROM `{CHANNEL}`.gate_holder")
        row = cur.fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def checkpoint(conn: pymysql.Connection) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id FROM `{CHANNEL}`.transfer_checkpoint")
        return int(cur.fetchone()[0])


def wait(what: Any, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.01)
    return time.monotonic()


def load(source: MariaDBServer, stop: threading.Event) -> None:
    with source.connect() as conn, conn.cursor() as cur:
        n = 0
        while not stop.is_set():
            n += 1
            cur.execute(f"INSERT INTO {DB}.t VALUES (%s, 'a row of the steady load')", (n,))
            time.sleep(0.02)


def idle_cost(pid: int, seconds: float) -> dict[str, float]:
    proc = psutil.Process(pid)
    time.sleep(5)  # its start-up (imports, first queries) is not idling
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    rss, pss = smaps_rollup(pid)
    cpu = (after.user + after.system) - (before.user + before.system)
    return {"pss_mib": round(pss / 2**20, 1), "rss_mib": round(rss / 2**20, 1),
            "cpu_percent": round(100 * cpu / seconds, 3), "children": len(proc.children(recursive=True))}


def takeovers(box: Sandbox, workdir: Path, count: int, how: signal.Signals) -> dict[str, Any]:
    hosts = [Host(workdir, f"{how.name.lower()}-{n}", box.dc) for n in range(2)]
    with box.dc.connect() as conn:
        hosts[0].start()
        wait(lambda: holder(conn)[1] == hosts[0].proc.pid)  # type: ignore[union-attr]
        hosts[1].start("--standby")
        to_holder, to_checkpoint = [], []
        for n in range(count):
            active, standby = hosts[n % 2], hosts[(n + 1) % 2]
            time.sleep(2.0)  # the standby is standing by; the active writes
            assert active.proc is not None and standby.proc is not None
            os.killpg(active.proc.pid, how)
            at, moved_from = time.monotonic(), checkpoint(conn)
            new_pid = standby.proc.pid
            took = wait(lambda pid=new_pid: holder(conn)[1] == pid)  # type: ignore[misc]
            moved = wait(lambda start=moved_from: checkpoint(conn) > start)  # type: ignore[misc]
            to_holder.append(took - at)
            to_checkpoint.append(moved - at)
            active.kill()
            active.start("--standby")
        for host in hosts:
            host.kill()

    def figures(values: list[float]) -> dict[str, float]:
        return {"median": round(statistics.median(values), 2), "max": round(max(values), 2)}

    return {"to_holder_s": figures(to_holder), "to_first_checkpoint_s": figures(to_checkpoint)}


FENCES = ("without", "guard", "check")  # no fence; in the chunk's query (gate's); a query of its own before it


def fence_cost(box: Sandbox, chunks: int = 500, latency_ms: float = 0.0) -> dict[str, Any]:
    """The writer's transaction of a 1000-row chunk without the fence, with it in the same query (gate's way,
    holder.guard) and with it as a query of its own before the chunk (holder.check, the way before), in
    turns A B C C B A (an order effect cancels out); the median chunk of each (the machine's other work makes
    sums noisy). ``latency_ms``: through a proxy adding that much to each round trip to the DC."""
    config = box.dc.config()
    link = LinkProxy(box.dc.port) if latency_ms else None
    if link is not None:
        link.delay = latency_ms / 2000
        config = replace(config, port=link.port)
    try:
        with connect(config, "DC", CHANNEL) as ctl:
            take_lock(ctl, CHANNEL)
            epoch, _ = take_over(ctl, CHANNEL, Holder("bench", os.getpid()), False)
            session, _ = _dc_session(config, CHANNEL)
            conn = session.conn
            fence = Fence(CHANNEL, epoch)
            seconds: dict[str, list[float]] = {mode: [] for mode in FENCES}
            row_id = 10**9
            turns = [*FENCES, *reversed(FENCES)]
            for n in range(len(FENCES) * chunks):
                mode = turns[n % len(turns)]
                rows = [(row_id + i, n + 10**8, DB, "t", "2024-01-01 00:00:00", "bench", "INSERT",
                         json.dumps({"NEW": [{"id": row_id + i}, {"v": "x" * 100}]})) for i in range(1000)]
                row_id += 1000
                started = time.perf_counter()
                if mode == "check":
                    with conn.cursor() as cur:
                        fence.check(cur)  # autocommit is off: the chunk's INSERTs go on in its transaction
                _write(session, rows, None, fence if mode == "guard" else None)
                seconds[mode].append(time.perf_counter() - started)
            with conn.cursor() as cur:
                cur.execute("DELETE FROM transfer_data WHERE id >= %s", (10**9,))
            conn.commit()
            conn.close()
    finally:
        if link is not None:
            link.close()
    rates = {mode: round(1000 / statistics.median(times)) for mode, times in seconds.items()}
    return {"dc_latency_ms": latency_ms, "chunks_each": chunks, "rows_per_s_without": rates["without"],
            "rows_per_s_with_fence": rates["guard"], "ratio": round(rates["guard"] / rates["without"], 3),
            "rows_per_s_fence_in_its_own_query": rates["check"],
            "ratio_fence_in_its_own_query": round(rates["check"] / rates["without"], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--takeovers", type=int, default=10)
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--dc-latency", type=float, default=0.0, metavar="MS",
                        help="the fence's cost also through a proxy adding MS to each round trip to the DC")
    parser.add_argument("--fence-chunks-at-latency", type=int, default=40)
    parser.add_argument("--only", choices=("idle", "takeovers", "fence"), help="run one part alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gate-standby-") as tmp:
        workdir = Path(tmp)
        box = Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True)
        box.up()
        stop = threading.Event()
        try:
            with box.source.connect() as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE {DB}")
                cur.execute(f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(40))")
            with connect(box.dc.config(), "DC") as conn:
                create_channel(conn, ChannelSettings(CHANNEL, box.source.config(), server_id=4343, allow=(f"{DB}.*",),
                                                     defaults=ChannelDefaults(lease_seconds=args.lease)))
                pos = current_position(box.source.config())
                with conn.cursor() as cur:
                    write_start_position(cur, CHANNEL, pos.log_file, pos.log_pos, pos.gtid_pos, box.source.address)
            threading.Thread(target=load, args=(box.source, stop), daemon=True).start()
            result: dict[str, Any] = {"lease_seconds": args.lease}
            active, standby = Host(workdir, "idle-a", box.dc), Host(workdir, "idle-b", box.dc)
            with box.dc.connect() as conn:
                active.start()
                wait(lambda: holder(conn)[1] == active.proc.pid)  # type: ignore[union-attr]
            if args.only in (None, "idle"):
                result["idle_standby"] = idle_cost(standby.start("--standby"), args.idle_seconds)
                result["active_main_process_pss_mib"] = round(smaps_rollup(active.proc.pid)[1] / 2**20, 1)  # type: ignore[union-attr]
            active.kill()
            standby.kill()
            if args.only in (None, "takeovers"):
                result["kill_9"] = takeovers(box, workdir, args.takeovers, signal.SIGKILL)
                result["sigstop"] = takeovers(box, workdir, args.takeovers, signal.SIGSTOP)
            stop.set()
            if args.only in (None, "fence"):
                result["fence"] = fence_cost(box)
                if args.dc_latency:
                    result["fence_at_latency"] = fence_cost(box, args.fence_chunks_at_latency, args.dc_latency)
        finally:
            stop.set()
            box.down()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
