"""Access to a channel's DC database: connections, schema, settings and resume state.

A channel is one database on the DC server. Its settings live in ``gate_settings`` (one JSON value
per name) and its resume position in ``gate_resume``, next to the contract tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, AnyStr, cast

import pymysql

import dc_schema
from gate.common.columns import ColumnRule
from gate.common.config import ChannelDefaults, Secret, ServerConfig, check_identifier
from gate.common.connection import connect as connect  # where callers have always found it
from gate.common.errors import (
    ChannelDamaged,
    ChannelExists,
    ChannelNotFound,
    CursorBeyondCheckpoint,
    GateError,
    MissingPrivileges,
    SchemaVersionError,
)
from gate.common.retry import CHANNEL_PRIVILEGES
from gate.common.tls import TlsSettings

GATE_VERSION = "0.1.0"
CHANNEL_COMMENT = "gate channel"  # the comment of every channel database gate creates


@dataclass(frozen=True)
class ChannelSettings:
    """Everything gate needs to run a channel. Passwords are kept as written (literal or ${ENV}) and
    resolved only when a connection reveals them."""

    name: str
    source: ServerConfig
    standby: ServerConfig | None = None
    server_id: int = 0
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    failover_mode: str = "gtid"
    on_divergence: str = "stop"
    columns: tuple[ColumnRule, ...] = ()
    defaults: ChannelDefaults = field(default_factory=ChannelDefaults)

    def as_rows(self) -> dict[str, Any]:
        """The settings as the name -> JSON value rows of gate_settings."""
        rows: dict[str, Any] = {
            "source": _server_row(self.source),
            "standby": _server_row(self.standby) if self.standby else None,
            "server_id": self.server_id,
            "allow": list(self.allow),
            "deny": list(self.deny),
            "failover_mode": self.failover_mode,
            "on_divergence": self.on_divergence,
            "columns": [rule.as_row() for rule in self.columns],
        }
        rows.update({k: v for k, v in asdict(self.defaults).items() if k not in PER_SERVER})
        return rows

    @classmethod
    def from_rows(cls, name: str, rows: dict[str, Any]) -> ChannelSettings:
        default_names = {f for f in asdict(ChannelDefaults()) if f not in PER_SERVER}
        defaults = ChannelDefaults(**{k: v for k, v in rows.items() if k in default_names})
        return cls(
            name=name,
            source=_server_from_row(rows["source"], f"channel {name} source"),
            standby=_server_from_row(rows["standby"], f"channel {name} standby") if rows.get("standby") else None,
            server_id=int(rows.get("server_id", 0)),
            allow=tuple(rows.get("allow", ())),
            deny=tuple(rows.get("deny", ())),
            failover_mode=rows.get("failover_mode", "gtid"),
            on_divergence=rows.get("on_divergence", "stop"),
            columns=tuple(ColumnRule.from_row(row) for row in rows.get("columns", ())),
            defaults=defaults,
        )


PER_SERVER = ("tls",)  # channel_defaults a channel stores with each server, not among its own defaults


def _server_row(server: ServerConfig) -> dict[str, Any]:
    return {"host": server.host, "port": server.port, "user": server.user, "password": server.password.as_written(),
            "tls": server.tls.as_row()}


def _server_from_row(row: dict[str, Any], where: str) -> ServerConfig:
    """Password references like ${SRC_PASSWORD} resolve on connecting, from the gate process's environment."""
    return ServerConfig(row["host"], int(row["port"]), row["user"], Secret(row.get("password", ""), f"{where} password"),
                        TlsSettings.from_row(row.get("tls")))


@dataclass(frozen=True)
class ResumeState:
    """The checkpoint and the binlog position right after its last transaction."""

    id: int = 0
    tid: int = 0
    log_file: str | None = None
    log_pos: int | None = None
    gtid_pos: str | None = None
    instance_name: str | None = None
    event_time: int | None = None

    def moved(self, **changes: Any) -> ResumeState:
        return replace(self, **changes)

    def describe(self) -> str:
        return describe_position(self.log_file, self.log_pos, self.gtid_pos)


