"""``gate channel``: create, show, change and drop channels."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

from gate.admin import channel as channels
from gate.admin import retention
from gate.admin import skip as skips
from gate.admin import snapshot as snapshots
from gate.admin.preflight import describe_tls, tls_report
from gate.capture import failover
from gate.cli.app import App, login_options, need_terminal, pairs, pass_app, report_checks, table, tls_options, warn
from gate.cli.snapshot import describe_request, emit_request, way_options
from gate.common.columns import MASK, parse_keys, parse_rules
from gate.common.config import check_range
from gate.common.errors import InvalidValue, NotConfirmed
from gate.common.tls import TlsOptions, given, tls_settings

# --- channels ----------------------------------------------------------------------------------


def retain_days_value(text: str | None) -> int | None:
    """``--retain-days``: a whole number of days, or ``none`` (the same as 0: keep every row)."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return 0
    if not text.strip().isdigit():
        raise InvalidValue(f"--retain-days must be a whole number of days or 'none' (keep every row), not {text!r}.")
    return int(text)


_RETAIN_HELP = ("remove rows older than N days once every registered consumer has read them; 'none' or 0 keeps "
                "every row")
_IDLE_HELP = "report a consumer behind the checkpoint whose cursor has not moved for DAYS as stale"


@click.group()
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


def _print_channel(app: App, name: str) -> None:
    data = channels.show(app.dc, name)
    app.emit(data, pairs(data))


@channel.command()
@click.argument("name")
@click.option("--source", "source_address", required=True, metavar="HOST:PORT", help="the source server")
@login_options("source", "source")
@tls_options("source", "source")
@click.option("--standby", "standby_address", metavar="HOST:PORT", help="a replica of the source to fail over to")
@login_options("standby", "standby")
@tls_options("standby", "standby")
@click.option("--server-id", type=int, help="server_id gate reads the binlog with [default: derived from NAME]")
@click.option("--timezone", help="time zone TIMESTAMP values are shown in [default: channel_defaults]")
@click.option("--binary-format", type=click.Choice(["base64", "hex"]), help="how binary strings are written")
@click.option("--writers", type=int, help="concurrent DC writer connections [default: channel_defaults]")
@click.option("--allow", multiple=True, metavar="PATTERN", help="capture only tables matching (repeatable)")
@click.option("--deny", multiple=True, metavar="PATTERN", help="never capture tables matching (repeatable)")
@click.option("--retain-days", metavar="N|none", help=_RETAIN_HELP + " [default: channel_defaults, none]")
@click.option("--consumer-max-idle-days", type=float, metavar="DAYS", help=_IDLE_HELP + " [default: channel_defaults, 7]")
@click.option("--no-check", is_flag=True, help="skip the preflight of the source and standby")
@click.option("--snapshot", "snapshot", is_flag=True,
              help="also request a snapshot of every table the channel captures (see 'gate snapshot')")
