"""``gate consumer``: the registered consumers of a channel (gate_consumer), which retention waits for."""

from __future__ import annotations

import click

from gate.admin import retention
from gate.cli.app import App, need_terminal, pass_app, table
from gate.common.errors import NotConfirmed


@click.group()
def consumer() -> None:
    """List and forget a channel's registered consumers.

    A registered consumer is a named cursor in the channel's gate_consumer table: the Python client's
    Consumer(..., name=...) and the Spark loader with a consumer name store theirs there. Retention
    never removes a row a registered consumer has not read.

    Example:

    \b
        gate consumer list shop
        gate consumer drop shop billing --yes
    """


@consumer.command(name="list")
@click.argument("channel")
@pass_app
def list_(app: App, channel: str) -> None:
    """List a channel's registered consumers.

    For each: its name, cursor (id and tid), when the cursor last moved (UTC), how many rows it is
    behind the checkpoint, and whether it is stale: behind the checkpoint and not moved for longer
    than the channel's consumer_max_idle_days. A stale consumer still holds retention back; drop it
    if it is gone.

    Example:

    \b
        gate consumer list shop
        gate --json consumer list shop
    """
    rows = retention.consumers(app.dc, channel)
    app.emit(rows, table(rows, ["name", "cursor_id", "cursor_tid", "last_move_utc", "rows_behind", "stale"])
             if rows else f"channel {channel}: no registered consumers")


@consumer.command()
@click.argument("channel")
@click.argument("name")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@pass_app
def drop(app: App, channel: str, name: str, yes: bool) -> None:
    """Forget a registered consumer, so that retention no longer waits for it.

    Deletes its row from gate_consumer. A reader that comes back under that name starts from the
    beginning and gets an error naming the oldest kept row if retention has removed rows it needs.
    Asks for confirmation unless --yes (needed without a terminal).

    Example:

    \b
        gate consumer drop shop billing --yes
    """
    if not yes:
        need_terminal(f"Consumer '{name}' was not dropped", "Add --yes to drop it.")
        if not click.confirm(f"Forget consumer '{name}' of channel '{channel}'?"):
            raise NotConfirmed(f"Consumer '{name}' was not dropped.")
    data = retention.drop_consumer(app.dc, channel, name)
    app.emit(data, f"dropped consumer '{name}' of channel {channel} (its cursor was id {data['cursor_id']})")
