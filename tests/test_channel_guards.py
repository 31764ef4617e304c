"""What channel commands refuse or repair before a DBA's slip becomes lost data: positions the source never
wrote, damaged and half-created channels, column rules on key columns, snapshots of tables without a key."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
from click.testing import Result

import dc_schema
from gate.devtools.sandbox import Sandbox, free_port
from tests.test_channel_cli import create, query, refused

Gate = Callable[..., Result]

# runs the gate CLI, stopping it just before its Nth SQL statement from CREATE DATABASE on: by SIGKILL of the
# process itself or of the DC server (its pid in GATE_TEST_KILL_PID)
_STOPPED_AT = """
import os, signal, sys
import pymysql.cursors
from gate.cli import main
stop_at, victim = int(os.environ["GATE_TEST_STOP_AT"]), int(os.environ.get("GATE_TEST_KILL_PID", os.getpid()))
seen = [0]
original = pymysql.cursors.Cursor.execute
def execute(self, query, args=None):
    if seen[0] or query.startswith("CREATE DATABASE"):
        seen[0] += 1
        if seen[0] == stop_at:
            os.kill(victim, signal.SIGKILL)
    return original(self, query, args)
pymysql.cursors.Cursor.execute = execute
main(sys.argv[1:], prog_name="gate")
"""


def stopped_at(config: Path, statement: int, *args: str, kill_pid: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "GATE_TEST_STOP_AT": str(statement)}
    if kill_pid is not None:
        env["GATE_TEST_KILL_PID"] = str(kill_pid)
    return subprocess.run([sys.executable, "-c", _STOPPED_AT, "--config", str(config), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def snapshot_requests(sandbox: Sandbox, name: str) -> list[tuple[Any, ...]]:
    return query(sandbox, f"SELECT id, dbname, tablename, state, reason FROM `{name}`.gate_snapshot ORDER BY id")


# --- 4 and 7: create is all-or-nothing, and running it again completes a creation that stopped ------------


def test_create_with_snapshot_stopped_at_any_statement_completes_when_run_again(
        gate: Gate, sandbox: Sandbox, unique_name: str, source_cursor: pymysql.cursors.Cursor,
        gate_config: Path) -> None:
    """Killed before each of its DC statements in turn (and after its last), create leaves either nothing, a
    creation stopped part way, or the whole channel with its snapshot requests; the same create run again
    gives the whole channel with exactly those requests."""
    source_cursor.execute("CREATE TABLE a (id INT PRIMARY KEY)")
    source_cursor.execute("CREATE TABLE b (id INT PRIMARY KEY)")
    args = ["channel", "create", unique_name, "--source", sandbox.source.address, "--allow", f"{unique_name}.*",
            "--snapshot", "--no-check"]
    wanted = [(1, unique_name, "a", "requested", "channel create"), (2, unique_name, "b", "requested", "channel create")]
    for statement in itertools.count(1):
        interrupted = stopped_at(gate_config, statement, *args)
        if interrupted.returncode == 0:
            break
        assert interrupted.returncode == -9, interrupted.stderr
        again = gate(*args)
        assert (again.exit_code, again.stderr) in [(0, ""), (1, (
            f"error: Channel '{unique_name}' already exists on the DC server. Use 'gate channel show {unique_name}' "
            f"to see it, or 'gate channel drop {unique_name}' first to start over.\n"))], (statement, again.stderr)
        assert snapshot_requests(sandbox, unique_name) == wanted, statement
        assert query(sandbox, f"SELECT name, value FROM `{unique_name}`.gate_meta ORDER BY 1") == [
            ("created_by", "gate 0.1.0"), ("schema_version", str(dc_schema.SCHEMA_VERSION))]
        assert gate("channel", "drop", unique_name, "--yes").exit_code == 0
    assert statement > 15  # every table, the inserts and what create prints were passed
    assert snapshot_requests(sandbox, unique_name) == wanted


def test_a_create_whose_dc_dies_names_the_failure_and_is_completed_by_running_it_again(
        make_sandbox: Callable[..., Sandbox], tmp_path: Path, gate: Gate) -> None:
    box = make_sandbox(with_standby=False)
    config = tmp_path / "config.yaml"
    config.write_text(f"dc:\n  port: {box.dc.port}\n")
    name = "dies"
    args = ["channel", "create", name, "--source", box.source.address]
    died = stopped_at(config, 5, *args, kill_pid=box.dc.pid())  # while it makes the tables
    assert (died.returncode, died.stdout) == (1, "")
    assert died.stderr.startswith(
        f"error: The DC server {box.dc.address} failed while channel '{name}' was being created (error 2013: ")
    assert died.stderr.endswith(
        "), so it is not complete. Once the DC server answers again, run the same 'gate channel create' again: it "
        f"completes the channel; or remove what was made with 'gate channel drop {name} --yes'.\n")
    box.dc.start()
    unfinished = (f"Channel '{name}' was not completely created (its creation stopped part way), so gate cannot use "
                  f"it. Run the same 'gate channel create {name} ...' again to complete it (it replaces what was made), "
                  f"or remove it with 'gate channel drop {name}'.")
    listed = gate("--config", str(config), "channel", "list")
    assert listed.stdout.splitlines()[1].split()[:2] == [name, "incomplete"]
    assert listed.stdout.endswith(f"\n\nchannel {name} is incomplete: {unfinished}\n")
    assert [(c["channel"], c["state"], c["problem"], c["schema_version"]) for c in json.loads(
        gate("--config", str(config), "--json", "channel", "list").stdout)] == [(name, "incomplete", unfinished, 0)]
    assert gate("--config", str(config), *args).exit_code == 0
    assert json.loads(gate("--config", str(config), "--json", "channel", "list").stdout)[0]["state"] == "stopped"


# --- 5: positions are checked against the source ------------------------------------------------------


def test_set_position_is_checked_against_the_source(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                     source_cursor: pymysql.cursors.Cursor) -> None:
    create(gate, sandbox, unique_name)
    source_cursor.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    source_cursor.execute("INSERT INTO t VALUES (1)")
    source_cursor.execute("SHOW MASTER STATUS")
    log_file, end = source_cursor.fetchone()[:2]
    source_cursor.execute(f"SHOW BINLOG EVENTS IN '{log_file}'")
    events = source_cursor.fetchall()
    table_map = next(e[1] for e in events if e[2] == "Table_map")
    gtid_event = next(e[1] for e in events if e[2] == "Gtid")
    source_cursor.execute("SELECT @@gtid_binlog_state, @@server_id")
    state, server_id = source_cursor.fetchone()
    newest = next(g for g in state.split(",") if g.startswith("0-"))
    source = sandbox.source.address
    fix = f"SHOW BINLOG EVENTS IN '{log_file}' lists its events: give the Pos of a Gtid event (a transaction's start)"
    position = ["channel", "set-position", unique_name]
    refused(gate, sandbox, [*position, "--file", log_file, "--pos", "999999999999"], 2,
            f"--pos 999999999999 is beyond any binlog file: positions are at most 4294967295. Give the Pos of an event "
            f"({fix}), or use --now.")
    refused(gate, sandbox, [*position, "--file", log_file, "--pos", str(end + 1)], 2,
            f"--pos {end + 1} is beyond the end of {log_file} on the source {source}, which is {end} bytes long. "
            f"Give the Pos of an event ({fix}), or use --now.")
    refused(gate, sandbox, [*position, "--file", log_file, "--pos", "100"], 2,
            f"--pos 100 is not the start of an event in {log_file} on the source {source}. {fix}, or use --gtid or "
            "--now.")
    refused(gate, sandbox, [*position, "--file", log_file, "--pos", str(table_map)], 2,
            f"--pos {table_map} is a Table_map event in {log_file} on the source {source}, inside a transaction: "
            f"reading from there would start half-way through it. {fix}, or use --gtid or --now.")
    gtid_fix = ("Give a GTID the source has binlogged (SELECT @@gtid_binlog_state on it shows the newest of each "
                "domain and server), or use --file and --pos, or --now.")
    refused(gate, sandbox, [*position, "--gtid", "0-691-99999"], 2,
            f"GTID 0-691-99999 is not in the binlog of the source {source}: it holds no transaction of server 691 in "
            f"domain 0. {gtid_fix}")
    domain, server, seq = newest.split("-")
    beyond = f"0-{server_id}-{int(seq) + 1000}"
    refused(gate, sandbox, [*position, "--gtid", beyond], 2,
            f"GTID {beyond} is not in the binlog of the source {source}: its newest from server {server_id} in domain "
            f"0 is {newest}. {gtid_fix}")
    refused(gate, sandbox, [*position, "--gtid", f"{newest},0-1-1"], 2,
            f"GTID position '{newest},0-1-1' names a replication domain twice; give one GTID per domain.")
    for good in (["--file", log_file, "--pos", str(gtid_event)], ["--file", log_file, "--pos", str(end)],
                 ["--gtid", newest]):
        assert gate(*position, *good).exit_code == 0, good


# --- 6: a damaged channel is named, the others still listed --------------------------------------------


def test_a_channel_with_a_table_dropped_by_hand(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    healthy, damaged = f"{unique_name}_ok", f"{unique_name}_bad"
    create(gate, sandbox, healthy)
    create(gate, sandbox, damaged)
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE `{damaged}`.transfer_checkpoint")
    message = (f"Channel '{damaged}' is damaged: its DC database lacks the table transfer_checkpoint (dropped by "
               "hand?), so gate does not use it. Restore it from a backup of the DC database, or drop the channel "
               f"('gate channel drop {damaged} --yes') and create it again (with --snapshot to bring back its tables' "
               "rows).")
    listed = {c["channel"]: c for c in json.loads(gate("--json", "channel", "list").stdout)}
    assert (listed[healthy]["state"], listed[healthy]["problem"], listed[healthy]["checkpoint_id"]) == (
        "stopped", None, 0)
    assert (listed[damaged]["state"], listed[damaged]["problem"], listed[damaged]["checkpoint_id"]) == (
        "damaged", message, None)
    assert f"\nchannel {damaged} is damaged: {message}\n" in gate("channel", "list").stdout
    for command in (["channel", "show", damaged], ["status", damaged, "--sample", "0"], ["snapshot", damaged],
                    ["channel", "filter", damaged, "--allow", "a.b"], ["channel", "set-position", damaged, "--now"],
                    ["channel", "check", damaged]):
        refused(gate, sandbox, command, 1, message)
    with sandbox.dc.connect() as conn, conn.cursor() as cur:  # gate_meta too: still a damaged channel of gate's
        cur.execute(f"DROP TABLE `{damaged}`.gate_meta")
    listed = {c["channel"]: c for c in json.loads(gate("--json", "channel", "list").stdout)}
    assert listed[damaged]["problem"] == message.replace(
        "the table transfer_checkpoint", "the tables gate_meta, transfer_checkpoint").replace("Restore it", "Restore them")
    assert gate("channel", "drop", damaged, "--yes").exit_code == 0
    assert query(sandbox, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", damaged) == []


# --- 8 and 9: rules on key columns and tables without a key are refused before anything changes -------


def test_key_rules_are_checked_whenever_the_capture_widens(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                           source_cursor: pymysql.cursors.Cursor) -> None:
    db = unique_name
    source_cursor.execute("CREATE TABLE big (id INT PRIMARY KEY, v INT)")
    source_cursor.execute("CREATE TABLE other (id INT PRIMARY KEY, code INT)")
    create(gate, sandbox, unique_name, "--allow", f"{db}.other")
    assert gate("channel", "columns", unique_name, "--mask", f"{db}.big.id", "--mask", f"{db}.other.code").exit_code == 0
    refused(gate, sandbox, ["channel", "filter", unique_name, "--allow", f"{db}.big", "--snapshot"], 1,
            f"With these lists the column rule --mask '{db}.big.id' hits {db}.big.id, a primary-key column on the "
            "source: row images must keep their key to stay identifiable. Nothing was stored; narrow the rule first "
            f"('gate channel columns {unique_name} --clear', then the rules again) or deny the table.")
    source_cursor.execute("ALTER TABLE other DROP PRIMARY KEY, ADD PRIMARY KEY (code)")  # a masked column
    checked = gate("channel", "check", unique_name)
    assert checked.exit_code == 1
    assert checked.stderr.endswith(
        f"  - column rule --mask '{db}.other.code' hits {db}.other.code is a rule on a primary-key column on the "
        "source; gate needs key columns unchanged, so that row images stay identifiable. Fix: narrow the rules "
        f"('gate channel columns {unique_name} --clear', then the rules again) so that they leave key columns out, or "
        f"deny the table ('gate channel filter {unique_name} --deny db.table')\n")
    assert sandbox.standby is not None
    sandbox.wait_standby_caught_up()  # the standby has the same tables, keys and all
    refused(gate, sandbox, ["channel", "set-source", unique_name, sandbox.standby.address], 1,
            f"On the new source the column rule --mask '{db}.other.code' hits {db}.other.code, a primary-key column "
            "there: row images must keep their key to stay identifiable. Nothing was stored; narrow the rule first "
            f"('gate channel columns {unique_name} --clear', then the rules again) or deny the table.")
    left_out = gate("snapshot", unique_name)
    assert (left_out.exit_code, left_out.stderr) == (4, (
        f"not requested: the column rule --mask '{db}.other.code' hits {db}.other.code, a column of the key the "
        f"snapshot pages on (narrow the rule); then request it with 'gate snapshot {unique_name} --table "
        f"{db}.other'\n"))
    assert left_out.stdout == "no snapshot requested\n"


def test_a_table_without_a_key_is_left_out_named_and_the_others_are_requested(
        gate: Gate, sandbox: Sandbox, unique_name: str, source_cursor: pymysql.cursors.Cursor) -> None:
    """channel create --snapshot, channel filter --snapshot and gate snapshot do their work for every table
    gate can snapshot, and name each other one on stderr with the fix, with exit status 4 (not 1)."""
    db = unique_name
    source_cursor.execute("CREATE TABLE keyed (id INT PRIMARY KEY)")
    source_cursor.execute("CREATE TABLE unique_ok (code INT NOT NULL, UNIQUE KEY (code))")
    source_cursor.execute("CREATE TABLE heap (v INT, w INT NULL, UNIQUE KEY (w))")  # a unique key on a NULL column
    source_cursor.execute("CREATE TABLE log (v INT)")

    def no_key(table: str) -> str:
        name = f"{db}.{table}"
        return (f"not requested: {name} has neither a primary key nor a unique key on NOT NULL columns: add one "
                f"(ALTER TABLE {name} ADD PRIMARY KEY (...)) and request it with 'gate snapshot {unique_name} --table "
                f"{name}', or request it read whole in one read view ('gate snapshot {unique_name} --whole-table "
                f"{name}', up to 100000 rows) or paged on columns you know are unique ('gate snapshot {unique_name} "
                f"--key {name}=COL,...')\n")
    result = gate("--json", "channel", "create", unique_name, "--source", sandbox.source.address, "--allow",
                  f"{db}.*", "--snapshot")
    assert (result.exit_code, result.stderr) == (4, f"source {sandbox.source.address}: does not offer TLS; gate connects "
                                                    "in plaintext (TLS mode preferred)\n" + no_key("heap") + no_key("log"))
    made = json.loads(result.stdout)["snapshot"]
    assert [r["table"] for r in made["requested"]] == [f"{db}.keyed", f"{db}.unique_ok"]
    assert [r["table"] for r in made["not_requested"]] == [f"{db}.heap", f"{db}.log"]
    assert [r[1:] for r in snapshot_requests(sandbox, unique_name)] == [
        (db, "keyed", "requested", "channel create"), (db, "unique_ok", "requested", "channel create")]
    assert gate("channel", "drop", unique_name, "--yes").exit_code == 0
    create(gate, sandbox, unique_name, "--allow", f"{db}.keyed")
    filtered = gate("channel", "filter", unique_name, "--allow", f"{db}.*", "--snapshot")
    assert (filtered.exit_code, filtered.stderr) == (4, no_key("heap") + no_key("log"))
    assert filtered.stdout.endswith(f"requested a snapshot of {db}.unique_ok (id 1)\nNo gate runs channel "
                                    f"{unique_name} now: 'gate run {unique_name}' takes them up when it starts.\n")
    asked = gate("snapshot", unique_name, "--table", f"{db}.heap")
    assert (asked.exit_code, asked.stderr, asked.stdout) == (4, no_key("heap"), "no snapshot requested\n")
    assert [r[1:3] for r in snapshot_requests(sandbox, unique_name)] == [(db, "unique_ok")]
    # the two ways to snapshot them: read whole, or paged on a key the DBA names (checked unique on the source)
    source_cursor.execute("INSERT INTO heap VALUES (1, NULL), (1, NULL)")
    source_cursor.execute("ALTER TABLE log MODIFY v INT NOT NULL")
    source_cursor.execute("INSERT INTO log VALUES (1), (2)")
    ways = gate("snapshot", unique_name, "--whole-table", f"{db}.heap", "--key", f"{db}.log=v")
    assert (ways.exit_code, ways.stderr) == (0, "")
    assert ways.stdout.startswith(f"requested a snapshot of {db}.heap (id 2, read whole in one read view)\n"
                                  f"requested a snapshot of {db}.log (id 3, paged on (v))\n")
    assert query(sandbox, f"SELECT id, snap_key FROM `{unique_name}`.gate_snapshot WHERE id > 1") == [
        (2, "[]"), (3, '["v"]')]
    assert gate("snapshot", unique_name, "--cancel").exit_code == 0
    source_cursor.execute("INSERT INTO log VALUES (2)")
    twice = gate("--json", "snapshot", unique_name, "--key", f"{db}.log=v", "--key", f"{db}.heap=w")
    assert (twice.exit_code, json.loads(twice.stdout)["not_requested"]) == (4, [
        {"table": f"{db}.heap", "reason": f"the key you chose for {db}.heap has NULL-able columns (w): a row whose key "
                                          "is NULL would never be read; choose NOT NULL columns; then request it again"},
        {"table": f"{db}.log", "reason": f"the key you chose for {db}.log (v) is not unique: 1 of its rows repeat the "
                                         "key of another; choose other columns, or --whole-table; then request it again"}])
    bound = gate("--json", "channel", "set", unique_name, "--snapshot-whole-table-rows", "1")
    assert json.loads(bound.stdout)["snapshot_whole_table_rows"] == 1
    over = gate("snapshot", unique_name, "--whole-table", f"{db}.heap")
    assert (over.exit_code, over.stderr) == (4, (
        f"not requested: {db}.heap has more than 1 rows, the most a whole-table snapshot reads (the channel's "
        f"snapshot_whole_table_rows): raise it ('gate channel set {unique_name} --snapshot-whole-table-rows N') or "
        f"page it on a key (a primary key, or --key {db}.heap=COL,...), then request it again\n"))
    refused(gate, sandbox, ["snapshot", unique_name, "--whole-table", f"{db}.nothing*"], 2,
            f"'{db}.nothing*' (--whole-table or --key) names no table whose snapshot is being requested ({db}.heap, "
            f"{db}.keyed, {db}.log, {db}.unique_ok). Nothing was changed; correct the name.")



def test_status_refuses_a_sample_that_is_no_duration(gate: Gate, sandbox: Sandbox) -> None:
    for sample in ("-1", "nan", "inf", "3601"):
        refused(gate, sandbox, ["status", "any", "--sample", sample], 2,
                f"--sample must be a number of seconds from 0 (no sample) to 3600, not {float(sample)}.")


def test_create_without_check_or_snapshot_does_not_ask_the_source(gate: Gate, sandbox: Sandbox,
                                                                  unique_name: str) -> None:
    result = gate("channel", "create", unique_name, "--source", f"127.0.0.1:{free_port()}", "--no-check")
    assert (result.exit_code, result.stderr) == (0, "")
