"""Snapshots of a channel's source tables, the operator's side: request, watch and cancel them.

A request is a row of the channel's ``gate_snapshot`` table in state ``requested``; ``gate run`` takes it
up (a running gate within a few seconds, else the next one when it starts), writes the table's current
rows as SNAPSHOTSTART, SNAPSHOT and SNAPSHOTEND rows, and moves the row to ``running``, then ``done`` or
``cancelled``, counting the rows at or below the checkpoint. A table with a request that is requested or
running is never requested a second time. A table 'gate run' could not snapshot (no key to page on, a
column rule on that key) is not requested: the others are, and the result names it with the fix; a
table without a key is requested when the request says how to read it (:class:`Ways`). Which
tables there are comes from the source's information_schema (base tables, no views), filtered by the
channel's allow and deny lists.
"""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import pymysql

import dc_schema
from gate.admin.catalog import Table, captured, check_pattern, snapshot_refusals, source_tables
from gate.common import dc
from gate.common.config import ServerConfig, check_identifier
from gate.common.dc import ChannelSettings, q
from gate.common.errors import InvalidValue

TABLE = "gate_snapshot"
ACTIVE = ("requested", "running")  # a table with a snapshot in one of these states gets no second request
LISTED = 20  # captured tables named in an error before "and N more"
_ER_NO_SUCH_TABLE = 1146


@dataclass(frozen=True)
class SnapshotRequest:
    """What a request did: the snapshots it inserted, those it found already pending, the tables it left out
    because 'gate run' could not snapshot them, and who takes the requests up."""

    channel: str
    reason: str
    requested: list[dict[str, Any]] = field(default_factory=list)  # id, table
    pending: list[dict[str, Any]] = field(default_factory=list)  # id, table, state: already requested or running
    running_gate: int | None = None  # DC connection of the gate running the channel, None if none runs it
    refused: list[dict[str, Any]] = field(default_factory=list)  # table, reason (with the fix): not requested

    def as_dict(self) -> dict[str, Any]:
        return {"channel": self.channel, "reason": self.reason, "requested": self.requested,
                "already_pending": self.pending, "not_requested": self.refused,
                "gate_running": self.running_gate is not None}


def ensure_table(cur: pymysql.cursors.Cursor, channel: str) -> None:
    """Channels created before snapshots lack the table: create it (as ``gate run`` does at start)."""
    cur.execute(f"USE {q(channel)}")
    cur.execute(dc_schema.table_ddl(TABLE))


def name_of(table: Table) -> str:
    return f"{table[0]}.{table[1]}"


def _matching(tables: Sequence[Table], patterns: Sequence[str]) -> tuple[list[Table], list[str]]:
    """The tables one of ``patterns`` matches (all without patterns), and the patterns that match none."""
    if not patterns:
        return list(tables), []
    by_pattern = {p: captured(tables, (p,), ()) for p in map(check_pattern, patterns)}
    chosen = {t for hits in by_pattern.values() for t in hits}
    return [t for t in tables if t in chosen], [p for p, hits in by_pattern.items() if not hits]


def _listing(tables: Sequence[Table]) -> str:
    names = [name_of(t) for t in tables[:LISTED]]
    more = f" and {len(tables) - LISTED} more" if len(tables) > LISTED else ""
    return ", ".join(names) + more