def describe_position(log_file: str | None, log_pos: int | None, gtid_pos: str | None) -> str:
    """A binlog position as messages show it: ``FILE:POS``, ``FILE:POS (GTID ...)`` or ``GTID ...``."""
    if not log_file:
        return f"GTID {gtid_pos}" if gtid_pos else "no position yet"
    return f"{log_file}:{log_pos}" + (f" (GTID {gtid_pos})" if gtid_pos else "")


def one_row(cur: pymysql.cursors.Cursor) -> Any:
    """The row of a query that always returns one (SELECT of values or variables, COUNT(*), SHOW
    MASTER STATUS of a server with binary logging, which gate checks first)."""
    row = cur.fetchone()
    if row is None:
        raise GateError("The server returned no row for a query that always returns one.")
    return row


def q(name: str) -> str:
    """Backquote an identifier that check_identifier has accepted."""
    return f"`{check_identifier(name, 'identifier')}`"


def round_trips(statements: list[AnyStr], max_packet: int) -> list[AnyStr]:
    """The statements joined with ';' into as few multi-statement queries as fit a packet of ``max_packet``
    bytes (text counted at 4 bytes a character, the most utf8mb4 takes; bytes, as the writers' INSERTs
    are, as they are; a longer statement goes alone). Each query is joined once: adding statements to a
    growing string copied it again for each (a writer's chunk of wide rows is several INSERTs of
    MAX_STATEMENT characters)."""
    if not statements:
        return []
    as_bytes = isinstance(statements[0], bytes)
    budget = max_packet - 1 if as_bytes else (max_packet - 1) // 4
    join = cast(AnyStr, b";" if as_bytes else ";").join
    queries: list[AnyStr] = []
    group: list[AnyStr] = []
    size = 0
    for statement in statements:
        if group and size + 1 + len(statement) > budget:
            queries.append(join(group))
            group = []
        size = size + 1 + len(statement) if group else len(statement)
        group.append(statement)
    if group:
        queries.append(join(group))
    return queries


class Batch(pymysql.cursors.Cursor):
    """A cursor that keeps the statements it is given, as the server would receive them, instead of sending
    them (:func:`in_one_round_trip` sends them). The functions that take a cursor work with it, as long as
    they do not read what their statements return."""

    def __init__(self, connection: pymysql.Connection) -> None:
        super().__init__(connection)
        self.statements: list[str] = []

    def execute(self, query: str, args: Any = None) -> int:
        self.statements.append(self.mogrify(query, args))
        return 0


ONE_PACKET = 1 << 20  # bytes per query of in_one_round_trip: within any DC's max_allowed_packet gate accepts


def in_one_round_trip(conn: pymysql.Connection, fill: Callable[[pymysql.cursors.Cursor], None],
                      first: str | None = None) -> list[int]:
    """Run the statements ``fill`` gives its cursor as one DC transaction, sent with BEGIN and COMMIT as one
    multi-statement query (``conn`` is opened with CLIENT.MULTI_STATEMENTS), so one round trip unless they
    exceed ONE_PACKET. The server stops a multi-statement query at its first error, so the COMMIT runs only
    after every statement succeeded; an error rolls back and is raised. Returns the rows each statement
    affected, in order.

    ``first`` (the fence, see gate.capture.holder.guard: it raises an error when the gate is deposed) goes
    right after the BEGIN, in the same query: nothing after it runs when it fails."""
    batch = Batch(conn)
    fill(batch)
    head = ["BEGIN"] if first is None else ["BEGIN", first]
    counts: list[int] = []
    try:
        with conn.cursor() as cur:
            for query in round_trips([*head, *batch.statements, "COMMIT"], ONE_PACKET):
                cur.execute(query)
                counts.append(cur.rowcount)
                while cur.nextset():
                    counts.append(cur.rowcount)
    except BaseException:
        try:
            conn.rollback()
        except (pymysql.err.Error, OSError):
            pass  # the connection is gone: so is its transaction
        raise
    return counts[len(head):-1]


