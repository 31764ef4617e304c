"""kill -9 of `gate run` at random moments under load, and restarts of the source and the DC.

Whatever happens, the final DC equals an uninterrupted run of the same binlog, ids and tids included,
and no row at or below the checkpoint is ever missing.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil

from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import MariaDBServer, Sandbox
from gate.devtools.workload import RandomWorkload
from tests.replay import dc_rows, make_channel, running, start_gate, wait_caught_up, wait_running


class InvariantWatch(threading.Thread):
    """Polls the DC: every row with id <= checkpoint is there, and the last one has the checkpoint's tid."""

    def __init__(self, dc: MariaDBServer, channel: str) -> None:
        super().__init__(daemon=True)
        self.dc, self.channel = dc, channel
        self.checks = 0
        self.violations: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        with self.dc.connect(self.channel) as conn, conn.cursor() as cur:
            while not self.done.is_set():
                conn.begin()  # one consistent snapshot for the checkpoint and the rows
                cur.execute("SELECT id, tid FROM transfer_checkpoint")
                cid, ctid = cur.fetchone()
                cur.execute("SELECT COUNT(*), COALESCE(MAX(tid), 0) FROM transfer_data WHERE id <= %s", (cid,))
                count, max_tid = cur.fetchone()
                conn.commit()
                if count != cid or max_tid != ctid:
                    self.violations.append(f"checkpoint ({cid}, {ctid}) but {count} rows, max tid {max_tid}")
                self.checks += 1
                time.sleep(0.01)


def _workload(source: MariaDBServer, db: str, big_rows: int, big_go: threading.Event) -> threading.Thread:
    """400 random transactions, then (once ``big_go`` is set) one transaction of ``big_rows`` rows, then 400 more."""

    def load() -> None:
        with source.connect() as conn, conn.cursor() as cur:
            work = RandomWorkload(conn, db, seed=7, ddl_every=40)
            work.setup()
            work.run(400)
            cur.execute(f"CREATE TABLE {db}.big (id INT PRIMARY KEY, v VARCHAR(30))")
            big_go.wait()
            conn.begin()
            for start in range(0, big_rows, 1000):
                cur.executemany(f"INSERT INTO {db}.big VALUES (%s, %s)",
                                [(i, f"row {i}") for i in range(start, start + 1000)])
            conn.commit()
            work.run(400)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    return thread


def _rows_above_checkpoint(dc: MariaDBServer, channel: str, table: str | None = None) -> int:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM transfer_data WHERE id > (SELECT id FROM transfer_checkpoint)"
                    + (" AND tablename = %s" if table else ""), (table,) if table else ())
        return int(cur.fetchone()[0])


def test_kill_9_at_random_moments_gives_the_uninterrupted_result(
        sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    db = f"src_{unique_name}"
    defaults = ChannelDefaults(batch_rows=500, writers=2)
    crashy, reference = f"{unique_name}_k", f"{unique_name}_r"
    dc = make_channel(sandbox.dc, sandbox.source, crashy, allow=(f"{db}.*",), defaults=defaults)
    make_channel(sandbox.dc, sandbox.source, reference, allow=(f"{db}.*",), defaults=defaults)
    watch = InvariantWatch(sandbox.dc, crashy)
    watch.start()
    big_go = threading.Event()
    load = _workload(sandbox.source, db, 40000, big_go)
    rng = random.Random(11)
    kills, partial_kills = 0, 0

    def kill(gate: subprocess.Popen[bytes]) -> None:
        nonlocal kills, partial_kills
        gate.send_signal(signal.SIGKILL)
        gate.wait()
        kills += 1
        partial_kills += _rows_above_checkpoint(sandbox.dc, crashy) > 0

    for _ in range(6):  # at random moments of the first 400 transactions
        gate = start_gate(tmp_path, sandbox.dc, crashy)
        time.sleep(rng.uniform(0.3, 2.0))
        kill(gate)
    # once inside the big transaction: at least two writer batches of it written, its end not reached
    gate = start_gate(tmp_path, sandbox.dc, crashy)
    big_go.set()
    deadline = time.monotonic() + 120
    while (in_big := _rows_above_checkpoint(sandbox.dc, crashy, "big")) < 2 * defaults.batch_rows:
        assert time.monotonic() < deadline, "gate never wrote two batches of the big transaction"
        time.sleep(0.01)
    kill(gate)
    assert _rows_above_checkpoint(sandbox.dc, crashy, "big") >= in_big  # killed with them above the checkpoint
    while kills < 13:  # random again, through the rest of the big transaction and the last 400
        gate = start_gate(tmp_path, sandbox.dc, crashy)
        time.sleep(rng.uniform(0.3, 2.0))
        kill(gate)
    load.join()
    gate = start_gate(tmp_path, sandbox.dc, crashy)
    wait_running(sandbox.dc, crashy, gate)
    try:
        wait_caught_up(sandbox.source, sandbox.dc, crashy, timeout=120)
    finally:
        gate.send_signal(signal.SIGTERM)
        assert gate.wait(timeout=60) == 0
    watch.done.set()
    watch.join()
    with running(dc, reference):
        wait_caught_up(sandbox.source, sandbox.dc, reference, timeout=120)
    got, expected = dc_rows(sandbox.dc, crashy), dc_rows(sandbox.dc, reference)
    assert len(expected) > 40000
    assert got == expected
    assert watch.checks > 100 and watch.violations == []
    assert partial_kills >= 1, "no kill landed while rows above the checkpoint were in flight"


def _descendants(tag: str) -> list[tuple[int, str]]:
    """The live processes whose environment holds GATE_TEST_TAG=``tag``: the gates started with it and every
    child they spawned, whoever adopted it since (other test runs on the machine are not counted)."""
    found = []
    for proc in psutil.process_iter(["name", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.environ().get("GATE_TEST_TAG") == tag:
                found.append((proc.pid, proc.info["name"]))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_no_writer_or_decoder_outlives_a_gate_killed_while_starting(sandbox: Sandbox, unique_name: str,
                                                                     tmp_path: Path) -> None:
    """A child still starting when gate is killed arms PR_SET_PDEATHSIG too late: it must notice and leave; the
    forkserver the children come from leaves with gate too."""
    make_channel(sandbox.dc, sandbox.source, unique_name)
    tag = f"{unique_name}-{os.getpid()}"
    for delay in (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7):
        gate = start_gate(tmp_path, sandbox.dc, unique_name, env={"GATE_TEST_TAG": tag})
        time.sleep(delay)
        gate.send_signal(signal.SIGKILL)
        gate.wait()
    deadline = time.monotonic() + 30  # a child that outlived its gate stays: wait for all to leave, or for this
    while (left := _descendants(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []
