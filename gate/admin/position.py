"""Start positions checked against the source before ``gate channel set-position`` stores them.

A file position must name a binlog the source has, lie within it (a 32-bit offset, at most the file's
size) and be the start of an event outside a transaction (SHOW BINLOG EVENTS ... FROM pos LIMIT 1). A
MariaDB GTID position must name, per replication domain, a transaction the source's binlog holds
(@@gtid_binlog_state) and has not purged (the GTID position at the start of its oldest binlog).
"""

from __future__ import annotations

import re

import pymysql

from gate.common.config import ServerConfig
from gate.common.dc import connect, one_row
from gate.common.errors import InvalidValue

MAX_POS = 2**32 - 1  # binlog positions are 32-bit offsets
_MARIADB_GTID = re.compile(r"[0-9]+-[0-9]+-[0-9]+(,[0-9]+-[0-9]+-[0-9]+)*")
_ER_NO_BINARY_LOGGING = 1381
_ER_BINLOG_EVENTS = 1220  # SHOW BINLOG EVENTS from a position that is no event's start
# events inside a transaction: reading from one would start half-way through it
_INSIDE = re.compile(r"Annotate_rows|Table_map|(Write|Update|Delete)_rows.*|Xid|Intvar|User_var|Rand|XA_prepare"
                     r"|Begin_load_query|Execute_load_query|Append_block")
_FIX = "SHOW BINLOG EVENTS IN '{file}' lists its events: give the Pos of a Gtid event (a transaction's start)"


def _binlogs(cur: pymysql.cursors.Cursor) -> list[tuple[str, int]]:
    """SHOW BINARY LOGS as (file, size), oldest first; none when binary logging is off."""
    try:
        cur.execute("SHOW BINARY LOGS")
    except pymysql.err.OperationalError as exc:
        if exc.args[0] != _ER_NO_BINARY_LOGGING:
            raise
        return []
    return [(row[0], int(row[1])) for row in cur.fetchall()]


def check_file_position(source: ServerConfig, log_file: str | None, log_pos: int | None) -> None:
    """Refuse a file position the source cannot start a replica at, naming the fix."""
    if log_file is None or log_pos is None:
        raise InvalidValue("Give --file and --pos together.")
    if log_pos < 4:
        raise InvalidValue(f"--pos {log_pos} is before the first event of a binlog file; positions start at 4.")
    if log_pos > MAX_POS:
        raise InvalidValue(f"--pos {log_pos} is beyond any binlog file: positions are at most {MAX_POS}. Give the "
                           f"Pos of an event ({_FIX.format(file=log_file)}), or use --now.")
    with connect(source, "source") as conn, conn.cursor() as cur:
        files = _binlogs(cur)
        sizes = dict(files)
        if log_file not in sizes:
            have = (" to ".join(dict.fromkeys((files[0][0], files[-1][0]))) if files
                    else "none (binary logging is off)")
            raise InvalidValue(
                f"The source {source.address} has no binary log {log_file!r}; its binary logs are {have} "
                "(SHOW BINARY LOGS). Give one of those, or use --now to start at the current end."
            )
        if log_pos > sizes[log_file]:
            raise InvalidValue(
                f"--pos {log_pos} is beyond the end of {log_file} on the source {source.address}, which is "
                f"{sizes[log_file]} bytes long. Give the Pos of an event ({_FIX.format(file=log_file)}), or use --now.")
        try:
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM {int(log_pos)} LIMIT 1", (log_file,))
        except pymysql.err.MySQLError as exc:
            if exc.args[0] != _ER_BINLOG_EVENTS:
                raise
            raise InvalidValue(
                f"--pos {log_pos} is not the start of an event in {log_file} on the source {source.address}. "
                f"{_FIX.format(file=log_file)}, or use --gtid or --now.") from None
        event = cur.fetchone()
    if event is not None and _INSIDE.fullmatch(event[2]):
        raise InvalidValue(
            f"--pos {log_pos} is a {event[2]} event in {log_file} on the source {source.address}, inside a "
            f"transaction: reading from there would start half-way through it. {_FIX.format(file=log_file)}, "
            "or use --gtid or --now.")


def _gtids(text: str) -> dict[tuple[int, int], int]:
    """A GTID list as (domain, server) -> sequence."""
    return {(int(d), int(s)): int(n) for d, s, n in (gtid.split("-") for gtid in text.split(",") if gtid)}


def check_gtid(source: ServerConfig, gtid: str) -> None:
    """Refuse a MariaDB GTID position whose transactions the source's binlog does not hold, naming the fix."""
    if not _MARIADB_GTID.fullmatch(gtid):
        raise InvalidValue(
            f"GTID position {gtid!r} is not valid. Give a MariaDB GTID list such as 0-1-42 or "
            "0-1-42,1-2-7 (domain-server-sequence, one per replication domain)."
        )
    wanted = _gtids(gtid)
    if len({domain for domain, _ in wanted}) < gtid.count(",") + 1:
        raise InvalidValue(f"GTID position {gtid!r} names a replication domain twice; give one GTID per domain.")
    with connect(source, "source") as conn, conn.cursor() as cur:
        files = _binlogs(cur)
        cur.execute("SELECT @@gtid_binlog_state, BINLOG_GTID_POS(%s, 4)", (files[0][0] if files else "",))
        state, oldest = one_row(cur)
    held, purged = _gtids(state or ""), _gtids(oldest or "")
    fix = ("Give a GTID the source has binlogged (SELECT @@gtid_binlog_state on it shows the newest of each domain "
           "and server), or use --file and --pos, or --now.")
    for (domain, server), seq in wanted.items():
        last = held.get((domain, server))
        name = f"{domain}-{server}-{seq}"
        if last is None or seq > last:
            newest = f"its newest from server {server} in domain {domain} is {domain}-{server}-{last}" if last else (
                f"it holds no transaction of server {server} in domain {domain}")
            raise InvalidValue(f"GTID {name} is not in the binlog of the source {source.address}: {newest}. {fix}")
        start = [(s, n) for (d, s), n in purged.items() if d == domain and n > seq]
        if start:
            raise InvalidValue(
                f"GTID {name} is purged from the binlog of the source {source.address}: its oldest binary log "
                f"{files[0][0]} starts after {domain}-{start[0][0]}-{start[0][1]}. {fix}")
