"""``gate snapshot``: request, watch and cancel snapshots of a channel's source tables."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from gate.admin import snapshot as snapshots
from gate.cli.app import App, pass_app, table
from gate.common.columns import parse_keys
from gate.common.config import check_identifier
from gate.common.errors import InvalidValue

REFRESH_SECONDS = 0.5  # how often a terminal's progress bars read gate_snapshot again
# exit status of a request that did its work but left out tables gate could not snapshot, each named on stderr
# ("not requested: ...") and in --json's not_requested: not a failure (1, 2, 3), nothing to retry
NOT_REQUESTED = 4


def way_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--whole-table and --key: how to read tables without a key (see :class:`gate.admin.snapshot.Ways`)."""
    command = click.option("--key", "keys", multiple=True, metavar="DB.TABLE=COL[,COL...]",
                           help="snapshot this table paged on these columns, unique and NOT NULL but not a key "
                                "there (checked on the source) (repeatable)")(command)
    return click.option("--whole-table", "whole", multiple=True, metavar="PATTERN",
                        help="snapshot these tables read whole, in one read view, up to snapshot_whole_table_rows "
                             "rows each: for a table without a key (repeatable)")(command)


def _way(row: dict[str, Any]) -> str:
    if row.get("whole_table"):
        return ", read whole in one read view"
    return f", paged on ({', '.join(row['key'])})" if "key" in row else ""


def describe_request(result: snapshots.SnapshotRequest, nothing: str = "no snapshot requested") -> str:
    """What a request did, and who takes it up, as lines for a person."""
    lines = [f"requested a snapshot of {r['table']} (id {r['id']}{_way(r)})" for r in result.requested]
    lines += [f"{r['table']} already has a snapshot {r['state']} (id {r['id']}): not requested again"
              for r in result.pending]
    if not result.requested:
        return "\n".join(lines + ["no snapshot requested" if result.pending or result.refused else nothing])
    if result.running_gate is not None:
        lines.append(f"The gate running channel {result.channel} (DC connection {result.running_gate}) takes "
                     "them up within a few seconds; 'gate snapshot "
                     f"{result.channel} --status' shows their progress.")
    else:
        lines.append(f"No gate runs channel {result.channel} now: 'gate run {result.channel}' takes them up when "
                     "it starts.")
    return "\n".join(lines)


def emit_request(app: App, data: dict[str, Any], text: str, result: snapshots.SnapshotRequest) -> None:
    """Print what a command that requests snapshots did; each table left out goes to stderr as ``not
    requested: ...`` (why, and the fix), and then the exit status is :data:`NOT_REQUESTED`."""
    app.emit(data, text)
    for left_out in result.refused:
        click.echo(f"not requested: {left_out['reason']}", err=True)
    if result.refused:
        click.get_current_context().exit(NOT_REQUESTED)


def _rows_cell(row: dict[str, Any]) -> str:
    """``done/estimate``, with the percentage of the estimate while the snapshot runs."""
    done, estimate = row["rows_done"], row["rows_estimate"]
    if estimate is None:
        return f"{done}/?"
    percent = f" {100 * done // estimate}%" if row["state"] == "running" and estimate else ""
    return f"{done}/{estimate}{percent}"


def status_table(rows: list[dict[str, Any]]) -> str:
    cells = [{**row, "state": row["state"] + (", cancel asked" if row["cancel_asked"] else ""),
              "rows": _rows_cell(row), "chunks": row["chunks_done"], "started": row["started_at"],
              "finished": row["finished_at"]} for row in rows]
    return table(cells, ["id", "table", "state", "reason", "rows", "chunks", "started", "finished", "message"])


