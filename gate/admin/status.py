"""A channel's live status, computed from positions, timestamps, standby samples, the switch history and
the channel lock; never a stored flag."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from gate.admin.retention import describe
from gate.admin.skip import skipped_transactions
from gate.admin.snapshot import read_snapshots
from gate.capture.holder import processes, takeovers
from gate.capture.lag import source_lag
from gate.capture.metrics import running_figure
from gate.capture.retention import plan
from gate.capture.stopped import read_stop
from gate.capture.writer import STUCK_KEY
from gate.common.config import ServerConfig
from gate.common.dc import connect, one_row, q, read_resume, read_settings, running_gate


@dataclass(frozen=True)
class ChannelStatus:
    channel: str
    state: str  # running | stopped
    stopped_by: dict[str, Any] | None  # the error that stopped the last run: error, message, exit_status, at (UTC)
    source: str
    source_position: str | None
    resume_position: str | None
    checkpoint_id: int
    checkpoint_tid: int
    last_create_time: str | None
    lag_seconds: float | None
    dc_stalled_seconds: float | None  # the running gate's gate_dc_stalled_seconds (None: it serves no metrics)
    rows_per_second: float | None
    standby: str | None
    standby_sample_age_seconds: float | None  # DC clock now minus the newest sample's standby clock
    failover_mode: str
    on_divergence: str
    retention: dict[str, Any]  # retain_days, purged_through, oldest_kept_id, bound, pinned_by, removable_rows
    stale_consumers: list[dict[str, Any]]  # as 'gate consumer list' shows them
    stuck_rows: list[dict[str, Any]]  # above the checkpoint, by id: id, bytes, max_allowed_packet, since, message
    snapshots: list[dict[str, Any]]  # requested and running snapshots by table, as gate snapshot --status has them
    skipped: list[dict[str, Any]]  # transactions 'gate channel skip' passed, oldest first (see gate.admin.skip)
    gates: list[dict[str, Any]]  # the gate processes of the channel (active, standby): host, pid, since, heartbeat
    takeovers: list[dict[str, Any]]  # the last 10 starts and takeovers, oldest first: epoch, at (UTC), host, pid,
    # standby (True: a standby took over), from_host, from_pid, reason
    switches: list[dict[str, Any]]  # oldest first: switched_at (UTC), from_instance, to_instance, reason, at_id

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def channel_status(dc: ServerConfig, channel: str, sample_seconds: float = 1.0) -> ChannelStatus:
    """Read the channel twice, ``sample_seconds`` apart, to measure rows/s at the checkpoint."""
    with connect(dc, "DC", channel) as conn, conn.cursor() as cur:
        settings = read_settings(conn, channel)
        first = read_resume(conn, channel)
        started = time.monotonic()
        holder, runner = running_gate(conn, channel)
        running = holder is not None
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
        retention = plan(conn, channel, settings.defaults)
        pending = read_snapshots(cur, channel, active_only=True)
        stop = read_stop(cur, channel)
        skipped = skipped_transactions(cur, channel)
        gates = processes(cur, channel, settings.defaults.lease_seconds)
        starts = [asdict(t) for t in takeovers(cur, channel)]
    resume_pos = f"{state.log_file}:{state.log_pos}" if state.log_file else None
    source_pos, lag = source_lag(settings.source, state)
    rate = (state.id - first.id) / elapsed if running and sample_seconds > 0 else None
    return ChannelStatus(
        channel=channel, state="running" if running else "stopped", stopped_by=None if stop is None else stop.as_row(),
        source=settings.source.address,
        source_position=source_pos, resume_position=resume_pos, checkpoint_id=state.id,
        checkpoint_tid=state.tid, last_create_time=str(last) if last else None,
        lag_seconds=lag,
        dc_stalled_seconds=running_figure(runner.metrics, "gate_dc_stalled_seconds", channel)
        if runner is not None and runner.metrics else None,
        rows_per_second=None if rate is None else round(rate, 1),
        standby=settings.standby.address if settings.standby else None,
        standby_sample_age_seconds=None if sample_age is None else round(float(sample_age), 1),
        failover_mode=settings.failover_mode, on_divergence=settings.on_divergence, snapshots=pending,
        switches=switches, skipped=skipped, gates=gates, takeovers=starts, stuck_rows=stuck, retention=describe(retention),
        stale_consumers=[c.as_row() for c in retention.consumers if c.stale],
    )


def stuck_rows(cur: Any, channel: str, checkpoint_id: int) -> list[dict[str, Any]]:
    """Rows the writers cannot write because they are larger than the DC server's max_allowed_packet, as
    the writers record them in gate_meta. Only those above the checkpoint: a row below it has been written
    (an entry left by a killed gate whose next run has not reached the row yet is still shown)."""
    cur.execute(f"SELECT value FROM {q(channel)}.gate_meta WHERE LEFT(name, %s) = %s", (len(STUCK_KEY), STUCK_KEY))
    found = [json.loads(value) for (value,) in cur.fetchall()]
    return sorted((row for row in found if row["id"] > checkpoint_id), key=lambda row: row["id"])
