"""``gate snapshot``, ``channel create/filter --snapshot`` and ``gate status`` on real servers: the exact
gate_snapshot rows a request writes, what --status and --cancel print and change."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

import dc_schema
from gate.devtools.sandbox import Sandbox, free_port
from tests.test_channel_cli import create, query

Gate = Callable[..., Result]
ROW = "dbname, tablename, reason, state, cancel, started_at, finished_at, rows_done, chunks_done, rows_estimate, message"


@pytest.fixture
def source_db(sandbox: Sandbox, unique_name: str) -> str:
    """A source database with tables a, b, orders, order_items and a view v."""
    db = f"src_{unique_name}"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for table in ("a", "b", "orders", "order_items"):
            cur.execute(f"CREATE TABLE {db}.{table} (id INT PRIMARY KEY)")
        cur.execute(f"CREATE VIEW {db}.v AS SELECT id FROM {db}.a")
    return db


def snapshot_rows(sandbox: Sandbox, channel: str) -> list[tuple[Any, ...]]:
    return query(sandbox, f"SELECT id, {ROW} FROM `{channel}`.gate_snapshot ORDER BY id")


def requested(id_: int, db: str, table: str, reason: str) -> tuple[Any, ...]:
    return (id_, db, table, reason, "requested", 0, None, None, 0, 0, None, None)


def test_request_matches_patterns_reports_pending_and_refuses_unknown_ones(
        gate: Gate, sandbox: Sandbox, unique_name: str, source_db: str) -> None:
    db, name = source_db, unique_name
    create(gate, sandbox, name, "--allow", f"{db}.*", "--deny", f"{db}.b")
    with sandbox.dc.connect(name) as conn, conn.cursor() as cur:  # a channel of an older gate: no table yet
        cur.execute("DROP TABLE gate_snapshot")
    result = gate("snapshot", name, "--table", f"{db}.order*")
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"requested a snapshot of {db}.order_items (id 1)\n"
        f"requested a snapshot of {db}.orders (id 2)\n"
        f"No gate runs channel {name} now: 'gate run {name}' takes them up when it starts.\n")
    assert snapshot_rows(sandbox, name) == [requested(1, db, "order_items", "gate snapshot"),
                                            requested(2, db, "orders", "gate snapshot")]
    assert query(sandbox, f"SHOW CREATE TABLE `{name}`.gate_snapshot")[0][1].startswith(
        "CREATE TABLE `gate_snapshot` (\n  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT COMMENT 'snapshot id")

    # all captured tables: a is new, the two others are already requested (b is denied, v is a view)
    with sandbox.dc.connect() as conn, conn.cursor() as cur:  # as a running gate does: hold the channel's lock
        cur.execute("SELECT GET_LOCK(%s, 0), CONNECTION_ID()", (f"gate:{name}",))
        holder = cur.fetchone()[1]
        as_json = gate("--json", "snapshot", name)
        text = gate("snapshot", name)
    assert json.loads(as_json.stdout) == {
        "channel": name, "reason": "gate snapshot", "requested": [{"id": 3, "table": f"{db}.a"}],
        "already_pending": [{"id": 1, "table": f"{db}.order_items", "state": "requested"},
                            {"id": 2, "table": f"{db}.orders", "state": "requested"}],
        "not_requested": [], "gate_running": True}
    assert text.stdout == (
        f"{db}.a already has a snapshot requested (id 3): not requested again\n"
        f"{db}.order_items already has a snapshot requested (id 1): not requested again\n"
        f"{db}.orders already has a snapshot requested (id 2): not requested again\n"
        "no snapshot requested\n")
    assert snapshot_rows(sandbox, name)[2:] == [requested(3, db, "a", "gate snapshot")]

    # a done or cancelled snapshot does not stop a new request; a running one does
    with sandbox.dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute("UPDATE gate_snapshot SET state = 'done' WHERE id = 1")
        cur.execute("UPDATE gate_snapshot SET state = 'running' WHERE id = 2")
        cur.execute("SELECT GET_LOCK(%s, 0), CONNECTION_ID()", (f"gate:{name}",))
        holder = cur.fetchone()[1]
        result = gate("snapshot", name, "--table", f"{db}.orders", "--table", f"{db}.order_items")
    assert result.stdout == (
        f"requested a snapshot of {db}.order_items (id 4)\n"
        f"{db}.orders already has a snapshot running (id 2): not requested again\n"
        f"The gate running channel {name} (DC connection {holder}) takes them up within a few seconds; "
        f"'gate snapshot {name} --status' shows their progress.\n")
    assert snapshot_rows(sandbox, name)[3:] == [requested(4, db, "order_items", "gate snapshot")]

    before = snapshot_rows(sandbox, name)
    captured = f"it captures 3 tables: {db}.a, {db}.order_items, {db}.orders on its source {sandbox.source.address}"
    for patterns, named in (([f"{db}.b"], f"'{db}.b'"), ([f"{db}.a", f"{db}.nope", "*.v"], f"'{db}.nope', '*.v'")):
        result = gate("snapshot", name, *[arg for p in patterns for arg in ("--table", p)])
        assert (result.exit_code, result.stdout) == (2, "")
        assert result.stderr == (
            f"error: No table that channel '{name}' captures matches {named}: {captured}. Nothing was requested; "
            f"correct the pattern, or widen the channel's filter first with 'gate channel filter {name} --allow "
            "...'.\n")
    result = gate("snapshot", name, "--table", "nodot")
    assert (result.exit_code, result.stderr) == (2, "error: Filter pattern 'nodot' is not valid. Write db.table with "
                                                    "exactly one dot, using letters (of any alphabet), digits, _ "
                                                    "and $, and the wildcards * (any run of characters) and ? (one "
                                                    "character), e.g. shop.* or *.audit_log.\n")
    gate("channel", "filter", name, "--clear", "--allow", "nothing_here.*")
    result = gate("snapshot", name)
    assert (result.exit_code, result.stderr) == (
        2, f"error: Channel '{name}' captures no table on its source {sandbox.source.address} (allow "
           "['nothing_here.*'], deny []), so there is nothing to snapshot; nothing was requested. Create the tables "
           f"first, or widen the filter with 'gate channel filter {name} --allow ...'.\n")
    assert snapshot_rows(sandbox, name) == before


def test_channel_create_and_filter_request_exactly_the_newly_captured_tables(
        gate: Gate, sandbox: Sandbox, unique_name: str, source_db: str) -> None:
    db, name = source_db, unique_name
    result = create(gate, sandbox, name, "--allow", f"{db}.a", "--allow", f"{db}.b", "--snapshot")
    assert result.stdout.endswith(
        f"\n\nrequested a snapshot of {db}.a (id 1)\nrequested a snapshot of {db}.b (id 2)\n"
        f"No gate runs channel {name} now: 'gate run {name}' takes them up when it starts.\n")
    assert snapshot_rows(sandbox, name) == [requested(1, db, "a", "channel create"),
                                            requested(2, db, "b", "channel create")]

    with sandbox.dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute("UPDATE gate_snapshot SET state = 'done'")
    result = gate("--json", "channel", "filter", name, "--allow", f"{db}.order*", "--deny", f"{db}.b")
    assert json.loads(result.stdout) == {"channel": name, "allow": [f"{db}.a", f"{db}.b", f"{db}.order*"],
                                         "deny": [f"{db}.b"]}  # no --snapshot: none requested
    assert len(snapshot_rows(sandbox, name)) == 2
    gate("channel", "filter", name, "--clear", "--allow", f"{db}.a")
    result = gate("channel", "filter", name, "--allow", f"{db}.o*", "--allow", f"{db}.b", "--snapshot")
    assert result.stdout == (
        f"channel  {name}\nallow    {db}.a, {db}.o*, {db}.b\ndeny     -\n\n"
        f"requested a snapshot of {db}.b (id 3)\n"
        f"requested a snapshot of {db}.order_items (id 4)\n"
        f"requested a snapshot of {db}.orders (id 5)\n"
        f"No gate runs channel {name} now: 'gate run {name}' takes them up when it starts.\n")
    assert snapshot_rows(sandbox, name)[2:] == [requested(3, db, "b", "channel filter"),
                                                requested(4, db, "order_items", "channel filter"),
                                                requested(5, db, "orders", "channel filter")]
    result = gate("--json", "channel", "filter", name, "--deny", f"{db}.orders", "--allow", "*.v", "--snapshot")
    assert json.loads(result.stdout)["snapshot"] == {"channel": name, "reason": "channel filter", "requested": [],
                                                     "already_pending": [], "not_requested": [], "gate_running": False}
    assert gate("channel", "filter", name, "--allow", f"{db}.*", "--snapshot").stdout.endswith(
        "\n\nno snapshot requested: the new lists capture no table on the source that the old ones did not\n")
    gate("channel", "filter", name, "--clear", "--allow", f"{db}.a")  # narrowed: the requests stay
    assert gate("channel", "filter", name, "--allow", f"{db}.order*", "--snapshot").stdout.endswith(
        f"\n\n{db}.order_items already has a snapshot requested (id 4): not requested again\n"
        f"{db}.orders already has a snapshot requested (id 5): not requested again\nno snapshot requested\n")
    assert len(snapshot_rows(sandbox, name)) == 5

    other = f"{name}_none"
    result = create(gate, sandbox, other, "--allow", "nothing_here.*", "--snapshot")
    assert result.stdout.endswith("\n\nno snapshot requested: the channel captures no table on the source yet\n")
    assert snapshot_rows(sandbox, other) == []
    result = gate("--json", "channel", "create", f"{name}_j", "--source", sandbox.source.address, "--allow",
                  f"{db}.order?items", "--snapshot")
    created = json.loads(result.stdout)
    assert (created["channel"], created["allow"], created["snapshot"]) == (
        f"{name}_j", [f"{db}.order?items"], {"channel": f"{name}_j", "reason": "channel create",
                                            "requested": [{"id": 1, "table": f"{db}.order_items"}],
                                            "already_pending": [], "not_requested": [], "gate_running": False})
    assert snapshot_rows(sandbox, f"{name}_j") == [requested(1, db, "order_items", "channel create")]
    # the source's tables are read before anything is created: an unreachable source leaves nothing behind
    port = free_port()
    result = gate("channel", "create", f"{name}_x", "--source", f"127.0.0.1:{port}", "--no-check", "--snapshot")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith(f"error: Cannot reach the source server at 127.0.0.1:{port} (")
    assert query(sandbox, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", f"{name}_x") == []


def _set(sandbox: Sandbox, name: str, *statements: str) -> None:
    with sandbox.dc.connect(name, init_command="SET time_zone = '+00:00'") as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def simulated_progress(sandbox: Sandbox, name: str, db: str) -> None:
    """What gate run would have left: orders done, then requested again; a running; order_items requested."""
    _set(sandbox, name,
         "INSERT INTO gate_snapshot (id, dbname, tablename, reason, state, requested_at, started_at, finished_at, "
         f"rows_done, chunks_done, rows_estimate) VALUES (1, '{db}', 'orders', 'channel create', 'done', "
         "'2026-01-02 03:04:05.006', '2026-01-02 03:04:06', '2026-01-02 03:10:00.5', 1200, 3, 1100)",
         "INSERT INTO gate_snapshot (id, dbname, tablename, reason, state, requested_at, started_at, rows_done, "
         f"chunks_done, rows_estimate, message) VALUES (2, '{db}', 'a', 'gate snapshot', 'running', "
         "'2026-01-02 04:00:00', '2026-01-02 04:00:01.250', 500, 1, 2000, 'restarted after a DC error')",
         f"INSERT INTO gate_snapshot (id, dbname, tablename, reason, requested_at) VALUES (3, '{db}', 'order_items', "
         "'gate snapshot', '2026-01-02 04:00:00')",
         f"INSERT INTO gate_snapshot (id, dbname, tablename, reason, requested_at) VALUES (4, '{db}', 'orders', "
         "'gate snapshot', '2026-01-02 05:00:00')")


def test_status_shows_each_tables_latest_snapshot(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                   source_db: str) -> None:
    db, name = source_db, unique_name
    create(gate, sandbox, name, "--allow", f"{db}.*")
    _set(sandbox, name, "DROP TABLE gate_snapshot")  # a channel of an older gate: read, not created, by these
    assert gate("snapshot", name, "--status").stdout == f"channel {name} has no snapshots\n"
    assert json.loads(gate("--json", "status", name, "--sample", "0").stdout)["snapshots"] == []
    assert "gate_snapshot" not in {t for (t,) in query(sandbox, f"SHOW TABLES FROM `{name}`")}
    _set(sandbox, name, dc_schema.table_ddl("gate_snapshot"))
    simulated_progress(sandbox, name, db)
    as_json = json.loads(gate("--json", "snapshot", name, "--status").stdout)
    running = {"id": 2, "table": f"{db}.a", "state": "running", "cancel_asked": False, "reason": "gate snapshot",
               "rows_done": 500, "rows_estimate": 2000, "chunks_done": 1, "requested_at": "2026-01-02 04:00:00.000",
               "started_at": "2026-01-02 04:00:01.250", "finished_at": None, "message": "restarted after a DC error"}
    pending = [{"id": 3, "table": f"{db}.order_items", "state": "requested", "cancel_asked": False,
                "reason": "gate snapshot", "rows_done": 0, "rows_estimate": None, "chunks_done": 0,
                "requested_at": "2026-01-02 04:00:00.000", "started_at": None, "finished_at": None, "message": None},
               {"id": 4, "table": f"{db}.orders", "state": "requested", "cancel_asked": False,
                "reason": "gate snapshot", "rows_done": 0, "rows_estimate": None, "chunks_done": 0,
                "requested_at": "2026-01-02 05:00:00.000", "started_at": None, "finished_at": None, "message": None}]
    assert as_json == {"channel": name, "gate_running": False, "snapshots": [running, *pending]}
    text = gate("snapshot", name, "--status").stdout
    assert text.splitlines() == [
        "id  table" + " " * (len(db) + 9) + "state      reason         rows          chunks  started                  "
        "finished  message",
        f"2   {db}.a            running    gate snapshot  500/2000 25%  1       2026-01-02 04:00:01.250  -         "
        "restarted after a DC error",
        f"3   {db}.order_items  requested  gate snapshot  0/?           0       -                        -         -",
        f"4   {db}.orders       requested  gate snapshot  0/?           0       -                        -         -"]
    assert json.loads(gate("--json", "snapshot", name, "--status", "--table", "*.order*").stdout)["snapshots"] == (
        pending)

    # the finished one shows while it is the table's latest
    _set(sandbox, name, "DELETE FROM gate_snapshot WHERE id = 4")
    done = json.loads(gate("--json", "snapshot", name, "--status", "--table", f"{db}.orders").stdout)["snapshots"]
    assert done == [{"id": 1, "table": f"{db}.orders", "state": "done", "cancel_asked": False,
                     "reason": "channel create", "rows_done": 1200, "rows_estimate": 1100, "chunks_done": 3,
                     "requested_at": "2026-01-02 03:04:05.006", "started_at": "2026-01-02 03:04:06.000",
                     "finished_at": "2026-01-02 03:10:00.500", "message": None}]

    status = json.loads(gate("--json", "status", name, "--sample", "0").stdout)
    assert status["snapshots"] == [running, pending[0]]
    lines = gate("status", name, "--sample", "0").stdout.splitlines()
    assert "snapshots                   2" in lines
    assert lines[-4:] == [
        "snapshots:",
        "id  table" + " " * (len(db) + 9) + "state      reason         rows          chunks  started                  "
        "finished  message",
        f"2   {db}.a            running    gate snapshot  500/2000 25%  1       2026-01-02 04:00:01.250  -         "
        "restarted after a DC error",
        f"3   {db}.order_items  requested  gate snapshot  0/?           0       -                        -         -"]


def test_cancel_follows_the_contract(gate: Gate, sandbox: Sandbox, unique_name: str, source_db: str) -> None:
    db, name = source_db, unique_name
    create(gate, sandbox, name, "--allow", f"{db}.*")
    simulated_progress(sandbox, name, db)
    before = snapshot_rows(sandbox, name)
    result = gate("snapshot", name, "--cancel", "--table", "*.order_items")
    assert result.stdout == f"cancelled the snapshot of {db}.order_items (id 3) before it started\n"
    rows = snapshot_rows(sandbox, name)
    finished = rows[2][7]
    assert rows == before[:2] + [(3, db, "order_items", "gate snapshot", "cancelled", 0, None, finished, 0, 0, None,
                                  "cancelled before it started")] + before[3:]
    assert finished is not None

    result = gate("--json", "snapshot", name, "--cancel")
    assert json.loads(result.stdout) == {
        "channel": name, "cancelled": [{"id": 4, "table": f"{db}.orders"}],
        "asked_to_cancel": [{"id": 2, "table": f"{db}.a"}], "gate_running": False}
    after = snapshot_rows(sandbox, name)
    assert after[1] == before[1][:5] + (1,) + before[1][6:]  # running: only cancel = 1; gate run ends it
    assert after[3][4:] == ("cancelled", 0, None, after[3][7], 0, 0, None, "cancelled before it started")
    assert after[0] == before[0]  # done stays done
    assert gate("snapshot", name, "--status", "--table", f"{db}.a").stdout.splitlines()[1].split()[2:5] == [
        "running,", "cancel", "asked"]
    text = gate("snapshot", name, "--cancel").stdout
    assert text == (f"asked gate to cancel the running snapshot of {db}.a (id 2)\n"
                    f"No gate runs channel {name} now: the next 'gate run {name}' ends them as cancelled.\n")
    _set(sandbox, name, "UPDATE gate_snapshot SET state = 'cancelled' WHERE id = 2")
    assert gate("snapshot", name, "--cancel", "--table", f"{db}.a").stdout == (
        f"nothing to cancel: no snapshot of channel {name} is requested or running for those tables\n")
    assert gate("snapshot", name, "--status", "--cancel").stderr == "error: Give --status or --cancel, not both.\n"


class Watcher:
    """``gate snapshot CHANNEL --status`` with a terminal as stdout; what it draws is collected."""

    def __init__(self, gate_config: Path, channel: str) -> None:
        self.controller, terminal = pty.openpty()
        self.output = bytearray()
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "gate"), "--config", str(gate_config), "snapshot", channel, "--status"],
            stdout=terminal, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
        os.close(terminal)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.controller, 4096)
            except OSError:  # the terminal's other end is closed
                return
            if not chunk:
                return
            self.output.extend(chunk)

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + 60
        while text not in self.output.decode(errors="replace"):
            assert self.process.poll() is None and time.monotonic() < deadline, (text, bytes(self.output))
            time.sleep(0.05)

    def end(self, timeout: float = 30) -> tuple[int, str, str]:
        """Exit status, the terminal's text without control sequences, stderr."""
        try:
            status = self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.reader.join(timeout=5)
            os.close(self.controller)
        assert self.process.stderr is not None
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.output.decode(errors="replace")).replace("\r\n", "\n")
        return status, text, self.process.stderr.read().decode()


