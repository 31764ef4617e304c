"""``gate sandbox up|status|down`` as a DBA runs it, and the sandbox servers' lifetime."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gate.common.config import load_config
from gate.devtools.sandbox import Sandbox, free_port

GATE = str(Path(sys.executable).parent / "gate")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(gone(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


PORTS = ("source_port", "standby_port", "dc_port")


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    """A config.yaml with a sandbox on free ports in tmp_path; whatever it starts is stopped afterwards."""
    path = tmp_path / "config.yaml"
    path.write_text("sandbox:\n  dir: sb\n" + "".join(f"  {key}: {free_port()}\n" for key in PORTS))
    yield path
    box = Sandbox(tmp_path / "sb")
    pids = [pid for pid in (s.pid() for s in box.servers) if pid]
    box.down()
    assert wait_gone(pids)


def gate(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GATE, "--config", str(config), *args], capture_output=True, text=True, timeout=120)


def test_up_status_down(config: Path) -> None:
    up = gate(config, "--json", "sandbox", "up")
    assert up.returncode == 0, up.stderr
    servers = json.loads(up.stdout)
    ports = load_config(config).sandbox
    assert [(s["role"], s["address"], s["server_id"], s["running"]) for s in servers] == [
        ("source", f"127.0.0.1:{ports.source_port}", 1, True),
        ("standby", f"127.0.0.1:{ports.standby_port}", 2, True),
        ("dc", f"127.0.0.1:{ports.dc_port}", 3, True),
    ]
    pids = [s["pid"] for s in servers]
    assert all(not gone(pid) for pid in pids)  # the servers outlive the command that started them

    again = gate(config, "sandbox", "up")  # idempotent: the same processes, nothing new
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0].split() == ["role", "address", "server_id", "running", "pid"]
    assert [line.split()[-1] for line in again.stdout.splitlines()[1:]] == [str(pid) for pid in pids]

    box = Sandbox(config.parent / "sb")
    assert box.standby is not None
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE replicated")
        cur.execute("CREATE TABLE replicated.t (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("INSERT INTO replicated.t VALUES (1), (2)")
    box.wait_standby_caught_up()
    with box.standby.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM replicated.t ORDER BY id")
        assert cur.fetchall() == ((1,), (2,))
        cur.execute("SELECT @@log_bin, @@log_slave_updates, @@binlog_format, @@server_id")
        assert cur.fetchone() == (1, 1, "ROW", 2)

    down = gate(config, "sandbox", "down")
    assert down.returncode == 0, down.stderr
    assert [line.split()[3] for line in down.stdout.splitlines()[1:]] == ["no", "no", "no"]
    assert wait_gone(pids)
    status = gate(config, "--json", "sandbox", "status")
    assert [s["running"] for s in json.loads(status.stdout)] == [False, False, False]

    # up again keeps the data and the replication; down --remove deletes everything
    assert gate(config, "sandbox", "up").returncode == 0
    with box.standby.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM replicated.t")
        assert cur.fetchone() == (2,)
    pids = [s.pid() for s in box.servers]
    assert gate(config, "sandbox", "down", "--remove").returncode == 0
    assert wait_gone([pid for pid in pids if pid]) and not (config.parent / "sb").exists()


def test_port_taken(config: Path) -> None:
    port = load_config(config).sandbox.source_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = gate(config, "sandbox", "up")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"error: Sandbox server source cannot use port {port}: another process listens there. Stop that process, "
        "or pick other ports in the sandbox section of config.yaml (they take effect after 'gate sandbox down "
        "--remove').\n"
    )
    assert all(not s.is_running() for s in Sandbox(config.parent / "sb").servers)


def test_tied_servers_die_with_their_parent(tmp_path: Path) -> None:
    """The test fixtures' servers never outlive a killed pytest."""
    script = (f"from gate.devtools.sandbox import Sandbox; import sys, time\n"
              f"box = Sandbox({str(tmp_path / 'sb')!r}, with_standby=False, tied_to_parent=True)\n"
              "box.up(); print(*(s.pid() for s in box.servers), flush=True); time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(gone(pid) for pid in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert wait_gone(pids)
