"""Administration of a running channel: filter changes it applies, stops during its start-up, its messages."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from gate.sandbox import Sandbox
from tests.replay import GATE, STARTED, make_channel, running, wait_row, wait_running


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
        f"INFO gate.pipeline: channel {unique_name} stopped during its start-up checks; nothing was read"]


def test_messages_name_a_gtid_only_position(sandbox: Sandbox, unique_name: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=("nothing.here",))
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {unique_name}_src")  # a transaction, so that the source has a GTID position
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{unique_name}`.gate_resume SET log_file = NULL, log_pos = NULL, gtid_pos = %s", (gtid,))
    caplog.set_level(logging.INFO, logger="gate.pipeline")
    with running(dc, unique_name):
        wait_row(sandbox.dc, unique_name, "SELECT 1 FROM gate_meta WHERE name = 'source_server_id'")
        deadline = time.monotonic() + 30
        while not any("reading" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.05)
    messages = [r.getMessage() for r in caplog.records if r.name == "gate.pipeline"]
    assert messages[0].startswith(f"channel {unique_name}: reading {sandbox.source.address} from GTID {gtid}, ")
    assert messages[-1] == f"channel {unique_name} stopped at checkpoint id=0 tid=0, resume at GTID {gtid}"
    assert not any("None" in m for m in messages)