def channel_exists(conn: pymysql.Connection, name: str) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (name,))
        return cur.fetchone() is not None


def channel_tables() -> set[str]:
    """The tables of a channel database, as dc_schema creates them."""
    return set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", " ".join(dc_schema.ddl_statements())))


def _tables(conn: pymysql.Connection, name: str) -> set[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (name,))
        return {r[0] for r in cur.fetchall()}


def _commented(conn: pymysql.Connection, name: str) -> bool:
    """Whether database ``name`` carries the comment gate gives every channel database."""
    with conn.cursor() as cur:
        cur.execute("SELECT schema_comment FROM information_schema.schemata WHERE schema_name = %s", (name,))
        row = cur.fetchone()
    return row is not None and row[0] == CHANNEL_COMMENT


def unfinished(conn: pymysql.Connection, name: str) -> bool:
    """Whether ``name`` is a channel database whose creation stopped part way: no table but gate's, no
    schema version recorded (gate records it last, with the settings, in one transaction), and gate's
    comment on the database, or (made before gate set that comment) the contract tables and an empty
    gate_meta."""
    tables = _tables(conn, name)
    if not channel_exists(conn, name) or not tables <= channel_tables():
        return False
    with conn.cursor() as cur:
        if "gate_meta" in tables and cur.execute(f"SELECT 1 FROM {q(name)}.gate_meta LIMIT 1"):
            return False
        if ("gate_meta" not in tables and "gate_settings" in tables
                and cur.execute(f"SELECT 1 FROM {q(name)}.gate_settings LIMIT 1")):
            return False  # gate made gate_meta before gate_settings: dropped by hand
    return _commented(conn, name) or {*dc_schema.CONTRACT_TABLES, "gate_meta"} <= tables


# made on first use in channels created before them
ADDED_LATER = ("gate_xa_pending", "gate_snapshot", "gate_verify", "gate_holder", "gate_process", "gate_takeover")


def missing_tables(conn: pymysql.Connection, name: str) -> list[str]:
    """The tables every channel database of this schema holds that ``name``'s lacks (dropped by hand)."""
    return sorted(channel_tables() - set(ADDED_LATER) - _tables(conn, name))


def damaged_message(name: str, missing: list[str]) -> str:
    return (f"Channel '{name}' is damaged: its DC database lacks the table{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} (dropped by hand?), so gate does not use it. Restore "
            f"{'them' if len(missing) > 1 else 'it'} from a backup of the DC database, or drop the channel ('gate "
            f"channel drop {name} --yes') and create it again (with --snapshot to bring back its tables' rows).")


def unfinished_message(name: str) -> str:
    return (f"Channel '{name}' was not completely created (its creation stopped part way), so gate cannot use "
            f"it. Run the same 'gate channel create {name} ...' again to complete it (it replaces what was made), or "
            f"remove it with 'gate channel drop {name}'.")


def read_together(conn: pymysql.Connection, queries: list[tuple[str, tuple[Any, ...]]]) -> list[list[tuple[Any, ...]]]:
    """The rows of each query (SQL and its arguments), the queries sent as one multi-statement query: one round
    trip (``conn`` is opened with CLIENT.MULTI_STATEMENTS). The server stops at the first error, raised here."""
    return [answer[1] for answer in read_named_together(conn, queries) if answer is not None]


def read_named_together(conn: pymysql.Connection, queries: list[tuple[str, tuple[Any, ...]]],
                        skipped: frozenset[int] = frozenset()) -> list[tuple[list[str], list[tuple[Any, ...]]] | None]:
    """:func:`read_together`, each query's rows with the names of their columns (none for a statement that
    returns no rows). A query that fails with an error number of ``skipped`` (a privilege missing) answers None,
    and the server having stopped there, the queries after it are sent again together: a round trip more."""
    results: list[tuple[list[str], list[tuple[Any, ...]]] | None] = []
    with conn.cursor() as cur:
        while len(results) < len(queries):
            try:
                cur.execute(";".join(cur.mogrify(sql, args) for sql, args in queries[len(results):]))
                while True:
                    results.append(([d[0] for d in cur.description or ()], list(cur.fetchall())))
                    if not cur.nextset():
                        break
            except pymysql.err.MySQLError as exc:
                if not exc.args or exc.args[0] not in skipped:
                    raise
                results.append(None)
    return results


