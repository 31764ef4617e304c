"""Administration of a running channel: filter changes it applies, stops during its start-up, its messages."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from gate.capture.pipeline import FILTER_EVERY
from gate.devtools.sandbox import Sandbox
from tests.replay import (
    GATE,
    STARTED,
    dc_rows,
    make_channel,
    running,
    start_gate,
    wait_caught_up,
    wait_row,
    wait_running,
)

Gate = Callable[..., Result]


def test_a_widened_filter_reaches_a_running_gate(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                  tmp_path: Path) -> None:
    db = f"src_{unique_name}"
    make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.a",))
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for table in ("a", "b"):
            cur.execute(f"CREATE TABLE {db}.{table} (id INT PRIMARY KEY, v VARCHAR(10))")
        running_gate = start_gate(tmp_path, sandbox.dc, unique_name)
        wait_running(sandbox.dc, unique_name, running_gate)
        cur.execute(f"INSERT INTO {db}.a VALUES (1, 'a1')")
        cur.execute(f"INSERT INTO {db}.b VALUES (1, 'before')")  # b is not captured yet
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        result = gate("channel", "filter", unique_name, "--allow", f"{db}.b")
        assert result.exit_code == 0, result.stderr
        time.sleep(FILTER_EVERY + 0.5)  # the running gate reads the filter again before its next transaction
        cur.execute(f"INSERT INTO {db}.b VALUES (2, 'after')")
        cur.execute(f"UPDATE {db}.b SET v = 'changed' WHERE id = 1")
        cur.execute(f"INSERT INTO {db}.a VALUES (2, 'a2')")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert running_gate.poll() is None  # no restart
    rows = [(r[0], r[1], r[2], r[3], r[6], json.loads(r[7])) for r in dc_rows(sandbox.dc, unique_name)]
    assert rows[0][:5] == (1, 1, db, "a", "CREATETABLE")  # b's CREATE TABLE came before the change: not captured
    assert rows[1:] == [
        (2, 2, db, "a", "INSERT", {"NEW": [{"id": "1"}, {"v": "a1"}]}),
        (3, 3, db, "b", "INSERT", {"NEW": [{"id": "2"}, {"v": "after"}]}),
        (4, 4, db, "b", "UPDATE", {"NEW": [{"id": "1"}, {"v": "changed"}], "OLD": [{"id": "1"}, {"v": "before"}]}),
        (5, 5, db, "a", "INSERT", {"NEW": [{"id": "2"}, {"v": "a2"}]}),
    ]
    running_gate.send_signal(signal.SIGTERM)
    assert running_gate.wait(timeout=60) == 0
    log = (tmp_path / f"{unique_name}.log").read_text()
    assert (f"INFO gate.capture.pipeline: channel {unique_name}: filter changed to allow ['{db}.a', '{db}.b'], deny [] "
            f"(was allow ['{db}.a'], deny []); applied from ") in log


def test_sigterm_during_the_start_up_checks_is_a_clean_stop(sandbox: Sandbox, unique_name: str,
                                                           tmp_path: Path) -> None:
    make_channel(sandbox.dc, sandbox.source, unique_name)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # takes connections, never greets: the check waits
        port = silent.getsockname()[1]
        with sandbox.dc.connect() as conn, conn.cursor() as cur:
            cur.execute(f"UPDATE `{unique_name}`.gate_settings SET value = %s WHERE name = 'source'",
                        (json.dumps({"host": "127.0.0.1", "port": port, "user": "root", "password": ""}),))
        config = tmp_path / "config.yaml"
        config.write_text(f"dc:\n  port: {sandbox.dc.port}\n")
        run = subprocess.Popen([GATE, "--config", str(config), "run", unique_name], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        STARTED.append(run)
        wait_running(sandbox.dc, unique_name, run)  # the lock is held: the preflight of the source runs now
        run.send_signal(signal.SIGTERM)
        time.sleep(0.5)
    # the source's socket closed: the check fails, after the stop signal
    out, err = run.communicate(timeout=60)
    assert (run.returncode, err.decode()) == (0, "")
    assert [line.split(" ", 2)[2] for line in out.decode().splitlines()] == [
        f"INFO gate.capture.pipeline: channel {unique_name} stopped during its start-up checks; nothing was read"]


def test_messages_name_a_gtid_only_position(sandbox: Sandbox, unique_name: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=("nothing.here",))
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {unique_name}_src")  # a transaction, so that the source has a GTID position
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{unique_name}`.gate_resume SET log_file = NULL, log_pos = NULL, gtid_pos = %s", (gtid,))
    caplog.set_level(logging.INFO, logger="gate.capture.pipeline")
    with running(dc, unique_name):
        wait_row(sandbox.dc, unique_name, "SELECT 1 FROM gate_meta WHERE name = 'source_server_id'")
        deadline = time.monotonic() + 30
        while not any("reading" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.05)
    messages = [r.getMessage() for r in caplog.records if r.name == "gate.capture.pipeline"]
    assert messages[0].startswith(f"channel {unique_name}: reading {sandbox.source.address} from GTID {gtid}, ")
    assert messages[-1] == f"channel {unique_name} stopped at checkpoint id=0 tid=0, resume at GTID {gtid}"
    assert not any("None" in m for m in messages)