@way_options
@pass_app
def create(app: App, name: str, source_address: str, source_user: str | None, source_password: str | None,
           source_password_env: str | None, source_tls_mode: str | None, source_tls_ca: str | None,
           source_tls_cert: str | None, source_tls_key: str | None, standby_address: str | None,
           standby_user: str | None, standby_password: str | None, standby_password_env: str | None,
           standby_tls_mode: str | None, standby_tls_ca: str | None, standby_tls_cert: str | None,
           standby_tls_key: str | None, server_id: int | None,
           timezone: str | None, binary_format: str | None, writers: int | None, allow: tuple[str, ...],
           deny: tuple[str, ...], retain_days: str | None, consumer_max_idle_days: float | None,
           no_check: bool, snapshot: bool, whole: tuple[str, ...], keys: tuple[str, ...]) -> None:
    """Create a channel: its database and tables on the DC server.

    Checks the source (and standby) first as 'gate check-source' does, unless --no-check, then
    creates the database NAME on the DC server with transfer_data, transfer_checkpoint (0, 0) and
    gate's own tables, and stores the settings. Settings not given come from channel_defaults in
    config.yaml. The default server_id is a stable number from 100000 to 999999 computed from NAME
    (CRC-32 of the name); give --server-id when another replica of the source uses it. Passwords
    given with --source-password-env are stored as the reference ${VAR}, never as the value.
    --retain-days N makes 'gate run' remove rows older than N days that every registered consumer
    has read (default: none, every row is kept). With --snapshot, the channel also gets a snapshot
    request for every table it captures on the source, so that 'gate run' writes the rows those tables
    already hold, not only their changes from now on; a table gate cannot snapshot (neither a primary key
    nor a unique key on NOT NULL columns) is not requested: the channel is created, a "not requested:
    ..." line on stderr names the table with the fix, and the exit status is 4; --whole-table and --key
    snapshot such tables another way (see 'gate snapshot'). The channel and its
    requests are made in one DC transaction: a create cut short (killed, or its DC failing) is completed
    by running it again. --source-tls-* and
    --standby-tls-* set how gate's connections to each server use TLS (default: channel_defaults.tls);
    the channel stores the file paths, never their contents. The preflight reports, for each server,
    whether it offers TLS, the protocol and cipher negotiated and what was verified.

    Example:

    \b
        gate channel create shop --source db1.example.com:3306 --source-user gate \\
            --source-password-env SHOP_SOURCE_PASSWORD --source-tls-mode verify-identity \\
            --source-tls-ca /etc/gate/ca.pem
        export SHOP_SOURCE_PASSWORD=...
        gate channel create shop --source db1.example.com:3306 --source-user gate \\
            --source-password-env SHOP_SOURCE_PASSWORD --standby db2.example.com:3306 \\
            --standby-user gate --standby-password-env SHOP_SOURCE_PASSWORD --allow 'shop.*'
        gate channel create crm --source db3.example.com:3306 --allow 'crm.*' --snapshot
    """
    ways = _ways(snapshot, whole, keys)
    default_tls = app.config.channel_defaults.tls
    source = channels.server_login(
        source_address, source_user, source_password, source_password_env, "source",
        tls=tls_settings(source_tls_mode, source_tls_ca, source_tls_cert, source_tls_key, keep=default_tls))
    standby = (channels.server_login(
        standby_address, standby_user, standby_password, standby_password_env, "standby",
        tls=tls_settings(standby_tls_mode, standby_tls_ca, standby_tls_cert, standby_tls_key, keep=default_tls))
               if standby_address else None)
    _, warnings, requested = channels.create(
        app.dc, app.config.channel_defaults, name, source, standby, server_id=server_id, timezone=timezone,
        binary_format=binary_format, writers=writers, allow=allow, deny=deny, check=not no_check,
        retain_days=retain_days_value(retain_days), consumer_max_idle_days=consumer_max_idle_days, snapshot=snapshot,
        ways=ways)
    warn(warnings)
    if not no_check:
        for role, server in (("source", source), ("standby", standby)):
            if server is not None:
                click.echo(f"{role} {server.address}: {describe_tls(tls_report(server, role))}", err=True)
    if requested is None:
        data = channels.show(app.dc, name)
        app.emit({**data, "warnings": [asdict(p) for p in warnings]}, pairs(data))
        return
    data = channels.show(app.dc, name)
    emit_request(app, {**data, "warnings": [asdict(p) for p in warnings], "snapshot": requested.as_dict()},
                 pairs(data) + "\n\n" + describe_request(requested, "no snapshot requested: the channel captures no "
                                                                "table on the source yet"), requested)


def _ways(snapshot: bool, whole: tuple[str, ...], keys: tuple[str, ...]) -> snapshots.Ways:
    """--whole-table and --key, which say how --snapshot reads the tables they name."""
    if (whole or keys) and not snapshot:
        raise InvalidValue("--whole-table and --key say how --snapshot reads a table: give --snapshot too.")
    return snapshots.Ways(whole, parse_keys(keys))


def _describe_gate(gate: dict[str, Any] | None) -> str | None:
    """The running gate as HOST/PID, or by its DC connection when it recorded neither."""
    if gate is None:
        return None
    return f"{gate['host']}/{gate['pid']}" if gate["host"] else f"connection {gate['connection']}"


