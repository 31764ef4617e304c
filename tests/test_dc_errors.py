"""Server errors that retrying cannot fix stop ``gate run`` with exit status 3 and a message naming the server,
its answer and the fix, on every path (checkpoint, writers, retention, snapshot requests, the runner record,
an unknown database); transient ones are retried. Each test revokes one table privilege from a DC user of its
own while gate runs on the session's servers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from subprocess import Popen
from typing import Any

import pymysql
import pytest
from click.testing import Result

from gate.capture.pipeline import STARTING
from gate.common.config import ChannelDefaults, Secret, ServerConfig
from gate.common.dc import channel_tables, connect, read_settings, write_settings
from gate.common.errors import ConnectionFailed, ServerRefused, StreamLost
from gate.common.retry import is_transient, refusal
from gate.devtools.sandbox import Sandbox
from tests.replay import make_channel, start_gate, wait_row, wait_running

Gate = Callable[..., Result]
PASSWORD = "Gate-pw-1"
FIX = ("Grant gate's DC user what it needs in the channel's database, on the DC server: GRANT CREATE, DROP, SELECT, "
       "INSERT, UPDATE, DELETE ON `{channel}`.* TO '{user}'@HOST (HOST: the host part of the account gate logs in "
       "as, which SELECT CURRENT_USER() shows as that user). Retrying cannot help, so gate stops (exit status 3: its "
       "systemd unit does not restart it); start it again once that is done.")


def dc_user(box: Sandbox, channel: str) -> str:
    """A DC user holding what gate needs in ``channel`` table by table, so that one table's privilege can go."""
    user = f"u_{channel}"[:64]
    with box.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'")
        cur.execute(f"GRANT SELECT, CREATE ON `{channel}`.* TO '{user}'@'%'")
        for table in sorted(channel_tables() | {"gate_xa_pending", "gate_snapshot"}):
            cur.execute(f"GRANT INSERT, UPDATE, DELETE ON `{channel}`.`{table}` TO '{user}'@'%'")
    return user


def revoke(box: Sandbox, channel: str, privilege: str, table: str) -> None:
    with box.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"REVOKE {privilege} ON `{channel}`.`{table}` FROM '{f'u_{channel}'[:64]}'@'%'")


def source_table(box: Sandbox, channel: str) -> str:
    db = f"{channel}_s"
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    return db


def started(box: Sandbox, channel: str, tmp_path: Path, **defaults: Any) -> tuple[str, str, Popen[bytes]]:
    """Channel ``channel`` on its own source database, run by its own DC user until its start-up is done."""
    db = source_table(box, channel)
    make_channel(box.dc, box.source, channel, allow=(f"{db}.*",), defaults=ChannelDefaults(**defaults))
    user = dc_user(box, channel)
    run = start_gate(tmp_path, box.dc, channel, user, PASSWORD)
    wait_running(box.dc, channel, run)
    wait_row(box.dc, channel, "SELECT 1 FROM gate_meta WHERE name = 'source_server_id'")  # its last start-up write
    return db, user, run


def stopped_with(run: Popen[bytes], tmp_path: Path, channel: str) -> str:
    """The message gate exited with, status 3, from its log's last line."""
    assert run.wait(timeout=90) == 3
    log = (tmp_path / f"{channel}.log").read_text()
    last = log.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("error: "), log
    return last.removeprefix("error: ")


def refused(box: Sandbox, doing: str, answer: str, fix: str) -> str:
    """The message of a DC refusal, as a pattern (the host gate connected from is the server's to name)."""
    return (re.escape(f"The DC server {box.dc.address} refused {doing}: {answer}. {fix}")
            .replace(re.escape("'@'HOSTNAME'"), r"'@'[\w.:]+'"))


def denied(command: str, user: str, channel: str, table: str) -> str:
    return f"[1142] {command} command denied to user '{user}'@'HOSTNAME' for table `{channel}`.`{table}`"


def status_stop(gate: Gate, channel: str) -> dict[str, object]:
    result = gate("--json", "status", channel, "--sample", "0")
    assert result.exit_code == 0, result.output
    stop: dict[str, object] = json.loads(result.stdout)["stopped_by"]
    return stop


def insert(box: Sandbox, db: str, *ids: int, timestamp: str = "") -> None:
    with box.source.connect() as conn, conn.cursor() as cur:
        if timestamp:
            cur.execute(f"SET timestamp = {timestamp}")
        cur.execute(f"INSERT INTO `{db}`.t VALUES " + ",".join(f"({i}, 'v')" for i in ids))
        conn.commit()


