"""How far a channel is behind its source, in seconds, truthful while the source is idle: one definition
(:func:`lag_seconds`) for ``gate status``, ``gate channel list`` and the running gate's
``gate_replication_lag_seconds``. They differ only in how they know that gate stands at the source's end:
status and list compare the resume position with the source's binlog end, a running gate has the source's
heartbeats."""

from __future__ import annotations

import time

import pymysql

from gate.common.config import ServerConfig
from gate.common.dc import ResumeState, connect, one_row
from gate.common.errors import GateError

# What a binlog holds around a rotation (FLUSH BINARY LOGS, a restart, max_binlog_size): no transaction.
BOOKKEEPING_EVENTS = {"Rotate", "Stop", "Format_desc", "Gtid_list", "Binlog_checkpoint", "Start_encryption"}
BOOKKEEPING_MAX = 8  # more events than that after a position are not a rotation's alone


def lag_seconds(at_end: bool, now: float, event_time: float | None, reached_end_at: float = 0.0) -> float | None:
    """0 when everything the source has binlogged is read and checkpointed (``at_end``); else ``now`` (the
    source's clock, or this host's) minus the later of the source time of the last checkpointed transaction
    and the time gate last stood at the source's end (``reached_end_at``, known to a running gate only), in
    milliseconds' precision; None when neither is known."""
    if at_end:
        return 0.0
    since = max(float(event_time or 0), reached_end_at)
    return round(max(0.0, now - since), 3) if since else None


def only_bookkeeping_after(cur: pymysql.cursors.Cursor, log_file: str, log_pos: int) -> bool:
    """Whether the source's binlog holds nothing but rotation bookkeeping from ``log_file:log_pos`` to its
    end: then a reader at that position has read every transaction, though SHOW MASTER STATUS is elsewhere.
    False also when the binlog cannot be read (SHOW BINLOG EVENTS needs BINLOG MONITOR): lag is then the
    time since the last checkpointed transaction."""
    try:
        cur.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cur.fetchall()]
        if log_file not in files:
            return False
        for name in files[files.index(log_file):]:
            cur.execute(f"SHOW BINLOG EVENTS IN %s FROM %s LIMIT {BOOKKEEPING_MAX}",
                        (name, log_pos if name == log_file else 4))
            events = cur.fetchall()
            if len(events) == BOOKKEEPING_MAX or any(event[2] not in BOOKKEEPING_EVENTS for event in events):
                return False
    except pymysql.err.Error:
        return False
    return True


def source_lag(source: ServerConfig, state: ResumeState) -> tuple[str | None, float | None]:
    """The source's binlog end (``FILE:POS``, None when unreachable) and how far ``state`` is behind it, in
    seconds: 0 when the resume position is that end or only a binlog rotation follows it, else the source's
    clock (this host's when unreachable) minus the source time of the last checkpointed transaction; None
    when the channel has checkpointed no transaction yet and is not at the end."""
    resume_pos = f"{state.log_file}:{state.log_pos}" if state.log_file else None
    at_end = False
    try:
        with connect(source, "source", connect_timeout=3) as sconn, sconn.cursor() as scur:
            scur.execute("SHOW MASTER STATUS")
            row = scur.fetchone()
            source_pos = f"{row[0]}:{row[1]}" if row else None
            scur.execute("SELECT UNIX_TIMESTAMP()")
            source_now = float(one_row(scur)[0])
            at_end = resume_pos is not None and resume_pos == source_pos or (
                state.log_file is not None and state.log_pos is not None
                and only_bookkeeping_after(scur, state.log_file, state.log_pos))
    except GateError:
        source_pos, source_now = None, time.time()
    return source_pos, lag_seconds(at_end, source_now, state.event_time)
