"""``gate run`` and ``gate status``: running a channel and watching it."""

from __future__ import annotations

import logging
import sys

import click

from gate.capture.holder import stand_by_until_free
from gate.cli.app import App, pairs, table
from gate.common.config import LIMITS, check_identifier
from gate.common.errors import InvalidValue


def setup_logging(level: str) -> None:
    """One line per notable event, to stdout."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


_PORTS = LIMITS["channel_defaults.metrics_port"]  # the range config.yaml's metrics_port has
MAX_SAMPLE = 3600  # seconds 'gate status --sample' may watch at most


@click.command()
@click.argument("channel")
@click.option("--no-check", is_flag=True, help="skip the preflight of the source and standby (not recommended)")
@click.option("--metrics-port", type=click.IntRange(int(_PORTS[0]), int(_PORTS[1])), metavar="PORT",
              help="serve /metrics, /healthz and /readyz on this port, 0 for none [default: the channel's metrics_port]")
@click.option("--metrics-address", metavar="ADDRESS",
              help="the interface they listen on [default: the channel's metrics_address, 127.0.0.1]")
@click.option("--standby", is_flag=True,
              help="wait until no live gate runs CHANNEL (on any host), then take it over and run it")
@click.pass_obj
def run(app: App, channel: str, no_check: bool, metrics_port: int | None, metrics_address: str | None,
        standby: bool) -> None:
    """Run CHANNEL in the foreground: read its source's binlog into its DC database.

    gate acts as a replica of the channel's source (with the channel's server_id), writes every row
    change and DDL into transfer_data and moves transfer_checkpoint forward at transaction
    boundaries, at least every checkpoint_interval_ms while data flows. It resumes exactly where the
    checkpoint stands: rows above it, left by a crash, are removed first. SIGTERM or Ctrl-C drains
    the writers, stores the checkpoint and exits 0 (waiting for the DC server if it is down); a
    second one stops at once with exit status 1, and the next run rewrites what was in flight.
    Logs go to stdout, one line per event.

    First the preflight checks the source and the standby (which must replicate from the source);
    with a standby, a server that cannot be reached is only a warning. While it runs, gate samples
    the standby every standby_sample_seconds; when the source stays unreachable for
    failover_after_seconds, it switches to the standby and goes on there.

    With --metrics-port (or the channel's metrics_port), gate serves its figures in the Prometheus
    text format on /metrics, /healthz (503 when stuck: no progress for stuck_after_seconds while
    there is work) and /readyz (503 unless connected to the source and the DC with the lag under
    ready_lag_seconds); see docs/operations/monitoring.md.

    A server that cannot be reached, a lost connection, a lock wait or deadlock is retried. An error
    that stays (a revoked privilege, a wrong password, an unknown database or table, a read-only DC, a
    certificate that fails verification) stops gate with a message naming the server, its answer and
    the fix; 'gate status' shows it.

    
    With --standby, gate first waits on one DC connection, idle, until no live gate runs the channel:
    none holds its lock (the one running it stopped, was killed or crashed), or the one holding it has
    not beaten its heartbeat for lease_seconds (its host is down or cut off from the DC, or it is
    stopped): then gate ends that one's DC connections and runs the channel from its checkpoint, as
    'gate run' does. Any number of hosts may stand by; one takes over. A gate that was taken over writes
    nothing more (every DC write checks the channel's epoch in its own transaction) and exits with
    status 5. A standby started before the channel exists waits for it. See docs/dba/several-hosts.md.

    Exit status:
      0  stopped by SIGTERM or Ctrl-C, checkpoint stored
      1  restart me: a server unreachable at start, an error a new run may not meet, a second signal
      2  a malformed config, channel name or value, a metrics port taken: fix it, do not restart
      3  a server refused gate (privilege, login, database, table, read-only, TLS certificate): an
         operator must act
      5  deposed: another gate (a standby) took the channel over while this one was silent; do not
         restart blindly ('gate status' says who runs it now and why)

    Example:

    \b
        gate run demo
        gate run demo --metrics-port 9187
        gate run demo --standby
        GATE_CONFIG=/etc/gate/config.yaml gate run orders
    """
    check_identifier(channel, "channel name")
    setup_logging(app.config.log.level)
    waited = None
    if standby and not metrics_port:  # nothing to serve while it waits: the capture's modules load at takeover
        waited = stand_by_until_free(app.dc, channel, ("gate.capture.pipeline",))
        if waited is None:
            return
    from gate.capture.pipeline import Pipeline

    pipeline = Pipeline(app.dc, channel, preflight=not no_check, metrics_port=metrics_port,
                        metrics_address=metrics_address, standby=standby,
                        held=None if waited is None else waited.held)
    if waited is not None and waited.stopping.is_set():  # a stop signal came while the capture loaded
        pipeline.stop()
    pipeline.run()


@click.command()
@click.argument("channel")
@click.option("--sample", default=1.0, show_default=True, metavar="SECONDS",
              help="how long to watch the checkpoint to measure rows/s (0 to skip)")
@click.pass_obj
def status(app: App, channel: str, sample: float) -> None:
    """Show whether CHANNEL is running, how far it is, its lag, its speed and its failover state.

    State comes from the channel's lock on the DC server (held by a running gate), positions from the
    source's SHOW MASTER STATUS and the channel's resume position, lag from the source's clock minus
    the source time of the oldest transaction not yet at or below the checkpoint (0 when gate has read
    everything), and how long the DC has made no progress while the running gate waits for it
    (dc_stalled_seconds, from its /metrics; 0: not stalled). With a
    standby: the age of the newest standby sample (the DC server's clock now minus the standby's
    clock at sampling; samples are taken while gate runs). Then the gate processes of the channel on
    any host: the active one and those standing by ('gate run --standby'), each with its heartbeat's
    age; and the takeovers by a standby among the last 10 starts (when, which host and pid, from whom,
    why; JSON: every start). Then the failover settings and every
    switch so far (time in UTC, from, to, the checkpoint id at the switch, reason), oldest first.
    Then retention: retain_days, the highest id removed (purged_through), the oldest kept id, the
    bound a purge would remove up to and what pins it (the checkpoint, a consumer, retain_days), and
    the registered consumers that are stale. Then any row the writers cannot write because it is
    larger than the DC server's max_allowed_packet: its id, size and the setting to raise. Last, the
    requested and running snapshots, each with its rows written so far against the source's estimate
    (see 'gate snapshot'). Then the transactions 'gate channel skip' passed (skipped). Last, the error
    that stopped the last 'gate run', if one did (stopped_by; the next run removes it): e.g. a privilege
    the DC or the source refused, with the GRANT that fixes it, or a transaction gate refused
    (refused_transaction, the one 'gate channel skip' may pass).

    Example:

    \b
        gate status demo
        gate --json status demo --sample 0
    """
    check_identifier(channel, "channel name")
    if not 0 <= sample <= MAX_SAMPLE:
        raise InvalidValue(f"--sample must be a number of seconds from 0 (no sample) to {MAX_SAMPLE}, not {sample}.")
    from gate.admin.status import channel_status
    from gate.cli.snapshot import status_table

    result = channel_status(app.dc, channel, sample).as_dict()
    switches, stuck, stale, pending, stop, skipped = (result["switches"], result["stuck_rows"],
                                                      result["stale_consumers"], result["snapshots"],
                                                      result["stopped_by"], result["skipped"])
    takeovers = [t for t in result["takeovers"] if t["standby"]]
    refused = stop and stop["transaction"]
    shown = {}
    for key, value in result.items():
        shown[key] = value
        if key == "stopped_by":  # the transaction it stopped at, the one 'gate channel skip' may pass
            shown["refused_transaction"] = refused and f"{refused['name']} at {refused['log_file']}:{refused['log_pos']}"
    text = pairs({**shown, "switches": len(switches), "stuck_rows": len(stuck), "stale_consumers": len(stale),
                  "snapshots": len(pending), "stopped_by": stop and stop["error"], "skipped": len(skipped),
                  "gates": len(result["gates"]), "takeovers": len(takeovers)})
    if result["gates"]:
        text += "\n\ngates (the active one runs the channel; standbys take it over):\n"
        text += table(result["gates"], ["role", "host", "pid", "since", "heartbeat_age_seconds"])
    if takeovers:
        text += "\n\ntakeovers by a standby (UTC):\n"
        text += table(takeovers, ["epoch", "at", "host", "pid", "from_host", "from_pid", "reason"])
    if switches:
        text += "\n\n" + table(switches, ["switched_at", "from_instance", "to_instance", "at_id", "reason"])
    if skipped:
        text += "\n\nskipped transactions (their changes are not in the DC; each has SKIPPED rows):\n"
        text += table(skipped, ["at", "transaction", "start", "end", "ids", "tables", "error"])
    if stale:
        text += "\n\nstale consumers (behind the checkpoint, not moved for longer than consumer_max_idle_days):\n"
        text += table(stale, ["name", "cursor_id", "last_move_utc", "rows_behind"])
    if result["dc_stalled_seconds"]:
        text += (f"\n\nWARNING: the DC has made no progress for {result['dc_stalled_seconds']:.0f} s while the "
                 "writers or the checkpoint wait for it; gate's log names what waits.")
    for row in stuck:
        text += f"\n\nERROR since {row['since']} UTC: {row['message']}"
    if stop:
        text += f"\n\nThe last run stopped at {stop['at']} UTC with exit status {stop['exit_status']}: {stop['message']}"
    if pending:
        text += "\n\nsnapshots:\n" + status_table(pending)
    app.emit(result, text)
