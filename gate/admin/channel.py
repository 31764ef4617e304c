"""Channel administration: what ``gate channel ...`` does on the DC server and the source.

Each function opens its own connections, validates what it is given before any SQL runs, and
returns plain data (dicts, lists) that the CLI prints as a table or as JSON.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import asdict, replace
from typing import Any

import pymysql

import dc_schema
from gate.admin import retention
from gate.admin import snapshot as snapshots
from gate.admin.catalog import (
    captured,
    cascade_problems,
    check_pattern,
    key_hits,
    rule_problems,
    source_columns,
    source_tables,
)
from gate.admin.position import check_file_position, check_gtid
from gate.admin.preflight import Problem, check_server, require_server, tls_report
from gate.capture import failover
from gate.capture.holder import processes, takeovers
from gate.capture.lag import source_lag
from gate.capture.reader import current_position
from gate.common import dc
from gate.common.columns import ColumnRule
from gate.common.config import (
    ChannelDefaults,
    Secret,
    ServerConfig,
    check_identifier,
    check_range,
    check_timezone,
    parse_address,
)
from gate.common.dc import ChannelSettings, ResumeState
from gate.common.errors import (
    ChannelBusy,
    ChannelDamaged,
    ColumnRuleRefused,
    ConnectionFailed,
    InvalidIdentifier,
    InvalidValue,
    SchemaVersionError,
)
from gate.common.server import require_mariadb
from gate.common.tls import TlsOptions, TlsSettings, tls_settings

SERVER_IDS = range(100000, 1000000)  # where default server_ids fall
MAX_SERVER_ID = 2**32 - 1
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ACCOUNT_USER = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")
_ACCOUNT_HOST = re.compile(r"^[A-Za-z0-9_.%:/-]{1,255}$")


def default_server_id(name: str) -> int:
    """The server_id gate uses for a channel unless told otherwise: CRC-32 of the name mapped into 100000..999999."""
    return SERVER_IDS.start + zlib.crc32(name.encode()) % len(SERVER_IDS)


def server_login(address: str, user: str | None, password: str | None, password_env: str | None,
                 role: str, keep: ServerConfig | None = None, tls: TlsSettings | None = None) -> ServerConfig:
    """A server from HOST:PORT and login options; what is not given is taken from ``keep`` (else root, no password,
    default TLS settings).

    A password from ``password_env`` is stored as the reference ``${VAR}``, resolved whenever gate connects.
    """
    host, port = parse_address(address, f"The {role} address")
    if password is not None and password_env is not None:
        raise InvalidValue(f"Give the {role} password either literally or as an environment variable, not both.")
    if password_env is not None:
        secret = env_password(password_env, role)
    elif password is not None:
        if "${" in password:
            raise InvalidValue(
                f"The {role} password contains '${{', which gate would read as an environment reference. "
                "Put the password in an environment variable and pass its name with the --...-password-env option."
            )
        secret = Secret(password, f"The {role} password")
    else:
        secret = keep.password if keep else Secret("")
    return ServerConfig(host, port, user or (keep.user if keep else "root"), secret,
                        tls or (keep.tls if keep else TlsSettings()))


def env_password(variable: str, role: str) -> Secret:
    """A password kept as the reference ``${variable}``: gate stores the reference, never the value."""
    if not _ENV_NAME.match(variable):
        raise InvalidValue(
            f"{variable!r} is not an environment variable name. Use letters, digits and underscores, "
            "not starting with a digit, e.g. SOURCE_PASSWORD."
        )
    return Secret(f"${{{variable}}}", f"The {role} password")


def _merged(patterns: tuple[str, ...], more: tuple[str, ...]) -> tuple[str, ...]:
    """``patterns`` followed by the new valid ones of ``more``, without repeats."""
    return tuple(dict.fromkeys(patterns + tuple(check_pattern(p) for p in more)))


def create(dc_server: ServerConfig, defaults: ChannelDefaults, name: str, source: ServerConfig,
           standby: ServerConfig | None = None, *, server_id: int | None = None, timezone: str | None = None,
           binary_format: str | None = None, writers: int | None = None, allow: tuple[str, ...] = (),
           deny: tuple[str, ...] = (), check: bool = True, retain_days: int | None = None,
           consumer_max_idle_days: float | None = None,
           snapshot: bool = False, ways: snapshots.Ways = snapshots.NO_WAYS,
           ) -> tuple[ChannelSettings, list[Problem], snapshots.SnapshotRequest | None]:
    """Create channel ``name``: validate, check the servers (unless ``check`` is False), create its DC database,
    with ``snapshot`` a snapshot request for every table it captures on the source that 'gate run' can
    snapshot (read as ``ways`` says for the tables it names; the result names the others, with the fix),
    all in one DC transaction.

    A channel whose creation stopped part way is replaced. Returns the settings, the preflight's warnings
    (with the captured tables foreign-key cascades change without row events) and the snapshot requests.
    """
    check_identifier(name, "Channel name")
    chosen: dict[str, Any] = {"timezone": timezone, "binary_format": binary_format, "writers": writers,
                              "retain_days": retain_days, "consumer_max_idle_days": consumer_max_idle_days}
    defaults = replace(defaults, **{k: v for k, v in chosen.items() if v is not None})
    check_timezone(defaults.timezone)
    for key, value, option in (("writers", writers, "--writers"), ("retain_days", retain_days, "--retain-days"),
                               ("consumer_max_idle_days", consumer_max_idle_days, "--consumer-max-idle-days")):
        if value is not None:
            check_range(f"channel_defaults.{key}", value, option)
    server_id = default_server_id(name) if server_id is None else server_id
    if not 0 < server_id <= MAX_SERVER_ID:
        raise InvalidValue(f"--server-id must be between 1 and {MAX_SERVER_ID}, not {server_id}.")
    settings = ChannelSettings(name=name, source=source, standby=standby, server_id=server_id,
                               allow=_merged((), allow), deny=_merged((), deny), defaults=defaults)
    warnings: list[Problem] = []
    with dc.connect(dc_server, "DC") as conn:
        dc.check_new(conn, name)
        holder = dc.take_lock(conn, name)
        if holder is not None:
            raise ChannelBusy(f"Channel '{name}' is in use: another gate process holds its lock (DC connection "
                              f"{holder}), e.g. a create of the same name. Wait for it to end, then look with "
                              "'gate channel list'.")
        dc.check_privileges(conn, name)
        require_mariadb(conn, "DC", dc_server.address)  # the servers are checked by the preflight
        if check:
            warnings += require_server(source, server_id, "source")
            if standby is not None:
                warnings += require_server(standby, server_id, "standby", source)
            warnings += cascade_problems(settings)[1]
        tables = captured(source_tables(source), settings.allow, settings.deny) if snapshot else []
        read = ways.of(tables)
        tables, refused = snapshots.split_unreadable(settings, tables, read)
        requested = snapshots.SnapshotRequest(name, "channel create", refused=refused)
        try:
            dc.create_channel(conn, settings, lambda cur: snapshots.add_requests(cur, requested, tables, read))
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as exc:
            raise ConnectionFailed(
                f"The DC server {dc_server.address} failed while channel '{name}' was being created (error "
                f"{exc.args[0]}: {exc.args[1] if len(exc.args) > 1 else exc}), so it "
                f"is not complete. Once the DC server answers again, run the same 'gate channel create' again: it "
                f"completes the channel; or remove what was made with 'gate channel drop {name} --yes'.") from None
    return settings, warnings, requested if snapshot else None


def _masked(server: ServerConfig | None) -> dict[str, Any] | None:
    if server is None:
        return None
    return {"address": server.address, "user": server.user, "password": "***" if server.password.as_written() else "",
            "tls": {**server.tls.as_row(), "verifies": server.tls.verifies}}


def show(dc_server: ServerConfig, name: str) -> dict[str, Any]:
    """A channel's settings (passwords as ***), its checkpoint and resume position."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        resume = dc.read_resume(conn, name)
        with conn.cursor() as cur:
            cur.execute(f"SELECT name, value FROM {dc.q(name)}.gate_meta")
            meta = dict(cur.fetchall())
    return {
        "channel": name,
        "schema_version": int(meta["schema_version"]),
        "created_by": meta.get("created_by"),
        "source": _masked(settings.source),
        "standby": _masked(settings.standby),
        "server_id": settings.server_id,
        "allow": list(settings.allow),
        "deny": list(settings.deny),
        "failover_mode": settings.failover_mode,
        "on_divergence": settings.on_divergence,
        "columns": [rule.describe() for rule in settings.columns],
        "defaults": {k: v for k, v in asdict(settings.defaults).items() if k not in dc.PER_SERVER},
        "checkpoint": {"id": resume.id, "tid": resume.tid},
        "resume": {k: v for k, v in asdict(resume).items() if k not in ("id", "tid")},
    }


