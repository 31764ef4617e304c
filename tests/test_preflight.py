"""The preflight: every problem named with its fix, on real servers set up wrong on purpose."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator

import pymysql
import pytest
from click.testing import Result

from gate.admin.catalog import cascade_problems, cascade_query
from gate.admin.preflight import (
    CHECK_TIMEOUT,
    Problem,
    check_server,
    require_channel,
    require_server,
)
from gate.common.config import Secret, ServerConfig
from gate.common.dc import ChannelSettings
from gate.common.errors import ConnectionFailed, PreflightFailed
from gate.devtools.sandbox import Sandbox

Gate = Callable[..., Result]
WRONG_ARGS = ("--skip-log-bin", "--binlog-format=STATEMENT", "--binlog-row-image=MINIMAL",
              "--binlog-row-metadata=MINIMAL", "--skip-log-slave-updates")


def root(server: object) -> ServerConfig:
    return ServerConfig("127.0.0.1", server.port)  # type: ignore[attr-defined]


def fix_of(setting: str, value: str) -> str:
    return (f"SET GLOBAL {setting} = '{value}'; and add '{setting} = {value}' under [mysqld] in my.cnf to keep it "
            "after a restart.")


def test_every_setting_wrong(make_sandbox: Callable[..., Sandbox], gate: Gate) -> None:
    box = make_sandbox(source_args=WRONG_ARGS)
    server = root(box.source)
    assert check_server(server, 1, "standby") == [
        Problem("log_bin", "OFF", "ON", "binary logging cannot be switched on at run time: add 'log_bin = mysql-bin' "
                                        "under [mysqld] in my.cnf and restart the server."),
        Problem("binlog_format", "STATEMENT", "ROW", fix_of("binlog_format", "ROW")),
        Problem("binlog_row_image", "MINIMAL", "FULL", fix_of("binlog_row_image", "FULL")),
        Problem("binlog_row_metadata", "MINIMAL", "FULL", fix_of("binlog_row_metadata", "FULL")),
        Problem("log_slave_updates", "OFF", "ON (a standby must binlog what it replicates)",
                "add 'log_slave_updates = ON' under [mysqld] in my.cnf and restart the standby."),
        Problem("server_id", "1, the same as gate's", "a server_id other than the server's own",
                "give gate a server_id that no server or replica of this replication topology uses (--server-id N "
                "when creating the channel or checking the source)."),
    ]
    result = gate("check-source", box.source.address, "--server-id", "7")
    assert (result.exit_code, result.stdout) == (
        1, f"source {box.source.address}: does not offer TLS; gate connects in plaintext (TLS mode preferred)\n")
    assert result.stderr == (
        f"error: The source server {box.source.address} is not ready for gate (4 problem(s)):\n"
        "  - log_bin is OFF; gate needs ON. Fix: binary logging cannot be switched on at run time: add "
        "'log_bin = mysql-bin' under [mysqld] in my.cnf and restart the server.\n"
        f"  - binlog_format is STATEMENT; gate needs ROW. Fix: {fix_of('binlog_format', 'ROW')}\n"
        f"  - binlog_row_image is MINIMAL; gate needs FULL. Fix: {fix_of('binlog_row_image', 'FULL')}\n"
        f"  - binlog_row_metadata is MINIMAL; gate needs FULL. Fix: {fix_of('binlog_row_metadata', 'FULL')}\n"
    )
    # the statements given as fixes do fix what can be fixed at run time
    with box.source.connect() as conn, conn.cursor() as cur:
        for problem in check_server(server, None):
            if problem.fix.startswith("SET GLOBAL"):
                cur.execute(problem.fix.split(";")[0])
    assert [p.setting for p in check_server(server, None)] == ["log_bin"]


@pytest.fixture(scope="module")
def accounts(sandbox: Sandbox) -> Iterator[dict[str, ServerConfig]]:
    """Accounts on the session source with various privileges (not binlogged, not replicated)."""
    grants = {"pf_none": None, "pf_slave": "REPLICATION SLAVE", "pf_all": "ALL PRIVILEGES",
              "pf_client": "REPLICATION SLAVE, REPLICATION CLIENT, SELECT"}
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        for user, privileges in grants.items():
            cur.execute(f"CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1' IDENTIFIED BY 'pf-pw'")
            if privileges:
                cur.execute(f"GRANT {privileges} ON *.* TO '{user}'@'127.0.0.1'")
    yield {user: ServerConfig("127.0.0.1", sandbox.source.port, user, Secret("pf-pw")) for user in grants}
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        for user in grants:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")


def test_missing_privileges_and_their_fix(sandbox: Sandbox, accounts: dict[str, ServerConfig]) -> None:
    assert check_server(accounts["pf_none"], None) == [Problem(
        "privileges of 'pf_none'@'127.0.0.1'", "USAGE", "REPLICATION SLAVE, BINLOG MONITOR and SELECT on *.*",
        "GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'pf_none'@'127.0.0.1';")]
    [problem] = check_server(accounts["pf_slave"], None)
    assert (problem.found, problem.fix) == (
        "REPLICATION SLAVE", "GRANT BINLOG MONITOR, SELECT ON *.* TO 'pf_slave'@'127.0.0.1';")
    with pytest.raises(PreflightFailed) as caught:
        require_server(accounts["pf_slave"], None)
    assert str(caught.value) == (
        f"The source server {sandbox.source.address} is not ready for gate (1 problem(s)):\n"
        "  - privileges of 'pf_slave'@'127.0.0.1' is REPLICATION SLAVE; gate needs REPLICATION SLAVE, BINLOG MONITOR "
        "and SELECT on *.*. Fix: GRANT BINLOG MONITOR, SELECT ON *.* TO 'pf_slave'@'127.0.0.1';"
    )
    with sandbox.source.connect() as conn, conn.cursor() as cur:  # the fix is a working statement
        cur.execute("SET sql_log_bin = 0")
        cur.execute(problem.fix)
    assert check_server(accounts["pf_slave"], None) == []
    assert check_server(accounts["pf_all"], 4242) == []  # ALL PRIVILEGES counts, and may list replicas
    assert check_server(accounts["pf_client"], None) == []  # REPLICATION CLIENT is BINLOG MONITOR on MariaDB


def test_server_id_clashes(sandbox: Sandbox, accounts: dict[str, ServerConfig]) -> None:
    assert check_server(root(sandbox.source), 4242) == []
    [own] = check_server(root(sandbox.source), 1)
    assert (own.setting, own.found) == ("server_id", "1, the same as gate's")
    [replica] = check_server(root(sandbox.source), 2)  # the standby replicates with server_id 2
    assert (replica.setting, replica.found.split(" at ")[0], replica.fatal) == (
        "server_id", "2, already used by the replica", True)
    # an account that may not list replicas gets a warning, not a failure
    assert require_server(accounts["pf_client"], 2) == [Problem(
        "SHOW SLAVE HOSTS", "denied to 'pf_client'@'127.0.0.1'", "it to see that no connected replica uses server_id 2",
        "GRANT REPLICATION MASTER ADMIN ON *.* TO 'pf_client'@'127.0.0.1'; or make sure yourself that no replica uses "
        "server_id 2.", fatal=False)]


def test_the_checks_and_the_callers_queries_take_one_round_trip_after_the_login(
        sandbox: Sandbox, accounts: dict[str, ServerConfig], unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over a slow link each round trip of 'gate run's start-up counts (some 11 for these checks before, 3.3 s at
    300 ms): every statement of the checks, and the caller's own (the source's cascading foreign keys), go as one
    multi-statement query after the login."""
    import pymysql.connections

    db = f"src_{unique_name}"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.p (id INT PRIMARY KEY)")
        cur.execute(f"CREATE TABLE `{db}`.ch (id INT PRIMARY KEY, pid INT, CONSTRAINT fk_ch FOREIGN KEY (pid) "
                    "REFERENCES p (id) ON DELETE CASCADE)")
    calls: list[str] = []
    for name in ("connect", "_execute_command"):
        original = getattr(pymysql.connections.Connection, name)

        def counted(self: pymysql.connections.Connection, *args: object, _name: str = name,
                    _original: Callable[..., object] = original) -> object:
            sql = args[1] if _name == "_execute_command" else "connect"
            calls.append(sql.decode() if isinstance(sql, bytes) else str(sql))
            return _original(self, *args)

        monkeypatch.setattr(pymysql.connections.Connection, name, counted)
    try:
        settings = ChannelSettings(unique_name, root(sandbox.source), server_id=4242, allow=(f"{db}.*",))
        warnings, (cascades,) = require_channel(settings, [cascade_query()])
        assert calls == ["connect", ";".join([
            "SET NAMES utf8mb4", "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
            "'binlog_row_image', 'binlog_row_metadata', 'log_slave_updates', 'server_id', 'version', "
            "'version_comment')", "SELECT CURRENT_USER()", "SHOW GRANTS FOR CURRENT_USER",
            "SELECT constraint_schema, table_name, constraint_name, unique_constraint_schema, referenced_table_name, "
            "delete_rule, update_rule FROM information_schema.referential_constraints WHERE (delete_rule IN "
            "('CASCADE', 'SET NULL', 'SET DEFAULT') OR update_rule IN ('CASCADE', 'SET NULL', 'SET DEFAULT')) AND "
            "constraint_schema NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')",
            "SHOW MASTER STATUS", "SHOW SLAVE HOSTS", "SHOW ALL SLAVES STATUS"])]
        assert warnings == []
        assert [p.setting for p in cascade_problems(settings, cascades)[1]] == [
            f"the foreign key fk_ch of the captured table {db}.ch (parent {db}.p)"]
        # a statement refused to gate's account is a problem of its own, and costs a round trip more: the
        # server stops at the refusal, and the statements after it are sent again together
        calls.clear()
        assert [p.setting for p in check_server(accounts["pf_client"], 4242)] == ["SHOW SLAVE HOSTS"]
        assert [sql.split(";")[-3:] if sql != "connect" else sql for sql in calls] == [
            "connect", ["SHOW MASTER STATUS", "SHOW SLAVE HOSTS", "SHOW ALL SLAVES STATUS"],
            ["SHOW ALL SLAVES STATUS"]]  # its answer is not needed: the source has log_slave_updates ON
    finally:
        with sandbox.source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def test_check_source_cli(gate: Gate, sandbox: Sandbox, accounts: dict[str, ServerConfig]) -> None:
    address = sandbox.source.address
    result = gate("check-source", address, "--server-id", "4242")
    plaintext = f"source {address}: does not offer TLS; gate connects in plaintext (TLS mode preferred)\n"
    assert (result.exit_code, result.stdout, result.stderr) == (
        0, f"{plaintext}source {address}: ready for gate with server_id 4242\n", "")
    result = gate("check-source", address, "--user", "pf_client", "--password-env", "PF_PW", env={"PF_PW": "pf-pw"})
    assert (result.exit_code, result.stdout) == (0, f"{plaintext}source {address}: ready for gate (server_id not "
                                                    "checked: give --server-id)\n")
    result = gate("--json", "check-source", address, "--user", "pf_none", "--password", "pf-pw", "--server-id", "2")
    assert result.exit_code == 1
    [report] = json.loads(result.stdout)
    assert (report["role"], report["server"], report["server_id"], report["ok"]) == ("source", address, 2, False)
    assert [(p["setting"], p["fatal"]) for p in report["problems"]] == [
        ("privileges of 'pf_none'@'127.0.0.1'", True), ("SHOW SLAVE HOSTS", False)]
    assert sandbox.standby is not None
    result = gate("check-source", sandbox.standby.address, "--role", "standby")
    assert (result.exit_code, result.stdout) == (0, f"standby {sandbox.standby.address}: does not offer TLS; gate "
                                                    "connects in plaintext (TLS mode preferred)\nstandby "
                                                    f"{sandbox.standby.address}: ready for gate (server_id not checked: "
                                                    "give --server-id)\n")


