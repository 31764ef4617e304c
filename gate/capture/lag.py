"""How far a channel is behind its source, in seconds: one definition (:func:`lag_seconds`) for ``gate
status``, ``gate channel list`` and the running gate's ``gate_replication_lag_seconds``.

The lag is the age of the oldest source transaction not yet at or below the checkpoint: the source's
clock now minus the time of its first event (its GTID event, or BEGIN). 0 when gate has read and
checkpointed everything the source has binlogged, however long the source has been idle. A restarted
channel, or a stopped one, has its real delay: the transaction right after its resume position is the
oldest it lacks, whatever happened before. Status and list read that transaction's time from the source's
binlog; a running gate knows the transactions it has read and not checkpointed yet, and the source's
heartbeats tell it when it stands at the source's end.
"""

from __future__ import annotations

import pymysql
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent

from gate.capture.libshim import OwnedStream
from gate.common.config import ServerConfig
from gate.common.connection import stream_connector
from gate.common.dc import ResumeState, connect, one_row
from gate.common.errors import GateError

# What a binlog holds around a rotation (FLUSH BINARY LOGS, a restart, max_binlog_size): no transaction.
BOOKKEEPING_EVENTS = {"Rotate", "Stop", "Format_desc", "Gtid_list", "Binlog_checkpoint", "Start_encryption"}
BOOKKEEPING_MAX = 8  # more events than that after a position are not a rotation's alone


def lag_seconds(at_end: bool, now: float, oldest: float | None) -> float | None:
    """0 when everything the source has binlogged is read and checkpointed (``at_end``); else ``now`` (the
    source's clock, or this host's) minus ``oldest``, the source time of the oldest transaction not yet at
    or below the checkpoint, in milliseconds' precision; None when that time is not known."""
    if at_end:
        return 0.0
    return round(max(0.0, now - oldest), 3) if oldest else None


def first_transaction_time(source: ServerConfig, log_file: str, log_pos: int) -> float | None:
    """The source time of the first transaction in the source's binlog after ``log_file:log_pos`` (a
    transaction boundary), read by a dump that ends at the binlog's end (server_id 0: it displaces no
    replica); None when none follows or the binlog cannot be read."""
    stream = OwnedStream(connection_settings={**source.connect_args(), "read_timeout": 10},
                         pymysql_wrapper=stream_connector(source, "source"), server_id=0, blocking=False,
                         resume_stream=True, log_file=log_file, log_pos=log_pos,
                         only_events=[MariadbGtidEvent, GtidEvent, QueryEvent], enable_logging=False,
                         admit=lambda header: None)  # only the first transaction's time is read
    try:
        for event in stream:
            return float(event.timestamp)
    except (GateError, pymysql.err.MySQLError, OSError):
        return None
    finally:
        stream.close()
    return None


def only_bookkeeping_after(cur: pymysql.cursors.Cursor, log_file: str, log_pos: int) -> bool:
    """Whether the source's binlog holds nothing but rotation bookkeeping from ``log_file:log_pos`` to its
    end: then a reader at that position has read every transaction, though SHOW MASTER STATUS is elsewhere.
    False also when the binlog cannot be read (SHOW BINLOG EVENTS needs BINLOG MONITOR)."""
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
    seconds (:func:`lag_seconds`): 0 when the resume position is that end or only a binlog rotation follows
    it, else the source's clock minus the time of the first transaction after the resume position; None
    when the source is unreachable or its binlog unreadable."""
    resume_pos = f"{state.log_file}:{state.log_pos}" if state.log_file else None
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
        return None, None
    oldest = None
    if not at_end and state.log_file is not None and state.log_pos is not None:
        oldest = first_transaction_time(source, state.log_file, state.log_pos)
    return source_pos, lag_seconds(at_end, source_now, oldest)
