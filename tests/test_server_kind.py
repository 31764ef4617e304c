"""gate works with MariaDB only (the servers its tests run on): a server that reports itself as MySQL is
refused as source and as DC by 'gate check-source', 'gate channel create' and 'gate run', named, before gate
reads or writes anything.

No MySQL server can be installed here, so the "MySQL" server is a real MariaDB server started with
--version=8.4.0: it reports @@version '8.4.0' and @@version_comment 'Debian 12', as a MySQL 8.4 server
reports a version without 'MariaDB' (its comment is 'MySQL Community Server - GPL'). Detection reads exactly
these two values, so the refusal path runs on a real server, with no substitute for gate's own queries."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from gate.admin.preflight import check_server
from gate.common.server import TESTED, is_mariadb, require_mariadb
from gate.devtools.sandbox import SOURCE_ARGS, MariaDBServer, Sandbox, free_port
from tests.replay import GATE, config_yaml, server_config

Gate = Callable[..., Result]
MYSQL_VERSION = "8.4.0"


def test_is_mariadb_reads_version_and_comment() -> None:
    assert is_mariadb("10.11.19-MariaDB-0+deb12u1", "Debian 12")
    assert is_mariadb("11.4.2-MariaDB", "mariadb.org binary distribution")
    assert is_mariadb("10.11.19", "mariadb.org binary distribution")  # a version string overridden by hand
    assert not is_mariadb("8.4.0", "MySQL Community Server - GPL")
    assert not is_mariadb("8.0.36-0ubuntu0.22.04.1", "(Ubuntu)")
    assert not is_mariadb("8.0.36-28", "Percona Server (GPL), Release 28, Revision 47601f19")


def refusal(role: str, address: str) -> str:
    return (f"The {role} server {address} is not MariaDB: it reports version '{MYSQL_VERSION}' ('Debian 12'). gate "
            f"is tested on {TESTED} only (it reads MariaDB's GTIDs and binlog events, and keeps its DC in MariaDB's "
            "collations), so it refuses MySQL and other servers rather than capture them untested. Use a MariaDB "
            f"server ({TESTED}) as the {role}.")


@pytest.fixture(scope="module")
def mysql_like(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A real server whose @@version says MySQL 8.4.0 (row binlog, as a source gate could read)."""
    server = MariaDBServer("mysql_like", tmp_path_factory.mktemp("mysql_like"), free_port(), 9,
                           SOURCE_ARGS + (f"--version={MYSQL_VERSION}",), True)
    server.start()
    yield server
    server.stop()


def test_mariadb_passes(sandbox: Sandbox) -> None:
    for role, server in (("source", sandbox.source), ("DC", sandbox.dc)):
        with server.connect() as conn:
            require_mariadb(conn, role, server.address)
    assert [p.setting for p in check_server(server_config(sandbox.source), None)] == []


def test_a_mysql_server_is_refused_everywhere(gate: Gate, sandbox: Sandbox, mysql_like: MariaDBServer,
                                               unique_name: str, tmp_path: Path) -> None:
    checked = gate("check-source", mysql_like.address)
    assert checked.exit_code == 1
    assert checked.stderr == (f"error: The source server {mysql_like.address} is not ready for gate (1 problem(s)):\n"
                              f"  - server is {MYSQL_VERSION} ('Debian 12'); gate needs MariaDB (tested: {TESTED}). "
                              f"Fix: {refusal('source', mysql_like.address)}\n")
    created = gate("channel", "create", unique_name, "--source", mysql_like.address)
    assert (created.exit_code, created.stderr) == (3, f"error: {refusal('source', mysql_like.address)}\n")
    mysql_dc = tmp_path / "mysql_dc.yaml"
    mysql_dc.write_text(config_yaml(mysql_like))
    created = gate("--config", str(mysql_dc), "channel", "create", unique_name, "--source", sandbox.source.address)
    assert (created.exit_code, created.stderr) == (3, f"error: {refusal('DC', mysql_like.address)}\n")
    with mysql_like.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW DATABASES LIKE %s", (unique_name,))
        assert cur.fetchall() == ()  # nothing made

    # --no-check does not ask the source (it may not be up yet): the channel is made, and gate run refuses it
    created = gate("channel", "create", unique_name, "--source", mysql_like.address, "--no-check")
    assert created.exit_code == 0, created.stderr
    config = tmp_path / "config.yaml"
    config.write_text(config_yaml(sandbox.dc))
    for flags in ((), ("--no-check",)):  # the preflight, or the check before the binlog is read
        run = subprocess.run([GATE, "--config", str(config), "run", unique_name, *flags], capture_output=True,
                             text=True, timeout=60)
        assert (run.returncode, run.stderr) == (3, f"error: {refusal('source', mysql_like.address)}\n")
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM transfer_data")
        assert cur.fetchone() == (0,)
