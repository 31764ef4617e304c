"""The error that stopped a channel's last ``gate run``, kept in its gate_meta for ``gate status``.

The run that stops on an error writes it while it still holds the channel's lock; the next run removes
it when it starts. A DC that refuses the write leaves the error in gate's log alone.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

import pymysql

from gate.common.dc import q

STOPPED_KEY = "stopped_by"  # gate_meta: the error that stopped the last run


@dataclass(frozen=True)
class StopRecord:
    """What stopped the run: the error's name, its message, the exit status gate ended with and when (UTC);
    ``transaction`` when it was a refused transaction (see :func:`refused_transaction`) at whose start the
    checkpoint stands, the one ``gate channel skip`` may move past."""

    error: str
    message: str
    exit_status: int
    at: str = ""
    transaction: dict[str, Any] | None = None

    def as_row(self) -> dict[str, object]:
        return asdict(self)


def record_stop(conn: pymysql.Connection, channel: str, stop: StopRecord) -> None:
    """Store ``stop`` (stamped now, in UTC) on ``conn``, the run's control connection."""
    at = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    conn.rollback()  # what the failed statement's transaction left goes
    with conn.cursor() as cur:
        cur.execute(f"REPLACE INTO {q(channel)}.gate_meta (name, value) VALUES (%s, %s)",
                    (STOPPED_KEY, json.dumps(replace(stop, at=at).as_row())))


def clear_stop(cur: pymysql.cursors.Cursor, channel: str) -> None:
    """A run starts: the last one's error is history."""
    cur.execute(f"DELETE FROM {q(channel)}.gate_meta WHERE name = %s", (STOPPED_KEY,))


def read_stop(cur: pymysql.cursors.Cursor, channel: str) -> StopRecord | None:
    """The error that stopped the last run, None when it stopped cleanly or is running."""
    cur.execute(f"SELECT value FROM {q(channel)}.gate_meta WHERE name = %s", (STOPPED_KEY,))
    row = cur.fetchone()
    return StopRecord(**json.loads(row[0])) if row else None


def refused_transaction(gtid: str | None, log_file: str | None, log_pos: int | None, gtid_pos: str | None,
                        timestamp: int, tables: list[tuple[str, str]], error: str, reason: str,
                        xid: str | None = None) -> dict[str, Any]:
    """A refused transaction as the stop record keeps it: ``name`` (its GTID, else its start ``FILE:POS``,
    what ``gate channel skip --transaction`` takes), its start position (the checkpoint's), its source time,
    the captured tables the refused event changes, the error and its reason, and ``xid`` when it is the
    first phase of an XA transaction (ended by XA PREPARE: a skip forgets its stored changes)."""
    return {"name": gtid or f"{log_file}:{log_pos}", "gtid": gtid, "log_file": log_file, "log_pos": log_pos,
            "gtid_pos": gtid_pos, "timestamp": timestamp, "tables": [list(table) for table in tables],
            "error": error, "reason": reason, "xid": xid}
