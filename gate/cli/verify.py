"""``gate verify``: compare the DC's fold of each captured table with the source, chunk by chunk at exact points."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import click

from gate.admin import verify as verifications
from gate.cli.app import App, pass_app
from gate.common import dc
from gate.common.config import check_identifier

DIFFERENT = 5  # exit status: a table differs from the source
UNVERIFIED = 6  # exit status: nothing differs, but a table could not be verified (cancelled, history purged)


def _keys(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in row["key"].items())


def describe(report: dict[str, Any]) -> str:
    """One table's outcome as lines for a person."""
    head = f"{report['table']} (verification {report['id']}): "
    if "chunks" not in report or report.get("message"):
        return head + f"not verified: {report.get('message') or report['state']}"
    head += f"{report['chunks']} chunks, {report['rows']} source rows checked: "
    if report["matched"]:
        return head + "equal to the source"
    lines = [head + f"{len(report['differing_chunks'])} chunk(s) differ"]
    for chunk in report["differing_chunks"]:
        lines.append(f"  chunk {chunk['chunk']} (VERIFY row {chunk['id']}, keys after {chunk['after']} up to "
                     f"{chunk['upto'] or 'the end'}): source {chunk['source_rows']} rows, DC {chunk['dc_rows']} rows")
    for row in report["differing_keys"]:
        lines.append(f"  key {_keys(row)}: source {row['source']}, DC {row['dc']}")
    if not report["differing_keys"]:
        lines.append("  no key differs any more when the chunks were read again (changed since?)")
    lines.append(f"  fix: {report['fix']}")
    return "\n".join(lines)


@click.command()
@click.argument("channel")
@click.option("--table", "patterns", multiple=True, metavar="PATTERN",
              help="only the captured tables matching this db.table pattern (repeatable) [default: all]")
@click.option("--max-rows-per-second", "max_rate", type=click.IntRange(min=1), default=None,
              help="read at most this many source rows per second per table [default: no cap but the snapshots' "
                   "throttling]")
@click.option("--timeout", type=click.FloatRange(min=0), default=None,
              help="give up waiting for the running gate after this many seconds (the verifications go on)")
@click.option("--metrics-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the outcome as Prometheus text to this file (node_exporter's textfile collector)")
@pass_app
def verify(app: App, channel: str, patterns: tuple[str, ...], max_rate: int | None, timeout: float | None,
           metrics_file: Path | None) -> None:
    """Verify that the DC's rows of CHANNEL's tables equal the source's, at exact binlog positions.

    Requests a verification of every captured table (or those a --table pattern matches) with a key to
    page on; the running 'gate run' reads each in chunks as it reads a snapshot (lock-free, one read view
    per chunk at a binlog position placed in the stream, no chunk while the stream is more than 10 s
    behind) and writes one VERIFY row per chunk into transfer_data: its key range, row count and checksum.
    This command waits for them (progress on stderr), folds the table's rows of transfer_data and compares
    each chunk with the fold below its VERIFY row. A chunk that differs is read again with its rows, and
    each key that differs is named with the source's and the DC's values, and the fix (a snapshot of the
    table). A verification already requested or running for a table (e.g. of a killed 'gate verify') is
    resumed, not requested again.

    Exit status: 0 when every table matched, 5 when one differs, 6 when none differs but one could not
    be verified (cancelled, or the DC's history of it purged).

    Example:

    \b
        gate verify shop
        gate verify shop --table 'shop.orders' --max-rows-per-second 20000
        gate --json verify shop --metrics-file /var/lib/node_exporter/gate_verify_shop.prom
    """
    check_identifier(channel, "channel name")
    shown: dict[int, str] = {}

    def progress(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            line = (f"{row['table']} (verification {row['id']}): {row['state']}, {row['rows_done']}/"
                    f"{row['rows_estimate'] if row['rows_estimate'] is not None else '?'} rows, "
                    f"{row['chunks_done']} chunks")
            if shown.get(row["id"]) != line:
                shown[row["id"]] = line
                click.echo(line, err=True)

    with dc.connect(app.dc, "DC") as conn:
        verifications.check_channel(conn, channel)
        requested, refused = verifications.request(conn, channel, patterns, max_rate)
        for item in refused:
            click.echo(f"not verified: {item['reason']}", err=True)
        if dc.lock_holder(conn, channel) is None:
            click.echo(f"No gate runs channel {channel} now: 'gate run {channel}' reads the verifications when it "
                       "starts; waiting.", err=True)
        verifications.wait(conn, channel, [r["id"] for r in requested], progress, timeout=timeout)
        reports = [verifications.verify_table(conn, channel, r["id"], progress, timeout) for r in requested]
    reports += [{"table": item["table"], "id": None, "state": "not requested", "matched": False,
                 "message": item["reason"]} for item in refused]
    if metrics_file is not None:
        temporary = metrics_file.with_name(metrics_file.name + ".tmp")
        temporary.write_text(verifications.metrics_text(channel, reports, time.time()))
        os.replace(temporary, metrics_file)
    matched = all(r["matched"] for r in reports)
    app.emit({"channel": channel, "matched": matched, "tables": reports}, "\n".join(map(describe, reports)))
    if not matched:
        differs = any(r.get("differing_chunks") for r in reports)
        click.get_current_context().exit(DIFFERENT if differs else UNVERIFIED)