def tables_query(name: str) -> tuple[str, tuple[Any, ...]]:
    """The tables of database ``name`` as one comma-separated value (NULL: none, or no such database)."""
    return "SELECT GROUP_CONCAT(table_name) FROM information_schema.tables WHERE table_schema = %s", (name,)


def version_query(name: str) -> tuple[str, tuple[Any, ...]]:
    """The schema version recorded in a channel's gate_meta (fails when the table is missing)."""
    return f"SELECT value FROM {q(name)}.gate_meta WHERE name = 'schema_version'", ()


def table_set(rows: list[tuple[Any, ...]]) -> set[str]:
    """The tables of :func:`tables_query`'s answer."""
    return set(rows[0][0].split(",")) if rows and rows[0][0] else set()


def usable_version(tables: set[str], version_rows: list[tuple[Any, ...]]) -> int | None:
    """The schema version of a channel database with ``tables`` and :func:`version_query`'s answer when gate can
    use it as it is (every table there, a compatible version); None when :func:`schema_version` must look closer."""
    version = int(version_rows[0][0]) if version_rows else 0
    if channel_tables() - set(ADDED_LATER) <= tables and version in dc_schema.COMPATIBLE_VERSIONS:
        return version
    return None


def schema_version(conn: pymysql.Connection, name: str) -> int:
    """The version a channel database was created with; errors for missing or incompatible ones. A usable
    channel costs two queries (its tables, its version); the others are looked at closer, to name the problem."""
    with conn.cursor() as cur:
        cur.execute(*tables_query(name))
        tables = table_set(list(cur.fetchall()))
        if "gate_meta" in tables:
            cur.execute(*version_query(name))
            version = usable_version(tables, list(cur.fetchall()))
            if version is not None:
                return version
    if not channel_exists(conn, name):
        raise ChannelNotFound(f"No channel '{name}' on this DC server. 'gate channel list' shows the channels there.")
    if "gate_meta" not in _tables(conn, name):
        if unfinished(conn, name):
            raise SchemaVersionError(unfinished_message(name))
        if _commented(conn, name) and _tables(conn, name) <= channel_tables():
            raise ChannelDamaged(damaged_message(name, missing_tables(conn, name)))
        raise SchemaVersionError(
            f"Database '{name}' on the DC server is not a gate channel (it has no gate_meta table), so gate "
            "leaves it alone. 'gate channel list' shows the channels there."
        )
    version = stored_schema_version(conn, name)
    if version not in dc_schema.COMPATIBLE_VERSIONS:
        if unfinished(conn, name):
            raise SchemaVersionError(unfinished_message(name))
        raise SchemaVersionError(
            f"Channel '{name}' has DC schema version {version}, which this gate ({GATE_VERSION}, schema "
            f"version {dc_schema.SCHEMA_VERSION}) cannot use. Run the gate version that created it, or "
            "create a new channel and let it start from a fresh position."
        )
    missing = missing_tables(conn, name)
    if missing:
        raise ChannelDamaged(damaged_message(name, missing))
    return version


