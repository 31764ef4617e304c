"""The ``gate`` command line.

Commands parse their options, call gate.channel, gate.preflight or gate.sandbox, and print the result
as an aligned table, or as JSON with ``gate --json``. A :class:`GateError` becomes one ``error: ...``
message on stderr and the error's exit status; never a traceback. New commands hang off :func:`main`
(``@main.command()``) and get the loaded config through ``@pass_app``.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

import click
import pymysql

from gate import channel as channels
from gate import failover
from gate.config import Config, ServerConfig, check_identifier, load_config
from gate.dc import GATE_VERSION
from gate.errors import GateError, InvalidValue, NotConfirmed, PreflightFailed
from gate.preflight import Problem, check_server, describe_failure
from gate.sandbox import Sandbox, SandboxState

F = TypeVar("F", bound=Callable[..., Any])


class App:
    """What every command gets: the config (loaded on first use) and the output mode."""

    def __init__(self, config_path: str | None, as_json: bool) -> None:
        self.config_path = config_path
        self.as_json = as_json

    @functools.cached_property
    def config(self) -> Config:
        return load_config(self.config_path)

    @property
    def dc(self) -> ServerConfig:
        return self.config.dc

    def emit(self, data: Any, text: str) -> None:
        """Print ``data`` as JSON with --json, else the readable ``text``."""
        click.echo(json.dumps(data, indent=2, default=str) if self.as_json else text)


pass_app = click.make_pass_decorator(App)


def warn(problems: Sequence[Problem]) -> None:
    for problem in problems:
        click.echo(f"warning: {problem}", err=True)


def need_terminal(not_done: str, add_yes: str) -> None:
    """Refuse a confirmation that this session has no terminal to ask on."""
    if not (sys.stdin and sys.stdin.isatty()):
        raise NotConfirmed(f"{not_done}: confirmation is needed and this session has no terminal to ask on. {add_yes}")


def cell(value: Any) -> str:
    if value is None or value == [] or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as left-aligned columns under a header line."""
    cells = [list(columns)] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells)


def pairs(data: dict[str, Any]) -> str:
    """A nested dict as aligned ``key  value`` lines; nested keys are joined with dots."""

    def flat(prefix: str, value: Any) -> list[tuple[str, str]]:
        if isinstance(value, dict) and value:
            return [item for k, v in value.items() for item in flat(f"{prefix}.{k}" if prefix else k, v)]
        return [(prefix, cell(value))]

    items = flat("", data)
    width = max(len(k) for k, _ in items)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in items)