def summaries(dc_server: ServerConfig) -> list[dict[str, Any]]:
    """One entry per channel on the DC server: whether a gate runs it (the lock's holder, with the host and
    pid it recorded), the gates standing by for it (HOST/PID) and the last takeover by one, its lag (as
    'gate status' computes it), checkpoint, metrics address, servers and
    schema version. Of a channel with an incompatible schema only its name, version, state and the lock's
    DC connection: its tables may mean something else. A channel gate cannot use as it is has the state
    ``incomplete`` (its creation stopped part way) or ``damaged`` (a table is missing), and ``problem``
    says what to do."""
    result = []
    with dc.connect(dc_server, "DC") as conn:
        for name in dc.list_channels(conn, commented=True):
            broken = _broken(conn, name)
            meta = "gate_meta" not in dc.missing_tables(conn, name)
            if not meta and broken is None:
                continue  # gate's comment on a database that is no channel of gate's
            version = dc.stored_schema_version(conn, name) if meta else 0
            compatible = version in dc_schema.COMPATIBLE_VERSIONS and broken is None
            holder, runner = dc.running_gate(conn, name) if compatible else (dc.lock_holder(conn, name), None)
            row: dict[str, Any] = {
                "channel": name, "state": broken[0] if broken else "stopped" if holder is None else "running",
                "problem": broken and broken[1],
                "gate": None if holder is None else {"connection": holder, "host": runner and runner.host,
                                                     "pid": runner and runner.pid},
                "lag_seconds": None, "checkpoint_id": None, "checkpoint_tid": None, "metrics_address": None,
                "metrics_port": None, "source": None, "standby": None, "schema_version": version,
                "standing_by": [], "last_takeover": None}
            if compatible:
                settings = dc.read_settings(conn, name)
                resume = dc.read_resume(conn, name)
                metrics = _metrics_at(settings, runner)
                row.update(lag_seconds=source_lag(settings.source, resume)[1], checkpoint_id=resume.id,
                           checkpoint_tid=resume.tid, metrics_address=metrics and metrics[0],
                           metrics_port=metrics and metrics[1], source=settings.source.address,
                           standby=settings.standby.address if settings.standby else None)
                with conn.cursor() as cur:
                    found = processes(cur, name, settings.defaults.lease_seconds)
                    last = [t for t in takeovers(cur, name) if t.standby][-1:]
                row.update(standing_by=[f"{p['host']}/{p['pid']}" for p in found if p["role"] == "standby"],
                           last_takeover=last and asdict(last[0]) or None)
            result.append(row)
    return result