def test_wrong_password(sandbox: Sandbox, gate: Gate) -> None:
    result = gate("check-source", sandbox.source.address, "--user", "pf_none", "--password", "nope")
    assert (result.exit_code, result.stderr) == (3, (
        f"error: The source server {sandbox.source.address} refused user 'pf_none': wrong password or no such user "
        "from this host. Check the source credentials (password via an ${ENV} reference).\n"))
    with pytest.raises(pymysql.err.OperationalError):
        pymysql.connect(host="127.0.0.1", port=sandbox.source.port, user="pf_none", password="nope")


def test_a_server_that_never_answers_fails_the_check_in_time() -> None:
    """A port that takes connections but never greets (a hung server, another service) fails the check
    after CHECK_TIMEOUT instead of holding 'gate run' in its start-up checks for ever."""
    outcome: list[str] = []

    def check(server: ServerConfig) -> None:
        try:
            check_server(server, None)
        except ConnectionFailed as exc:
            outcome.append(str(exc))

    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        thread = threading.Thread(target=check, args=(ServerConfig("127.0.0.1", port),), daemon=True)
        thread.start()
        thread.join(CHECK_TIMEOUT + 10)
        assert not thread.is_alive(), f"the check still waits after {CHECK_TIMEOUT + 10} s"
    assert outcome == [f"Cannot reach the source server at 127.0.0.1:{port} (Lost connection to MySQL server during "
                       "query (timed out)). Check that it is running and that host and port are right."]