@channel.command(name="list")
@pass_app
def list_(app: App) -> None:
    """List the channels on the DC server: which run, how far behind, where their metrics are.

    For each channel: state (running when a gate holds the channel's lock on the DC server, else
    stopped); gate, the running gate's host and pid (HOST/PID); standing_by, the gates started with
    'gate run --standby' waiting to take it over (HOST/PID, those whose heartbeat is recent; in JSON
    also last_takeover, the last one a standby made: when, from whom, why); lag_seconds, as 'gate status' computes
    it: 0 when the channel's resume position is the source's binlog end, else the source's clock minus
    the source time of the oldest transaction not yet at or below the checkpoint (so an idle source does
    not make it grow, and a stopped channel's lag grows from the first transaction it misses); the
    checkpoint (id and tid of the last complete transaction in transfer_data); metrics, the address and
    port the running gate serves /metrics on (for a stopped channel: its metrics_port setting); source,
    standby and the DC schema version it was created with. A channel gate cannot use as it is shows the
    state incomplete (its creation stopped part way) or damaged (a table dropped by hand), with a line
    that says what to do.
    Asks each source for its binlog end (3 s timeout).

    Example:

    \b
        gate channel list
        gate --json channel list
    """
    rows = channels.summaries(app.dc)
    shown = [{**row, "gate": _describe_gate(row["gate"]),
              "metrics": row["metrics_port"] and f"{row['metrics_address']}:{row['metrics_port']}"} for row in rows]
    problems = [f"\nchannel {row['channel']} is {row['state']}: {row['problem']}" for row in rows if row["problem"]]
    shown = [{**row, "standing_by": ", ".join(row["standing_by"]) or None} for row in shown]
    app.emit(rows, "\n".join([table(shown, ["channel", "state", "gate", "lag_seconds", "checkpoint_id",
                                            "checkpoint_tid", "metrics", "source", "standby", "schema_version",
                                            "standing_by"]),
                              *problems]))


@channel.command()
@click.argument("name")
@pass_app
def show(app: App, name: str) -> None:
    """Show one channel: every setting, its checkpoint and resume position.

    Passwords are shown as ***. Each server's tls shows its mode, CA, client certificate and key
    paths and what a connection verifies of the server (its peer; 'gate channel check' shows the
    certificate itself). The resume position is the binlog file, position and GTID position of the
    source right after the last checkpointed transaction, or where 'gate channel set-position' put it.

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
    their accounts. The cursors of the registered consumers (gate consumer list) go with the
    database: the confirmation, the refusal without a terminal and the output name each consumer
    with its cursor and how far it is behind the checkpoint.

    Example:

    \b
        gate channel drop shop --yes
    """
    prompt, consumers = channels.drop_prompt(app.dc, name, force)
    if not yes:
        need_terminal(f"Channel '{name}' was not dropped", (f"{prompt}. " if consumers else "") +
                      "Add --yes to drop it with all its data.")
        typed = click.prompt(f"{prompt}. Type the channel name to confirm", default="", show_default=False)
        if typed != name:
            raise NotConfirmed(f"Channel '{name}' was not dropped: the name typed did not match.")
    data: dict[str, Any] = {"dropped": name}
    running, consumers = channels.drop(app.dc, name, force)
    if consumers:
        data["consumers"] = consumers
    if running is not None:
        click.echo(f"warning: a gate process was running channel '{name}' (DC connection {running}); its database "
                   "is gone, so that gate stops with a DC error when it next writes. Stop it if it is still running.",
                   err=True)
        data["running_gate_connection"] = running
    app.emit(data, f"dropped channel {name}" + (f" and the cursors of its registered consumers: "
                                                 f"{retention.positions(consumers)}" if consumers else ""))


@channel.command(name="filter")
@click.argument("name")
@click.option("--allow", multiple=True, metavar="PATTERN", help="add a pattern to the allow list (repeatable)")
@click.option("--deny", multiple=True, metavar="PATTERN", help="add a pattern to the deny list (repeatable)")
@click.option("--clear", is_flag=True, help="empty both lists first")
@click.option("--snapshot", "snapshot", is_flag=True,
              help="request snapshots of the tables the new lists capture and the old ones did not")
