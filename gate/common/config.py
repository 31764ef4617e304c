"""config.yaml: the DC server, defaults for new channels, the sandbox.

Any string value may reference environment variables as ``${NAME}`` or ``${NAME:-default}``.
Passwords are held as :class:`Secret`, whose repr and str never show the value. Every number has a
range (:data:`LIMITS`), checked here and by the command-line options that set the same values.
"""

from __future__ import annotations

import os
import re
import zoneinfo
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

from gate.common.errors import ConfigError, InvalidIdentifier, InvalidValue, TlsFailed
from gate.common.tls import TlsSettings, tls_settings

DEFAULT_CONFIG = Path("config.yaml")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_ADDRESS = re.compile(r"^([A-Za-z0-9_.-]+)(?::([0-9]{1,5}))?$")

# "section.key" -> the lowest and highest value it may have (inclusive)
LIMITS: dict[str, tuple[float, float]] = {
    "dc.port": (1, 65535),
    "sandbox.source_port": (1, 65535),
    "sandbox.standby_port": (1, 65535),
    "sandbox.dc_port": (1, 65535),
    "channel_defaults.writers": (1, 64),
    "channel_defaults.decoders": (1, 64),
    "channel_defaults.batch_rows": (1, 100_000),
    "channel_defaults.checkpoint_interval_ms": (1, 600_000),
    "channel_defaults.standby_sample_seconds": (0.1, 3600),
    "channel_defaults.failover_after_seconds": (1, 86_400),
    "channel_defaults.failover_margin_seconds": (0, 3600),
    "channel_defaults.metrics_port": (0, 65535),
    "channel_defaults.stuck_after_seconds": (1, 86_400),
    "channel_defaults.lease_seconds": (1, 3600),
    "channel_defaults.ready_lag_seconds": (0, 86_400),
    "channel_defaults.retain_days": (0, 36_500),
    "channel_defaults.consumer_max_idle_days": (0.001, 3650),
    "channel_defaults.retention_interval_seconds": (0.1, 86_400),
    "channel_defaults.snapshot_readers": (1, 64),
    "channel_defaults.snapshot_chunk_seconds": (0.01, 60),
    "channel_defaults.snapshot_chunk_rows": (1, 1_000_000),
    "channel_defaults.snapshot_whole_table_rows": (1, 10_000_000),
}


def out_of_range(key: str, value: float, what: str) -> str | None:
    """What is wrong with ``value`` for the setting ``key`` of :data:`LIMITS` (named ``what``), or None.
    NaN and infinities are out of every range."""
    low, high = LIMITS[key]
    if low <= value <= high:
        return None
    return f"{what} must be between {low:g} and {high:g}, not {value}."


def check_range(key: str, value: float, option: str) -> None:
    """Refuse a command-line ``option`` value outside the range of the setting ``key``."""
    problem = out_of_range(key, value, option)
    if problem:
        raise InvalidValue(problem)


class Secret:
    """A password as written: literal text, or ``${NAME}`` references resolved from the environment
    each time it is revealed. Its repr and str never show either."""

    __slots__ = ("_text", "_where", "_literal")

    def __init__(self, text: str, where: str = "password", literal: bool = False) -> None:
        self._text = text
        self._where = where
        self._literal = literal  # a password already resolved: never read as references

    def reveal(self) -> str:
        """The password itself, for connecting; a reference to an unset variable is a ConfigError."""
        return self._text if self._literal else expand_env(self._text, self._where)

    def as_written(self) -> str:
        """The text as given (``${NAME}`` stays a reference), for storing a channel's settings."""
        return self._text

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)


