"""The channel CLI against real servers: what it creates on the DC, what it prints, what it refuses."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from click.testing import Result

import dc_schema
from gate.admin.channel import default_server_id
from gate.common.dc import lock_name
from gate.devtools.sandbox import Sandbox, free_port
from tests.replay import make_channel, start_gate, wait_row, wait_running

Gate = Callable[..., Result]
PASSWORD = "Zq9-distinctive-Pw!"  # must never appear in any output
PREFERRED = {"mode": "preferred", "ca": None, "cert": None, "key": None}  # TLS settings stored by default
SHOWN_PREFERRED = {**PREFERRED, "verifies": "nothing (the server's certificate is not checked)"}
USER = "gate_cli"


@pytest.fixture(scope="module")
def login(sandbox: Sandbox) -> list[str]:
    """A source and standby account with exactly gate's privileges and a distinctive password."""
    for server in (sandbox.source, sandbox.standby):
        assert server is not None
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")
            cur.execute(f"CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY %s", (PASSWORD,))
            cur.execute(f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{USER}'@'127.0.0.1'")
    return ["--source-user", USER, "--source-password", PASSWORD]


def create(gate: Gate, sandbox: Sandbox, name: str, *extra: str, env: dict[str, str | None] | None = None) -> Result:
    result = gate("channel", "create", name, "--source", sandbox.source.address, *extra, env=env)
    assert result.exit_code == 0, result.stderr
    return result


def query(sandbox: Sandbox, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def dc_state(sandbox: Sandbox) -> dict[str, Any]:
    """Everything a CLI command could change on the DC: databases, accounts, grants, channel state."""
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        def rows(sql: str) -> tuple[tuple[Any, ...], ...]:
            cur.execute(sql)
            return cur.fetchall()

        state: dict[str, Any] = {
            "schemata": rows("SELECT schema_name FROM information_schema.schemata ORDER BY 1"),
            "users": rows("SELECT User, Host FROM mysql.user ORDER BY 1, 2"),
            "grants": rows("SELECT Host, Db, User, Table_name, Table_priv FROM mysql.tables_priv ORDER BY 1, 2, 3, 4"),
        }
        for db, table in rows("SELECT table_schema, table_name FROM information_schema.tables WHERE table_name IN "
                              "('gate_meta', 'gate_settings', 'transfer_checkpoint', 'gate_resume', 'gate_snapshot')"):
            columns = "id, tid, log_file, log_pos, gtid_pos, instance_name" if table == "gate_resume" else "*"
            state[f"{db}.{table}"] = rows(f"SELECT {columns} FROM `{db}`.{table} ORDER BY 1")
    return state


def settings_of(sandbox: Sandbox, name: str) -> dict[str, Any]:
    return {k: json.loads(v) for k, v in query(sandbox, f"SELECT name, value FROM `{name}`.gate_settings")}


def refused(gate: Gate, sandbox: Sandbox, args: list[str], status: int, message: str,
            env: dict[str, str | None] | None = None) -> None:
    """The command fails with exactly ``message`` and status, prints nothing else, and changes nothing."""
    before = dc_state(sandbox)
    result = gate(*args, env=env)
    assert (result.exit_code, result.stderr, result.stdout) == (status, f"error: {message}\n", "")
    assert dc_state(sandbox) == before


# --- create, list, show --------------------------------------------------------------------------


def test_create_makes_exactly_the_contract_tables(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    create(gate, sandbox, unique_name)
    tables = query(sandbox, "SELECT table_name, engine, table_collation FROM information_schema.tables "
                            "WHERE table_schema = %s ORDER BY 1", unique_name)
    ddl_tables = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", " ".join(dc_schema.ddl_statements()))
    assert sorted(t[0] for t in tables) == sorted(ddl_tables)
    assert {t[0]: (t[1], t[2]) for t in tables if t[0] in dc_schema.CONTRACT_TABLES} == {
        "transfer_data": ("InnoDB", "utf8mb4_bin"), "transfer_checkpoint": ("InnoDB", "utf8mb4_general_ci")}
    columns = "column_name, column_type, is_nullable, character_set_name"
    assert query(sandbox, f"SELECT {columns} FROM information_schema.columns WHERE table_schema = %s "
                          "AND table_name = 'transfer_data' ORDER BY ordinal_position", unique_name) == [
        ("id", "bigint(20) unsigned", "NO", None),
        ("tid", "bigint(20) unsigned", "NO", None),
        ("dbname", "varchar(64)", "NO", "utf8mb4"),
        ("tablename", "varchar(64)", "NO", "utf8mb4"),
        ("create_time", "timestamp", "NO", None),
        ("instance_name", "varchar(64)", "NO", "utf8mb4"),
        ("optype", "varchar(64)", "NO", "utf8mb4"),
        ("data", "longtext", "YES", "utf8mb4"),
    ]
    assert query(sandbox, "SELECT index_name, non_unique, GROUP_CONCAT(column_name ORDER BY seq_in_index) "
                          "FROM information_schema.statistics WHERE table_schema = %s AND table_name = 'transfer_data' "
                          "GROUP BY index_name, non_unique ORDER BY 1", unique_name) == [
        ("idx_create_time", 1, "create_time"), ("idx_dbname_tablename", 1, "dbname,tablename"), ("PRIMARY", 0, "id,tid")]
    assert query(sandbox, f"SELECT {columns} FROM information_schema.columns WHERE table_schema = %s "
                          "AND table_name = 'transfer_checkpoint' ORDER BY ordinal_position", unique_name) == [
        ("id", "bigint(20) unsigned", "NO", None), ("tid", "bigint(20) unsigned", "NO", None)]
    assert query(sandbox, f"SELECT id, tid FROM `{unique_name}`.transfer_checkpoint") == [(0, 0)]
    assert query(sandbox, f"SELECT name, value FROM `{unique_name}`.gate_meta ORDER BY 1") == [
        ("created_by", "gate 0.1.0"), ("schema_version", "2")]
    settings = settings_of(sandbox, unique_name)
    assert settings["source"] == {"host": "127.0.0.1", "port": sandbox.source.port, "user": "root", "password": "",
                                  "tls": PREFERRED}
    assert settings["server_id"] == default_server_id(unique_name)
    assert 100000 <= settings["server_id"] <= 999999


def test_create_with_every_option_show_and_list(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                login: list[str]) -> None:
    assert sandbox.standby is not None
    result = create(gate, sandbox, unique_name, *login, "--standby", sandbox.standby.address,
                    "--standby-user", USER, "--standby-password-env", "GATE_TEST_STANDBY_PW",
                    "--server-id", "4242", "--timezone", "Asia/Shanghai", "--binary-format", "hex",
                    "--writers", "3", "--allow", "shop.*", "--allow", "crm.customer?", "--deny", "*.audit_log",
                    "--retain-days", "30", "--consumer-max-idle-days", "2.5", env={"GATE_TEST_STANDBY_PW": PASSWORD})
    # our user may not run SHOW SLAVE HOSTS: a warning per server, not a failure
    assert result.stderr.count(f"warning: SHOW SLAVE HOSTS is denied to '{USER}'@'127.0.0.1'") == 2
    settings = settings_of(sandbox, unique_name)
    assert settings["source"]["password"] == PASSWORD  # a literal password is stored as given ...
    assert settings["standby"] == {"host": "127.0.0.1", "port": sandbox.standby.port, "user": USER,
                                   "password": "${GATE_TEST_STANDBY_PW}",  # ... an env one as the reference
                                   "tls": PREFERRED}
    outputs = [result.output]
    shown = gate("--json", "channel", "show", unique_name)
    outputs.append(shown.output)
    assert json.loads(shown.stdout) == {
        "channel": unique_name, "schema_version": 2, "created_by": "gate 0.1.0",
        "source": {"address": sandbox.source.address, "user": USER, "password": "***", "tls": SHOWN_PREFERRED},
        "standby": {"address": sandbox.standby.address, "user": USER, "password": "***", "tls": SHOWN_PREFERRED},
        "server_id": 4242, "allow": ["shop.*", "crm.customer?"], "deny": ["*.audit_log"],
        "failover_mode": "gtid", "on_divergence": "stop", "columns": [],
        "defaults": {"timezone": "Asia/Shanghai", "binary_format": "hex", "writers": 3, "decoders": 2,
                     "batch_rows": 1000, "checkpoint_interval_ms": 100, "standby_sample_seconds": 5.0,
                     "failover_after_seconds": 10.0, "failover_margin_seconds": 5.0, "metrics_port": 0,
                     "metrics_address": "127.0.0.1", "stuck_after_seconds": 120.0, "ready_lag_seconds": 60.0,
                     "retain_days": 30, "consumer_max_idle_days": 2.5, "retention_interval_seconds": 60.0,
                     "snapshot_readers": 2, "snapshot_chunk_seconds": 0.5, "snapshot_chunk_rows": 2000,
                     "on_rows_without_events": "snapshot", "snapshot_whole_table_rows": 100000,
                         "lease_seconds": 5.0},
        "checkpoint": {"id": 0, "tid": 0},
        "resume": {"log_file": None, "log_pos": None, "gtid_pos": None, "instance_name": None, "event_time": None},
    }
    text = gate("channel", "show", unique_name)
    outputs.append(text.output)
    assert f"source.address                       {sandbox.source.address}\n" in text.stdout
    assert "source.password                      ***\n" in text.stdout
    assert "allow                                shop.*, crm.customer?\n" in text.stdout
    listed = gate("channel", "list")
    outputs.append(listed.output)
    header = listed.stdout.splitlines()[0]
    assert header.split() == ["channel", "state", "gate", "lag_seconds", "checkpoint_id", "checkpoint_tid", "metrics",
                              "source", "standby", "schema_version", "standing_by"]
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith(unique_name + " "))
    assert line.split() == [unique_name, "stopped", "-", "-", "0", "0", "-", sandbox.source.address,
                            sandbox.standby.address, "2", "-"]  # never positioned, nothing checkpointed: no lag
    assert line.index(sandbox.source.address) == header.index("source")
    as_json = gate("--json", "channel", "list")
    outputs.append(as_json.output)
    assert {"channel": unique_name, "state": "stopped", "problem": None, "gate": None, "lag_seconds": None,
            "checkpoint_id": 0, "checkpoint_tid": 0, "metrics_address": None, "metrics_port": None,
            "source": sandbox.source.address, "standby": sandbox.standby.address,
            "schema_version": 2, "standing_by": [], "last_takeover": None} in json.loads(as_json.stdout)
    outputs.append(gate("channel", "check", unique_name, env={"GATE_TEST_STANDBY_PW": PASSWORD}).output)
    assert all(PASSWORD not in out for out in outputs)


def test_channel_check(gate: Gate, sandbox: Sandbox, unique_name: str, login: list[str]) -> None:
    create(gate, sandbox, unique_name, *login, "--server-id", "2")  # the standby replicates with server_id 2
    with sandbox.dc.connect() as conn, conn.cursor() as cur:  # let gate see the replicas: log in as root
        cur.execute(f"UPDATE `{unique_name}`.gate_settings SET value = %s WHERE name = 'source'",
                    (json.dumps({"host": "127.0.0.1", "port": sandbox.source.port, "user": "root", "password": ""}),))
    result = gate("channel", "check", unique_name)
    assert result.exit_code == 1
    assert re.fullmatch(  # the replica's port is the one it reports, not its listening port
        rf"error: The source server {sandbox.source.address} is not ready for gate \(1 problem\(s\)\):\n"
        r"  - server_id is 2, already used by the replica at 127\.0\.0\.1:\d+; gate needs a server_id no connected "
        r"replica uses\. Fix: give gate a server_id that no server or replica of this replication topology uses "
        r"\(--server-id N when creating the channel or checking the source\)\.\n", result.stderr)
    as_json = gate("--json", "channel", "check", unique_name)
    assert as_json.exit_code == 1
    [report] = json.loads(as_json.stdout)
    assert (report["role"], report["server"], report["ok"], report["server_id"]) == (
        "source", sandbox.source.address, False, 2)
    assert [p["setting"] for p in report["problems"]] == ["server_id"]


# --- drop ----------------------------------------------------------------------------------------


def test_drop_needs_confirmation(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    create(gate, sandbox, unique_name)
    refused(gate, sandbox, ["channel", "drop", unique_name], 1,
            f"Channel '{unique_name}' was not dropped: confirmation is needed and this session has no terminal to ask "
            "on. Add --yes to drop it with all its data.")
    result = gate("--json", "channel", "drop", unique_name, "--yes")
    assert (result.exit_code, json.loads(result.stdout)) == (0, {"dropped": unique_name})
    assert query(sandbox, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", unique_name) == []


def test_drop_a_channel_whose_creation_stopped_part_way(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    unfinished = (f"Channel '{unique_name}' was not completely created (its creation stopped part way), so gate "
                  f"cannot use it. Run the same 'gate channel create {unique_name} ...' again to complete it (it "
                  f"replaces what was made), or remove it with 'gate channel drop {unique_name}'.")
    create(gate, sandbox, unique_name)
    with sandbox.dc.connect() as conn, conn.cursor() as cur:  # as a creation cut short before its last step
        cur.execute(f"DELETE FROM `{unique_name}`.gate_meta")
    for command in (["show", unique_name], ["filter", unique_name]):
        refused(gate, sandbox, ["channel", *command], 1, unfinished)
    result = gate("--json", "channel", "drop", unique_name, "--yes")
    assert (result.exit_code, json.loads(result.stdout)) == (0, {"dropped": unique_name}), result.stderr
    assert query(sandbox, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", unique_name) == []
    # cut short earlier: only some of the tables made
    create(gate, sandbox, unique_name)
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE `{unique_name}`.gate_meta, `{unique_name}`.gate_settings")
    refused(gate, sandbox, ["channel", "show", unique_name], 1, unfinished)
    create(gate, sandbox, unique_name)  # the same create again completes it
    assert query(sandbox, f"SELECT name FROM `{unique_name}`.gate_meta ORDER BY 1") == [("created_by",),
                                                                                       ("schema_version",)]
    assert gate("channel", "drop", unique_name, "--yes").exit_code == 0
    # made by a gate that did not comment its databases yet: every table, no settings, an empty gate_meta
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}`")
        cur.execute(f"USE `{unique_name}`")
        for statement in dc_schema.ddl_statements():
            cur.execute(statement)
    refused(gate, sandbox, ["channel", "show", unique_name], 1, unfinished)
    assert gate("channel", "drop", unique_name, "--yes").exit_code == 0
    assert query(sandbox, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", unique_name) == []
    # a database with gate's comment that holds anything else is not gate's to drop
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}` COMMENT 'gate channel'")
        cur.execute(f"CREATE TABLE `{unique_name}`.transfer_data (id INT PRIMARY KEY)")
        cur.execute(f"CREATE TABLE `{unique_name}`.orders (id INT PRIMARY KEY)")
    refused(gate, sandbox, ["channel", "drop", unique_name, "--yes"], 1,
            f"Database '{unique_name}' on the DC server is not a gate channel (it has no gate_meta table), so gate "
            "leaves it alone. 'gate channel list' shows the channels there.")


def test_create_with_a_dc_user_lacking_privileges(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                  tmp_path: Path) -> None:
    user = f"dc_{unique_name}"[:80]
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'dc-pw'")
        cur.execute(f"GRANT CREATE, SELECT ON *.* TO '{user}'@'127.0.0.1'")
    config = tmp_path / "limited.yaml"
    config.write_text(f"dc:\n  port: {sandbox.dc.port}\n  user: {user}\n  password: dc-pw\n")
    refused(gate, sandbox, ["--config", str(config), "channel", "create", unique_name, "--source",
                            sandbox.source.address], 1,
            f"The DC user {user}@127.0.0.1 lacks DROP, INSERT, UPDATE, DELETE on the database '{unique_name}', which "
            "gate needs to create and run a channel; nothing was created. Grant them on the DC server, e.g. GRANT "
            f"CREATE, DROP, SELECT, INSERT, UPDATE, DELETE ON `{unique_name}`.* TO '{user}'@'127.0.0.1', and create "
            "the channel again.")
    # privileges on the database itself and through a default role count
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"GRANT INSERT, UPDATE, DELETE ON `{unique_name}`.* TO '{user}'@'127.0.0.1'")
        cur.execute(f"CREATE ROLE {user}_r")
        cur.execute(f"GRANT DROP ON `{unique_name}`.* TO {user}_r")
        cur.execute(f"GRANT {user}_r TO '{user}'@'127.0.0.1'")
        cur.execute(f"SET DEFAULT ROLE {user}_r FOR '{user}'@'127.0.0.1'")
    try:
        result = gate("--config", str(config), "channel", "create", unique_name, "--source", sandbox.source.address)
        assert result.exit_code == 0, result.stderr
        assert query(sandbox, f"SELECT id, tid FROM `{unique_name}`.transfer_checkpoint") == [(0, 0)]
        assert gate("--config", str(config), "channel", "drop", unique_name, "--yes").exit_code == 0
    finally:
        with sandbox.dc.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER '{user}'@'127.0.0.1'")
            cur.execute(f"DROP ROLE {user}_r")


def test_drop_while_a_gate_runs_the_channel(gate: Gate, sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    make_channel(sandbox.dc, sandbox.source, unique_name)
    running = start_gate(tmp_path, sandbox.dc, unique_name)
    wait_running(sandbox.dc, unique_name, running)
    wait_row(sandbox.dc, unique_name, "SELECT 1 FROM gate_meta WHERE name = 'source_server_id'")  # its last start-up write
    [(holder,)] = query(sandbox, "SELECT IS_USED_LOCK(%s)", lock_name(unique_name))
    for options in (["--yes"], []):
        refused(gate, sandbox, ["channel", "drop", unique_name, *options], 1,
                f"Channel '{unique_name}' is running: a gate process holds its lock (DC connection {holder}). Stop "
                "gate first (SIGTERM or Ctrl-C), then drop the channel; or add --force to drop it under the running "
                "gate, which then stops with an error.")
    result = gate("--json", "channel", "drop", unique_name, "--yes", "--force")
    assert (result.exit_code, json.loads(result.stdout)) == (
        0, {"dropped": unique_name, "running_gate_connection": holder})
    assert result.stderr == (
        f"warning: a gate process was running channel '{unique_name}' (DC connection {holder}); its database is "
        "gone, so that gate stops with a DC error when it next writes. Stop it if it is still running.\n")
    assert query(sandbox, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", unique_name) == []
    with sandbox.source.connect() as conn, conn.cursor() as cur:  # the gate's next write fails
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {unique_name}_src")
        cur.execute(f"CREATE TABLE {unique_name}_src.t (id INT PRIMARY KEY)")
    assert running.wait(timeout=60) == 3  # a server refused gate: not restarted
    log = (tmp_path / f"{unique_name}.log").read_text()
    # the first DC statement after the drop fails: a write, the checkpoint, or the poll of snapshot requests
    assert re.search(rf"\nerror: The DC server {sandbox.dc.address} refused .*: \[1146\] Table '{unique_name}\."
                     r"(transfer_data|transfer_checkpoint|gate_snapshot|gate_holder)' doesn't exist\. The channel's "
                     r"database or one of its tables is gone .*\n$", log), log


def test_empty_password_variables_are_refused(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    empty = {"GATE_TEST_EMPTY": ""}
    message = ("The {} password refers to the environment variable GATE_TEST_EMPTY, which is set but empty. Give it a "
               "value (export GATE_TEST_EMPTY=...) or give a default as ${{GATE_TEST_EMPTY:-value}}.")
    refused(gate, sandbox, ["channel", "create", unique_name, "--source", sandbox.source.address,
                            "--source-password-env", "GATE_TEST_EMPTY"], 2, message.format("source"), env=empty)
    create(gate, sandbox, unique_name)
    refused(gate, sandbox, ["channel", "grant", unique_name, f"app_{unique_name}"[:80], "--password-env",
                            "GATE_TEST_EMPTY"], 2, message.format("app user"), env=empty)
    refused(gate, sandbox, ["channel", "set-source", unique_name, sandbox.source.address, "--password-env",
                            "GATE_TEST_EMPTY"], 2, message.format("source"), env=empty)
    result = gate("check-source", sandbox.source.address, "--password-env", "GATE_TEST_EMPTY", env=empty)
    assert (result.exit_code, result.stderr) == (2, f"error: {message.format('source')}\n")


def test_channel_defaults_out_of_range_in_the_config(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                     tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"dc:\n  port: {sandbox.dc.port}\nchannel_defaults:\n  timezone: UTC\n  writers: -3\n")
    refused(gate, sandbox, ["--config", str(config), "channel", "create", unique_name, "--source",
                            sandbox.source.address], 2,
            f"{config} line 5: channel_defaults.writers must be between 1 and 64, not -3.")


def drop_at_terminal(gate_config: Path, name: str, typed: str) -> subprocess.CompletedProcess[bytes]:
    """``gate channel drop NAME`` with a terminal on stdin, answering the prompt with ``typed``."""
    controller, terminal = pty.openpty()
    try:
        os.write(controller, typed.encode() + b"\n")
        return subprocess.run([str(Path(sys.executable).parent / "gate"), "--config", str(gate_config),
                               "channel", "drop", name], stdin=terminal, capture_output=True, timeout=60)
    finally:
        os.close(controller)
        os.close(terminal)


def test_drop_asks_to_type_the_name(sandbox: Sandbox, gate: Gate, gate_config: Path, unique_name: str) -> None:
    create(gate, sandbox, unique_name)
    before = dc_state(sandbox)
    wrong = drop_at_terminal(gate_config, unique_name, "something_else")
    assert wrong.returncode == 1
    assert wrong.stderr.decode() == f"error: Channel '{unique_name}' was not dropped: the name typed did not match.\n"
    assert dc_state(sandbox) == before
    right = drop_at_terminal(gate_config, unique_name, unique_name)
    assert right.returncode == 0, right.stderr
    assert right.stdout.decode() == (
        f"Dropping channel '{unique_name}' deletes its DC database with 0 checkpointed rows. Type the channel name "
        f"to confirm: dropped channel {unique_name}\n")
    assert query(sandbox, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", unique_name) == []


# --- filter, position, servers -------------------------------------------------------------------


def test_filter(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    create(gate, sandbox, unique_name, "--allow", "shop.*")
    result = gate("channel", "filter", unique_name, "--allow", "crm.customer?", "--deny", "*.audit_log",
                  "--allow", "shop.*")
    assert result.stdout == f"channel  {unique_name}\nallow    shop.*, crm.customer?\ndeny     *.audit_log\n"
    assert (settings_of(sandbox, unique_name)["allow"], settings_of(sandbox, unique_name)["deny"]) == (
        ["shop.*", "crm.customer?"], ["*.audit_log"])
    for bad in ("shop", "a.b.c", "shop.`x`", "shop.t;", ".t", "db.", "db.t-1"):
        refused(gate, sandbox, ["channel", "filter", unique_name, "--deny", bad], 2,
                f"Filter pattern {bad!r} is not valid. Write db.table with exactly one dot, using letters (of any "
                "alphabet), digits, _ and $, and the wildcards * (any run of characters) and ? (one character), e.g. "
                "shop.* or *.audit_log.")
    result = gate("--json", "channel", "filter", unique_name, "--clear", "--deny", "tmp_*.*")
    assert json.loads(result.stdout) == {"channel": unique_name, "allow": [], "deny": ["tmp_*.*"]}
    assert json.loads(gate("--json", "channel", "filter", unique_name).stdout)["deny"] == ["tmp_*.*"]


def resume_row(sandbox: Sandbox, name: str) -> tuple[Any, ...]:
    return query(sandbox, f"SELECT id, tid, log_file, log_pos, gtid_pos, instance_name FROM `{name}`.gate_resume")[0]


def test_set_position(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    create(gate, sandbox, unique_name)
    with sandbox.dc.connect() as conn, conn.cursor() as cur:  # as if gate had run: the checkpoint must stay
        cur.execute(f"UPDATE `{unique_name}`.gate_resume SET id = 7, tid = 3")
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        log_file = cur.fetchone()[0]
    source = sandbox.source.address
    result = gate("channel", "set-position", unique_name, "--file", log_file, "--pos", "4")
    assert result.exit_code == 0, result.stderr
    assert resume_row(sandbox, unique_name) == (7, 3, log_file, 4, None, source)
    assert f"log_file       {log_file}\nlog_pos        4\n" in result.stdout
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")  # a GTID the source has binlogged
        cur.execute("SELECT @@gtid_binlog_pos")
        (gtid,) = cur.fetchone()
    result = gate("--json", "channel", "set-position", unique_name, "--gtid", gtid)
    assert json.loads(result.stdout) == {"channel": unique_name, "id": 7, "tid": 3, "log_file": None, "log_pos": None,
                                         "gtid_pos": gtid, "instance_name": source, "event_time": None}
    gate("channel", "set-position", unique_name, "--now")
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        log_file, log_pos = cur.fetchone()[:2]
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
    assert resume_row(sandbox, unique_name) == (7, 3, log_file, log_pos, gtid or None, source)
    refused(gate, sandbox, ["channel", "set-position", unique_name, "--file", "mysql-bin.999999", "--pos", "4"], 2,
            f"The source {source} has no binary log 'mysql-bin.999999'; its binary logs are "
            f"{_binlog_range(sandbox)} (SHOW BINARY LOGS). Give one of those, or use --now to start at the current end.")
    refused(gate, sandbox, ["channel", "set-position", unique_name, "--gtid", "0-1-5", "--now"], 2,
            "Give one start position: --file and --pos together, --gtid, or --now.")
    refused(gate, sandbox, ["channel", "set-position", unique_name], 2,
            "Give one start position: --file and --pos together, --gtid, or --now.")
    refused(gate, sandbox, ["channel", "set-position", unique_name, "--file", log_file], 2,
            "Give --file and --pos together.")
    refused(gate, sandbox, ["channel", "set-position", unique_name, "--file", log_file, "--pos", "1"], 2,
            "--pos 1 is before the first event of a binlog file; positions start at 4.")
    refused(gate, sandbox, ["channel", "set-position", unique_name, "--gtid", "0-1"], 2,
            "GTID position '0-1' is not valid. Give a MariaDB GTID list such as 0-1-42 or 0-1-42,1-2-7 "
            "(domain-server-sequence, one per replication domain).")


def _binlog_range(sandbox: Sandbox) -> str:
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cur.fetchall()]
    return files[0] if len(files) == 1 else f"{files[0]} to {files[-1]}"


def test_set_source_and_standby(gate: Gate, sandbox: Sandbox, unique_name: str, login: list[str]) -> None:
    assert sandbox.standby is not None
    create(gate, sandbox, unique_name, *login)
    gate("channel", "set-position", unique_name, "--now")
    result = gate("channel", "set-source", unique_name, sandbox.standby.address)  # keeps user and password
    assert result.exit_code == 0, result.stderr
    assert result.stderr.endswith(
        f"note: the resume position belongs to {sandbox.source.address}; set one on the new source with "
        f"'gate channel set-position {unique_name} ...'.\n")
    assert settings_of(sandbox, unique_name)["source"] == {
        "host": "127.0.0.1", "port": sandbox.standby.port, "user": USER, "password": PASSWORD, "tls": PREFERRED}
    result = gate("channel", "set-standby", unique_name, sandbox.source.address, "--user", "root", "--password", "")
    assert result.exit_code == 0, result.stderr
    assert f"standby.address                      {sandbox.source.address}\n" in result.stdout
    assert settings_of(sandbox, unique_name)["standby"] == {
        "host": "127.0.0.1", "port": sandbox.source.port, "user": "root", "password": "", "tls": PREFERRED}
    refused(gate, sandbox, ["channel", "set-standby", unique_name], 2,
            "Give either the standby's HOST:PORT or --none to remove it, not both or neither.")
    refused(gate, sandbox, ["channel", "set-source", unique_name, f"127.0.0.1:{free_port()}", "--no-check", "--password",
                            "a${B}c"], 2,
            "The source password contains '${', which gate would read as an environment reference. Put the password "
            "in an environment variable and pass its name with the --...-password-env option.")
    result = gate("--json", "channel", "set-standby", unique_name, "--none")
    assert json.loads(result.stdout)["standby"] is None
    assert settings_of(sandbox, unique_name)["standby"] is None


# --- grant ---------------------------------------------------------------------------------------


def test_grant_reads_exactly_the_two_tables(gate: Gate, sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    create(gate, sandbox, unique_name)
    user, app_password = f"app_{unique_name}"[:80], "App-Pw-42"
    result = gate("channel", "grant", unique_name, user, "--host", "127.0.0.1", "--password-env", "GATE_TEST_APP_PW",
                  env={"GATE_TEST_APP_PW": app_password})
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (f"granted SELECT on {unique_name}.transfer_data and {unique_name}.transfer_checkpoint "
                             f"to '{user}'@'127.0.0.1' (new user)\n")
    assert app_password not in result.output
    with pymysql.connect(host="127.0.0.1", port=sandbox.dc.port, user=user, password=app_password,
                         database=unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid FROM transfer_checkpoint")
        assert cur.fetchall() == ((0, 0),)
        cur.execute("SELECT COUNT(*) FROM transfer_data")
        assert cur.fetchall() == ((0,),)
        for denied in ("SELECT * FROM gate_settings", "SELECT * FROM gate_resume",
                       "INSERT INTO transfer_data (id, tid, dbname, tablename, instance_name, optype) "
                       "VALUES (1, 1, 'a', 'b', 'c', 'INSERT')", "UPDATE transfer_checkpoint SET id = 1"):
            with pytest.raises(pymysql.err.OperationalError) as caught:
                cur.execute(denied)
            assert caught.value.args[0] == 1142, denied
        cur.execute("SHOW TABLES")
        assert sorted(cur.fetchall()) == [("transfer_checkpoint",), ("transfer_data",)]
    # the app user as gate's DC user: refused before anything is made, with the privileges it lacks
    config = tmp_path / "app.yaml"
    config.write_text(f"dc:\n  port: {sandbox.dc.port}\n  user: {user}\n  password: {app_password}\n")
    refused(gate, sandbox, ["--config", str(config), "channel", "create", f"{unique_name}_2", "--source",
                            sandbox.source.address], 1,
            f"The DC user {user}@127.0.0.1 lacks CREATE, DROP, SELECT, INSERT, UPDATE, DELETE on the database "
            f"'{unique_name}_2', which gate needs to create and run a channel; nothing was created. Grant them on the "
            f"DC server, e.g. GRANT CREATE, DROP, SELECT, INSERT, UPDATE, DELETE ON `{unique_name}_2`.* TO "
            f"'{user}'@'127.0.0.1', and create the channel again.")
    again = gate("--json", "channel", "grant", unique_name, user, "--host", "127.0.0.1")
    assert json.loads(again.stdout) == {
        "channel": unique_name, "user": user, "host": "127.0.0.1", "created": False,
        "tables": [f"{unique_name}.transfer_data", f"{unique_name}.transfer_checkpoint"]}
    refused(gate, sandbox, ["channel", "grant", unique_name, "nobody_here"], 2,
            "User 'nobody_here'@'%' does not exist on the DC server. Give --password-env VAR, with the new user's "
            "password in the environment variable VAR, and gate creates the user.")
    refused(gate, sandbox, ["channel", "grant", unique_name, "x'; DROP USER root; --", "--password-env", "P"], 2,
            "User name \"x'; DROP USER root; --\" is not safe. Use 1 to 80 letters, digits, '_', '.' or '-'.")
    refused(gate, sandbox, ["channel", "grant", unique_name, "app", "--host", "a'b", "--password-env", "P"], 2,
            "Host \"a'b\" is not safe. Use a host name, an IP address, or a pattern with % (e.g. 10.0.% or %), "
            "made of letters, digits, '.', '-', '_', ':', '/' and '%'.")


# --- bad input: one clear paragraph, exit status, nothing changed ---------------------------------


@pytest.mark.parametrize("name", ["a`b", "shop.orders", "my channel", "x;DROP DATABASE mysql"])
@pytest.mark.parametrize("command", [["create", "{}", "--source", "127.0.0.1:3306", "--no-check"], ["show", "{}"],
                                     ["drop", "{}", "--yes"], ["filter", "{}"], ["grant", "{}", "app"],
                                     ["check", "{}"], ["set-position", "{}", "--now"]])
def test_unsafe_channel_names(gate: Gate, sandbox: Sandbox, name: str, command: list[str]) -> None:
    refused(gate, sandbox, ["channel", *(name if arg == "{}" else arg for arg in command)], 2,
            f"Channel name {name!r} is not a safe identifier. Use 1 to 64 letters, digits or underscores, starting "
            "with a letter or underscore (no dots, spaces, quotes, backticks or semicolons).")


def test_unreachable_and_refused_servers(gate: Gate, sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    port = free_port()
    refused(gate, sandbox, ["channel", "create", unique_name, "--source", f"127.0.0.1:{port}"], 1,
            f"Cannot reach the source server at 127.0.0.1:{port} (Can't connect to MySQL server on '127.0.0.1' "
            "([Errno 111] Connection refused)). Check that it is running and that host and port are right.")
    refused(gate, sandbox, ["channel", "create", unique_name, "--source", sandbox.source.address,
                            "--source-password-env", "GATE_TEST_WRONG"], 3,
            f"The source server {sandbox.source.address} refused user 'root': wrong password or no such user from "
            "this host. Check the source credentials (password via an ${ENV} reference).",
            env={"GATE_TEST_WRONG": "not-the-password"})
    refused(gate, sandbox, ["channel", "create", unique_name, "--source", sandbox.source.address,
                            "--source-password-env", "GATE_TEST_UNSET"], 2,
            "The source password refers to the environment variable GATE_TEST_UNSET, which is not set. Export it "
            "(export GATE_TEST_UNSET=...) or give a default as ${GATE_TEST_UNSET:-value}.",
            env={"GATE_TEST_UNSET": None})
    refused(gate, sandbox, ["channel", "create", unique_name, "--source", "db 1:3306"], 2,
            "The source address 'db 1:3306' is not a valid address. Give HOST:PORT, e.g. 127.0.0.1:3306 or "
            "db1.example.com:3306 (a host name or IPv4 address, a port from 1 to 65535, 64 characters at most).")
    for options, message in [
        (["--timezone", "Mars/Olympus"],
         "Time zone 'Mars/Olympus' is unknown. Use an IANA name such as UTC, Europe/Berlin or Asia/Shanghai."),
        (["--writers", "0"], "--writers must be between 1 and 64, not 0."),
        (["--writers", "65"], "--writers must be between 1 and 64, not 65."),
        (["--server-id", "0"], "--server-id must be between 1 and 4294967295, not 0."),
        (["--source-password", "x", "--source-password-env", "X"],
         "Give the source password either literally or as an environment variable, not both."),
        (["--source-password-env", "1X"], "'1X' is not an environment variable name. Use letters, digits and "
                                          "underscores, not starting with a digit, e.g. SOURCE_PASSWORD."),
        (["--allow", "shop"], "Filter pattern 'shop' is not valid. Write db.table with exactly one dot, using letters "
                              "(of any alphabet), digits, _ and $, and the wildcards * (any run of characters) and ? "
                              "(one character), e.g. shop.* or *.audit_log."),
    ]:
        refused(gate, sandbox, ["channel", "create", unique_name, "--source", sandbox.source.address, *options], 2,
                message)
    refused(gate, sandbox, ["--config", str(tmp_path / "nope.yaml"), "channel", "list"], 2,
            f"config file {tmp_path / 'nope.yaml'} does not exist. Pass --config with the path of your config.yaml.")
    for dc, message in [
        (f"port: {port}", f"Cannot reach the DC server at 127.0.0.1:{port} (Can't connect to MySQL server on "
                          "'127.0.0.1' ([Errno 111] Connection refused)). Check that it is running and that host and "
                          "port are right."),
        (f"port: {sandbox.dc.port}\n  password: wrong", f"The DC server {sandbox.dc.address} refused user 'root': "
                                                        "wrong password or no such user from this host. Check the DC "
                                                        "credentials (password via an ${ENV} reference)."),
    ]:
        config = tmp_path / "dc.yaml"
        config.write_text(f"dc:\n  {dc}\n")
        refused(gate, sandbox, ["--config", str(config), "channel", "list"], 1 if "reach" in message else 3, message)


@pytest.mark.parametrize(("text", "message"), [
    ("dc:\n  host: [127.0.0.1\n", "{path} is not valid YAML at line 3, column 1: expected ',' or ']', but got "
                                  "'<stream end>'. Fix the syntax there."),
    ("dc:\n  hots: 127.0.0.1\n", "config section 'dc' has unknown key(s) hots; the keys it accepts are host, port, "
                                 "user, password, tls."),
    ("dcs:\n  host: 127.0.0.1\n", "{path} has unknown section(s) dcs; the sections it accepts are dc, "
                                  "channel_defaults, sandbox, log."),
])
def test_bad_config(gate: Gate, sandbox: Sandbox, tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    for command in (["channel", "list"], ["channel", "create", "x", "--source", sandbox.source.address],
                    ["sandbox", "status"]):
        refused(gate, sandbox, ["--config", str(config), *command], 2, message.format(path=config))


def test_existing_missing_incompatible_and_foreign(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    create(gate, sandbox, unique_name)
    refused(gate, sandbox, ["channel", "create", unique_name, "--source", sandbox.source.address], 1,
            f"Channel '{unique_name}' already exists on the DC server. Use 'gate channel show {unique_name}' to see "
            f"it, or 'gate channel drop {unique_name}' first to start over.")
    missing = f"{unique_name}_missing"
    for command in (["drop", missing, "--yes"], ["show", missing], ["set-position", missing, "--now"]):
        refused(gate, sandbox, ["channel", *command], 1,
                f"No channel '{missing}' on this DC server. 'gate channel list' shows the channels there.")
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{unique_name}`.gate_meta SET value = '99' WHERE name = 'schema_version'")
    for command in (["show", unique_name], ["drop", unique_name, "--yes"], ["filter", unique_name, "--allow", "a.b"],
                    ["grant", unique_name, "app", "--password-env", "X"], ["check", unique_name]):
        refused(gate, sandbox, ["channel", *command], 1,
                f"Channel '{unique_name}' has DC schema version 99, which this gate (0.1.0, schema version 2) cannot "
                "use. Run the gate version that created it, or create a new channel and let it start from a fresh "
                "position.", env={"X": "x"})
    listed = json.loads(gate("--json", "channel", "list").stdout)
    assert {"channel": unique_name, "state": "stopped", "problem": None, "gate": None, "lag_seconds": None,
            "checkpoint_id": None, "checkpoint_tid": None, "metrics_address": None, "metrics_port": None,
            "source": None, "standby": None, "schema_version": 99, "standing_by": [], "last_takeover": None} in listed
    foreign = f"{unique_name}_app"
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{foreign}`")
        cur.execute(f"CREATE TABLE `{foreign}`.t (id INT PRIMARY KEY)")
    refused(gate, sandbox, ["channel", "create", foreign, "--source", sandbox.source.address], 1,
            f"The DC server already has a database '{foreign}', and it is not a gate channel. Pick another channel "
            "name; gate never takes over a database it did not create.")
    for command in (["show", foreign], ["drop", foreign, "--yes"], ["set-source", foreign, "127.0.0.1:3306"]):
        refused(gate, sandbox, ["channel", *command], 1,
                f"Database '{foreign}' on the DC server is not a gate channel (it has no gate_meta table), so gate "
                "leaves it alone. 'gate channel list' shows the channels there.")


def test_help_has_an_example_everywhere(gate: Gate) -> None:
    from gate.cli import main

    def commands(group: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, command in getattr(group, "commands", {}).items():
            yield from commands(command, path + [name])

    verbs = set(main.commands)
    assert verbs == {"channel", "check-source", "consumer", "sandbox", "run", "status", "snapshot", "tail",
                     "spark-load", "spark-materialise", "verify"}
    for path in commands(main, []):
        result = gate(*path, "--help")
        assert result.exit_code == 0
        assert "Example:" in result.stdout and re.search(r"\n +gate ", result.stdout), path
