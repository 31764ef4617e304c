"""Monitors for the benchmark: the machine's CPU, gate's process tree (RSS, CPU per role) and the
channel's checkpoint as it moves."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from gate.devtools.sandbox import MariaDBServer

Position = tuple[str, int]  # binlog file and position


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
    if name in ("gate-writer", "gate-decoder", "gate-snapshot", "gate-forkserver"):  # gate.common.process.name_process
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
                if role not in ("other", "forkserver"):  # a child names itself once it runs (until then it
                    self._roles[proc.pid] = role            # has the forkserver's name): ask again until it has
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


def global_status(cur: Any, names: Sequence[str]) -> dict[str, int]:
    """The server's global status counters ``names``, by name."""
    cur.execute("SHOW GLOBAL STATUS WHERE variable_name IN (" + ", ".join(["%s"] * len(names)) + ")", tuple(names))
    return {name: int(value) for name, value in cur.fetchall()}


INNODB = ("Innodb_checkpoint_age", "Innodb_buffer_pool_pages_dirty", "Innodb_buffer_pool_pages_flushed")


def innodb_state(server: MariaDBServer) -> dict[str, int]:
    """What the DC server's InnoDB has still to do for the runs before: its checkpoint age (bytes of redo not
    yet checkpointed), its dirty pages, and the pages it has flushed since it started."""
    with server.connect() as conn, conn.cursor() as cur:
        return global_status(cur, INNODB)


def rows_written(cur: Any) -> int:
    """The DC server's Handler_write: every row inserted into a table since it started (gate's tables too), as
    each is, not at COMMIT."""
    return global_status(cur, ("Handler_write",))["Handler_write"]


class CheckpointPoller(threading.Thread):
    """Polls the channel's checkpoint and resume position every ``interval`` s, recording each change, and the
    highest id committed in transfer_data (``landed``: rows written, also above the checkpoint, as inside one
    large transaction), and every ``written_every`` polls the rows the DC server has inserted since the poller
    was made (``written``). Both show a large transaction's progress; the highest id moves in steps, a group
    of chunks landing at once (tens of thousands of rows over a long round trip), and not always the next
    group, while the count moves with each row inserted: its steady rate is the smoother figure. Reading the
    count costs the DC 0.2 to 0.3 ms of CPU, hence not at every poll."""

    def __init__(self, dc: MariaDBServer, channel: str, end: Position | None = None, interval: float = 0.01,
                 written_every: int = 5) -> None:
        super().__init__(daemon=True)
        self.dc = dc
        self.channel = channel
        self.end = end
        self.interval = interval
        self.written_every = written_every
        self.trace: list[tuple[float, int]] = []  # (wall time, checkpoint id), on change
        self.landed: list[tuple[float, int]] = []  # (wall time, highest id in transfer_data), on change
        self.written: list[tuple[float, int]] = []  # (wall time, rows the DC inserted since now), on change
        with dc.connect() as conn, conn.cursor() as cur:
            self._written_before = rows_written(cur)
        self.reached = threading.Event()
        self.reached_at: float | None = None
        self._halt = threading.Event()
        self.position: Position | None = None

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def run(self) -> None:
        conn = self.dc.connect(self.channel)
        last = top = written = -1
        polls = 0
        try:
            with conn.cursor() as cur:
                while not self._halt.is_set():
                    if polls % self.written_every == 0:
                        count = rows_written(cur) - self._written_before
                        if count != written:
                            self.written.append((time.time(), count))
                            written = count
                    polls += 1
                    cur.execute("SELECT c.id, r.log_file, r.log_pos, (SELECT COALESCE(MAX(id), 0) FROM transfer_data) "
                                "FROM transfer_checkpoint c, gate_resume r")
                    cid, log_file, log_pos, landed = cur.fetchone()
                    now = time.time()
                    if cid != last:
                        self.trace.append((now, int(cid)))
                        last = cid
                    if landed != top:
                        self.landed.append((now, int(landed)))
                        top = landed
                    if log_file is not None:
                        self.position = (log_file, int(log_pos))
                    if self.end is not None and not self.reached.is_set() and self.position is not None \
                            and self.position >= self.end:
                        self.reached_at = now
                        self.reached.set()
                    time.sleep(self.interval)
        finally:
            conn.close()


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    f = int(k)
    return s[f] if f + 1 >= len(s) else s[f] + (s[f + 1] - s[f]) * (k - f)