def expand_env(text: str, where: str) -> str:
    """Replace ``${NAME}`` / ``${NAME:-default}`` references. A variable that is unset or empty takes the
    default; without one it is an error, as is a ``${`` that starts no complete reference."""
    if "${" in _ENV_REF.sub("", text):
        raise ConfigError(
            f"{where} contains '${{' that is not a complete environment reference (a closing brace is missing?). "
            "Write ${NAME} or ${NAME:-default}; a value that itself contains '${' must come from an environment "
            "variable."
        )

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value:
            return value
        if default is not None:
            return default
        state, fix = ("not set", "Export it") if value is None else ("set but empty", "Give it a value")
        raise ConfigError(
            f"{where} refers to the environment variable {name}, which is {state}. "
            f"{fix} (export {name}=...) or give a default as ${{{name}:-value}}."
        )

    return _ENV_REF.sub(substitute, text)


def check_identifier(name: str, what: str) -> str:
    """Names reach SQL as identifiers: allow letters, digits and underscores only, up to 64 characters."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise InvalidIdentifier(
            f"{what} {name!r} is not a safe identifier. Use 1 to 64 letters, digits or underscores, "
            "starting with a letter or underscore (no dots, spaces, quotes, backticks or semicolons)."
        )
    return name


def check_timezone(name: str) -> str:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidValue(
            f"Time zone {name!r} is unknown. Use an IANA name such as UTC, Europe/Berlin or Asia/Shanghai."
        ) from None
    return name


def parse_address(text: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``HOST``, port 3306) as host and port; it must fit instance_name (64 chars)."""
    match = _ADDRESS.match(text)
    port = int(match.group(2) or 3306) if match else 0
    if not match or not 0 < port < 65536 or len(f"{match.group(1)}:{port}") > 64:
        raise InvalidValue(
            f"{what} {text!r} is not a valid address. Give HOST:PORT, e.g. 127.0.0.1:3306 or db1.example.com:3306 "
            "(a host name or IPv4 address, a port from 1 to 65535, 64 characters at most)."
        )
    return match.group(1), port


# The network timeouts of every connection gate opens, in seconds: ServerConfig.connect_args gives them to
# each PyMySQL connection (a caller may give its own: the binlog stream reads with a 3 s timeout, as its
# source sends a heartbeat every 0.1 s), spark_readers.session to Spark's JDBC reads; the JVM format("gate")
# (Login.java) sets the same figures. A read timeout bounds the wait for one answer of the server, so it must
# exceed the longest statement gate sends: a chunk's INSERT of batch_rows rows (or a snapshot chunk's) on a
# slow DC, a retention DELETE, a lock wait (innodb_lock_wait_timeout, 50 s by default, ends those first
# with an error gate retries); a write timeout bounds the send of one packet (16 MiB at most: 140 KB/s).
# Shorter figures would cut such statements on a slow link; these still end a connection to a black-holed
# server within two minutes, and gate warns of a stalled DC long before (pipeline.STALL_AFTER).
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 120
WRITE_TIMEOUT = 120


