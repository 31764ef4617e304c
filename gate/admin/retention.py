"""What ``gate channel purge`` and ``gate consumer list|drop`` do on the DC server (the rules are in
gate.capture.retention, which a running gate applies in the background)."""

from __future__ import annotations

import math
from typing import Any

import pymysql

from gate.capture.retention import Plan, plan, purge, read_consumers
from gate.common import dc
from gate.common.config import ServerConfig, check_identifier
from gate.common.errors import UnknownConsumer

_ER_NO_SUCH_TABLE = 1146


def describe(found: Plan) -> dict[str, Any]:
    """A plan as the commands and ``gate status`` print it."""
    return {"retain_days": found.retain_days, "purged_through": found.purged_through,
            "oldest_kept_id": found.oldest_kept_id, "checkpoint_id": found.checkpoint, "bound": found.bound,
            "pinned_by": found.pinned_by, "removable_rows": found.removable}


def purge_channel(dc_server: ServerConfig, name: str, dry_run: bool = False) -> dict[str, Any]:
    """Apply the channel's retention now; with ``dry_run`` only say what it would remove."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        defaults = dc.read_settings(conn, name).defaults
        found = plan(conn, name, defaults)
        removed = 0 if dry_run or found.removable <= 0 else purge(conn, name, found.bound)
        after = dc.purged_through(conn, name)
    return {"channel": name, **describe(found), "dry_run": dry_run, "removed_rows": removed,
            "purged_through_now": after}


def consumers(dc_server: ServerConfig, name: str) -> list[dict[str, Any]]:
    """Every registered consumer of the channel, by name."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        dc.migrate(conn, name)  # names are exact from schema version 2 on
        defaults = dc.read_settings(conn, name).defaults
        return [c.as_row() for c in plan(conn, name, defaults).consumers]


def drop_consumer(dc_server: ServerConfig, name: str, consumer: str) -> dict[str, Any]:
    """Forget a consumer: retention no longer waits for it; a reader of that name starts over (and gets
    CursorExpiredError if rows it needs are gone)."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn, conn.cursor() as cur:
        dc.migrate(conn, name)  # names are exact from schema version 2 on: never another name's row
        cur.execute(f"SELECT id, tid FROM {dc.q(name)}.gate_consumer WHERE name = %s", (consumer,))
        row = cur.fetchone()
        if row is None:
            cur.execute(f"SELECT name FROM {dc.q(name)}.gate_consumer ORDER BY name")
            known = ", ".join(f"'{n}'" for (n,) in cur.fetchall()) or "none"
            raise UnknownConsumer(f"Channel '{name}' has no consumer named '{consumer}' (registered: {known}). "
                                  f"'gate consumer list {name}' shows them.")
        cur.execute(f"DELETE FROM {dc.q(name)}.gate_consumer WHERE name = %s", (consumer,))
    return {"channel": name, "dropped": consumer, "cursor_id": int(row[0]), "cursor_tid": int(row[1])}


def registered(conn: pymysql.Connection, name: str) -> list[dict[str, Any]]:
    """The cursors dropping the channel discards: each registered consumer's name, cursor_id, cursor_tid and
    rows_behind the checkpoint, by name (none when a table they are read from was dropped by hand, so
    that such a channel can still be dropped)."""
    with conn.cursor() as cur:
        try:
            cur.execute(f"SELECT id FROM {dc.q(name)}.transfer_checkpoint")
            found = read_consumers(cur, name, int(dc.one_row(cur)[0]), math.inf)
        except pymysql.err.ProgrammingError as exc:
            if not exc.args or exc.args[0] != _ER_NO_SUCH_TABLE:
                raise
            return []
    return [{"name": c.name, "cursor_id": c.cursor_id, "cursor_tid": c.cursor_tid, "rows_behind": c.behind}
            for c in found]


def positions(consumers: list[dict[str, Any]]) -> str:
    """``'billing' at row 4 (2 rows behind the checkpoint), 'audit' at row 6 (at the checkpoint)``."""
    return ", ".join(f"'{c['name']}' at row {c['cursor_id']} (" + (
        f"{c['rows_behind']} rows behind the checkpoint)" if c["rows_behind"] else "at the checkpoint)")
        for c in consumers)