class GateGroup(click.Group):
    """The root group: turns gate's errors (and server errors) into one message and an exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GateError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except pymysql.MySQLError as exc:
            click.echo(f"error: a server refused the operation: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=GateGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), metavar="PATH",
              help="config file [default: $GATE_CONFIG, else ./config.yaml; built-in defaults if neither exists]")
@click.option("--json", "as_json", is_flag=True, help="print results as JSON instead of tables")
@click.version_option(GATE_VERSION, prog_name="gate")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, as_json: bool) -> None:
    """MySQL/MariaDB change data capture into a DC database.

    gate reads a source server's binary log and writes every row change, DDL statement and TRUNCATE
    into the table transfer_data of a channel database on a DC server, with a checkpoint telling
    readers how far the data is complete. These commands set up and inspect channels, check source
    servers, and run private sandbox servers to try it on.

    Example:

    \b
        gate sandbox up
        gate channel create demo --source 127.0.0.1:33061
        gate --json channel show demo
    """
    ctx.obj = App(config_path, as_json)


# --- sandbox -----------------------------------------------------------------------------------


@main.group()
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


def _sandbox(app: App) -> Sandbox:
    settings = app.config.sandbox
    return Sandbox(app.config.resolve(settings.dir), with_standby=True,
                   ports=SandboxState(settings.source_port, settings.dc_port, settings.standby_port))


def _print_sandbox(app: App, box: Sandbox) -> None:
    rows = [{"role": s["server"], **{k: s[k] for k in ("address", "server_id", "running", "pid")}}
            for s in box.status()]
    app.emit(rows, table(rows, ["role", "address", "server_id", "running", "pid"]))


@sandbox.command()
@pass_app
def up(app: App) -> None:
    """Start the sandbox servers, creating them on first use.

    Creates the source, standby and DC under the sandbox directory if they do not exist yet, starts
    the ones not running, and prints each server. Running it again changes nothing.

    Example:

    \b
        gate sandbox up
    """
    box = _sandbox(app)
    box.up()
    _print_sandbox(app, box)


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
    from gate.workload import RandomWorkload

    check_identifier(db, "database name")
    box = _sandbox(app)
    with box.source.connect() as conn:
        work = RandomWorkload(conn, db, seed=seed, ddl_every=50)
        work.setup()
        work.run(transactions)
    click.echo(f"committed {transactions} transactions on {box.source.address}, database {db}")


# --- channels ----------------------------------------------------------------------------------


@main.group()
def channel() -> None:
    """Create, inspect, configure and drop channels.

    A channel is one source server (plus an optional standby) captured into one database of the
    same name on the DC server configured in config.yaml. Channel names are 1 to 64 letters, digits
    and underscores.

    Example:

    \b
        gate channel create shop --source db1.example.com:3306 --source-user gate \\
            --source-password-env SHOP_SOURCE_PASSWORD
        gate channel list
    """


def login_options(role: str, prefix: str = "", keeps: bool = False) -> Callable[[F], F]:
    """The options --[prefix-]user, --[prefix-]password and --[prefix-]password-env of one server."""
    dash, under = (f"{prefix}-", f"{prefix}_") if prefix else ("", "")
    default = "keep the current one" if keeps else "root"
    options = [
        click.option(f"--{dash}user", f"{under}user", metavar="USER",
                     help=f"user gate logs in to the {role} as [default: {default}]"),
        click.option(f"--{dash}password", f"{under}password", metavar="PASSWORD",
                     help=f"{role} password, stored in the channel as given (prefer --{dash}password-env)"),
        click.option(f"--{dash}password-env", f"{under}password_env", metavar="VAR",
                     help=f"environment variable holding the {role} password; the channel stores only "
                          "the reference ${VAR}, read whenever gate connects"),
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _print_channel(app: App, name: str) -> None:
    data = channels.show(app.dc, name)
    app.emit(data, pairs(data))


@channel.command()
@click.argument("name")
@click.option("--source", "source_address", required=True, metavar="HOST:PORT", help="the source server")
@login_options("source", "source")
@click.option("--standby", "standby_address", metavar="HOST:PORT", help="a replica of the source to fail over to")
@login_options("standby", "standby")
@click.option("--server-id", type=int, help="server_id gate reads the binlog with [default: derived from NAME]")
@click.option("--timezone", help="time zone TIMESTAMP values are shown in [default: channel_defaults]")
@click.option("--binary-format", type=click.Choice(["base64", "hex"]), help="how binary strings are written")
@click.option("--writers", type=int, help="concurrent DC writer connections [default: channel_defaults]")
@click.option("--allow", multiple=True, metavar="PATTERN", help="capture only tables matching (repeatable)")
@click.option("--deny", multiple=True, metavar="PATTERN", help="never capture tables matching (repeatable)")
@click.option("--no-check", is_flag=True, help="skip the preflight of the source and standby")
@pass_app
def create(app: App, name: str, source_address: str, source_user: str | None, source_password: str | None,
           source_password_env: str | None, standby_address: str | None, standby_user: str | None,
           standby_password: str | None, standby_password_env: str | None, server_id: int | None,
           timezone: str | None, binary_format: str | None, writers: int | None, allow: tuple[str, ...],
           deny: tuple[str, ...], no_check: bool) -> None:
    """Create a channel: its database and tables on the DC server.

    Checks the source (and standby) first as 'gate check-source' does, unless --no-check, then
    creates the database NAME on the DC server with transfer_data, transfer_checkpoint (0, 0) and
    gate's own tables, and stores the settings. Settings not given come from channel_defaults in
    config.yaml. The default server_id is a stable number from 100000 to 999999 computed from NAME
    (CRC-32 of the name); give --server-id when another replica of the source uses it. Passwords
    given with --source-password-env are stored as the reference ${VAR}, never as the value.

    Example:

    \b
        export SHOP_SOURCE_PASSWORD=...
        gate channel create shop --source db1.example.com:3306 --source-user gate \\
            --source-password-env SHOP_SOURCE_PASSWORD --standby db2.example.com:3306 \\
            --standby-user gate --standby-password-env SHOP_SOURCE_PASSWORD --allow 'shop.*'
    """
    source = channels.server_login(source_address, source_user, source_password, source_password_env, "source")
    standby = (channels.server_login(standby_address, standby_user, standby_password, standby_password_env, "standby")
               if standby_address else None)
    _, warnings = channels.create(
        app.dc, app.config.channel_defaults, name, source, standby, server_id=server_id, timezone=timezone,
        binary_format=binary_format, writers=writers, allow=allow, deny=deny, check=not no_check,
    )
    warn(warnings)
    _print_channel(app, name)


@channel.command(name="list")
@pass_app
def list_(app: App) -> None:
    """List the channels on the DC server.

    Shows each channel's source and standby, its checkpoint (id and tid of the last complete
    transaction in transfer_data) and the DC schema version it was created with.

    Example:

    \b
        gate channel list
    """
    rows = channels.summaries(app.dc)
    app.emit(rows, table(rows, ["channel", "source", "standby", "checkpoint_id", "checkpoint_tid",
                                "schema_version"]))


@channel.command()
@click.argument("name")
@pass_app
def show(app: App, name: str) -> None:
    """Show one channel: every setting, its checkpoint and resume position.

    Passwords are shown as ***. The resume position is the binlog file, position and GTID position
    of the source right after the last checkpointed transaction, or where 'gate channel
    set-position' put it.

    Example:

    \b
        gate channel show shop
    """
    _print_channel(app, name)


@channel.command()
@click.argument("name")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@click.option("--force", is_flag=True, help="drop it even while a gate runs the channel (that gate stops with an error)")
@pass_app
def drop(app: App, name: str, yes: bool, force: bool) -> None:
    """Drop a channel: its DC database with all captured data.

    Asks you to type the channel name to confirm, unless --yes is given; in a session without a
    terminal it refuses without --yes. Refused while a gate runs the channel, unless --force: the
    database is then dropped under the running gate, which stops with a DC error (say so to whoever
    runs it). A channel whose creation stopped part way is dropped too. Users granted access keep
    their accounts.

    Example:

    \b
        gate channel drop shop --yes
    """
    prompt = channels.drop_prompt(app.dc, name, force)
    if not yes:
        need_terminal(f"Channel '{name}' was not dropped", "Add --yes to drop it with all its data.")
        typed = click.prompt(f"{prompt}. Type the channel name to confirm", default="", show_default=False)
        if typed != name:
            raise NotConfirmed(f"Channel '{name}' was not dropped: the name typed did not match.")
    data: dict[str, Any] = {"dropped": name}
    running = channels.drop(app.dc, name, force)
    if running is not None:
        click.echo(f"warning: a gate process was running channel '{name}' (DC connection {running}); its database "
                   "is gone, so that gate stops with a DC error when it next writes. Stop it if it is still running.",
                   err=True)
        data["running_gate_connection"] = running
    app.emit(data, f"dropped channel {name}")


@channel.command(name="filter")
@click.argument("name")
@click.option("--allow", multiple=True, metavar="PATTERN", help="add a pattern to the allow list (repeatable)")
@click.option("--deny", multiple=True, metavar="PATTERN", help="add a pattern to the deny list (repeatable)")
@click.option("--clear", is_flag=True, help="empty both lists first")
@pass_app
def filter_(app: App, name: str, allow: tuple[str, ...], deny: tuple[str, ...], clear: bool) -> None:
    """Set which tables a channel captures, by db.table patterns.

    A table is captured when the allow list is empty or one allow pattern matches it, and no deny
    pattern matches it. Patterns are db.table with the wildcards * (any characters) and ? (one
    character), matched case-sensitively. --allow and --deny add to the lists, --clear empties both
    first; with no option the lists are only shown. A running gate applies the new lists within a few
    seconds, from its next transaction on; rows a newly allowed table held before are not captured.

    Example:

    \b
        gate channel filter shop --clear --allow 'shop.*' --deny '*.audit_log'
    """
    settings = channels.set_filter(app.dc, name, allow, deny, clear)
    data = {"channel": name, "allow": list(settings.allow), "deny": list(settings.deny)}
    app.emit(data, pairs(data))


@channel.command(name="set-position")
@click.argument("name")
@click.option("--file", "log_file", metavar="FILE", help="binlog file name, e.g. mysql-bin.000042")
@click.option("--pos", "log_pos", type=int, metavar="N", help="position in --file (an event start)")
@click.option("--gtid", metavar="GTID", help="MariaDB GTID position, e.g. 0-1-1234")
@click.option("--now", is_flag=True, help="the source's current end (SHOW MASTER STATUS, @@gtid_binlog_pos)")
@pass_app
def set_position(app: App, name: str, log_file: str | None, log_pos: int | None, gtid: str | None,
                 now: bool) -> None:
    """Set where a channel starts reading the source's binlog.

    Give a binlog file and position (the file must be in the source's SHOW BINARY LOGS), a MariaDB
    GTID position, or --now for the source's current end. Only the resume position changes; the
    checkpoint (id, tid) stays, so ids continue where transfer_data stands.

    Example:

    \b
        gate channel set-position shop --file mysql-bin.000042 --pos 4
        gate channel set-position shop --now
    """
    state = channels.set_position(app.dc, name, log_file=log_file, log_pos=log_pos, gtid=gtid, now=now)
    data = {"channel": name, **asdict(state)}
    app.emit(data, pairs(data))


def _set_server(app: App, name: str, role: str, address: str | None, user: str | None, password: str | None,
                password_env: str | None, no_check: bool) -> None:
    _, warnings = channels.set_server(app.dc, name, role, address, user, password, password_env, check=not no_check)
    warn(warnings)
    data = channels.show(app.dc, name)
    instance = data["resume"]["instance_name"]
    if role == "source" and instance and instance != data["source"]["address"]:
        click.echo(f"note: the resume position belongs to {instance}; set one on the new source with "
                   f"'gate channel set-position {name} ...'.", err=True)
    app.emit(data, pairs(data))


@channel.command(name="set-source")
@click.argument("name")
@click.argument("address", metavar="HOST:PORT")
@login_options("source", keeps=True)
@click.option("--no-check", is_flag=True, help="skip the preflight of the new source")
@pass_app
def set_source(app: App, name: str, address: str, user: str | None, password: str | None,
               password_env: str | None, no_check: bool) -> None:
    """Point a channel at another source server.

    Checks the new source first (unless --no-check). User and password not given stay as they
    were. A binlog position belongs to one server: after moving to another server, set a start
    position there with 'gate channel set-position'.

    Example:

    \b
        gate channel set-source shop db3.example.com:3306 --password-env SHOP_SOURCE_PASSWORD
    """
    _set_server(app, name, "source", address, user, password, password_env, no_check)


@channel.command(name="set-standby")
@click.argument("name")
@click.argument("address", metavar="HOST:PORT", required=False)
@login_options("standby", keeps=True)
@click.option("--none", "remove", is_flag=True, help="remove the channel's standby")
@click.option("--no-check", is_flag=True, help="skip the preflight of the new standby")
@pass_app
def set_standby(app: App, name: str, address: str | None, user: str | None, password: str | None,
                password_env: str | None, remove: bool, no_check: bool) -> None:
    """Set or remove a channel's standby server.

    The standby is a replica of the source with its own binlog and log_slave_updates on. It is
    checked first (unless --no-check). User and password not given stay as they were.

    Example:

    \b
        gate channel set-standby shop db2.example.com:3306 --user gate --password-env SHOP_SOURCE_PASSWORD
        gate channel set-standby shop --none
    """
    if remove == (address is not None):
        raise InvalidValue("Give either the standby's HOST:PORT or --none to remove it, not both or neither.")
    _set_server(app, name, "standby", address, user, password, password_env, no_check)


@channel.command(name="set")
@click.argument("name")
@click.option("--failover-mode", type=click.Choice(failover.MODES),
              help="how a switch finds what the DC already holds: by GTID, or by fingerprint (origin server_id, "
                   "timestamp, row images) for binlogs without GTIDs")
@click.option("--on-divergence", type=click.Choice(failover.ON_DIVERGENCE),
              help="when the DC holds transactions the standby never received: stop gate, or report and go on")
@pass_app
def set_(app: App, name: str, failover_mode: str | None, on_divergence: str | None) -> None:
    """Set a channel's failover behaviour.

    --failover-mode chooses how gate, after a switch, recognises the standby's transactions that the DC
    already holds. --on-divergence chooses what happens when the DC holds transactions the standby
    never received (lost by asynchronous replication): 'stop' makes gate exit with the report,
    'continue' logs the report and goes on. A running gate reads these settings when it next starts
    the channel. With no option the settings are only shown.

    Example:

    \b
        gate channel set shop --on-divergence continue
        gate channel set shop --failover-mode fingerprint
    """
    settings = channels.set_failover(app.dc, name, failover_mode, on_divergence)
    data = {"channel": name, "failover_mode": settings.failover_mode, "on_divergence": settings.on_divergence}
    app.emit(data, pairs(data))


@channel.command(name="switch")
@click.argument("name")
@click.option("--catch-up-timeout", default=60.0, show_default=True, metavar="SECONDS",
              help="how long to wait for the standby to apply all that the source has binlogged")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@pass_app
def switch(app: App, name: str, catch_up_timeout: float, yes: bool) -> None:
    """Switch a stopped channel to its standby (a planned switch).

    For when the source is alive, e.g. before maintenance on it. Refused while gate runs the channel:
    stop it first. Waits until the standby has applied all that the source has binlogged
    (MASTER_GTID_WAIT), removes rows above the checkpoint, and stores the switch as a failover does: the
    standby becomes the channel's source, the channel has no standby any more, and the resume position
    is the newest standby sample older than the last checkpointed transaction minus
    failover_margin_seconds. The next 'gate run' reads the standby from there and drops what the DC
    already holds, so every change stays in the DC exactly once; new rows carry the standby's address as
    instance_name. Samples exist only if gate has run the channel with this standby. 'gate status' shows
    the switch.

    Example:

    \b
        gate channel switch shop --yes && gate run shop
    """
    if not yes:
        need_terminal(f"Channel '{name}' was not switched", "Add --yes to switch it to its standby.")
        if not click.confirm(f"Switch channel '{name}' to its standby now?"):
            raise NotConfirmed(f"Channel '{name}' was not switched.")
    data = channels.switch(app.dc, name, catch_up_timeout)
    app.emit(data, pairs(data))


@channel.command()
@click.argument("name")
@click.argument("user")
@click.option("--host", default="%", show_default=True, help="host part of the account")
@click.option("--password-env", metavar="VAR", help="environment variable holding the password of a new user")
@pass_app
def grant(app: App, name: str, user: str, host: str, password_env: str | None) -> None:
    """Let an application user read a channel's changes.

    Grants USER@HOST SELECT on exactly NAME.transfer_data and NAME.transfer_checkpoint on the DC
    server, nothing else (gate's own tables, which hold the settings, stay hidden). A user that does
    not exist yet is created with the password in the environment variable given by --password-env;
    an existing user keeps its password.

    Example:

    \b
        export APP_PASSWORD=...
        gate channel grant shop reporting --host '10.0.%' --password-env APP_PASSWORD
    """
    created = channels.grant(app.dc, name, user, host, password_env)
    data = {"channel": name, "user": user, "host": host, "created": created,
            "tables": [f"{name}.transfer_data", f"{name}.transfer_checkpoint"]}
    account = "new user" if created else "existing user, password unchanged"
    app.emit(data, f"granted SELECT on {name}.transfer_data and {name}.transfer_checkpoint to '{user}'@'{host}' "
                   f"({account})")


@channel.command(name="check")
@click.argument("name")
@pass_app
def check_channel(app: App, name: str) -> None:
    """Run the preflight on a channel's source and standby.

    The same checks as 'gate check-source', with the channel's logins and server_id. Exits with
    status 1 when a server fails a check.

    Example:

    \b
        gate channel check shop
    """
    _report(app, channels.check(app.dc, name))


# --- preflight ---------------------------------------------------------------------------------


def _report(app: App, results: list[dict[str, Any]]) -> None:
    """Print preflight results; fail (status 1) if any server has a fatal problem."""
    failed = [r for r in results if any(p.fatal for p in r["problems"])]
    if app.as_json:
        click.echo(json.dumps([{**r, "ok": r not in failed, "problems": [asdict(p) for p in r["problems"]]}
                               for r in results], indent=2))
        if failed:
            click.get_current_context().exit(PreflightFailed.exit_code)
        return
    for result in results:
        warn([p for p in result["problems"] if not p.fatal])
        if result not in failed:
            server_id = result["server_id"]
            click.echo(f"{result['role']} {result['server']}: ready for gate "
                       + ("(server_id not checked: give --server-id)" if server_id is None
                          else f"with server_id {server_id}"))
    if failed:
        raise PreflightFailed("\n".join(
            describe_failure(r["server"], r["role"], [p for p in r["problems"] if p.fatal]) for r in failed))


@main.command(name="check-source")
@click.argument("address", metavar="HOST:PORT")
@login_options("server")
@click.option("--server-id", type=int, help="the server_id gate would use; checked for clashes when given")
@click.option("--role", type=click.Choice(["source", "standby"]), default="source", show_default=True,
              help="standby also needs log_slave_updates")
@pass_app
def check_source(app: App, address: str, user: str | None, password: str | None, password_env: str | None,
                 server_id: int | None, role: str) -> None:
    """Check that a server is set up for gate.

    Checks log_bin ON, binlog_format ROW, binlog_row_image FULL, binlog_row_metadata FULL, that the
    user has REPLICATION SLAVE, BINLOG MONITOR (or REPLICATION CLIENT) and SELECT, and, with
    --server-id, that no other replica and not the server itself uses that server_id. Each problem
    names the statement or my.cnf line that fixes it. Exits with status 1 when a check fails.

    Example:

    \b
        export SOURCE_PASSWORD=...
        gate check-source db1.example.com:3306 --user gate --password-env SOURCE_PASSWORD --server-id 4242
    """
    server = channels.server_login(address, user, password, password_env, role)
    _report(app, [{"role": role, "server": server.address, "server_id": server_id,
                   "problems": check_server(server, server_id, role)}])


# --- running and reading a channel (gate/cli_run.py, gate/cli_consume.py) --------------------

from gate.cli_consume import spark_load, spark_materialise, tail  # noqa: E402  (they use App via pass_obj)
from gate.cli_run import run  # noqa: E402
from gate.cli_run import status as status_command  # noqa: E402  (gate.cli has a sandbox 'status' too)

for _command in (run, status_command, tail, spark_load, spark_materialise):
    main.add_command(_command)
