"""config.yaml: environment references, defaults, and exact messages for every kind of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from gate.common.config import (
    ChannelDefaults,
    Config,
    SandboxConfig,
    Secret,
    ServerConfig,
    check_identifier,
    load_config,
    parse_address,
    parse_config,
)
from gate.common.errors import ConfigError, InvalidIdentifier, InvalidValue

REPO = Path(__file__).resolve().parent.parent


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert caught.value.exit_code == 2
    return str(caught.value)


def test_repo_config_yaml_is_valid_and_points_at_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATE_DC_PASSWORD", raising=False)
    config = load_config(REPO / "config.yaml")
    assert config.dc == ServerConfig("127.0.0.1", 33063, "root", Secret("${GATE_DC_PASSWORD:-}"))
    assert config.dc.password.reveal() == ""
    assert config.sandbox == SandboxConfig(".state/sandbox", 33061, 33062, 33063)
    assert config.channel_defaults == ChannelDefaults()
    assert config.resolve(config.sandbox.dir) == REPO / ".state" / "sandbox"


def test_environment_references_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DC_HOST", "dc1.example.com")
    monkeypatch.setenv("DC_PW", "pa$$word")
    monkeypatch.delenv("DC_PORT", raising=False)
    config = parse_config("dc:\n  host: ${DC_HOST}\n  port: ${DC_PORT:-3307}\n  password: ${DC_PW}\n")
    assert (config.dc.host, config.dc.port) == ("dc1.example.com", 3307)
    assert config.dc.connect_args()["password"] == "pa$$word"
    # the reference is kept as written and resolved on each use; repr and str hide both
    assert config.dc.password.as_written() == "${DC_PW}"
    monkeypatch.setenv("DC_PW", "rotated")
    assert config.dc.password.reveal() == "rotated"
    assert "pa$$word" not in repr(config) and "DC_PW" not in repr(config) and str(config.dc.password) == "Secret('***')"


def test_missing_environment_variable() -> None:
    assert error_of("dc:\n  host: ${GATE_TEST_UNSET}\n") == (
        "config.yaml line 2: dc.host refers to the environment variable GATE_TEST_UNSET, which is not set. "
        "Export it (export GATE_TEST_UNSET=...) or give a default as ${GATE_TEST_UNSET:-value}."
    )
    assert error_of("dc:\n  password: ${GATE_TEST_UNSET}\n").startswith(
        "config.yaml line 2: dc.password refers to the environment variable GATE_TEST_UNSET, which is not set.")


def test_defaults_when_absent_and_an_empty_file_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for empty in ("", "# nothing yet\n\n"):
        assert error_of(empty) == (
            "config.yaml is empty (or holds only comments), so it names no DC server. Give at least its dc section "
            "(host, port, user, password), or remove the file to use the built-in defaults (a DC at 127.0.0.1:3306 "
            "as root).")
    assert parse_config("dc:\n") == Config()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATE_CONFIG", raising=False)
    assert load_config() == Config()  # no ./config.yaml: built-in defaults
    (tmp_path / "elsewhere.yaml").write_text("log:\n  level: DEBUG\n")
    monkeypatch.setenv("GATE_CONFIG", str(tmp_path / "elsewhere.yaml"))
    assert load_config().log.level == "DEBUG"


def test_explicit_config_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "nope.yaml")
    assert str(caught.value) == (
        f"config file {tmp_path / 'nope.yaml'} does not exist. Pass --config with the path of your config.yaml."
    )


def test_unknown_keys() -> None:
    assert error_of("dc:\n  hots: x\n") == (
        "config section 'dc' has unknown key(s) hots; the keys it accepts are host, port, user, password, tls."
    )
    assert error_of("dcs:\n  host: x\nextra: 1\n") == (
        "config.yaml has unknown section(s) dcs, extra; the sections it accepts are dc, channel_defaults, sandbox, log."
    )


def test_malformed_yaml() -> None:
    assert error_of("dc:\n  host: a\n   port: 3\n") == (
        "config.yaml is not valid YAML at line 3, column 8: mapping values are not allowed here. Fix the syntax there."
    )
    assert error_of("- just\n- a list\n") == (
        "config.yaml must be a mapping with the sections dc, channel_defaults, sandbox, log."
    )
    assert error_of("dc: [1, 2]\n") == "config section 'dc' must be a mapping of keys to values."


@pytest.mark.parametrize(("text", "message"), [
    ("dc:\n  port: abc\n", "config.yaml line 2: dc.port must be a whole number, not 'abc'."),
    ("channel_defaults:\n  writers: true\n",
     "config.yaml line 2: channel_defaults.writers must be a whole number, not True."),
    ("channel_defaults:\n  binary_format: raw\n",
     "config.yaml line 2: channel_defaults.binary_format must be one of base64, hex, not 'raw'."),
    ("channel_defaults:\n  failover_after_seconds: soon\n",
     "config.yaml line 2: channel_defaults.failover_after_seconds must be a number, not 'soon'."),
    ("dc:\n  host: 5\n", "config.yaml line 2: dc.host must be text, not 5."),
    ("log:\n  level: LOUD\n", "config.yaml line 2: log.level must be one of DEBUG, INFO, WARNING, ERROR, not 'LOUD'."),
    ("channel_defaults:\n  timezone: Mars/Olympus\n",
     "config.yaml line 2: channel_defaults.timezone: Time zone 'Mars/Olympus' is unknown. "
     "Use an IANA name such as UTC, Europe/Berlin or Asia/Shanghai."),
])
def test_wrong_types(text: str, message: str) -> None:
    assert error_of(text) == message


@pytest.mark.parametrize(("setting", "message"), [
    ("decoders: 100000", "channel_defaults.decoders must be between 1 and 64, not 100000."),
    ("checkpoint_interval_ms: -5", "channel_defaults.checkpoint_interval_ms must be between 1 and 600000, not -5."),
    ("failover_after_seconds: .nan", "channel_defaults.failover_after_seconds must be between 1 and 86400, not nan."),
    ("failover_after_seconds: .inf", "channel_defaults.failover_after_seconds must be between 1 and 86400, not inf."),
    ("standby_sample_seconds: 0", "channel_defaults.standby_sample_seconds must be between 0.1 and 3600, not 0.0."),
    ("failover_margin_seconds: -1", "channel_defaults.failover_margin_seconds must be between 0 and 3600, not -1.0."),
    ("batch_rows: 0", "channel_defaults.batch_rows must be between 1 and 100000, not 0."),
    ("writers: -3", "channel_defaults.writers must be between 1 and 64, not -3."),
])
def test_every_number_has_a_range(setting: str, message: str) -> None:
    assert error_of(f"# defaults\nchannel_defaults:\n  timezone: UTC\n  {setting}\n") == (
        f"config.yaml line 4: {message}")
    assert error_of("dc:\n  host: x\n  port: 70000\n") == (
        "config.yaml line 3: dc.port must be between 1 and 65535, not 70000.")
    assert error_of("sandbox:\n  dc_port: 0\n") == "config.yaml line 2: sandbox.dc_port must be between 1 and 65535, not 0."
    edges = parse_config("channel_defaults:\n  writers: 64\n  decoders: 1\n  standby_sample_seconds: 0.1\n"
                         "  failover_margin_seconds: 0\n  batch_rows: 100000\n").channel_defaults
    assert (edges.writers, edges.decoders, edges.standby_sample_seconds, edges.failover_margin_seconds,
            edges.batch_rows) == (64, 1, 0.1, 0.0, 100000)


def test_a_key_given_twice() -> None:
    assert error_of("channel_defaults:\n  writers: 2\n  decoders: 2\n  writers: 8\n") == (
        "config.yaml line 4: the key 'writers' is given twice in one section (first at line 2). Keep one of them.")
    assert error_of("dc:\n  host: a\nlog:\n  level: INFO\ndc:\n  port: 1\n") == (
        "config.yaml line 5: the key 'dc' is given twice in one section (first at line 1). Keep one of them.")


def test_a_reference_without_its_closing_brace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X", "secret")
    assert error_of("dc:\n  user: gate\n  password: ${X\n") == (
        "config.yaml line 3: dc.password contains '${' that is not a complete environment reference (a closing brace "
        "is missing?). Write ${NAME} or ${NAME:-default}; a value that itself contains '${' must come from an "
        "environment variable.")
    assert error_of("dc:\n  host: a${X}b${X\n").startswith("config.yaml line 2: dc.host contains '${' that is not")
    assert parse_config("dc:\n  password: a${X}b$c{d}\n").dc.password.reveal() == "asecretb$c{d}"


def test_an_empty_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATE_TEST_EMPTY", "")
    assert error_of("dc:\n  password: ${GATE_TEST_EMPTY}\n") == (
        "config.yaml line 2: dc.password refers to the environment variable GATE_TEST_EMPTY, which is set but empty. "
        "Give it a value (export GATE_TEST_EMPTY=...) or give a default as ${GATE_TEST_EMPTY:-value}.")
    # a default covers an empty variable as it covers an unset one, as in the shell
    assert parse_config("dc:\n  password: ${GATE_TEST_EMPTY:-}\n").dc.password.reveal() == ""
    assert parse_config("dc:\n  user: ${GATE_TEST_EMPTY:-gate}\n").dc.user == "gate"
    # a password kept as a reference is checked again whenever it is used
    monkeypatch.setenv("GATE_TEST_LATER", "x")
    config = parse_config("dc:\n  password: ${GATE_TEST_LATER}\n")
    monkeypatch.setenv("GATE_TEST_LATER", "")
    with pytest.raises(ConfigError) as caught:
        config.dc.connect_args()
    assert str(caught.value).startswith(
        "dc.password refers to the environment variable GATE_TEST_LATER, which is set but empty.")


def test_a_config_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes("dc:\n  host: 127.0.0.1\n  user: g\u00e4te\n".encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path} line 3: byte 0xe4 is not UTF-8 text. Save the file as UTF-8."
    path.write_text("channel_defaults:\n  writers: 0\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path} line 2: channel_defaults.writers must be between 1 and 64, not 0."


def test_addresses() -> None:
    assert parse_address("db1.example.com:3307", "The source address") == ("db1.example.com", 3307)
    assert parse_address("10.0.0.5", "The source address") == ("10.0.0.5", 3306)
    for bad in ("db1:0", "db1:70000", "db 1:3306", "db1:3306;", "", "x" * 60 + ":3306"):
        with pytest.raises(InvalidValue) as caught:
            parse_address(bad, "The source address")
        assert str(caught.value) == (
            f"The source address {bad!r} is not a valid address. Give HOST:PORT, e.g. 127.0.0.1:3306 or "
            "db1.example.com:3306 (a host name or IPv4 address, a port from 1 to 65535, 64 characters at most)."
        )


@pytest.mark.parametrize("name", ["a`b", "a.b", "a b", "a;b", "", "1abc", "x" * 65, "dröp"])
def test_unsafe_identifiers(name: str) -> None:
    with pytest.raises(InvalidIdentifier) as caught:
        check_identifier(name, "Channel name")
    assert str(caught.value) == (
        f"Channel name {name!r} is not a safe identifier. Use 1 to 64 letters, digits or underscores, starting "
        "with a letter or underscore (no dots, spaces, quotes, backticks or semicolons)."
    )