@way_options
@pass_app
def filter_(app: App, name: str, allow: tuple[str, ...], deny: tuple[str, ...], clear: bool, snapshot: bool,
            whole: tuple[str, ...], keys: tuple[str, ...]) -> None:
    """Set which tables a channel captures, by db.table patterns.

    A table is captured when the allow list is empty or one allow pattern matches it, and no deny
    pattern matches it. Patterns are db.table with the wildcards * (any characters) and ? (one
    character), matched case-sensitively. --allow and --deny add to the lists, --clear empties both
    first; with no option the lists are only shown. A running gate applies the new lists within a few
    seconds, from its next transaction on; rows a newly allowed table held before are not captured,
    unless --snapshot: it requests a snapshot of each table on the source that the new lists capture
    and the old ones did not, and names them. New lists that capture a table whose primary-key column
    a column rule matches are refused; a --snapshot leaves out a table gate could not snapshot, naming
    it on stderr ("not requested: ..."), with exit status 4, unless --whole-table or --key says how to
    read it (see 'gate snapshot').

    Example:

    \b
        gate channel filter shop --clear --allow 'shop.*' --deny '*.audit_log'
        gate channel filter shop --allow 'crm.customer?' --snapshot
    """
    settings, requested = channels.set_filter(app.dc, name, allow, deny, clear, snapshot, _ways(snapshot, whole, keys))
    data: dict[str, Any] = {"channel": name, "allow": list(settings.allow), "deny": list(settings.deny)}
    if requested is None:
        app.emit(data, pairs(data))
        return
    nothing = "no snapshot requested: the new lists capture no table on the source that the old ones did not"
    emit_request(app, {**data, "snapshot": requested.as_dict()}, pairs(data) + "\n\n" + describe_request(requested, nothing),
                 requested)


@channel.command(name="columns")
@click.argument("name")
@click.option("--exclude", multiple=True, metavar="PATTERN", help="leave db.table.column out of every image (repeatable)")
@click.option("--mask", multiple=True, metavar="PATTERN", help=f"write {MASK} for its values (repeatable)")
@click.option("--hash", "hash_", multiple=True, metavar="PATTERN",
              help="write the hex HMAC-SHA-256 of its values, keyed with --hash-key-env (repeatable)")
@click.option("--hash-key-env", metavar="VAR", help="environment variable holding the HMAC key of the --hash rules")
@click.option("--truncate", multiple=True, metavar="PATTERN=N",
              help="keep the first N characters of its values (bytes for binary columns) (repeatable)")
