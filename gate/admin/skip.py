"""``gate channel skip``: move a channel past exactly the transaction its last run refused.

A run that meets a transaction it cannot capture (a statement-format change, a partial row image, a table
map without column names: binlog_row_metadata below FULL) stops with the checkpoint at that transaction's
start and records it (:mod:`gate.capture.stopped`). Skipping checks that the named transaction is that one
and that the channel has not moved since, finds the transaction's end in the source's own decoding of its
binlog (SHOW BINLOG EVENTS from its start, in the next file when a rotation lies before it), and in one DC
transaction writes a SKIPPED row per captured table the refused event changed, moves the checkpoint and the
resume position past the transaction, removes what lies above the checkpoint and the stored changes of a
refused XA PREPARE, and records the skip for ``gate status``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import dropwhile
from typing import Any

import pymysql

from gate.capture import xa
from gate.capture.lag import BOOKKEEPING_EVENTS
from gate.capture.reader import gtid_position_after
from gate.capture.stopped import STOPPED_KEY, read_stop
from gate.common import dc
from gate.common.config import ServerConfig, check_identifier
from gate.common.dc import ResumeState, q
from gate.common.errors import ChannelBusy, SkipRefused
from gate.common.retry import refusals

SKIPPED_KEY = "skipped:"  # gate_meta names (then the id of its first SKIPPED row) of the transactions skipped
_EVENTS_PER_READ = 200  # SHOW BINLOG EVENTS rows read at a time while looking for a transaction's end
_ENDS_GROUP = ("COMMIT", "ROLLBACK")  # the Query events that end a BEGIN ... group (non-transactional tables)


@dataclass(frozen=True)
class Skipped:
    """A skipped transaction as ``gate status`` lists it: its name (GTID, else start FILE:POS), where it
    starts and ends in the source's binlog, the ids of its SKIPPED rows, the error that refused it, and
    when it was skipped (UTC)."""

    transaction: str
    start: str
    end: str
    ids: list[int]
    tables: list[str]
    error: str
    at: str

    def as_row(self) -> dict[str, Any]:
        return {"transaction": self.transaction, "start": self.start, "end": self.end, "ids": self.ids,
                "tables": self.tables, "error": self.error, "at": self.at}


def transaction_end(events: Iterable[Sequence[Any]], gtid: str | None) -> int | None:
    """The end position of the transaction whose first event opens ``events`` (SHOW BINLOG EVENTS rows:
    Log_name, Pos, Event_type, Server_id, End_log_pos, Info), None when they end before it does.

    With ``gtid`` the first event must be its Gtid event. A group opened by BEGIN (or XA START) ends at its
    Xid, XA PREPARE, COMMIT or ROLLBACK event; a group of one statement (DDL) at that statement."""
    events = iter(events)
    first = next(events, None)
    if first is None:
        return None
    kind, info = str(first[2]), str(first[5])
    if gtid is not None:
        words = info.split()
        if kind != "Gtid" or not words or words[-1] != gtid:
            raise SkipRefused(f"The source's binlog holds {kind} '{info}' where transaction {gtid} should start: "
                              "the channel's position and its binlog disagree. Check the source's binlog with "
                              "SHOW BINLOG EVENTS, then set the position by hand ('gate channel set-position').")
    grouped = kind != "Gtid" or info.upper().startswith(("BEGIN", "XA START"))
    for row in events:
        kind, info = str(row[2]), str(row[5]).strip().upper()
        if kind in ("Xid", "XA_prepare") or (kind.startswith("Query") and (not grouped or info in _ENDS_GROUP)):
            return int(row[4])
    return None


def _find_end(source: ServerConfig, log_file: str, log_pos: int, gtid: str | None) -> tuple[str, int]:
    """The binlog file and end position of the transaction at ``log_file``:``log_pos`` in the source's binlog
    (SHOW BINLOG EVENTS). A rotation's bookkeeping between that position and the transaction (the end of a
    binlog file, the start of the next) is stepped over: the reader's position moves only at a commit."""
    with refusals("source", source, f"SHOW BINLOG EVENTS IN '{log_file}' (the end of the transaction to skip)"), \
            dc.connect(source, "source") as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [str(row[0]) for row in cur.fetchall()]
        rows: list[Sequence[Any]] = []
        read = 0  # the events read from log_file:log_pos
        while True:
            cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT %s, %s", (log_file, log_pos, read, _EVENTS_PER_READ))
            batch = cur.fetchall()
            read += len(batch)
            rows += batch if rows else list(dropwhile(lambda row: str(row[2]) in BOOKKEEPING_EVENTS, batch))
            if not rows and len(batch) < _EVENTS_PER_READ and log_file in files[:-1]:
                log_file, log_pos, read = files[files.index(log_file) + 1], 4, 0  # the file ends before it
                continue
            end = transaction_end(rows, gtid)
            if end is not None:
                return log_file, end
            if len(batch) < _EVENTS_PER_READ:
                raise SkipRefused(
                    f"The source's binlog {log_file} holds no end of the transaction that starts at "
                    f"{rows[0][1] if rows else log_pos}; gate skips only a whole transaction. Check the binlog "
                    "with SHOW BINLOG EVENTS.")


