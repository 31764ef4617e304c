"""A channel's gate on several "hosts" (separate `gate run` processes, each with its own working folder and
config): a standby takes the channel over when the active one is killed, stopped (SIGSTOP) or cut off from
the DC (a black-holed link), and the deposed one lands nothing after that (fencing). Whatever happens, the
DC's ids and tids are gap-free and its fold equals the source."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import MariaDBServer, Sandbox
from gate.devtools.workload import RandomWorkload
from tests.replay import (
    GATE,
    STARTED,
    config_yaml,
    dc_rows,
    fresh_target,
    make_channel,
    replay,
    table_contents,
    wait_caught_up,
)

LEASE = 2.0  # lease_seconds of the tests' channels
BOUND = 10.0  # seconds a takeover may take after the active gate dies or goes silent


def _host(tmp_path: Path, name: str, dc: MariaDBServer, channel: str, *args: str, port: int | None = None,
          user: str = "root") -> subprocess.Popen[bytes]:
    """``gate run CHANNEL --no-check ARGS`` as host ``name``: its own folder, config and log, its own process
    group (so that SIGSTOP stops its writers too); ``port``: the DC through a proxy there."""
    home = tmp_path / name
    home.mkdir(exist_ok=True)
    config = home / "config.yaml"
    text = config_yaml(dc, user)
    config.write_text(text if port is None else text.replace(f"port: {dc.port}", f"port: {port}"))
    log = open(home / "gate.log", "ab")
    gate = subprocess.Popen([GATE, "--config", str(config), "run", channel, "--no-check", *args], stdout=log,
                            stderr=log, cwd=home, start_new_session=True)
    STARTED.append(gate)
    return gate


def _log(tmp_path: Path, name: str) -> str:
    return (tmp_path / name / "gate.log").read_text()


def _holder(dc: MariaDBServer, channel: str) -> tuple[int, int] | None:
    """The channel's (epoch, pid) in gate_holder."""
    with dc.connect(channel) as conn, conn.cursor() as cur:
        if not cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = "
                           "'gate_holder'", (channel,)):
            return None
        cur.execute("SELECT epoch, pid FROM gate_holder")
        row = cur.fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def _wait_holder(dc: MariaDBServer, channel: str, pids: set[int], timeout: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _holder(dc, channel)
        if found is not None and found[1] in pids:
            return found
        time.sleep(0.05)
    raise AssertionError(f"none of {pids} holds {channel} after {timeout} s (holder: {_holder(dc, channel)})")


def _load(source: MariaDBServer, db: str, transactions: int, pace: float = 0.01) -> threading.Thread:
    """Random transactions (inserts, updates, deletes, some DDL) in a thread, ``pace`` seconds apart."""

    def run() -> None:
        with source.connect() as conn:
            work = RandomWorkload(conn, db, seed=3, ddl_every=50)
            work.setup()
            for _ in range(transactions):
                work.run(1)
                time.sleep(pace)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _assert_exact(sandbox: Sandbox, channel: str, db: str) -> None:
    """Ids and tids gap-free, and the fold of the DC's rows equal to the source's tables."""
    wait_caught_up(sandbox.source, sandbox.dc, channel, timeout=60)
    rows = dc_rows(sandbox.dc, channel)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    tids = sorted({r[1] for r in rows})
    assert tids == list(range(1, len(tids) + 1))
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)
    target = fresh_target(sandbox.dc, db)
    try:
        replay(rows, target)
        with sandbox.source.connect() as source:
            assert table_contents(target, db) == table_contents(source, db)
    finally:
        with target.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        target.close()


def _stop(gate: subprocess.Popen[bytes]) -> int:
    gate.send_signal(signal.SIGTERM)
    return gate.wait(timeout=60)


@pytest.fixture
def channel(sandbox: Sandbox, unique_name: str) -> str:
    make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"src_{unique_name}.*",),
                 defaults=ChannelDefaults(lease_seconds=LEASE, batch_rows=50, writers=2))
    return unique_name


def test_kill_9_of_the_active_gate_one_of_two_racing_standbys_takes_over_exactly(
        sandbox: Sandbox, channel: str, tmp_path: Path) -> None:
    db = f"src_{channel}"
    active = _host(tmp_path, "a", sandbox.dc, channel)
    _wait_holder(sandbox.dc, channel, {active.pid}, 30)
    standbys = {gate.pid: gate for gate in (_host(tmp_path, "b", sandbox.dc, channel, "--standby"),
                                            _host(tmp_path, "c", sandbox.dc, channel, "--standby"))}
    load = _load(sandbox.source, db, 300)
    time.sleep(1.5)
    active.kill()
    killed = time.monotonic()
    assert active.wait() == -signal.SIGKILL
    epoch, winner = _wait_holder(sandbox.dc, channel, set(standbys), BOUND)
    assert time.monotonic() - killed < BOUND
    load.join()
    _assert_exact(sandbox, channel, db)
    loser = next(pid for pid in standbys if pid != winner)
    assert standbys[loser].poll() is None  # still standing by
    with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT pid, standby, from_pid, reason FROM gate_takeover WHERE epoch = %s", (epoch,))
        pid, by_standby, from_pid, reason = cur.fetchone()
        cur.execute("SELECT pid, role FROM gate_process ORDER BY pid")
        roles = dict(cur.fetchall())
    assert (pid, by_standby, from_pid) == (winner, 1, active.pid)
    assert f"pid {active.pid} ended without a clean stop" in reason
    assert roles == {winner: "active", loser: "standby"}
    # a clean stop of the winner hands the channel to the other standby at once
    assert _stop(standbys[winner]) == 0
    _wait_holder(sandbox.dc, channel, {loser}, BOUND)
    with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT reason FROM gate_takeover ORDER BY epoch DESC LIMIT 1")
        assert cur.fetchone()[0] == f"{os.uname().nodename} pid {winner} had stopped cleanly"
    assert _stop(standbys[loser]) == 0
    _assert_exact(sandbox, channel, db)