@dataclass(frozen=True)
class ServerConfig:
    """Where a MySQL/MariaDB server is and how to log in."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: Secret = field(default_factory=lambda: Secret(""))
    tls: TlsSettings = field(default_factory=TlsSettings)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect_args(self) -> dict[str, Any]:
        """PyMySQL's arguments for this server, TLS and timeouts included: the one place they are built (every
        connection gate opens goes through gate.common.connection, which calls this)."""
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password.reveal(),
                "connect_timeout": CONNECT_TIMEOUT, "read_timeout": READ_TIMEOUT, "write_timeout": WRITE_TIMEOUT,
                **self.tls.pymysql_args()}


@dataclass(frozen=True)
class ChannelDefaults:
    """Settings a new channel starts with; each can be changed per channel."""

    timezone: str = "UTC"
    binary_format: Literal["base64", "hex"] = "base64"
    writers: int = 2
    decoders: int = 2
    batch_rows: int = 1000
    checkpoint_interval_ms: int = 100
    standby_sample_seconds: float = 5.0
    failover_after_seconds: float = 10.0
    failover_margin_seconds: float = 5.0
    metrics_port: int = 0  # gate run serves /metrics, /healthz and /readyz there; 0: not at all
    metrics_address: str = "127.0.0.1"  # the interface they listen on: only this host unless widened
    stuck_after_seconds: float = 120.0  # /healthz is 503 once gate has made no progress for that long
    ready_lag_seconds: float = 60.0  # /readyz is 503 while the replication lag is above it
    retain_days: int = 0  # rows older than this that every registered consumer has read go; 0: keep every row
    consumer_max_idle_days: float = 7.0  # a consumer behind the checkpoint that has not moved for longer is stale
    retention_interval_seconds: float = 60.0  # how often gate run applies the retention and reads the consumers
    snapshot_readers: int = 2  # processes reading snapshot chunks from the source
    snapshot_chunk_seconds: float = 0.5  # a snapshot chunk's SELECT is sized to take about this long
    snapshot_chunk_rows: int = 2000  # ... but reads at least this many rows
    on_rows_without_events: Literal["snapshot", "flag"] = "snapshot"  # a statement that changed rows without
    # row events (ROWS_WITHOUT_EVENTS in its payload): snapshot those tables, or only flag the payload
    snapshot_whole_table_rows: int = 100_000  # the most rows of a table snapshotted whole (--whole-table)
    lease_seconds: float = 5.0  # a running gate silent for longer (host down, cut off) is taken over by a standby
    tls: TlsSettings = field(default_factory=TlsSettings)  # a new channel's source and standby; stored per server


@dataclass(frozen=True)
class SandboxConfig:
    dir: str = ".state/sandbox"
    source_port: int = 33061
    standby_port: int = 33062
    dc_port: int = 33063


@dataclass(frozen=True)
class LogConfig:
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


@dataclass(frozen=True)
class Config:
    dc: ServerConfig = field(default_factory=ServerConfig)
    channel_defaults: ChannelDefaults = field(default_factory=ChannelDefaults)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    log: LogConfig = field(default_factory=LogConfig)
    path: Path | None = None

    def resolve(self, path: str) -> Path:
        """A path from the config as an absolute one, relative to the config file's folder (else the working
        directory)."""
        return ((self.path.parent if self.path else Path.cwd()) / path).absolute()


_SECTIONS: dict[str, type] = {
    "dc": ServerConfig, "channel_defaults": ChannelDefaults, "sandbox": SandboxConfig, "log": LogConfig,
}


_TLS_KEYS = ("mode", "ca", "cert", "key")


def _tls(raw: Any, key: str, where: str, source: str) -> TlsSettings:
    """A ``tls`` mapping (mode, ca, cert, key); relative paths are taken from the config file's folder."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {key} must be a mapping with the keys {', '.join(_TLS_KEYS)}.")
    unknown = sorted(map(str, set(raw) - set(_TLS_KEYS)))
    if unknown:
        raise ConfigError(f"{where}: {key} has unknown key(s) {', '.join(unknown)}; it accepts {', '.join(_TLS_KEYS)}.")
    values = {k: None if raw.get(k) is None else expand_env(str(raw[k]), f"{key}.{k}") for k in _TLS_KEYS}
    try:
        return tls_settings(values["mode"], values["ca"], values["cert"], values["key"],
                            base=Path(source).absolute().parent)
    except (InvalidValue, TlsFailed) as exc:
        raise ConfigError(f"{where}: {key}: {exc}") from None


def _coerce(value: Any, kind: Any, where: str) -> Any:
    """Check one scalar against its declared type, expanding environment references in strings.

    A Secret keeps its references and resolves them when revealed; they are checked here already.
    """
    kind = str(kind)
    if kind == "Secret":
        secret = Secret("" if value is None else str(value), where)
        secret.reveal()
        return secret
    if isinstance(value, str):
        value = expand_env(value, where)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().lstrip("-").isdigit():
            raise ConfigError(f"{where} must be a whole number, not {value!r}.")
        return int(value)
    if kind == "float":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where} must be a number, not {value!r}.") from None
    if kind.startswith("Literal"):
        allowed = re.findall(r"'([^']*)'", kind)
        if value not in allowed:
            raise ConfigError(f"{where} must be one of {', '.join(allowed)}, not {value!r}.")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be text, not {value!r}.")
    return value