def skip(dc_server: ServerConfig, name: str, transaction: str) -> Skipped:
    """Move channel ``name`` past ``transaction``, the one its last run stopped at (refused otherwise)."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        dc.schema_version(conn, name)
        holder = dc.take_lock(conn, name)  # held until the connection closes: no gate starts meanwhile
        if holder is not None:
            raise ChannelBusy(f"Channel '{name}' is running: a gate process holds its lock (DC connection {holder}). "
                              "A skip moves only a stopped channel; a gate that refuses a transaction stops by itself.")
        settings = dc.read_settings(conn, name)
        with conn.cursor() as cur:
            stop = read_stop(cur, name)
        refused = stop.transaction if stop is not None else None
        if stop is None or refused is None:
            what = f"with {stop.error}" if stop is not None else "without an error, or is running"
            raise SkipRefused(
                f"Channel '{name}' did not stop at a transaction it refused (its last run stopped {what}), so there "
                f"is nothing to skip: 'gate channel skip' moves past only the transaction that 'gate status {name}' "
                "names under stopped_by after gate refused it.")
        if refused["name"] != transaction:
            raise SkipRefused(
                f"Channel '{name}' stopped at transaction {refused['name']}, not {transaction}: gate skips only the "
                f"transaction it stopped at. Run 'gate channel skip {name} --transaction {refused['name']}' to "
                "skip that one.")
        state = dc.read_resume(conn, name)
        start = (refused["log_file"], refused["log_pos"])
        if (state.log_file, state.log_pos) != start or state.instance_name != settings.source.address:
            raise SkipRefused(
                f"Channel '{name}' no longer resumes at the start of transaction {transaction} "
                f"({start[0]}:{start[1]} on {settings.source.address}) but at {state.describe()} on "
                f"{state.instance_name}: its position was moved since gate stopped, so the skip is not made. Run "
                f"'gate run {name}': it stops again at any transaction it refuses.")
        if refused["log_file"] is None:
            raise SkipRefused(
                f"Channel '{name}' stopped at transaction {transaction} with a GTID position alone (set by 'gate "
                "channel set-position --gtid'), and a skip needs the binlog file position of its start. Run "
                f"'gate channel set-position {name} --file FILE --pos POS' with the position of its Gtid event "
                "(SHOW BINLOG EVENTS on the source), then 'gate run "
                f"{name}': it stops at the transaction again, and 'gate channel skip' can move past it then.")
        end = _find_end(settings.source, str(refused["log_file"]), int(refused["log_pos"]), refused["gtid"])
        return _write(conn, name, settings.source.address, state, refused, end)


def _write(conn: pymysql.Connection, name: str, instance: str, state: ResumeState, refused: dict[str, Any],
           end: tuple[str, int]) -> Skipped:
    """The SKIPPED rows, the checkpoint and resume position past the transaction (``end``: FILE, POS), the
    skip's record and the stop record's removal, in one DC transaction. Rows above the checkpoint (a run that
    ended without cleaning up) and the stored changes of a skipped XA PREPARE go in it too: its XA COMMIT then
    numbers nothing."""
    tables = [tuple(table) for table in refused["tables"]] or [("", "")]
    start = f"{refused['log_file']}:{refused['log_pos']}"
    to = f"{end[0]}:{end[1]}"
    payload = {"SKIPPED": {"transaction": refused["name"], "gtid": refused["gtid"], "from": start, "to": to,
                           "tables": [{"dbname": db, "tablename": table} for db, table in tables if table],
                           "error": refused["error"], "reason": refused["reason"]}}
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    tid = state.tid + 1
    ids = [state.id + n for n in range(1, len(tables) + 1)]
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(int(refused["timestamp"])))
    gtid_pos = gtid_position_after(state.gtid_pos, refused["gtid"]) if refused["gtid"] else state.gtid_pos
    moved = state.moved(id=ids[-1], tid=tid, log_file=end[0], log_pos=end[1], gtid_pos=gtid_pos,
                        event_time=int(refused["timestamp"]))
    skipped = Skipped(refused["name"], start, to, ids, [f"{db}.{table}" for db, table in tables if table],
                      refused["error"], time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()))
    conn.begin()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        dc.remove_above_checkpoint(cur, name, state.id)
        if refused.get("xid"):
            xa.forget(cur, name, [refused["xid"]])
        cur.executemany(f"INSERT INTO {q(name)}.transfer_data (id, tid, dbname, tablename, create_time, "
                        "instance_name, optype, data) VALUES (%s, %s, %s, %s, %s, %s, 'SKIPPED', %s)",
                        [(row_id, tid, db, table, created, instance, data) for row_id, (db, table) in zip(ids, tables)])
        dc.write_resume(cur, name, moved)
        cur.execute(f"INSERT INTO {q(name)}.gate_meta (name, value) VALUES (%s, %s)",
                    (f"{SKIPPED_KEY}{ids[0]}", json.dumps(skipped.as_row())))
        cur.execute(f"DELETE FROM {q(name)}.gate_meta WHERE name = %s", (STOPPED_KEY,))
    conn.commit()
    return skipped


def skipped_transactions(cur: pymysql.cursors.Cursor, channel: str) -> list[dict[str, Any]]:
    """Every transaction 'gate channel skip' moved the channel past, oldest first."""
    cur.execute(f"SELECT value FROM {q(channel)}.gate_meta WHERE LEFT(name, %s) = %s",
                (len(SKIPPED_KEY), SKIPPED_KEY))
    return sorted((json.loads(value) for (value,) in cur.fetchall()), key=lambda row: row["ids"][0])