def _broken(conn: pymysql.Connection, name: str) -> tuple[str, str] | None:
    """The state and message of a channel database gate cannot use as it is: ``incomplete`` (its creation
    stopped part way) or ``damaged`` (a table missing); None for others."""
    if dc.unfinished(conn, name):
        return "incomplete", dc.unfinished_message(name)
    try:
        dc.schema_version(conn, name)
    except ChannelDamaged as exc:
        return "damaged", str(exc)
    except SchemaVersionError:
        pass
    return None


def _metrics_at(settings: ChannelSettings, runner: dc.Runner | None) -> tuple[str, int] | None:
    """Where the channel's metrics are served: by the running gate as it recorded, else by the channel's
    settings (what the next 'gate run' without --metrics-port uses); None for nowhere."""
    if runner is not None:
        if runner.metrics is None:
            return None
        address, port = runner.metrics.rsplit(":", 1)
        return address, int(port)
    defaults = settings.defaults
    return (defaults.metrics_address, defaults.metrics_port) if defaults.metrics_port else None


def _lock_for_drop(conn: pymysql.Connection, name: str, force: bool) -> int | None:
    """Take the channel's lock so that no gate starts running it meanwhile. Returns the DC connection of
    a gate running the channel (only with ``force``; without, that refuses)."""
    holder = dc.take_lock(conn, name)
    if holder is None:
        return None
    if not force:
        raise ChannelBusy(
            f"Channel '{name}' is running: a gate process holds its lock (DC connection {holder}). Stop gate first "
            "(SIGTERM or Ctrl-C), then drop the channel; or add --force to drop it under the running gate, which "
            "then stops with an error."
        )
    return holder


