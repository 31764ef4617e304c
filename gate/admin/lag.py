"""How far a channel is behind its source, in seconds, truthful while the source is idle."""

from __future__ import annotations

import time

import pymysql

from gate.common.config import ServerConfig
from gate.common.dc import ResumeState, connect, one_row
from gate.common.errors import GateError

# What a binlog holds around a rotation (FLUSH BINARY LOGS, a restart, max_binlog_size): no transaction.
BOOKKEEPING_EVENTS = {"Rotate", "Stop", "Format_desc", "Gtid_list", "Binlog_checkpoint", "Start_encryption"}
BOOKKEEPING_MAX = 8  # more events than that after a position are not a rotation's alone


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
    if at_end:
        return source_pos, 0.0
    if state.event_time:
        return source_pos, round(max(0.0, source_now - state.event_time), 3)
    return source_pos, None