@dataclass(frozen=True)
class Ways:
    """How to read tables gate has no key to page on, as the user asked: ``whole`` (--whole-table
    patterns) in one read view, ``keys`` (--key DB.TABLE=COLS) paged on columns the user knows unique."""

    whole: tuple[str, ...] = ()
    keys: Mapping[str, list[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.whole or self.keys)

    def of(self, tables: Sequence[Table]) -> dict[Table, list[str]]:
        """The key each of ``tables`` a way names is to be paged on ([]: read it whole); a way that names
        none of them, or a table named by two ways, is refused."""
        chosen, unmatched = _matching(tables, self.whole) if self.whole else ([], [])
        ways: dict[Table, list[str]] = {t: [] for t in chosen}
        by_name = {name_of(t): t for t in tables}
        for name, key in self.keys.items():
            if name not in by_name:
                unmatched.append(name)
            elif by_name[name] in ways:
                raise InvalidValue(f"{name} is given both --whole-table and --key: choose one way to read it.")
            else:
                ways[by_name[name]] = key
        if unmatched:
            raise InvalidValue(
                f"{', '.join(repr(p) for p in unmatched)} (--whole-table or --key) names no table whose snapshot "
                f"is being requested ({_listing(tables) or 'none'}). Nothing was changed; correct the name.")
        return ways


NO_WAYS = Ways()


def request(dc_server: ServerConfig, channel: str, patterns: Sequence[str] = (), ways: Ways = NO_WAYS) -> SnapshotRequest:
    """Request a snapshot of every table the channel captures on its source, or of those ``patterns`` match
    and ``ways`` name (each read as its way says).

    A pattern matching no captured table is refused, naming it and the captured tables; so is a channel
    that captures no table. Nothing is written then.
    """
    check_identifier(channel, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, channel)
        tables = captured(source_tables(settings.source), settings.allow, settings.deny)
        chosen, unmatched = _matching(tables, patterns)
        if unmatched:
            have = f"{len(tables)} tables: {_listing(tables)}" if tables else "no table now"
            raise InvalidValue(
                f"No table that channel '{channel}' captures matches {', '.join(repr(p) for p in unmatched)}: it "
                f"captures {have} on its source {settings.source.address}. Nothing was requested; correct the "
                f"pattern, or widen the channel's filter first with 'gate channel filter {channel} --allow ...'.")
        if not tables:
            raise InvalidValue(
                f"Channel '{channel}' captures no table on its source {settings.source.address} (allow "
                f"{list(settings.allow) or 'everything'}, deny {list(settings.deny)}), so there is nothing to "
                "snapshot; nothing was requested. Create the tables first, or widen the filter with "
                f"'gate channel filter {channel} --allow ...'.")
        read = ways.of(tables)
        if ways and not patterns:  # the ways name the tables
            chosen = [t for t in tables if t in read]
        else:
            chosen = [t for t in tables if t in chosen or t in read]
        readable, refused = split_unreadable(settings, chosen, read)
        return _insert(conn, channel, readable, "gate snapshot", refused, read)


def newly_captured(tables: Iterable[Table], before: ChannelSettings, after: ChannelSettings) -> list[Table]:
    """Of ``tables``, those the lists of ``after`` capture and those of ``before`` did not."""
    tables = list(tables)
    old = set(captured(tables, before.allow, before.deny))
    return [t for t in captured(tables, after.allow, after.deny) if t not in old]


def split_unreadable(settings: ChannelSettings, tables: Sequence[Table],
                     ways: Mapping[Table, list[str]]) -> tuple[list[Table], list[dict[str, Any]]]:
    """``tables`` 'gate run' can snapshot (as ``ways`` says for those it names), and those it would refuse
    (from the source's catalog and the channel's column rules), each with why and the fix, as
    :attr:`SnapshotRequest.refused` lists them."""
    refusals = snapshot_refusals(settings.source, settings.name, tables, settings.columns, ways,
                                 settings.defaults.snapshot_whole_table_rows)
    reasons: dict[Table, list[str]] = {}
    for table, reason in refusals:
        reasons.setdefault(table, []).append(reason)
    refused = [{"table": name_of(t), "reason": "; ".join(why)} for t, why in reasons.items()]
    return [t for t in tables if t not in reasons], refused


def _insert(conn: pymysql.Connection, channel: str, tables: Sequence[Table], reason: str,
            refused: list[dict[str, Any]], ways: Mapping[Table, list[str]]) -> SnapshotRequest:
    """One request per table, in one DC transaction; tables with a requested or running snapshot are reported."""
    result = SnapshotRequest(channel, reason, running_gate=dc.lock_holder(conn, channel), refused=refused)
    with conn.cursor() as cur:
        ensure_table(cur, channel)
        conn.begin()
        try:
            add_requests(cur, result, tables, ways)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    return result


def add_requests(cur: pymysql.cursors.Cursor, result: SnapshotRequest, tables: Sequence[Table],
                 ways: Mapping[Table, list[str]]) -> None:
    """Insert a request per table into the channel's table, with the key ``ways`` gives it ([]: read it
    whole; else none: 'gate run' chooses), noting in ``result`` what was requested and what was already
    pending; the caller owns the transaction."""
    snapshots = f"{q(result.channel)}.{TABLE}"
    cur.execute(f"SELECT id, dbname, tablename, state FROM {snapshots} WHERE state IN %s ORDER BY id FOR UPDATE",
                (ACTIVE,))
    pending = {(db, table): (id_, state) for id_, db, table, state in cur.fetchall()}
    for table in tables:
        if table in pending:
            id_, state = pending[table]
            result.pending.append({"id": id_, "table": name_of(table), "state": state})
            continue
        way = ways.get(table)
        cur.execute(f"INSERT INTO {snapshots} (dbname, tablename, reason, snap_key) VALUES (%s, %s, %s, %s)",
                    (*table, result.reason, None if way is None else json.dumps(way)))
        made: dict[str, Any] = {"id": cur.lastrowid, "table": name_of(table)}
        if way is not None:
            made.update({"key": way} if way else {"whole_table": True})
        result.requested.append(made)


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did: requests ended before they started, and running snapshots asked to end."""

    channel: str
    cancelled: list[dict[str, Any]] = field(default_factory=list)  # id, table: were requested, now cancelled
    asked: list[dict[str, Any]] = field(default_factory=list)  # id, table: running, now cancel = 1
    running_gate: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"channel": self.channel, "cancelled": self.cancelled, "asked_to_cancel": self.asked,
                "gate_running": self.running_gate is not None}


def cancel(dc_server: ServerConfig, channel: str, patterns: Sequence[str] = ()) -> Cancelled:
    """Cancel the channel's requested snapshots (they end at once) and ask ``gate run`` to end its running
    ones (it writes SNAPSHOTEND with state cancelled); only those of tables ``patterns`` match, if given."""
    check_identifier(channel, "Channel name")
    checked = [check_pattern(p) for p in patterns]
    with dc.connect(dc_server, "DC") as conn, conn.cursor() as cur:
        dc.schema_version(conn, channel)
        result = Cancelled(channel, running_gate=dc.lock_holder(conn, channel))
        ensure_table(cur, channel)
        conn.begin()
        try:
            cur.execute(f"SELECT id, dbname, tablename, state FROM {TABLE} WHERE state IN %s ORDER BY id FOR UPDATE",
                        (ACTIVE,))
            rows = [(id_, (db, table), state) for id_, db, table, state in cur.fetchall()]
            hit = set(_matching([table for _, table, _ in rows], checked)[0])
            ids = {state: [id_ for id_, table, s in rows if s == state and table in hit] for state in ACTIVE}
            if ids["requested"]:
                cur.execute(f"UPDATE {TABLE} SET state = 'cancelled', finished_at = NOW(3), message = 'cancelled "
                            "before it started' WHERE state = 'requested' AND id IN %s", (ids["requested"],))
            if ids["running"]:
                cur.execute(f"UPDATE {TABLE} SET cancel = 1 WHERE state = 'running' AND id IN %s", (ids["running"],))
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    for id_, table, state in rows:
        if table in hit:
            (result.cancelled if state == "requested" else result.asked).append({"id": id_, "table": name_of(table)})
    return result


# --- progress ------------------------------------------------------------------------------------

_COLUMNS = ("id, dbname, tablename, reason, state, cancel, requested_at, started_at, finished_at, rows_done, "
            "chunks_done, rows_estimate, message")


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    (id_, db, table, reason, state, cancel_, requested_at, started_at, finished_at, rows_done, chunks_done,
     rows_estimate, message) = values

    def utc(at: Any) -> str | None:
        return None if at is None else at.isoformat(sep=" ", timespec="milliseconds")

    return {"id": id_, "table": f"{db}.{table}", "state": state, "cancel_asked": bool(cancel_), "reason": reason,
            "rows_done": rows_done, "rows_estimate": rows_estimate, "chunks_done": chunks_done,
            "requested_at": utc(requested_at), "started_at": utc(started_at), "finished_at": utc(finished_at),
            "message": message}


def read_snapshots(cur: pymysql.cursors.Cursor, channel: str, active_only: bool = False,
                   patterns: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The latest snapshot of each table (or only the requested and running ones) of the tables
    ``patterns`` match (all without), by table; times in UTC. A channel created before snapshots (no
    table yet) has none."""
    where = "WHERE s.state IN %s" if active_only else (
        f"WHERE s.id = (SELECT MAX(l.id) FROM {q(channel)}.{TABLE} l "
        "WHERE l.dbname = s.dbname AND l.tablename = s.tablename)")
    columns = ", ".join(f"s.{c.strip()}" for c in _COLUMNS.split(","))
    cur.execute("SET time_zone = '+00:00'")
    try:
        cur.execute(f"SELECT {columns} FROM {q(channel)}.{TABLE} s {where} ORDER BY s.dbname, s.tablename, s.id",
                    (ACTIVE,) if active_only else ())
    except pymysql.err.ProgrammingError as exc:
        if exc.args[0] == _ER_NO_SUCH_TABLE:
            return []
        raise
    rows = cur.fetchall()
    wanted = set(_matching([(r[1], r[2]) for r in rows], patterns)[0])
    return [_row(values) for values in rows if (values[1], values[2]) in wanted]


def progress(dc_server: ServerConfig, channel: str, patterns: Sequence[str] = ()) -> dict[str, Any]:
    """The channel's snapshots as ``gate snapshot --status`` shows them, and whether a gate runs the channel."""
    with closing(watch(dc_server, channel, patterns)) as readings:
        return next(readings)


def watch(dc_server: ServerConfig, channel: str, patterns: Sequence[str] = (),
          interval: float = 0.5) -> Generator[dict[str, Any], None, None]:
    """:func:`progress` again every ``interval`` seconds, on one DC connection, up to the first reading in which
    no snapshot is requested or running."""
    check_identifier(channel, "Channel name")
    checked = [check_pattern(p) for p in patterns]
    with dc.connect(dc_server, "DC") as conn, conn.cursor() as cur:
        dc.schema_version(conn, channel)
        while True:
            rows = read_snapshots(cur, channel, patterns=checked)
            yield {"channel": channel, "gate_running": dc.lock_holder(conn, channel) is not None, "snapshots": rows}
            if not any(row["state"] in ACTIVE for row in rows):
                return
            time.sleep(interval)