def drop_prompt(dc_server: ServerConfig, name: str, force: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """What dropping ``name`` deletes, for the confirmation, and the registered consumers whose cursors go
    with it (see :func:`gate.admin.retention.registered`); refused as :func:`drop` would refuse it."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        _lock_for_drop(conn, name, force)
        if dc.channel_exists(conn, name) and dc.unfinished(conn, name):
            return f"Dropping channel '{name}' deletes its DC database, whose creation stopped part way", []
        broken = _broken(conn, name) if dc.channel_exists(conn, name) else None
        if broken is not None:
            return f"Dropping channel '{name}' deletes its DC database, which is {broken[0]}", []
        dc.schema_version(conn, name)
        rows = dc.read_resume(conn, name).id
        consumers = retention.registered(conn, name)
    prompt = f"Dropping channel '{name}' deletes its DC database with {rows} checkpointed rows"
    if consumers:
        prompt += f" and the cursors of its registered consumers: {retention.positions(consumers)}"
    return prompt, consumers


def drop(dc_server: ServerConfig, name: str, force: bool = False) -> tuple[int | None, list[dict[str, Any]]]:
    """Drop the channel's database, also one whose creation stopped part way. Refused while a gate runs
    the channel unless ``force``; then returns the DC connection of that gate, which stops with an error.
    Also returns the registered consumers whose cursors were dropped with it, as read under the lock."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        running = _lock_for_drop(conn, name, force)
        consumers: list[dict[str, Any]] = []
        if dc.channel_exists(conn, name) and _broken(conn, name) is None:
            consumers = retention.registered(conn, name)
        dc.drop_channel(conn, name)
    return running, consumers


def set_filter(dc_server: ServerConfig, name: str, allow: tuple[str, ...] = (), deny: tuple[str, ...] = (),
               clear: bool = False,
               snapshot: bool = False,
               ways: snapshots.Ways = snapshots.NO_WAYS) -> tuple[ChannelSettings, snapshots.SnapshotRequest | None]:
    """Add allow/deny patterns (after emptying both lists if ``clear``); nothing given only reads them.

    Refused when a column rule hits a primary-key column of a table the new lists capture on the source.
    With ``snapshot``, requests a snapshot of each table on the source the new lists capture and the old
    ones did not, in the DC transaction that stores the lists, read as ``ways`` says for the tables it
    names (one that cannot be snapshotted is not requested: the result names it).
    """
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        before = dc.read_settings(conn, name)
        if not allow and not deny and not clear:
            return before, snapshots.SnapshotRequest(name, "channel filter") if snapshot else None
        kept_allow, kept_deny = ((), ()) if clear else (before.allow, before.deny)
        settings = replace(before, allow=_merged(kept_allow, allow), deny=_merged(kept_deny, deny))
        hits = key_hits(source_columns(settings), settings.columns) if settings.columns else []
        if hits:
            raise ColumnRuleRefused(
                f"With these lists {'; '.join(hits)}, a primary-key column on the source: row images must keep "
                f"their key to stay identifiable. Nothing was stored; narrow the rule first ('gate channel columns "
                f"{name} --clear', then the rules again) or deny the table.")
        requested = None
        if snapshot:
            tables = snapshots.newly_captured(source_tables(settings.source), before, settings)
            read = ways.of(tables)
            tables, refused = snapshots.split_unreadable(settings, tables, read)
            requested = snapshots.SnapshotRequest(name, "channel filter", running_gate=dc.lock_holder(conn, name),
                                                  refused=refused)
            with conn.cursor() as cur:
                snapshots.ensure_table(cur, name)
        conn.begin()
        with conn.cursor() as cur:
            dc.store_settings(cur, settings)
            if requested is not None:
                snapshots.add_requests(cur, requested, tables, read)
        conn.commit()
    return settings, requested


def set_columns(dc_server: ServerConfig, name: str, rules: list[ColumnRule], clear: bool = False) -> ChannelSettings:
    """Append column rules (after removing all if ``clear``); nothing given only reads them. A rule hitting
    a primary-key column of a table on the source (its information_schema) is refused, nothing is stored."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        if not rules and not clear:
            return settings
        kept = () if clear else settings.columns
        new = tuple(dict.fromkeys(kept + tuple(rules)))
        hits = key_hits(source_columns(settings), rules)
        if hits:
            raise ColumnRuleRefused(
                f"T{hits[0][1:]}, a primary-key column on the source: row images must keep their key to stay "
                "identifiable. Nothing was stored; narrow the pattern so it leaves key columns out.")
        settings = replace(settings, columns=new)
        dc.write_settings(conn, settings)
    return settings


def set_tls(dc_server: ServerConfig, name: str, tls: dict[str, TlsOptions]) -> ChannelSettings:
    """Change the TLS settings of the channel's servers (by role, "source" or "standby"; options not given
    stay), after a connection with the new settings has worked (a failure raises and stores nothing)."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        if not tls:
            return settings
        changed = {}
        for role, value in tls.items():
            server = getattr(settings, role)
            if server is None:
                raise InvalidValue(f"Channel '{name}' has no {role}: there is no {role} to give TLS settings to.")
            changed[role] = replace(server, tls=tls_settings(*value, keep=server.tls))
            tls_report(changed[role], role)  # connects with the new settings
        settings = replace(settings, **changed)
        dc.write_settings(conn, settings)
    return settings