def test_status_on_a_terminal_draws_progress_until_the_snapshots_end(
        sandbox: Sandbox, unique_name: str, source_db: str, gate_config: Path, gate: Gate) -> None:
    db, name = source_db, unique_name
    create(gate, sandbox, name, "--allow", f"{db}.*")
    _set(sandbox, name,
         "INSERT INTO gate_snapshot (id, dbname, tablename, reason, state, started_at, rows_done, rows_estimate) "
         f"VALUES (1, '{db}', 'a', 'gate snapshot', 'running', NOW(3), 10, 40)")
    watcher = Watcher(gate_config, name)
    watcher.wait_for("25%")
    _set(sandbox, name, "UPDATE gate_snapshot SET rows_done = 30 WHERE id = 1")
    watcher.wait_for("75%")
    _set(sandbox, name, "UPDATE gate_snapshot SET rows_done = 41, state = 'done', finished_at = NOW(3) WHERE id = 1")
    status, shown, errors = watcher.end()
    assert (status, errors) == (0, "")
    assert f"1 {db}.a running" in shown and f"1 {db}.a done" in shown and "41/41" in shown
    assert "10/40 rows  25%" in shown and "30/40 rows  75%" in shown
    last = shown.rstrip("\n").split("\n")[-2:]
    assert [line.split()[:6] for line in last] == [
        ["id", "table", "state", "reason", "rows", "chunks"], ["1", f"{db}.a", "done", "gate", "snapshot", "41/40"]]

    # Ctrl-C stops watching, not the snapshot
    _set(sandbox, name, f"INSERT INTO gate_snapshot (id, dbname, tablename, reason) VALUES (2, '{db}', 'b', 'x')")
    watcher = Watcher(gate_config, name)
    watcher.wait_for(f"2 {db}.b requested")
    watcher.process.send_signal(signal.SIGINT)
    status, shown, errors = watcher.end()
    assert (status, errors) == (0, "stopped watching; the snapshots go on\n")
    assert snapshot_rows(sandbox, name)[1] == requested(2, db, "b", "x")