def stored_schema_version(conn: pymysql.Connection, name: str) -> int:
    """The version recorded in a channel database's gate_meta, 0 if none is recorded."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT value FROM {q(name)}.gate_meta WHERE name = 'schema_version'")
        row = cur.fetchone()
    return int(row[0]) if row else 0


def migrate(conn: pymysql.Connection, name: str, version: int | None = None) -> None:
    """Bring channel ``name`` (refused as :func:`schema_version` refuses) to this gate's schema version, one
    version at a time, each recorded in gate_meta after its statements, which are safe to repeat should a
    migration be interrupted. Needs ALTER on the channel's database (a DC user without it gets the grant).
    ``version``: the channel's, as the caller has just checked it (nothing to read then)."""
    version = schema_version(conn, name) if version is None else version
    with conn.cursor() as cur:
        for target in range(version + 1, dc_schema.SCHEMA_VERSION + 1):
            cur.execute(f"USE {q(name)}")
            try:
                for statement in dc_schema.migration(target):
                    cur.execute(statement)
            except pymysql.err.MySQLError as exc:
                if not exc.args or exc.args[0] != _ER_TABLE_ACCESS_DENIED:
                    raise
                cur.execute("SELECT CURRENT_USER()")
                user, host = one_row(cur)[0].rsplit("@", 1)
                raise MissingPrivileges(
                    f"Channel '{name}' has DC schema version {target - 1}, and this gate ({GATE_VERSION}) upgrades it "
                    f"to version {dc_schema.SCHEMA_VERSION} before using it, which needs ALTER on the database "
                    f"'{name}'; the DC user {user}@{host} lacks it, so nothing was changed. Grant it on the DC server, "
                    f"e.g. GRANT ALTER ON `{name}`.* TO '{user}'@'{host}', and run the command again.") from None
            cur.execute(f"UPDATE {q(name)}.gate_meta SET value = %s WHERE name = 'schema_version'", (str(target),))


def list_channels(conn: pymysql.Connection, commented: bool = False) -> list[str]:
    """Databases on the DC server that carry gate's meta table (and, with ``commented``, those that carry
    gate's comment: a channel whose creation stopped early, or a damaged one)."""
    with conn.cursor() as cur:
        cur.execute("SELECT table_schema FROM information_schema.tables WHERE table_name = 'gate_meta' "
                    + ("UNION SELECT schema_name FROM information_schema.schemata WHERE schema_comment = %s "
                       if commented else "") + "ORDER BY 1", (CHANNEL_COMMENT,) if commented else ())
        return [r[0] for r in cur.fetchall()]


def check_new(conn: pymysql.Connection, name: str) -> bool:
    """Refuse a channel name that a database on the DC server already has, except a channel whose creation
    stopped part way: True for that one (creating it again replaces it), else False."""
    if channel_exists(conn, name):
        if unfinished(conn, name):
            return True
        if name not in list_channels(conn):
            raise ChannelExists(
                f"The DC server already has a database '{name}', and it is not a gate channel. "
                "Pick another channel name; gate never takes over a database it did not create."
            )
        raise ChannelExists(
            f"Channel '{name}' already exists on the DC server. Use 'gate channel show {name}' to see it, "
            f"or 'gate channel drop {name}' first to start over."
        )
    return False


def check_privileges(conn: pymysql.Connection, name: str) -> None:
    """Refuse to create channel ``name`` when the DC user lacks a privilege gate needs in it: creating
    would stop part way. Privileges count on all databases, on ``name`` and through enabled roles."""
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        user, host = one_row(cur)[0].rsplit("@", 1)
        cur.execute("SELECT role_name FROM information_schema.enabled_roles")
        grantees = [f"'{user}'@'{host}'"] + [f"'{role}'@''" for (role,) in cur.fetchall()]
        marks = ", ".join(["%s"] * len(grantees))
        cur.execute(
            f"SELECT privilege_type FROM information_schema.user_privileges WHERE grantee IN ({marks}) UNION "
            f"SELECT privilege_type FROM information_schema.schema_privileges WHERE grantee IN ({marks}) "
            "AND %s LIKE table_schema", (*grantees, *grantees, name))
        held = {row[0] for row in cur.fetchall()}
    missing = [p for p in CHANNEL_PRIVILEGES if p not in held]
    if missing:
        raise MissingPrivileges(
            f"The DC user {user}@{host} lacks {', '.join(missing)} on the database '{name}', which gate needs to "
            f"create and run a channel; nothing was created. Grant them on the DC server, e.g. GRANT "
            f"{', '.join(CHANNEL_PRIVILEGES)} ON `{name}`.* TO '{user}'@'{host}', and create the channel again."
        )


