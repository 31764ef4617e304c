"""Preflight: is a server set up so that gate can capture its changes row by row?

Checked on the source (and on a standby, which also needs log_slave_updates, as does a source that is
itself a replica): binary logging on, ROW format, FULL row image and row metadata, the replication
privileges of gate's user, and that gate's server_id clashes neither with the server's own nor with
another connected replica's. A standby must also replicate from the channel's source. Every problem
names the setting and the statement or my.cnf line that fixes it.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pymysql.constants import CLIENT

from gate.common.config import ServerConfig
from gate.common.connection import set_names, tls_status
from gate.common.dc import ChannelSettings, connect, one_row, read_named_together
from gate.common.errors import ConnectionFailed, PreflightFailed, UnsupportedServer
from gate.common.retry import refusals
from gate.common.server import TESTED, is_mariadb, unsupported

# setting -> value gate needs; each can be changed at run time and kept in my.cnf
_DYNAMIC = {"binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}
_GRANT_ON_ALL = re.compile(r"^GRANT (.+?) ON \*\.\* TO ")
_ER_SPECIFIC_ACCESS_DENIED = 1227
_ER_PARSE_ERROR = 1064
_REFUSED = frozenset({_ER_SPECIFIC_ACCESS_DENIED, _ER_PARSE_ERROR})  # a statement refused to gate's account, or one
# the server does not know (MySQL 8.4 has no SHOW MASTER STATUS): such a server is refused as not MariaDB anyway
CHECK_TIMEOUT = 10.0  # seconds a check waits for each answer: a server that accepts but never answers fails it
Query = tuple[str, tuple[Any, ...]]  # SQL and its arguments
Rows = list[tuple[Any, ...]]
Answer = tuple[list[str], Rows] | None  # a statement's column names and rows; None: the server refused it
_VARIABLES = ("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image', "
              "'binlog_row_metadata', 'log_slave_updates', 'server_id', 'version', 'version_comment')")


@dataclass(frozen=True)
class Problem:
    """One setting that keeps gate from working (or, when not fatal, that gate could not verify)."""

    setting: str
    found: str
    expected: str
    fix: str
    fatal: bool = True

    def __str__(self) -> str:
        return f"{self.setting} is {self.found}; gate needs {self.expected}. Fix: {self.fix}"


def check_server(server: ServerConfig, gate_server_id: int | None, role: str = "source",
                 replicates_from: ServerConfig | None = None) -> list[Problem]:
    """Every problem of ``server`` for reading its binlog as ``role`` ("source" or "standby").

    ``gate_server_id`` None skips the server_id checks (``gate check-source`` without --server-id).
    ``replicates_from``, for a standby: the channel's source, which it must replicate from.
    """
    return _check(server, gate_server_id, role, replicates_from, [])[0]


@dataclass(frozen=True)
class _Answers:
    """What the checks read of a server: its variables, gate's account and its privileges on *.*, the connected
    replicas (None: not listed to this account), what its replication says, its binlog filters (SHOW MASTER
    STATUS), and the rows of the caller's own queries."""

    found: dict[str, str]
    account: str
    granted: set[str]
    replicas: list[tuple[int, str]] | None
    replication: list[Problem]
    filters: dict[str, Any]
    also: list[Rows]


def _check(server: ServerConfig, gate_server_id: int | None, role: str, replicates_from: ServerConfig | None,
           also: list[Query]) -> tuple[list[Problem], list[Rows]]:
    """:func:`check_server`, with ``also`` (the caller's queries to the same server) answered in the same round
    trip: the problems, and the rows of each of ``also``."""
    answers = _asked(server, gate_server_id is not None, role, replicates_from, also)
    found = answers.found
    problems = _server_problems(found, role, server.address)
    problems += _variable_problems(found, role) + _filter_problems(answers.filters)
    problems += _privilege_problems(answers.granted, answers.account, "MariaDB" in found.get("version", ""))
    if gate_server_id is not None:
        problems += _server_id_problems(int(found["server_id"]), gate_server_id, answers.replicas, answers.account)
    return problems + answers.replication, answers.also