def _setting(value: Any, kind: Any, key: str, where: str) -> Any:
    """One value of config.yaml: its type, then its range; errors name ``where`` (file and line) and ``key``."""
    try:
        value = _coerce(value, kind, key)
        if key == "channel_defaults.timezone":
            check_timezone(value)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except InvalidValue as exc:
        raise ConfigError(f"{where}: {key}: {exc}") from None
    problem = out_of_range(key, value, key) if key in LIMITS else None
    if problem:
        raise ConfigError(f"{where}: {problem}")
    return value


def _section(raw: Any, cls: type, name: str, source: str) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, _Mapping):
        raise ConfigError(f"config section '{name}' must be a mapping of keys to values.")
    known = {f.name: f.type for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(
            f"config section '{name}' has unknown key(s) {', '.join(map(str, unknown))}; "
            f"the keys it accepts are {', '.join(known)}."
        )
    lines = raw.lines

    def value(key: str, raw_value: Any) -> Any:
        where = f"{source} line {lines.get(key, raw.line)}"
        if str(known[key]) == "TlsSettings":
            return _tls(raw_value, f"{name}.{key}", where, source)
        return _setting(raw_value, known[key], f"{name}.{key}", where)

    return cls(**{k: value(k, v) for k, v in raw.items()})


class _Mapping(dict[Any, Any]):
    """A YAML mapping that remembers its line and the line of each key."""

    line: int
    lines: dict[Any, int]


class _Loader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping and records each key's line."""

    source = "config.yaml"

    def construct_config_mapping(self, node: yaml.MappingNode) -> _Mapping:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # '<<: *anchor' merges keys in; a key given after it overrides them
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in lines:
                raise ConfigError(
                    f"{self.source} line {line}: the key {key!r} is given twice in one section (first at line "
                    f"{lines[key]}). Keep one of them."
                )
            lines[key] = line
        mapping = _Mapping(self.construct_mapping(node, deep=True))
        mapping.line, mapping.lines = node.start_mark.line + 1, lines
        return mapping


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_config_mapping)


def parse_config(text: str, source: str = "config.yaml") -> Config:
    loader = _Loader(text)
    loader.source = source
    try:
        raw = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", exc)
        raise ConfigError(f"{source} is not valid YAML{where}: {problem}. Fix the syntax there.") from None
    finally:
        loader.dispose()
    if raw is None:
        raise ConfigError(
            f"{source} is empty (or holds only comments), so it names no DC server. Give at least its dc section "
            "(host, port, user, password), or remove the file to use the built-in defaults (a DC at 127.0.0.1:3306 "
            "as root)."
        )
    if not isinstance(raw, dict):
        raise ConfigError(f"{source} must be a mapping with the sections {', '.join(_SECTIONS)}.")
    unknown = sorted(set(raw) - set(_SECTIONS))
    if unknown:
        raise ConfigError(
            f"{source} has unknown section(s) {', '.join(map(str, unknown))}; "
            f"the sections it accepts are {', '.join(_SECTIONS)}."
        )
    return Config(**{name: _section(raw.get(name), cls, name, source) for name, cls in _SECTIONS.items()})


def load_config(path: Path | str | None = None) -> Config:
    """Read config from ``path``, else $GATE_CONFIG, else ./config.yaml; built-in defaults if none exists."""
    chosen = Path(path or os.environ.get("GATE_CONFIG") or DEFAULT_CONFIG)
    if not chosen.exists():
        if path or os.environ.get("GATE_CONFIG"):
            raise ConfigError(f"config file {chosen} does not exist. Pass --config with the path of your config.yaml.")
        return Config()
    data = chosen.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{chosen} line {line}: byte 0x{data[exc.start]:02x} is not UTF-8 text. "
            "Save the file as UTF-8."
        ) from None
    config = parse_config(text, str(chosen))
    return Config(config.dc, config.channel_defaults, config.sandbox, config.log, chosen)