def create_channel(conn: pymysql.Connection, settings: ChannelSettings,
                   fill: Callable[[pymysql.cursors.Cursor], object] = lambda cur: None) -> None:
    """Create the channel database with every table, then, in one transaction, its settings, an empty
    checkpoint, what ``fill`` writes and last its schema version. A channel whose creation stopped part way
    before (:func:`unfinished`) is replaced. Nothing stays behind when it fails (unless the server goes
    away meanwhile; then :func:`check_new` and :func:`drop_channel` recognise the unfinished database)."""
    name = settings.name
    if check_new(conn, name):
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE {q(name)}")
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {q(name)} DEFAULT CHARACTER SET utf8mb4 COMMENT %s", (CHANNEL_COMMENT,))
        try:
            for statement in dc_schema.ddl_statements():
                cur.execute(f"USE {q(name)}")
                cur.execute(statement)
            conn.begin()
            cur.execute(f"INSERT INTO {q(name)}.transfer_checkpoint (id, tid) VALUES (0, 0)")
            cur.execute(f"INSERT INTO {q(name)}.gate_resume (singleton, id, tid) VALUES (1, 0, 0)")
            _write_rows(cur, name, settings.as_rows())
            fill(cur)
            cur.executemany(
                f"INSERT INTO {q(name)}.gate_meta (name, value) VALUES (%s, %s)",
                [("schema_version", str(dc_schema.SCHEMA_VERSION)), ("created_by", f"gate {GATE_VERSION}")],
            )
            conn.commit()
        except Exception:
            try:
                conn.rollback()
                cur.execute(f"DROP DATABASE IF EXISTS {q(name)}")
            except pymysql.MySQLError:
                pass  # the DC went away: the error that stopped the creation is the one to report
            raise


def _write_rows(cur: pymysql.cursors.Cursor, name: str, rows: dict[str, Any]) -> None:
    cur.executemany(
        f"REPLACE INTO {q(name)}.gate_settings (name, value) VALUES (%s, %s)",
        [(k, json.dumps(v)) for k, v in rows.items()],
    )


def settings_query(name: str) -> tuple[str, tuple[Any, ...]]:
    return f"SELECT name, value FROM {q(name)}.gate_settings", ()


def settings_from(name: str, rows: list[tuple[Any, ...]]) -> ChannelSettings:
    """The settings of :func:`settings_query`'s answer."""
    return ChannelSettings.from_rows(name, {k: json.loads(v) for k, v in rows})


def read_settings(conn: pymysql.Connection, name: str) -> ChannelSettings:
    schema_version(conn, name)
    with conn.cursor() as cur:
        cur.execute(*settings_query(name))
        return settings_from(name, list(cur.fetchall()))


def write_settings(conn: pymysql.Connection, settings: ChannelSettings) -> None:
    schema_version(conn, settings.name)
    with conn.cursor() as cur:
        store_settings(cur, settings)


def store_settings(cur: pymysql.cursors.Cursor, settings: ChannelSettings) -> None:
    """Write every setting; the caller owns the transaction."""
    _write_rows(cur, settings.name, settings.as_rows())


def resume_query(name: str) -> tuple[str, tuple[Any, ...]]:
    return f"SELECT id, tid, log_file, log_pos, gtid_pos, instance_name, event_time FROM {q(name)}.gate_resume", ()


def resume_from(rows: list[tuple[Any, ...]]) -> ResumeState:
    """The resume state of :func:`resume_query`'s answer."""
    return ResumeState(*rows[0]) if rows else ResumeState()


def read_resume(conn: pymysql.Connection, name: str) -> ResumeState:
    with conn.cursor() as cur:
        cur.execute(*resume_query(name))
        return resume_from(list(cur.fetchall()))