def _asked(server: ServerConfig, replicas: bool, role: str, replicates_from: ServerConfig | None,
           also: list[Query]) -> _Answers:
    """The checks' statements and ``also`` in one round trip after the login: over a slow link each round trip
    counts. A statement the server refuses gate's account (a privilege missing) costs a round trip more and is
    a problem of its own. The replication statement is asked whatever the variables say, and read only when
    they call for it."""
    standby = role == "standby" and replicates_from is not None
    replication = "SHOW SLAVE STATUS" if standby else "SHOW ALL SLAVES STATUS" if role == "source" else ""
    with connect(server, role, read_timeout=CHECK_TIMEOUT, client_flag=CLIENT.MULTI_STATEMENTS,
                 names_later=True) as conn:
        _names, variables, user, grants, *rest = read_named_together(conn, [
            (set_names(conn), ()), (_VARIABLES, ()), ("SELECT CURRENT_USER()", ()),
            ("SHOW GRANTS FOR CURRENT_USER", ()), *also, ("SHOW MASTER STATUS", ()),
            *([("SHOW SLAVE HOSTS", ())] if replicas else []), *([(replication, ())] if replication else [])],
            skipped=_REFUSED)
    found = {str(name): str(value) for name, value in _answered(variables)[1]}
    account, mariadb = _account(_answered(user)[1][0][0]), "MariaDB" in found.get("version", "")
    answered = [_answered(answer)[1] for answer in rest[:len(also)]]
    master, *rest = rest[len(also):]
    hosts = _replicas(rest.pop(0)) if replicas else []
    problems: list[Problem] = []
    if standby:
        assert replicates_from is not None
        problems = _replication_problems(_named(rest.pop(0)), replicates_from, account, mariadb)
    elif replication and found.get("log_slave_updates") != "ON":
        problems = _upstream_problems(_named(rest.pop(0)), account, mariadb)
    status = _named(master) or [{}]  # an account without BINLOG MONITOR: a problem of its own
    return _Answers(found, account, _global_privileges(row[0] for row in _answered(grants)[1]), hosts, problems,
                    status[0], answered)


def _answered(answer: Answer) -> tuple[list[str], Rows]:
    """The answer of a statement the server does not refuse anyone."""
    assert answer is not None
    return answer


def _named(answer: Answer) -> list[dict[str, Any]] | None:
    """The rows of an answer as dicts by column name; None for a statement the server refused."""
    return None if answer is None else [dict(zip(answer[0], row)) for row in answer[1]]


def require_server(server: ServerConfig, gate_server_id: int | None, role: str = "source",
                   replicates_from: ServerConfig | None = None) -> list[Problem]:
    """Raise PreflightFailed listing every fatal problem (UnsupportedServer for a server that is not MariaDB);
    return the non-fatal ones (warnings)."""
    return _required(server, gate_server_id, role, replicates_from, [])[0]


def _required(server: ServerConfig, gate_server_id: int | None, role: str, replicates_from: ServerConfig | None,
              also: list[Query]) -> tuple[list[Problem], list[Rows]]:
    """:func:`require_server`, with the rows of ``also`` (see :func:`_check`)."""
    problems, rows = _check(server, gate_server_id, role, replicates_from, also)
    for problem in problems:
        if problem.setting == "server":
            raise UnsupportedServer(problem.fix)
    fatal = [p for p in problems if p.fatal]
    if fatal:
        raise PreflightFailed(describe_failure(server.address, role, fatal))
    return problems, rows


def require_channel(settings: ChannelSettings, also: list[Query] | None = None) -> tuple[list[Problem], list[Rows]]:
    """``gate run``'s preflight: the source, and the standby with its replication from the source.

    Raises PreflightFailed for a fatal problem and returns the warnings, with the rows of ``also``: queries
    to the source, asked in the same round trip as its checks (empty when it cannot be reached). With a
    standby, a server that cannot be reached is a warning: gate switches to the standby if the source stays
    unreachable for failover_after_seconds, and without its standby gate captures the source but cannot fail
    over.
    """
    servers: list[tuple[str, ServerConfig, ServerConfig | None]] = [("source", settings.source, None)]
    if settings.standby is not None:
        servers.append(("standby", settings.standby, settings.source))
    warnings: list[Problem] = []
    asked = also or []
    rows: list[Rows] = [[] for _ in asked]
    for role, server, replicates_from in servers:
        try:
            with refusals(role, server, "gate's preflight checks"):
                found, answers = _required(server, settings.server_id, role, replicates_from,
                                           asked if role == "source" else [])
                warnings += found
                if role == "source":
                    rows = answers
        except ConnectionFailed as exc:  # a server that refuses gate (ServerRefused) stops it, standby or not
            if settings.standby is None:
                raise
            consequence = ("gate fails over to the standby if it stays down" if role == "source"
                           else "gate cannot fail over until it is back")
            warnings.append(Problem(f"the {role} {server.address}", "unreachable", "a server that answers",
                                    f"{exc} Meanwhile {consequence}.", fatal=False))
    return warnings, rows


def tls_report(server: ServerConfig, role: str) -> dict[str, Any]:
    """Whether ``server`` offers TLS (have_ssl), what gate's connection negotiated (protocol, cipher) and what
    it verified of the server's certificate (the peer: its names, issuer and end of validity)."""
    with connect(server, role, read_timeout=CHECK_TIMEOUT) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.have_ssl")
        offers = one_row(cur)[0] == "YES"
        return {"offers_tls": offers, **tls_status(conn, server)}