def _watch(app: App, channel: str, patterns: tuple[str, ...]) -> dict[str, Any]:
    """Progress bars of the requested and running snapshots until none is left (or Ctrl-C); the last reading."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    bars: dict[int, Any] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("rows"),
                  TaskProgressColumn(), TimeElapsedColumn()) as shown:
        for data in snapshots.watch(app.dc, channel, patterns, REFRESH_SECONDS):
            for row in data["snapshots"]:
                active = row["state"] in snapshots.ACTIVE
                if active or row["id"] in bars:
                    total = row["rows_estimate"] if active else row["rows_done"]
                    if row["id"] not in bars:
                        bars[row["id"]] = shown.add_task("", total=total, start=row["state"] == "running")
                    elif row["state"] == "running":
                        shown.start_task(bars[row["id"]])
                    shown.update(bars[row["id"]], total=total, completed=row["rows_done"],
                                 description=f"{row['id']} {row['table']} {row['state']}")
    return data


@click.command()
@click.argument("channel")
@click.option("--table", "patterns", multiple=True, metavar="PATTERN",
              help="only the captured tables matching this db.table pattern (repeatable) [default: all]")
@way_options
@click.option("--status", "show", is_flag=True, help="show each table's latest snapshot and its progress")
@click.option("--cancel", is_flag=True, help="cancel the requested and running snapshots (of --table's tables)")
@pass_app
def snapshot(app: App, channel: str, patterns: tuple[str, ...], whole: tuple[str, ...], keys: tuple[str, ...],
             show: bool, cancel: bool) -> None:
    """Request, watch or cancel snapshots: the current rows of CHANNEL's captured tables.

    Without an option: requests a snapshot of every table the channel captures on its source (base
    tables of its information_schema that its allow and deny lists pass), or of those a --table pattern
    (db.table, wildcards * and ?) matches; a pattern matching no captured table is refused, naming the
    captured tables, and nothing is requested. A table whose snapshot is already requested or running is
    reported and not requested again. A table gate cannot snapshot (neither a primary key nor a unique
    key on NOT NULL columns, or a column rule on that key) is not requested: the others are, a "not
    requested: ..." line on stderr names it with the fix, and the exit status is 4. A running 'gate run'
    takes requests up within a few seconds, else the next one when it starts; it writes a SNAPSHOTSTART
    row, one SNAPSHOT row per source row and a SNAPSHOTEND row per table into transfer_data, between the
    changes it captures.

    A table without a key can be snapshotted two ways, each naming the table as --table does:
    --whole-table PATTERN reads it whole in one read view (exact, lock-free; up to the channel's
    snapshot_whole_table_rows rows, counted now and when read; restarted from the start if gate is
    killed); --key DB.TABLE=COL[,COL...] pages it on columns you know are unique and NOT NULL (checked on
    the source now, with a read of the whole table, and again in each chunk: a repeated key cancels the
    snapshot, named).

    --status shows each table's latest snapshot: id, state, reason, rows written at or below the
    checkpoint against the source's row estimate (its information_schema TABLE_ROWS when the table's
    snapshot started; with the percentage while it runs), chunks, start, end (UTC) and message. On a
    terminal it draws a progress bar per requested or running snapshot until they end (Ctrl-C stops
    watching, not the snapshots).

    --cancel ends requested snapshots at once (state cancelled, "cancelled before it started") and asks
    the running gate to end running ones: it writes SNAPSHOTEND with state cancelled, after which that
    table's rows in transfer_data are incomplete.

    Example:

    \b
        gate snapshot shop --table 'shop.orders' --table 'shop.order_*'
        gate snapshot shop --whole-table 'shop.audit_log' --key shop.legacy=code,day
        gate snapshot shop --status
        gate --json snapshot shop --status
        gate snapshot shop --cancel --table 'shop.orders'
    """
    check_identifier(channel, "channel name")
    if show and cancel:
        raise InvalidValue("Give --status or --cancel, not both.")
    if (show or cancel) and (whole or keys):
        raise InvalidValue("--whole-table and --key say how to read the tables a request asks for: not with "
                           "--status or --cancel.")
    if cancel:
        done = snapshots.cancel(app.dc, channel, patterns)
        lines = [f"cancelled the snapshot of {r['table']} (id {r['id']}) before it started" for r in done.cancelled]
        lines += [f"asked gate to cancel the running snapshot of {r['table']} (id {r['id']})" for r in done.asked]
        if done.asked and done.running_gate is None:
            lines.append(f"No gate runs channel {channel} now: the next 'gate run {channel}' ends them as cancelled.")
        app.emit(done.as_dict(), "\n".join(lines or [f"nothing to cancel: no snapshot of channel {channel} is "
                                                     "requested or running" + (" for those tables" if patterns else "")]))
    elif show:
        if app.as_json or not sys.stdout.isatty():
            data = snapshots.progress(app.dc, channel, patterns)
        else:
            try:
                data = _watch(app, channel, patterns)
            except KeyboardInterrupt:
                click.echo("stopped watching; the snapshots go on", err=True)
                return
        app.emit(data, status_table(data["snapshots"]) if data["snapshots"] else
                 f"channel {channel} has no snapshots")
    else:
        result = snapshots.request(app.dc, channel, patterns, snapshots.Ways(whole, parse_keys(keys)))
        emit_request(app, result.as_dict(), describe_request(result), result)