def test_checkpoint_update_revoked(sandbox: Sandbox, unique_name: str, tmp_path: Path, gate: Gate) -> None:
    """Before: 'checkpoint not stored, DC unreachable ((1142, ...)); retrying' for ever."""
    db, user, run = started(sandbox, unique_name, tmp_path)
    revoke(sandbox, unique_name, "UPDATE", "transfer_checkpoint")
    insert(sandbox, db, 1)
    message = stopped_with(run, tmp_path, unique_name)
    assert re.fullmatch(refused(
        sandbox, "the checkpoint's UPDATE of transfer_checkpoint and gate_resume (with the snapshot progress in "
        "gate_snapshot)", denied("UPDATE", user, unique_name, "transfer_checkpoint"),
        FIX.format(channel=unique_name, user=user)), message), message
    stop = status_stop(gate, unique_name)
    assert (stop["error"], stop["message"], stop["exit_status"]) == ("ServerRefused", message, 3)
    text = gate("status", unique_name, "--sample", "0").stdout
    assert re.search(r"^stopped_by +ServerRefused$", text, re.M), text
    assert text.endswith(f"UTC with exit status 3: {message}\n"), text


def test_writers_insert_revoked(sandbox: Sandbox, unique_name: str, tmp_path: Path, gate: Gate) -> None:
    db, user, run = started(sandbox, unique_name, tmp_path)
    revoke(sandbox, unique_name, "INSERT", "transfer_data")
    insert(sandbox, db, 1, 2)
    message = stopped_with(run, tmp_path, unique_name)
    assert re.fullmatch(refused(sandbox, "the INSERT of rows 1..2 into transfer_data",
                                denied("INSERT", user, unique_name, "transfer_data"),
                                FIX.format(channel=unique_name, user=user)), message), message
    assert status_stop(gate, unique_name)["message"] == message


def test_retention_delete_revoked(sandbox: Sandbox, unique_name: str, tmp_path: Path, gate: Gate) -> None:
    """Before: 'retention pass failed (...); retrying at the next pass' for ever."""
    db, user, run = started(sandbox, unique_name, tmp_path, retain_days=1, retention_interval_seconds=0.2)
    revoke(sandbox, unique_name, "DELETE", "transfer_data")  # after the start-up's removal above the checkpoint
    insert(sandbox, db, 1, 2, timestamp="UNIX_TIMESTAMP() - 3 * 86400")  # rows three days old: retention's
    message = stopped_with(run, tmp_path, unique_name)
    assert re.fullmatch(refused(
        sandbox, "retention's statements (the DELETE of old rows from transfer_data, gate_meta's purged_through, the "
        "consumers)", denied("DELETE", user, unique_name, "transfer_data"),
        FIX.format(channel=unique_name, user=user)), message), message
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM transfer_data ORDER BY id")
        assert cur.fetchall() == ((1,), (2,))  # nothing removed
    assert status_stop(gate, unique_name)["message"] == message


def test_snapshot_request_update_revoked(sandbox: Sandbox, unique_name: str, tmp_path: Path, gate: Gate) -> None:
    """Before: 'DC unreachable ((1142, ...)); retrying' every half second, for ever."""
    db, user, run = started(sandbox, unique_name, tmp_path)
    revoke(sandbox, unique_name, "UPDATE", "gate_snapshot")
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO gate_snapshot (dbname, tablename, reason) VALUES (%s, 't', 'test')", (db,))
    message = stopped_with(run, tmp_path, unique_name)
    assert re.fullmatch(refused(sandbox, "a statement of gate's control connection",
                                denied("UPDATE", user, unique_name, "gate_snapshot"),
                                FIX.format(channel=unique_name, user=user)), message), message
    assert status_stop(gate, unique_name)["message"] == message