def set_server(dc_server: ServerConfig, name: str, role: str, address: str | None, user: str | None = None,
               password: str | None = None, password_env: str | None = None,
               check: bool = True, tls: TlsOptions = (None, None, None, None)) -> tuple[ChannelSettings, list[Problem]]:
    """Point the channel's ``role`` ("source" or "standby") at another server; ``address`` None removes the standby.

    Login options not given are kept from the current server of that role. A new standby starts with no
    samples: the old standby's positions mean nothing on it. A new source (checked unless ``check`` is
    False) where a column rule hits a primary-key column of a captured table is refused. Returns the new
    settings and the preflight's warnings.
    """
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        server = None
        warnings: list[Problem] = []
        if address is not None:
            kept = getattr(settings, role)
            server = server_login(address, user, password, password_env, role, kept,
                                  tls_settings(*tls, keep=kept.tls if kept else None))
            if check:
                warnings = require_server(server, settings.server_id, role)
        settings = replace(settings, **{role: server})  # type: ignore[arg-type]  # role is source or standby
        widens = role == "source" and check and settings.columns
        hits = key_hits(source_columns(settings), settings.columns) if widens else []
        if hits:
            raise ColumnRuleRefused(
                f"On the new source {'; '.join(hits)}, a primary-key column there: row images must keep their key "
                f"to stay identifiable. Nothing was stored; narrow the rule first ('gate channel columns {name} "
                "--clear', then the rules again) or deny the table.")
        dc.write_settings(conn, settings)
        if role == "standby":
            with conn.cursor() as cur:
                failover.forget_samples(cur, name)
    return settings, warnings