def write_resume(cur: pymysql.cursors.Cursor, name: str, state: ResumeState) -> None:
    """Move checkpoint and resume state together; the caller owns the transaction."""
    cur.execute(f"UPDATE {q(name)}.transfer_checkpoint SET id = %s, tid = %s", (state.id, state.tid))
    cur.execute(
        f"UPDATE {q(name)}.gate_resume SET id = %s, tid = %s, log_file = %s, log_pos = %s, gtid_pos = %s, "
        "instance_name = %s, event_time = %s",
        (state.id, state.tid, state.log_file, state.log_pos, state.gtid_pos, state.instance_name, state.event_time),
    )


def drop_channel(conn: pymysql.Connection, name: str) -> None:
    """Drop a channel's database: a usable one, a damaged one, or one whose creation stopped part way."""
    try:
        schema_version(conn, name)
    except ChannelDamaged:
        pass
    except SchemaVersionError:
        if not unfinished(conn, name):
            raise
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE {q(name)}")


# --- the channel's lock, start position and rows above the checkpoint ----------------------------

def lock_name(channel: str) -> str:
    """The named lock (GET_LOCK) that a gate running ``channel`` holds on its DC connection."""
    return f"gate:{channel}"


def lock_query(channel: str) -> tuple[str, tuple[Any, ...]]:
    """Take the channel's lock if no one holds it; answers whether it did and its holder."""
    return "SELECT GET_LOCK(%s, 0), IS_USED_LOCK(%s)", (lock_name(channel),) * 2


def lock_from(rows: list[tuple[Any, ...]]) -> int | None:
    """:func:`lock_query`'s answer: None when taken, else the DC connection id of its holder."""
    got, holder = rows[0]
    return None if got == 1 else int(holder or 0)


def take_lock(conn: pymysql.Connection, channel: str) -> int | None:
    """Take the channel's lock on ``conn`` if no one holds it: None when taken, else the DC connection
    id of its holder. A gate holds it while it runs the channel; commands that must not run under a
    gate (drop, switch) hold it while they work."""
    with conn.cursor() as cur:
        cur.execute(*lock_query(channel))
        return lock_from(list(cur.fetchall()))


def lock_holder(conn: pymysql.Connection, channel: str) -> int | None:
    """The DC connection id of the gate running ``channel``, None if none runs it."""
    with conn.cursor() as cur:
        cur.execute("SELECT IS_USED_LOCK(%s)", (lock_name(channel),))
        holder = one_row(cur)[0]
    return None if holder is None else int(holder)


RUNNER_KEY = "runner"  # gate_meta: who holds the channel's lock, as the gate holding it wrote it


@dataclass(frozen=True)
class Runner:
    """The gate process running a channel, as it recorded itself on taking the lock: the DC connection
    holding the lock, the host and pid, and where it serves its metrics (None: it serves none)."""

    connection: int
    host: str
    pid: int
    metrics: str | None = None


def record_runner(cur: pymysql.cursors.Cursor, channel: str, runner: Runner) -> None:
    """Store ``runner`` in gate_meta; the caller holds the channel's lock on the connection named there."""
    cur.execute(f"REPLACE INTO {q(channel)}.gate_meta (name, value) VALUES (%s, %s)",
                (RUNNER_KEY, json.dumps(asdict(runner))))


def running_gate(conn: pymysql.Connection, channel: str) -> tuple[int | None, Runner | None]:
    """The DC connection holding the channel's lock (None: no gate runs it) and the runner record of
    that connection, None when the record is another connection's (left by an earlier run)."""
    holder = lock_holder(conn, channel)
    if holder is None:
        return None, None
    with conn.cursor() as cur:
        cur.execute(f"SELECT value FROM {q(channel)}.gate_meta WHERE name = %s", (RUNNER_KEY,))
        row = cur.fetchone()
    runner = Runner(**json.loads(row[0])) if row else None
    return holder, runner if runner is not None and runner.connection == holder else None


