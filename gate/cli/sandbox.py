"""``gate sandbox``: private MariaDB servers to try gate on."""

from __future__ import annotations

import click

from gate.cli.app import App, pass_app, table
from gate.common.config import check_identifier
from gate.devtools.sandbox import Sandbox, SandboxState

# --- sandbox -----------------------------------------------------------------------------------


@click.group()
def sandbox() -> None:
    """Run private MariaDB servers to try gate on.

    Three servers: a source (binlog in ROW format, FULL row image and metadata), a standby that
    replicates from it with its own binlog (GTID, log_slave_updates on), and a DC. They live in the
    sandbox directory of config.yaml, listen on 127.0.0.1 on the ports configured there, and have a
    root account without password: for trying gate, never for real data. They keep running after
    the command ends, until 'gate sandbox down'.

    Example:

    \b
        gate sandbox up && gate sandbox status
    """


def _sandbox(app: App, tls: bool = False) -> Sandbox:
    settings = app.config.sandbox
    return Sandbox(app.config.resolve(settings.dir), with_standby=True,
                   ports=SandboxState(settings.source_port, settings.dc_port, settings.standby_port), tls=tls)


def _print_sandbox(app: App, box: Sandbox) -> None:
    rows = [{"role": s["server"], **{k: s[k] for k in ("address", "server_id", "running", "pid")}}
            for s in box.status()]
    app.emit(rows, table(rows, ["role", "address", "server_id", "running", "pid"]))


@sandbox.command()
@click.option("--tls", is_flag=True, help="new servers get certificates of a CA made in the sandbox directory and "
                                          "accept only TLS connections")
@pass_app
def up(app: App, tls: bool) -> None:
    """Start the sandbox servers, creating them on first use.

    Creates the source, standby and DC under the sandbox directory if they do not exist yet, starts
    the ones not running, and prints each server. Running it again changes nothing. With --tls (for
    new servers; they keep it), the sandbox makes a CA and certificates for 127.0.0.1 and localhost
    in its tls/ folder, the servers run with require_secure_transport=ON, and the command prints
    the config.yaml lines that make gate verify them.

    Example:

    \b
        gate sandbox up
        gate sandbox down --remove && gate sandbox up --tls
    """
    box = _sandbox(app, tls)
    box.up()
    _print_sandbox(app, box)
    if box.state.tls and not app.as_json:
        settings = f"  tls:\n    mode: verify-identity\n    ca: {box.tls_dir / 'ca.pem'}\n"
        click.echo(f"\nThe servers accept only TLS. In config.yaml, give gate the sandbox's CA:\ndc:\n{settings}"
                   f"channel_defaults:\n{settings}", err=True, nl=False)


@sandbox.command()
@pass_app
def status(app: App) -> None:
    """Show each sandbox server: role, address, server_id, whether it runs.

    Example:

    \b
        gate --json sandbox status
    """
    _print_sandbox(app, _sandbox(app))


@sandbox.command()
@click.option("--remove", is_flag=True, help="also delete the sandbox directory with all its data")
@pass_app
def down(app: App, remove: bool) -> None:
    """Stop the sandbox servers.

    Shuts each server down cleanly. With --remove, also deletes the sandbox directory, so that the
    next 'gate sandbox up' starts from empty servers.

    Example:

    \b
        gate sandbox down --remove
    """
    box = _sandbox(app)
    box.down(remove=remove)
    _print_sandbox(app, box)


@sandbox.command()
@click.option("--db", default="shop", show_default=True, help="database to create and write on the source")
@click.option("--transactions", default=500, show_default=True, help="how many transactions to commit")
@click.option("--seed", default=1, show_default=True, help="random seed: the same seed writes the same changes")
@pass_app
def load(app: App, db: str, transactions: int, seed: int) -> None:
    """Write a random workload on the sandbox source.

    Creates DB with three tables and commits random transactions: inserts, updates (some change the
    primary key) and deletes, some over several tables, and a DDL statement (ADD/DROP COLUMN, RENAME,
    TRUNCATE) every 50 transactions. Something for a channel to capture.

    Example:

    \b
        gate sandbox load --db shop --transactions 1000
    """
    from gate.devtools.workload import RandomWorkload

    check_identifier(db, "database name")
    box = _sandbox(app)
    with box.source.connect() as conn:
        work = RandomWorkload(conn, db, seed=seed, ddl_every=50)
        work.setup()
        work.run(transactions)
    click.echo(f"committed {transactions} transactions on {box.source.address}, database {db}")