def test_a_read_only_dc(sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    """read_only on the DC is an operator's matter: gate does not wait it out (root, with SUPER, may still write)."""
    db, user, run = started(sandbox, unique_name, tmp_path)
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL read_only = 1")
        try:
            insert(sandbox, db, 1)
            message = stopped_with(run, tmp_path, unique_name)
        finally:
            cur.execute("SET GLOBAL read_only = 0")
    assert re.fullmatch(refused(
        sandbox, "the INSERT of rows 1..1 into transfer_data", "[1290] The MariaDB server is running with the "
        "--read-only option so it cannot execute this statement", "The DC server is read-only and gate must write "
        "there: SET GLOBAL read_only = OFF on it, or point gate at the writable primary (dc in config.yaml). "
        "Retrying cannot help, so gate stops (exit status 3: its systemd unit does not restart it); start it again "
        "once that is done."), message), message


def test_runner_record_refused_at_start(sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    """The record 'channel list' shows a running gate's host, pid and metrics address by: refused with the
    start-up transaction that writes it, before the binlog is read (the error cannot be left in gate_meta
    either: the log alone has it)."""
    db = source_table(sandbox, unique_name)
    make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    user = dc_user(sandbox, unique_name)
    revoke(sandbox, unique_name, "INSERT", "gate_meta")
    run = start_gate(tmp_path, sandbox.dc, unique_name, user, PASSWORD)
    message = stopped_with(run, tmp_path, unique_name)
    assert re.fullmatch(refused(sandbox, STARTING, denied("INSERT", user, unique_name, "gate_meta"),
                                FIX.format(channel=unique_name, user=user)), message), message


def test_an_unknown_database_stops_with_status_3(sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    run = start_gate(tmp_path, sandbox.dc, unique_name)
    assert stopped_with(run, tmp_path, unique_name) == (
        f"The DC server {sandbox.dc.address} has no database '{unique_name}': was the channel dropped? 'gate channel "
        "list' shows the channels there.")


def test_the_source_refusing_the_binlog_stream(sandbox: Sandbox, unique_name: str, tmp_path: Path, gate: Gate) -> None:
    """A source user without REPLICATION SLAVE: the binlog dump is refused. Before: exit status 1 (restarted)."""
    user = f"s_{unique_name}"[:64]
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'")
        cur.execute(f"GRANT SELECT, BINLOG MONITOR ON *.* TO '{user}'@'%'")
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    with connect(dc, "DC", unique_name) as conn:
        settings = read_settings(conn, unique_name)
        write_settings(conn, replace(settings, source=ServerConfig("127.0.0.1", sandbox.source.port, user,
                                                                   Secret(PASSWORD))))
    message = stopped_with(start_gate(tmp_path, sandbox.dc, unique_name), tmp_path, unique_name)
    assert re.fullmatch(re.escape(f"The source server {sandbox.source.address} refused the binlog stream from ")
                        + r"mysql-bin\.\d+:\d+ \(GTID [\d,-]+\)" + re.escape(
        ": [1227] Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s) for this operation. "
        f"Grant it on the source server: GRANT REPLICATION SLAVE ON *.* TO '{user}'@HOST (HOST: the host part of the "
        "account gate logs in as, which SELECT CURRENT_USER() shows as that user); gate needs REPLICATION SLAVE, "
        "BINLOG MONITOR, SELECT ON *.* there. Retrying cannot help, so gate stops (exit status 3: its systemd unit "
        "does not restart it); start it again once that is done."), message), message
    assert status_stop(gate, unique_name)["message"] == message


def test_transient_errors_are_told_from_lasting_ones() -> None:
    lost = [pymysql.err.OperationalError(2013, "Lost connection"), pymysql.err.OperationalError(2006, "gone away"),
            pymysql.err.OperationalError(1040, "Too many connections"), pymysql.err.OperationalError(1205, "lock"),
            pymysql.err.OperationalError(1213, "Deadlock"), pymysql.err.OperationalError(1927, "killed"),
            pymysql.err.InterfaceError(0, ""), ConnectionFailed("unreachable"), StreamLost("lost"), OSError("reset")]
    lasting = [pymysql.err.OperationalError(code, "x") for code in (1142, 1044, 1045, 1227, 1049, 1290, 1836)] + [
        pymysql.err.ProgrammingError(1146, "Table 'c.t' doesn't exist"), ServerRefused("refused")]
    assert [is_transient(exc) for exc in lost] == [True] * len(lost)
    assert [is_transient(exc) for exc in lasting] == [False] * len(lasting)


@pytest.mark.parametrize(("role", "code", "text", "fix"), [
    ("source", 1227, "Access denied; you need (at least one of) the BINLOG MONITOR privilege(s) for this operation",
     "Grant it on the source server: GRANT BINLOG MONITOR ON *.* TO 'gate'@HOST (HOST: the host part of the account "
     "gate logs in as, which SELECT CURRENT_USER() shows as that user); gate needs REPLICATION SLAVE, BINLOG MONITOR, "
     "SELECT ON *.* there."),
    ("DC", 1290, "The MariaDB server is running with the --read-only option so it cannot execute this statement",
     "The DC server is read-only and gate must write there: SET GLOBAL read_only = OFF on it, or point gate at the "
     "writable primary (dc in config.yaml)."),
])
def test_refusals_name_the_server_the_answer_and_the_fix(role: str, code: int, text: str, fix: str) -> None:
    server = ServerConfig("db1", 3306, "gate", Secret("pw"))
    exc = refusal(pymysql.err.OperationalError(code, text), role, server, "a statement", "shop")
    assert isinstance(exc, ServerRefused) and exc.exit_code == 3
    assert str(exc) == (f"The {role} server db1:3306 refused a statement: [{code}] {text}. {fix} Retrying cannot "
                        "help, so gate stops (exit status 3: its systemd unit does not restart it); start it again "
                        "once that is done.")