def describe_tls(report: dict[str, Any]) -> str:
    """A TLS report in one line."""
    offers = "offers TLS" if report["offers_tls"] else "does not offer TLS"
    if not report["encrypted"]:
        return f"{offers}; gate connects in plaintext (TLS mode {report['mode']})"
    peer = f"; peer {report['peer']}" if report["peer"] else ""
    return (f"{offers}; gate negotiated {report['protocol']} with {report['cipher']} (TLS mode {report['mode']}), "
            f"verified: {report['verified']}{peer}")


def describe_failure(address: str, role: str, problems: list[Problem]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    return f"The {role} server {address} is not ready for gate ({len(problems)} problem(s)):\n{lines}"


def _account(current_user: str) -> str:
    """'user@host' from CURRENT_USER() as the quoted account of a GRANT statement."""
    user, _, host = current_user.rpartition("@")
    return f"'{user}'@'{host}'"


def _global_privileges(grants: Iterable[str]) -> set[str]:
    """The privileges granted ON *.*, from SHOW GRANTS lines."""
    privileges: set[str] = set()
    for grant in grants:
        match = _GRANT_ON_ALL.match(grant)
        if match:
            privileges.update(p.strip().upper() for p in match.group(1).split(","))
    return privileges


def _replicas(answer: Answer) -> list[tuple[int, str]] | None:
    """(server_id, host:port) of the replicas connected now (SHOW SLAVE HOSTS); None when the account may not
    list them."""
    return None if answer is None else [(int(row[0]), f"{row[1]}:{row[2]}") for row in answer[1]]


def _server_problems(found: dict[str, str], role: str, address: str) -> list[Problem]:
    """A server that is not MariaDB (MySQL): gate is tested on MariaDB only."""
    version, comment = found.get("version", ""), found.get("version_comment", "")
    if is_mariadb(version, comment):
        return []
    return [Problem("server", f"{version} ({comment!r})", f"MariaDB (tested: {TESTED})",
                    unsupported(role, address, version, comment))]


def _variable_problems(found: dict[str, str], role: str) -> list[Problem]:
    problems = []
    if found.get("log_bin") != "ON":
        problems.append(Problem(
            "log_bin", found.get("log_bin", "OFF"), "ON",
            "binary logging cannot be switched on at run time: add 'log_bin = mysql-bin' under [mysqld] in "
            "my.cnf and restart the server.",
        ))
    for setting, needed in _DYNAMIC.items():
        value = found.get(setting)
        if value is None:
            problems.append(Problem(
                setting, f"not supported by this server ({found.get('version', 'unknown version')})", needed,
                f"upgrade to MariaDB 10.5 or later (tested: {TESTED}).",
            ))
        elif value != needed:
            problems.append(Problem(
                setting, value, needed,
                f"SET GLOBAL {setting} = '{needed}'; and add '{setting} = {needed}' under [mysqld] in my.cnf "
                "to keep it after a restart.",
            ))
    if role == "standby" and found.get("log_slave_updates") != "ON":
        problems.append(Problem(
            "log_slave_updates", found.get("log_slave_updates", "OFF"), "ON (a standby must binlog what it replicates)",
            "add 'log_slave_updates = ON' under [mysqld] in my.cnf and restart the standby.",
        ))
    return problems


def _filter_problems(status: dict[str, Any]) -> list[Problem]:
    """binlog_do_db and binlog_ignore_db (SHOW MASTER STATUS): the changes they filter out never reach gate."""
    return [Problem(
        setting, str(status[column]), "empty (every database in the binlog)",
        f"the changes it filters out are not in the binlog, so gate never sees them. Remove {setting} from my.cnf "
        "and restart the server, unless no table the channel captures is ever changed there.", fatal=False,
    ) for setting, column in (("binlog_do_db", "Binlog_Do_DB"), ("binlog_ignore_db", "Binlog_Ignore_DB"))
        if status.get(column)]


def _replication_problems(statuses: list[dict[str, Any]] | None, source: ServerConfig, account: str,
                          mariadb: bool) -> list[Problem]:
    """A standby replicates from the channel's source (SHOW SLAVE STATUS: ``statuses``, None when refused to
    gate's account), with both threads running."""
    if statuses is None:
        monitor = "SLAVE MONITOR" if mariadb else "REPLICATION CLIENT"
        return [Problem(
            "SHOW SLAVE STATUS", f"denied to {account}", f"it to see that the standby replicates from {source.address}",
            f"GRANT {monitor} ON *.* TO {account}; or make sure yourself that the standby replicates from "
            f"{source.address}.", fatal=False,
        )]
    status = statuses[0] if statuses else None
    gtid = "MASTER_USE_GTID=slave_pos" if mariadb else "MASTER_AUTO_POSITION=1"
    fix = (f"on the standby, STOP SLAVE; CHANGE MASTER TO MASTER_HOST='{source.host}', MASTER_PORT={source.port}, "
           f"MASTER_USER='...', MASTER_PASSWORD='...', {gtid}; START SLAVE; or make a replica of the source the "
           "channel's standby ('gate channel set-standby').")
    if status is None:
        return [Problem("replication", "not set up (SHOW SLAVE STATUS is empty)",
                        f"the standby replicating from the source {source.address}", fix)]
    master = f"{status['Master_Host']}:{status['Master_Port']}"
    if not _same_server(status["Master_Host"], int(status["Master_Port"]), source):
        return [Problem("replication source", master, f"the channel's source {source.address}", fix)]
    io, sql = status["Slave_IO_Running"], status["Slave_SQL_Running"]
    if (io, sql) != ("Yes", "Yes"):
        return [Problem(
            f"replication from {master}", f"Slave_IO_Running {io}, Slave_SQL_Running {sql}", "both Yes",
            "START SLAVE; on the standby (Last_IO_Error and Last_SQL_Error of SHOW SLAVE STATUS say why they "
            "stopped). Until it replicates, a switch would miss the source's newest changes.", fatal=False,
        )]
    return []


def _upstream_problems(statuses: list[dict[str, Any]] | None, account: str, mariadb: bool) -> list[Problem]:
    """A source without log_slave_updates must not be a replica: what it replicates is not in its binlog (SHOW
    ALL SLAVES STATUS: ``statuses``, None when refused to gate's account)."""
    if statuses is None:
        if not mariadb:
            return []  # a statement this server does not know; it is refused as not MariaDB
        return [Problem(
            "SHOW SLAVE STATUS", f"denied to {account}", "it to see whether the source is itself a replica",
            f"GRANT SLAVE MONITOR ON *.* TO {account}; or make sure yourself that the source replicates from no "
            "server, or has log_slave_updates ON.", fatal=False,
        )]
    upstreams = [f"{status['Master_Host']}:{status['Master_Port']}" for status in statuses]
    if not upstreams:
        return []
    return [Problem(
        "log_slave_updates", f"OFF on a source that replicates from {', '.join(upstreams)}",
        "ON (without it, the changes it replicates are not in its binlog and would never reach gate)",
        "add 'log_slave_updates = ON' under [mysqld] in my.cnf and restart the server, or capture its "
        "upstream instead.",
    )]


def _same_server(host: str, port: int, server: ServerConfig) -> bool:
    """Whether host:port names ``server``: the same port, and the same host name or a shared address."""
    if port != server.port:
        return False
    if host.lower() == server.host.lower():
        return True

    def addresses(name: str) -> set[str]:
        try:
            return {str(info[4][0]) for info in socket.getaddrinfo(name, port, proto=socket.IPPROTO_TCP)}
        except OSError:
            return set()

    return bool(addresses(host) & addresses(server.host))


def _privilege_problems(granted: set[str], account: str, mariadb: bool) -> list[Problem]:
    if "ALL PRIVILEGES" in granted:
        return []
    monitor = "BINLOG MONITOR" if mariadb else "REPLICATION CLIENT"
    needed = {"REPLICATION SLAVE": {"REPLICATION SLAVE"}, monitor: {"BINLOG MONITOR", "REPLICATION CLIENT", "SUPER"},
              "SELECT": {"SELECT"}}
    missing = [privilege for privilege, any_of in needed.items() if not granted & any_of]
    if not missing:
        return []
    return [Problem(
        f"privileges of {account}", ", ".join(sorted(granted)) or "none on *.*",
        f"REPLICATION SLAVE, {monitor} and SELECT on *.*",
        f"GRANT {', '.join(missing)} ON *.* TO {account};",
    )]


def _server_id_problems(server_id: int, gate_id: int, replicas: list[tuple[int, str]] | None,
                        account: str) -> list[Problem]:
    fix = ("give gate a server_id that no server or replica of this replication topology uses "
           "(--server-id N when creating the channel or checking the source).")
    if server_id == gate_id:
        return [Problem("server_id", f"{server_id}, the same as gate's", "a server_id other than the server's own",
                        fix)]
    if replicas is None:
        return [Problem(
            "SHOW SLAVE HOSTS", f"denied to {account}", f"it to see that no connected replica uses server_id {gate_id}",
            f"GRANT REPLICATION MASTER ADMIN ON *.* TO {account}; or make sure yourself that no replica uses "
            f"server_id {gate_id}.", fatal=False,
        )]
    return [Problem("server_id", f"{gate_id}, already used by the replica at {address}",
                    "a server_id no connected replica uses", fix)
            for replica_id, address in replicas if replica_id == gate_id]
