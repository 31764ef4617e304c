"""Operating many channels: 'gate channel list' (which run, where, how far behind) and the metrics settings
of 'gate channel set', on real servers with real gate processes."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from gate.capture.pipeline import FILTER_EVERY
from gate.common.config import ChannelDefaults
from gate.common.dc import lock_holder, lock_name
from gate.devtools.sandbox import Sandbox, free_port
from tests.replay import GATE, STARTED, make_channel, running, wait_caught_up, wait_running
from tests.test_channel_cli import refused, settings_of
from tests.test_metrics import wait_status

Gate = Callable[..., Result]
COLUMNS = ["channel", "state", "gate", "lag_seconds", "checkpoint_id", "checkpoint_tid", "metrics", "source",
           "standby", "schema_version", "standing_by"]


def run_gate(tmp_path: Path, sandbox: Sandbox, channel: str, *options: str) -> subprocess.Popen[bytes]:
    config = tmp_path / "config.yaml"
    config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {sandbox.dc.port}\n  user: root\n  password: ''\n")
    with open(tmp_path / f"{channel}.log", "ab") as log:
        gate = subprocess.Popen([GATE, "--config", str(config), "run", channel, "--no-check", *options],
                                stdout=log, stderr=log)
    STARTED.append(gate)
    wait_running(sandbox.dc, channel, gate)
    return gate


def listed(gate: Gate, *channels: str) -> tuple[list[str], dict[str, list[str]], dict[str, dict[str, object]]]:
    """The header and the lines of ``channels`` in 'gate channel list' (split into cells), and their --json."""
    text = gate("channel", "list")
    assert text.exit_code == 0, text.stderr
    lines = text.stdout.splitlines()
    as_json = gate("--json", "channel", "list")
    entries = {entry["channel"]: entry for entry in json.loads(as_json.stdout)}
    return (lines[0].split(), {line.split()[0]: line.split() for line in lines[1:] if line.split()[:1] in [[c] for c
                                                                                                  in channels]},
            {name: entries[name] for name in channels})


def test_list_shows_a_running_and_a_stopped_channel(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                    tmp_path: Path) -> None:
    live, stopped = f"{unique_name}_live", f"{unique_name}_stopped"
    src = sandbox.source.address
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        for name in (live, stopped):
            cur.execute(f"CREATE DATABASE {name}_db")
            cur.execute(f"CREATE TABLE {name}_db.t (id INT PRIMARY KEY)")
        stopped_port, live_port = free_port(), free_port()
        dc = make_channel(sandbox.dc, sandbox.source, stopped, allow=(f"{stopped}_db.*",),
                          defaults=ChannelDefaults(metrics_port=stopped_port))
        make_channel(sandbox.dc, sandbox.source, live, allow=(f"{live}_db.*",))
        with running(dc, stopped):  # one transaction, committed 1000 s ago by the source's clock
            cur.execute("SET TIMESTAMP = UNIX_TIMESTAMP() - 1000")
            cur.execute(f"INSERT INTO {stopped}_db.t VALUES (1)")
            cur.execute("SET TIMESTAMP = DEFAULT")
            wait_caught_up(sandbox.source, sandbox.dc, stopped)
        run = run_gate(tmp_path, sandbox, live, "--metrics-port", str(live_port))  # not the channel's setting
        moved_at = time.time()
        cur.execute(f"INSERT INTO {live}_db.t VALUES (1)")
        cur.execute(f"INSERT INTO {live}_db.t VALUES (2)")
        wait_caught_up(sandbox.source, sandbox.dc, live)
    wait_status(live_port, "/readyz", 200)
    with sandbox.dc.connect() as conn:
        connection = lock_holder(conn, live)
    host = socket.gethostname()

    header, lines, entries = listed(gate, live, stopped)
    assert header == COLUMNS
    assert lines[live] == [live, "running", f"{host}/{run.pid}", "0.0", "2", "2", f"127.0.0.1:{live_port}", src, "-",
                           "2", "-"]
    # the source moved on (live's inserts) after stopped's last transaction: its lag is the age of the first
    # of them, the oldest transaction it lacks, not that of its own last one (1000 s)
    lag = float(lines[stopped][3])
    assert 0 <= lag <= time.time() - moved_at + 1 < 1000, lag
    assert lines[stopped] == [stopped, "stopped", "-", lines[stopped][3], "1", "1", f"127.0.0.1:{stopped_port}", src,
                              "-", "2", "-"]
    assert entries[live] == {
        "channel": live, "state": "running", "problem": None,
        "gate": {"connection": connection, "host": host, "pid": run.pid},
        "lag_seconds": 0.0, "checkpoint_id": 2, "checkpoint_tid": 2, "metrics_address": "127.0.0.1",
        "metrics_port": live_port, "source": src, "standby": None, "schema_version": 2, "standing_by": [],
        "last_takeover": None}
    assert entries[stopped] == {
        "channel": stopped, "state": "stopped", "problem": None, "gate": None,
        "lag_seconds": entries[stopped]["lag_seconds"],
        "checkpoint_id": 1, "checkpoint_tid": 1, "metrics_address": "127.0.0.1", "metrics_port": stopped_port,
        "source": src, "standby": None, "schema_version": 2, "standing_by": [], "last_takeover": None}
    assert 0 <= float(entries[stopped]["lag_seconds"]) <= time.time() - moved_at + 1  # type: ignore[arg-type]

    run.terminate()
    assert run.wait(timeout=60) == 0
    with sandbox.dc.connect() as conn, conn.cursor() as cur:  # a planned switch or a drop holds the lock so
        cur.execute("SELECT GET_LOCK(%s, 0), CONNECTION_ID()", (lock_name(stopped),))
        got, holder = cur.fetchone()
        assert got == 1
        _, lines, entries = listed(gate, live, stopped)
    # stopped: the runner record of the last run is not shown, the metrics setting (none) is
    assert lines[live] == [live, "stopped", "-", "0.0", "2", "2", "-", src, "-", "2", "-"]
    assert (entries[live]["gate"], entries[live]["metrics_port"]) == (None, None)
    assert lines[stopped][:3] == [stopped, "running", "connection"] and lines[stopped][3] == str(holder)
    assert entries[stopped]["gate"] == {"connection": holder, "host": None, "pid": None}


def test_set_changes_the_metrics_settings_of_an_existing_channel(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                                 tmp_path: Path) -> None:
    other = f"{unique_name}_b"
    make_channel(sandbox.dc, sandbox.source, unique_name)
    port = free_port()
    make_channel(sandbox.dc, sandbox.source, other, defaults=ChannelDefaults(metrics_port=port,
                                                                             metrics_address="0.0.0.0"))
    for options, message in (  # with another option given too, that is not stored either
            (["--on-divergence", "continue", "--metrics-port", "70000"],
             "--metrics-port must be between 0 and 65535, not 70000."),
            (["--ready-lag-seconds", "-1"], "--ready-lag-seconds must be between 0 and 86400, not -1.0."),
            (["--stuck-after-seconds", "0"], "--stuck-after-seconds must be between 1 and 86400, not 0.0."),
            (["--metrics-address", "a b"], "--metrics-address 'a b' is not an address to listen on. Give an IP "
             "address of this host or a host name, e.g. 127.0.0.1 (this host only) or 0.0.0.0 (every interface)."),
            (["--metrics-port", "9999", "--retain-days", "-1"],
             "--retain-days must be a whole number of days or 'none' (keep every row), not '-1'."),
            (["--ready-lag-seconds", "5", "--consumer-max-idle-days", "0"],
             "--consumer-max-idle-days must be between 0.001 and 3650, not 0.0.")):
        refused(gate, sandbox, ["channel", "set", unique_name, *options], 2, message)

    result = gate("--json", "channel", "set", unique_name, "--metrics-port", str(port), "--metrics-address",
                  "0.0.0.0", "--ready-lag-seconds", "300", "--stuck-after-seconds", "30")
    assert result.exit_code == 0
    assert result.stderr == (f"warning: channel {other} has metrics_port {port} on 0.0.0.0 too: gates of both on "
                             "one host cannot both serve it\n")
    assert json.loads(result.stdout) == {
        "channel": unique_name, "failover_mode": "gtid", "on_divergence": "stop", "retain_days": 0,
        "consumer_max_idle_days": 7.0, "metrics_port": port, "metrics_address": "0.0.0.0", "stuck_after_seconds": 30.0,
        "ready_lag_seconds": 300.0, "on_rows_without_events": "snapshot"}
    stored = settings_of(sandbox, unique_name)
    assert [stored[k] for k in ("metrics_port", "metrics_address", "stuck_after_seconds", "ready_lag_seconds",
                                "writers")] == [port, "0.0.0.0", 30.0, 300.0, 2]
    shown = gate("channel", "set", unique_name)  # no option: only shown
    assert shown.stdout.splitlines() == [
        f"channel                 {unique_name}", "failover_mode           gtid", "on_divergence           stop",
        "retain_days             0", "consumer_max_idle_days  7.0", f"metrics_port            {port}",
        "metrics_address         0.0.0.0", "stuck_after_seconds     30.0", "ready_lag_seconds       300.0",
        "on_rows_without_events  snapshot"]
    assert gate("channel", "set", other, "--metrics-port", "0").exit_code == 0

    # the next gate run serves on the new port and address, without --metrics-port
    run = run_gate(tmp_path, sandbox, unique_name)
    assert wait_status(port, "/readyz", 200).startswith("ready: connected to the source and the DC, ")
    header, lines, _ = listed(gate, unique_name)
    assert lines[unique_name][COLUMNS.index("metrics")] == f"0.0.0.0:{port}"
    # a running gate takes a new limit between two transactions
    assert gate("channel", "set", unique_name, "--ready-lag-seconds", "0").exit_code == 0
    time.sleep(FILTER_EVERY + 0.5)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {unique_name}_db")
        cur.execute(f"CREATE TABLE {unique_name}_db.t (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {unique_name}_db.t VALUES (1)")
    body = wait_status(port, "/readyz", 503, timeout=20)
    assert body.startswith("lagging: ") and body.endswith(" s behind the source (limit 0 s)\n"), body
    run.terminate()
    assert run.wait(timeout=60) == 0


def test_gate_run_records_itself_only_in_a_channel_of_its_schema(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                                tmp_path: Path) -> None:
    """A database whose creation stopped part way stays recognisable as such (an empty gate_meta)."""
    make_channel(sandbox.dc, sandbox.source, unique_name)
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DELETE FROM `{unique_name}`.gate_meta")
    config = tmp_path / "config.yaml"
    config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {sandbox.dc.port}\n  user: root\n  password: ''\n")
    run = subprocess.run([GATE, "--config", str(config), "run", unique_name, "--no-check"], capture_output=True,
                         text=True, timeout=60)
    assert (run.returncode, run.stderr) == (1, (
        f"error: Channel '{unique_name}' was not completely created (its creation stopped part way), so gate cannot "
        f"use it. Run the same 'gate channel create {unique_name} ...' again to complete it (it replaces what was "
        f"made), or remove it with 'gate channel drop {unique_name}'.\n"))
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        assert cur.execute(f"SELECT * FROM `{unique_name}`.gate_meta") == 0, cur.fetchall()