@click.option("--clear", is_flag=True, help="remove every rule first")
@pass_app
def columns(app: App, name: str, exclude: tuple[str, ...], mask: tuple[str, ...], hash_: tuple[str, ...],
            hash_key_env: str | None, truncate: tuple[str, ...], clear: bool) -> None:
    """Exclude, mask, hash or truncate columns before they reach the DC.

    Patterns are db.table.column with the wildcards * and ? of table patterns. Rules are kept in order
    (--exclude, then --mask, --hash, --truncate as given, after the existing ones) and every rule
    matching a column applies to it in that order; an excluded column is absent from the row images
    and from CREATETABLE/ALTERTABLE payloads. --mask writes *** for the value; --hash writes the
    lowercase hex HMAC-SHA-256 of the value (its UTF-8 text, or its bytes for binary columns), keyed
    with the contents of the environment variable --hash-key-env names: gate stores only the
    variable's name, and 'gate run' refuses to start without it. --truncate keeps the first N
    characters (bytes for binary columns, before base64/hex). NULL stays NULL. A rule may not hit a
    primary-key column: it is refused here (from the source's information_schema), by 'gate channel
    filter' when new lists would capture such a table, by 'gate channel check' and by 'gate run'.
    With no option the rules are only shown. A running gate applies new rules from its next
    transaction on; rows already in the DC stay as they are.

    Example:

    \b
        export GATE_HASH_KEY=...
        gate channel columns shop --exclude 'shop.users.password_hash' --hash 'shop.*.email' --hash-key-env GATE_HASH_KEY
        gate channel columns shop --mask 'shop.users.phone' --truncate 'shop.docs.body=200'
    """
    rules = parse_rules(exclude, mask, hash_, hash_key_env, truncate)
    settings = channels.set_columns(app.dc, name, rules, clear)
    data = {"channel": name, "columns": [rule.as_row() for rule in settings.columns]}
    app.emit(data, "\n".join([rule.describe() for rule in settings.columns] or [f"channel {name}: no column rules"]))


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

    Give a binlog file and position (the file must be in the source's SHOW BINARY LOGS, the position
    the start of an event outside a transaction, e.g. a Gtid event's Pos in SHOW BINLOG EVENTS), a
    MariaDB GTID position the source has binlogged and not purged, or --now for the source's current
    end. Only the resume position changes; the
    checkpoint (id, tid) stays, so ids continue where transfer_data stands.

    Example:

    \b
        gate channel set-position shop --file mysql-bin.000042 --pos 4
        gate channel set-position shop --now
    """
    state = channels.set_position(app.dc, name, log_file=log_file, log_pos=log_pos, gtid=gtid, now=now)
    data = {"channel": name, **asdict(state)}
    app.emit(data, pairs(data))


@channel.command(name="skip")
@click.argument("name")
@click.option("--transaction", required=True, metavar="GTID",
              help="the transaction gate stopped at, as its error and 'gate status' name it (its GTID)")
@pass_app
def skip(app: App, name: str, transaction: str) -> None:
    """Move a stopped channel past the one transaction gate refused.

    gate stops at a transaction that changes a captured table in a form it cannot capture (a statement
    logged by a session with binlog_format STATEMENT or MIXED, a partial row image of a session with
    binlog_row_image MINIMAL or NOBLOB, a table map without column names, logged with binlog_row_metadata
    below FULL), with everything before it written and checkpointed; its error
    and 'gate status' name the transaction. This command checks that TRANSACTION is that one and that
    the channel still resumes at its start, finds its end in the source's binlog (SHOW BINLOG EVENTS),
    and in one DC transaction writes a SKIPPED row per table the refused change names (their own tid)
    and moves the checkpoint and the resume position past exactly that transaction. Its changes are
    then missing from the DC: 'gate snapshot NAME --table DB.TABLE' brings the tables level again.
    'gate status' lists the skipped transactions.

    Example:

    \b
        gate channel skip shop --transaction 0-1-4711
    """
    skipped = skips.skip(app.dc, name, transaction).as_row()
    app.emit({"channel": name, **skipped},
             f"channel {name}: skipped transaction {skipped['transaction']} ({skipped['start']} to {skipped['end']}); "
             f"SKIPPED row(s) {', '.join(map(str, skipped['ids']))}")


def _set_server(app: App, name: str, role: str, address: str | None, user: str | None, password: str | None,
                password_env: str | None, no_check: bool, tls: TlsOptions = (None, None, None, None)) -> None:
    _, warnings = channels.set_server(app.dc, name, role, address, user, password, password_env, check=not no_check,
                                      tls=tls)
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
@tls_options("source")
@click.option("--no-check", is_flag=True, help="skip the preflight of the new source")
@pass_app
def set_source(app: App, name: str, address: str, user: str | None, password: str | None,
               password_env: str | None, tls_mode: str | None, tls_ca: str | None, tls_cert: str | None,
               tls_key: str | None, no_check: bool) -> None:
    """Point a channel at another source server.

    Checks the new source first (unless --no-check). User and password not given stay as they
    were. A binlog position belongs to one server: after moving to another server, set a start
    position there with 'gate channel set-position'.

    Example:

    \b
        gate channel set-source shop db3.example.com:3306 --password-env SHOP_SOURCE_PASSWORD
    """
    _set_server(app, name, "source", address, user, password, password_env, no_check,
                (tls_mode, tls_ca, tls_cert, tls_key))


@channel.command(name="set-standby")
@click.argument("name")
@click.argument("address", metavar="HOST:PORT", required=False)
@login_options("standby", keeps=True)
@tls_options("standby")
@click.option("--none", "remove", is_flag=True, help="remove the channel's standby")
@click.option("--no-check", is_flag=True, help="skip the preflight of the new standby")
@pass_app
def set_standby(app: App, name: str, address: str | None, user: str | None, password: str | None,
                password_env: str | None, tls_mode: str | None, tls_ca: str | None, tls_cert: str | None,
                tls_key: str | None, remove: bool, no_check: bool) -> None:
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
    _set_server(app, name, "standby", address, user, password, password_env, no_check,
                (tls_mode, tls_ca, tls_cert, tls_key))


@channel.command(name="set")
@click.argument("name")
@click.option("--failover-mode", type=click.Choice(failover.MODES),
              help="how a switch finds what the DC already holds: by GTID, or by fingerprint (origin server_id, "
                   "timestamp, row images) for binlogs without GTIDs")
@click.option("--on-divergence", type=click.Choice(failover.ON_DIVERGENCE),
              help="when the DC holds transactions the standby never received: stop gate, or report and go on")
@click.option("--retain-days", metavar="N|none", help=_RETAIN_HELP)
@click.option("--consumer-max-idle-days", type=float, metavar="DAYS", help=_IDLE_HELP)
@click.option("--metrics-port", type=int, metavar="PORT",
              help="the port 'gate run' serves /metrics, /healthz and /readyz on, 0 for none")
@click.option("--metrics-address", metavar="ADDRESS", help="the interface they listen on, e.g. 127.0.0.1 or 0.0.0.0")
@click.option("--stuck-after-seconds", type=float, metavar="S",
              help="/healthz says 503 after this long without progress while there is work")
@click.option("--ready-lag-seconds", type=float, metavar="S", help="/readyz says 503 while the lag is above this")
@click.option("--on-rows-without-events", type=click.Choice(channels.ON_ROWS_WITHOUT_EVENTS),
              help="after a statement that changed rows without row events (TRUNCATE PARTITION, ...): snapshot "
                   "the tables it changed, or only flag its payload")
@click.option("--lease-seconds", type=float, metavar="S",
              help="a running gate silent for longer (host down, cut off) is taken over by a standby")
@click.option("--snapshot-whole-table-rows", type=int, metavar="N",
              help="the most rows of a table snapshotted whole (gate snapshot --whole-table)")
@tls_options("source", "source")
@tls_options("standby", "standby")
@pass_app
def set_(app: App, name: str, failover_mode: str | None, on_divergence: str | None, retain_days: str | None,
         consumer_max_idle_days: float | None, metrics_port: int | None, metrics_address: str | None,
         stuck_after_seconds: float | None, ready_lag_seconds: float | None, on_rows_without_events: str | None,
         snapshot_whole_table_rows: int | None, lease_seconds: float | None,
         source_tls_mode: str | None,
         source_tls_ca: str | None, source_tls_cert: str | None, source_tls_key: str | None,
         standby_tls_mode: str | None, standby_tls_ca: str | None, standby_tls_cert: str | None,
         standby_tls_key: str | None) -> None:
    """Set a channel's failover behaviour, retention, metrics and health settings, and snapshot bound.

    --failover-mode chooses how gate, after a switch, recognises the standby's transactions that the DC
    already holds. --on-divergence chooses what happens when the DC holds transactions the standby
    never received (lost by asynchronous replication): 'stop' makes gate exit with the report,
    'continue' logs the report and goes on. A running gate reads these settings when it next starts
    the channel.

    --retain-days N: 'gate run' removes rows older than N days once every registered consumer (gate
    consumer list) has read them; 'none' or 0 keeps every row. --consumer-max-idle-days: a consumer
    behind the checkpoint that has not moved for longer is reported as stale (it is never dropped by
    gate). A running gate applies both at its next retention pass.

    --metrics-port and --metrics-address set where 'gate run' serves its metrics and health endpoints
    (its --metrics-port and --metrics-address options override them); give each channel run on one
    host its own port (a warning names another channel with the same address and port).
    --stuck-after-seconds and --ready-lag-seconds are the limits of /healthz and /readyz. A running
    gate applies the two limits within seconds, a new address or port when it next starts. With no
    option the settings are only shown.

    --on-rows-without-events: what gate does after a statement that changed rows without row events
    (ALTER TABLE ... TRUNCATE, DROP or EXCHANGE PARTITION, ALTER SEQUENCE, ...; its payload names them under
    ROWS_WITHOUT_EVENTS): 'snapshot' (the default) requests a snapshot of each captured table it changed,
    so that the DC's fold converges again; 'flag' leaves it at the payload. A running gate applies it
    within seconds.

    --lease-seconds S: a gate running the channel that has not beaten its heartbeat in the DC for S
    seconds (its host down or cut off from the DC, the process stopped) is taken over by a gate standing
    by ('gate run --standby'); standbys apply it at once, the running gate from its next start. See
    docs/dba/several-hosts.md.

    --snapshot-whole-table-rows N: the most rows of a table 'gate snapshot --whole-table' reads (it
    holds them all in memory); a running gate uses it from its next start.

    --source-tls-* and --standby-tls-* change how gate's connections to that server use TLS (options
    not given stay; '' removes a file); gate connects with the new settings first and stores nothing
    if that fails. A running gate uses them when it next starts.

    Example:

    \b
        gate channel set shop --on-divergence continue
        gate channel set shop --failover-mode fingerprint
        gate channel set shop --retain-days 14 --consumer-max-idle-days 3
        gate channel set shop --metrics-port 9188 --ready-lag-seconds 300
        gate channel set shop --on-rows-without-events flag
        gate channel set shop --lease-seconds 10
        gate channel set shop --source-tls-mode verify-identity --source-tls-ca /etc/gate/ca.pem
    """
    tls = {role: options for role, options in (
        ("source", (source_tls_mode, source_tls_ca, source_tls_cert, source_tls_key)),
        ("standby", (standby_tls_mode, standby_tls_ca, standby_tls_cert, standby_tls_key))) if given(options)}
    days = retain_days_value(retain_days)
    channels.check_retention(days, consumer_max_idle_days)  # every value is checked before anything changes
    if snapshot_whole_table_rows is not None:
        check_range("channel_defaults.snapshot_whole_table_rows", snapshot_whole_table_rows,
                    "--snapshot-whole-table-rows")
    _, clashes = channels.set_metrics(app.dc, name, metrics_port, metrics_address, stuck_after_seconds,
                                      ready_lag_seconds, lease_seconds)  # it checks its values before it changes anything
    settings = channels.set_tls(app.dc, name, tls)
    settings = channels.set_failover(app.dc, name, failover_mode, on_divergence)
    if on_rows_without_events is not None:
        settings = channels.set_rows_without_events(app.dc, name, on_rows_without_events)
    if snapshot_whole_table_rows is not None:
        settings = channels.set_whole_table_rows(app.dc, name, snapshot_whole_table_rows)
    if days is not None or consumer_max_idle_days is not None:
        settings = channels.set_retention(app.dc, name, days, consumer_max_idle_days)
    for clash in clashes:
        click.echo(f"warning: {clash}", err=True)
    data: dict[str, Any] = {"channel": name, "failover_mode": settings.failover_mode,
                            "on_divergence": settings.on_divergence}
    defaults = asdict(settings.defaults)
    data.update({key: defaults[key] for key in ("retain_days", "consumer_max_idle_days", *channels.METRICS_SETTINGS,
                                                "on_rows_without_events")})
    if snapshot_whole_table_rows is not None:  # else shown by 'gate channel show', with the other defaults
        data["snapshot_whole_table_rows"] = defaults["snapshot_whole_table_rows"]
    data.update({f"{role}_tls": getattr(settings, role).tls.as_row() for role in tls})  # the servers changed
    app.emit(data, pairs(data))


@channel.command()
@click.argument("name")
@click.option("--dry-run", is_flag=True, help="print what would be removed, remove nothing")
@pass_app
def purge(app: App, name: str, dry_run: bool) -> None:
    """Apply a channel's retention now: remove the rows it allows.

    'gate run' does the same in the background every retention_interval_seconds; this runs it on
    demand, also while gate runs. The bound is the lowest of the checkpoint and every registered
    consumer's cursor, lowered to the last row older than retain_days (and to the end of a whole
    transaction); rows up to it go, oldest first, in small batches. Prints the bound, what pins it
    and the rows removed (--dry-run: the rows that would go, removing nothing). A channel with
    retain_days 0 (none) keeps every row.

    Example:

    \b
        gate channel purge shop --dry-run
        gate channel purge shop
    """
    data = retention.purge_channel(app.dc, name, dry_run)
    verb = "would remove" if dry_run else "removed"
    count = data["removable_rows"] if dry_run else data["removed_rows"]
    app.emit(data, "\n".join([
        f"channel {name}: retain_days {data['retain_days'] or 'none'}, checkpoint id {data['checkpoint_id']}, "
        f"purged through id {data['purged_through']}",
        f"bound: id {data['bound']}, pinned by {data['pinned_by']}",
        f"{verb} {count} rows" + (f" (ids {data['purged_through'] + 1} to {data['bound']})" if count else ""),
    ]))


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
    report_checks(app, channels.check(app.dc, name))