def write_start_position(cur: pymysql.cursors.Cursor, channel: str, log_file: str | None, log_pos: int | None,
                         gtid_pos: str | None, instance_name: str) -> None:
    """Where the next ``gate run`` starts reading ``instance_name``'s binlog; the checkpoint's id and tid stay."""
    cur.execute(f"UPDATE {q(channel)}.gate_resume SET log_file = %s, log_pos = %s, gtid_pos = %s, instance_name = %s",
                (log_file, log_pos, gtid_pos, instance_name))


REMOVE_BATCH = 20000  # rows per DELETE of remove_above_checkpoint


def remove_above_checkpoint(cur: pymysql.cursors.Cursor, channel: str, checkpoint_id: int) -> int:
    """Delete the rows above the checkpoint (an interrupted run's, rewritten by the next one) in batches
    of REMOVE_BATCH rows, so that no single statement holds many locks; returns how many went."""
    removed = 0
    while cur.execute(f"DELETE FROM {q(channel)}.transfer_data WHERE id > %s ORDER BY id LIMIT %s",
                      (checkpoint_id, REMOVE_BATCH)):
        removed += cur.rowcount
    return removed


# --- retention: the rows removed so far ------------------------------------------------------------

PURGED_KEY = "purged_through"  # gate_meta: the highest id retention has removed (absent: 0)
_ER_TABLE_ACCESS_DENIED = 1142


def purged_through(conn: pymysql.Connection, channel: str) -> int:
    """The highest id retention has removed from ``channel``'s transfer_data (0: none); every row above it
    up to the checkpoint is present. Retention stores it before (or with) the removal it covers, so a reader
    that reads it after its rows knows whether rows it asked for were gone. A reader granted only the
    contract tables (no SELECT on gate_meta) gets the same figure from transfer_data: ids are gap-free, so
    it is the oldest row's id minus one, at most the checkpoint."""
    with conn.cursor() as cur:
        try:
            cur.execute(f"SELECT value FROM {q(channel)}.gate_meta WHERE name = %s", (PURGED_KEY,))
        except pymysql.err.MySQLError as exc:
            if not exc.args or exc.args[0] != _ER_TABLE_ACCESS_DENIED:
                raise
            cur.execute(f"SELECT c.id, (SELECT MIN(id) FROM {q(channel)}.transfer_data) "
                        f"FROM {q(channel)}.transfer_checkpoint c")
            checkpoint, oldest = one_row(cur)
            return int(checkpoint) if oldest is None else min(int(checkpoint), int(oldest) - 1)
        row = cur.fetchone()
    return int(row[0]) if row else 0


def require_at_most_checkpoint(channel: str, after: int, checkpoint: int, what: str, fix: str) -> None:
    """Refuse to read on after row ``after`` beyond the checkpoint: rows above it may be missing or
    incomplete, and a reader that went on from there would skip them. ``what`` names the cursor or option
    as the reader knows it; ``fix`` says what to give instead. Every reader's check (client, tail, Spark)."""
    if after > checkpoint:
        skipped = f"row {after}" if after == checkpoint + 1 else f"rows {checkpoint + 1} to {after}"
        raise CursorBeyondCheckpoint(
            f"{what} is beyond the checkpoint of channel '{channel}' (row {checkpoint}): rows above the checkpoint "
            f"may be missing or incomplete, and reading on from there would skip {skipped} without a word. {fix}")


def describe_retention(conn: pymysql.Connection, channel: str) -> str:
    """The channel's retention setting in words, for messages to readers (who may not read gate_settings)."""
    with conn.cursor() as cur:
        try:
            cur.execute(f"SELECT value FROM {q(channel)}.gate_settings WHERE name = 'retain_days'")
        except pymysql.err.MySQLError as exc:
            if not exc.args or exc.args[0] != _ER_TABLE_ACCESS_DENIED:
                raise
            return f"'gate channel show {channel}' shows its retain_days"
        row = cur.fetchone()
    days = int(json.loads(row[0])) if row else 0
    if not days:
        return "the channel's retention is off now (retain_days 0)"
    return f"the channel keeps rows for {days} days, and longer until every registered consumer has read them"