def set_position(dc_server: ServerConfig, name: str, *, log_file: str | None = None, log_pos: int | None = None,
                 gtid: str | None = None, now: bool = False) -> ResumeState:
    """Set where the channel starts reading: a binlog file and position, a MariaDB GTID position, or the
    source's current end. Only the resume position changes, never the checkpoint's id and tid."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        source = settings.source
        if sum((now, gtid is not None, log_file is not None or log_pos is not None)) != 1:
            raise InvalidValue("Give one start position: --file and --pos together, --gtid, or --now.")
        if now:
            at = current_position(source)
            log_file, log_pos, gtid = at.log_file, at.log_pos, at.gtid_pos
        elif gtid is not None:
            check_gtid(source, gtid)
        else:
            check_file_position(source, log_file, log_pos)
        with conn.cursor() as cur:
            dc.write_start_position(cur, name, log_file, log_pos, gtid, source.address)
        return dc.read_resume(conn, name)


def grant(dc_server: ServerConfig, name: str, user: str, host: str = "%", password_env: str | None = None) -> bool:
    """Let ``user``@``host`` SELECT exactly the channel's transfer_data and transfer_checkpoint.

    The user is created (with the password in ``password_env``) if it does not exist; an existing user
    keeps its password. Returns whether the user was created.
    """
    check_identifier(name, "Channel name")
    if not _ACCOUNT_USER.match(user):
        raise InvalidIdentifier(f"User name {user!r} is not safe. Use 1 to 80 letters, digits, '_', '.' or '-'.")
    if not _ACCOUNT_HOST.match(host):
        raise InvalidIdentifier(
            f"Host {host!r} is not safe. Use a host name, an IP address, or a pattern with % "
            "(e.g. 10.0.% or %), made of letters, digits, '.', '-', '_', ':', '/' and '%'."
        )
    password = env_password(password_env, "app user") if password_env else None
    with dc.connect(dc_server, "DC") as conn, conn.cursor() as cur:
        dc.schema_version(conn, name)
        cur.execute("SELECT 1 FROM mysql.user WHERE User = %s AND Host = %s", (user, host))
        exists = cur.fetchone() is not None
        if not exists:
            if password is None:
                raise InvalidValue(
                    f"User '{user}'@'{host}' does not exist on the DC server. Give --password-env VAR, with "
                    "the new user's password in the environment variable VAR, and gate creates the user."
                )
            cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (user, host, password.reveal()))
        for table in dc_schema.CONTRACT_TABLES:
            cur.execute(f"GRANT SELECT ON {dc.q(name)}.{dc.q(table)} TO %s@%s", (user, host))
    return not exists


def check(dc_server: ServerConfig, name: str) -> list[dict[str, Any]]:
    """The preflight of the channel's source and standby: one entry per server with its problems; the source's
    also names the captured tables that foreign-key cascades change without row events (a warning each)."""
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
    servers: list[tuple[str, ServerConfig, ServerConfig | None]] = [("source", settings.source, None)]
    if settings.standby is not None:
        servers.append(("standby", settings.standby, settings.source))
    results: list[dict[str, Any]] = [
        {"role": role, "server": server.address, "server_id": settings.server_id,
         "problems": check_server(server, settings.server_id, role, replicates_from),
         "tls": tls_report(server, role)}
        for role, server, replicates_from in servers]
    if not any(p.fatal for p in results[0]["problems"]):
        results[0]["problems"] += rule_problems(settings)
        keys, problems = cascade_problems(settings)
        results[0]["problems"] += problems
        results[0]["cascading_foreign_keys"] = keys
    return results


def set_failover(dc_server: ServerConfig, name: str, failover_mode: str | None = None,
                 on_divergence: str | None = None) -> ChannelSettings:
    """Set how a switch finds the transactions the DC holds (gtid | fingerprint) and whether a divergence
    stops gate (stop | continue); None keeps a setting. A running gate reads them when it next starts."""
    check_identifier(name, "Channel name")
    for value, allowed, option in ((failover_mode, failover.MODES, "--failover-mode"),
                                   (on_divergence, failover.ON_DIVERGENCE, "--on-divergence")):
        if value is not None and value not in allowed:
            raise InvalidValue(f"{option} must be one of {', '.join(allowed)}, not {value!r}.")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        settings = replace(settings, failover_mode=failover_mode or settings.failover_mode,
                           on_divergence=on_divergence or settings.on_divergence)
        dc.write_settings(conn, settings)
    return settings


ON_ROWS_WITHOUT_EVENTS = ("snapshot", "flag")


def set_rows_without_events(dc_server: ServerConfig, name: str, value: str) -> ChannelSettings:
    """Set what 'gate run' does after a statement that changed rows without row events: 'snapshot' the
    tables it names (the default), or only 'flag' its payload. A running gate applies it within seconds."""
    check_identifier(name, "Channel name")
    if value not in ON_ROWS_WITHOUT_EVENTS:
        raise InvalidValue(f"--on-rows-without-events must be one of {', '.join(ON_ROWS_WITHOUT_EVENTS)}, not "
                           f"{value!r}.")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        chosen: dict[str, Any] = {"on_rows_without_events": value}  # checked above against the Literal's values
        settings = replace(settings, defaults=replace(settings.defaults, **chosen))
        dc.write_settings(conn, settings)
    return settings


def check_retention(retain_days: int | None, consumer_max_idle_days: float | None) -> None:
    """Refuse retention settings out of their range (None: not given)."""
    if retain_days is not None:
        check_range("channel_defaults.retain_days", retain_days, "--retain-days")
    if consumer_max_idle_days is not None:
        check_range("channel_defaults.consumer_max_idle_days", consumer_max_idle_days, "--consumer-max-idle-days")


def set_retention(dc_server: ServerConfig, name: str, retain_days: int | None = None,
                  consumer_max_idle_days: float | None = None) -> ChannelSettings:
    """Set how many days rows are kept (0: every row, retention off) and after how many idle days a consumer
    is reported stale; None keeps a setting. A running gate applies them at its next retention pass."""
    check_identifier(name, "Channel name")
    check_retention(retain_days, consumer_max_idle_days)
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        defaults = settings.defaults
        if retain_days is not None:
            defaults = replace(defaults, retain_days=retain_days)
        if consumer_max_idle_days is not None:
            defaults = replace(defaults, consumer_max_idle_days=consumer_max_idle_days)
        settings = replace(settings, defaults=defaults)
        dc.write_settings(conn, settings)
    return settings


def set_whole_table_rows(dc_server: ServerConfig, name: str, rows: int) -> ChannelSettings:
    """Set the most rows of a table snapshotted whole (--whole-table): checked when one is requested, and by
    'gate run' when it reads one (a running gate from its next start)."""
    check_identifier(name, "Channel name")
    check_range("channel_defaults.snapshot_whole_table_rows", rows, "--snapshot-whole-table-rows")
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        settings = replace(settings, defaults=replace(settings.defaults, snapshot_whole_table_rows=rows))
        dc.write_settings(conn, settings)
    return settings


METRICS_SETTINGS = ("metrics_port", "metrics_address", "stuck_after_seconds", "ready_lag_seconds")
_LISTEN_ADDRESS = re.compile(r"^[A-Za-z0-9_.:-]{1,255}$")


def set_metrics(dc_server: ServerConfig, name: str, metrics_port: int | None = None, metrics_address: str | None = None,
                stuck_after_seconds: float | None = None,
                ready_lag_seconds: float | None = None,
                lease_seconds: float | None = None) -> tuple[ChannelSettings, list[str]]:
    """Change the channel's metrics settings (None keeps one). Returns the settings and warnings: another
    channel on the DC configured with the same address and port (two gates on one host cannot both listen
    there). A running gate applies the two limits within seconds, the address and port when it next starts."""
    check_identifier(name, "Channel name")
    if metrics_address is not None and not _LISTEN_ADDRESS.match(metrics_address):
        raise InvalidValue(f"--metrics-address {metrics_address!r} is not an address to listen on. Give an IP address "
                           "of this host or a host name, e.g. 127.0.0.1 (this host only) or 0.0.0.0 (every interface).")
    numbers: dict[str, float | None] = {"metrics_port": metrics_port, "stuck_after_seconds": stuck_after_seconds,
               "ready_lag_seconds": ready_lag_seconds, "lease_seconds": lease_seconds}
    for key, value in numbers.items():
        if value is not None:
            check_range(f"channel_defaults.{key}", value, "--" + key.replace("_", "-"))
    chosen: dict[str, Any] = {k: v for k, v in {**numbers, "metrics_address": metrics_address}.items()
                              if v is not None}
    with dc.connect(dc_server, "DC") as conn:
        settings = dc.read_settings(conn, name)
        if chosen:
            settings = replace(settings, defaults=replace(settings.defaults, **chosen))
            dc.write_settings(conn, settings)
        mine = settings.defaults
        others = [other for other in dc.list_channels(conn) if other != name
                  and dc.stored_schema_version(conn, other) in dc_schema.COMPATIBLE_VERSIONS]
        clashes = [other for other in others if mine.metrics_port and
                   _metrics_at(dc.read_settings(conn, other), None) == (mine.metrics_address, mine.metrics_port)]
    return settings, [f"channel {other} has metrics_port {mine.metrics_port} on {mine.metrics_address} too: gates "
                      "of both on one host cannot both serve it" for other in clashes]


def switch(dc_server: ServerConfig, name: str, catch_up_seconds: float) -> dict[str, Any]:
    """A planned switch of a stopped channel to its standby, while the source is alive.

    Holds the channel's lock meanwhile (refused if a gate runs the channel), waits until the standby has
    applied everything the source has binlogged, removes rows above the checkpoint and stores the switch
    as a failover would: the next ``gate run`` reads the standby and drops what the DC already holds.
    """
    check_identifier(name, "Channel name")
    with dc.connect(dc_server, "DC") as conn:
        holder = dc.take_lock(conn, name)
        if holder is not None:
            raise ChannelBusy(
                f"Channel '{name}' is running: a gate process holds its lock (DC connection {holder}). Stop gate "
                "first (SIGTERM or Ctrl-C; it stores its checkpoint), then switch."
            )
        settings = dc.read_settings(conn, name)
        origin_server_id = failover.catch_up(settings, catch_up_seconds)
        state = dc.read_resume(conn, name)
        with conn.cursor() as cur:
            removed = dc.remove_above_checkpoint(cur, name, state.id)
        new_settings, new_state = failover.plan_switch(conn, settings, state, origin_server_id, failover.PLANNED)
    return {"channel": name, "from": settings.source.address, "to": new_settings.source.address,
            "at_id": state.id, "failover_mode": settings.failover_mode, "removed_rows_above_checkpoint": removed,
            "resume": new_state.describe()}
