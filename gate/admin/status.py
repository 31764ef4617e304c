"""A channel's live status, computed from positions, timestamps, standby samples, the switch history and
the channel lock; never a stored flag."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import pymysql

from gate.admin.snapshot import read_snapshots
from gate.capture.writer import STUCK_KEY
from gate.common.config import ServerConfig
from gate.common.dc import ResumeState, connect, lock_holder, one_row, q, read_resume, read_settings
from gate.common.errors import GateError

# What a binlog holds around a rotation (FLUSH BINARY LOGS, a restart, max_binlog_size): no transaction.
BOOKKEEPING_EVENTS = {"Rotate", "Stop", "Format_desc", "Gtid_list", "Binlog_checkpoint", "Start_encryption"}
BOOKKEEPING_MAX = 8  # more events than that after a position are not a rotation's alone


@dataclass(frozen=True)
class ChannelStatus:
    channel: str
    state: str  # running | stopped
    source: str
    source_position: str | None
    resume_position: str | None
    checkpoint_id: int
    checkpoint_tid: int
    last_create_time: str | None
    lag_seconds: float | None
    rows_per_second: float | None
    standby: str | None
    standby_sample_age_seconds: float | None  # DC clock now minus the newest sample's standby clock
    failover_mode: str
    on_divergence: str
    stuck_rows: list[dict[str, Any]]  # above the checkpoint, by id: id, bytes, max_allowed_packet, since, message
    snapshots: list[dict[str, Any]]  # requested and running snapshots by table, as gate snapshot --status has them
    switches: list[dict[str, Any]]  # oldest first: switched_at (UTC), from_instance, to_instance, reason, at_id

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def channel_status(dc: ServerConfig, channel: str, sample_seconds: float = 1.0) -> ChannelStatus:
    """Read the channel twice, ``sample_seconds`` apart, to measure rows/s at the checkpoint."""
    with connect(dc, "DC", channel) as conn, conn.cursor() as cur:
        settings = read_settings(conn, channel)
        first = read_resume(conn, channel)
        started = time.monotonic()
        running = lock_holder(conn, channel) is not None
        if sample_seconds > 0 and running:
            time.sleep(sample_seconds)
        state = read_resume(conn, channel)
        elapsed = time.monotonic() - started
        cur.execute("SET time_zone = '+00:00'")  # create_time is shown in UTC
        cur.execute(f"SELECT MAX(create_time) FROM {q(channel)}.transfer_data WHERE id = %s", (state.id,))
        last = one_row(cur)[0]
        cur.execute(f"SELECT UNIX_TIMESTAMP(NOW(3)) - MAX(sampled_at) FROM {q(channel)}.gate_standby_sample")
        sample_age = one_row(cur)[0]
        cur.execute(f"SELECT switched_at, from_instance, to_instance, reason, at_id FROM {q(channel)}.gate_switch "
                    "ORDER BY switched_at")
        switches = [{"switched_at": at.isoformat(sep=" ", timespec="milliseconds"), "from_instance": source,
                     "to_instance": target, "reason": reason, "at_id": at_id}
                    for at, source, target, reason, at_id in cur.fetchall()]
        stuck = stuck_rows(cur, channel, state.id)
        pending = read_snapshots(cur, channel, active_only=True)
    resume_pos = f"{state.log_file}:{state.log_pos}" if state.log_file else None
    source_pos, lag = source_lag(settings.source, state)
    rate = (state.id - first.id) / elapsed if running and sample_seconds > 0 else None
    return ChannelStatus(
        channel=channel, state="running" if running else "stopped", source=settings.source.address,
        source_position=source_pos, resume_position=resume_pos, checkpoint_id=state.id,
        checkpoint_tid=state.tid, last_create_time=str(last) if last else None,
        lag_seconds=lag,
        rows_per_second=None if rate is None else round(rate, 1),
        standby=settings.standby.address if settings.standby else None,
        standby_sample_age_seconds=None if sample_age is None else round(float(sample_age), 1),
        failover_mode=settings.failover_mode, on_divergence=settings.on_divergence, snapshots=pending,
        switches=switches, stuck_rows=stuck,
    )


def stuck_rows(cur: Any, channel: str, checkpoint_id: int) -> list[dict[str, Any]]:
    """Rows the writers cannot write because they are larger than the DC server's max_allowed_packet, as
    the writers record them in gate_meta. Only those above the checkpoint: a row below it has been written
    (an entry left by a killed gate whose next run has not reached the row yet is still shown)."""
    cur.execute(f"SELECT value FROM {q(channel)}.gate_meta WHERE LEFT(name, %s) = %s", (len(STUCK_KEY), STUCK_KEY))
    found = [json.loads(value) for (value,) in cur.fetchall()]
    return sorted((row for row in found if row["id"] > checkpoint_id), key=lambda row: row["id"])
