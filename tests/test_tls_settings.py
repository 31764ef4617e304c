"""TLS settings: modes, what each combination means for PyMySQL and Connector/J, config.yaml, key files."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest

from gate.common.config import parse_config
from gate.common.dc import ChannelSettings
from gate.common.errors import ConfigError, InvalidValue, TlsFailed
from gate.common.tls import TlsSettings, tls_settings
from gate.devtools.certs import Issued, make_authority


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Issued]:
    directory = tmp_path_factory.mktemp("certs")
    authority = make_authority(directory)
    return authority.cert, authority.issue(directory, "client", ("gate",), client=True)


def test_modes_and_combinations_refused_with_the_fix() -> None:
    with pytest.raises(InvalidValue, match=r"^TLS mode 'strict' is unknown. Use one of disabled, preferred, "
                                           r"required, verify-ca, verify-identity.$"):
        TlsSettings("strict")
    with pytest.raises(InvalidValue) as caught:
        TlsSettings("required", ca="/etc/ca.pem")
    assert str(caught.value) == ("A TLS CA file (/etc/ca.pem) is only used to verify the server's certificate, which "
                                 "mode required does not do. Use mode verify-ca or verify-identity, or leave the CA "
                                 "out.")
    with pytest.raises(InvalidValue, match="give both the certificate file and the key file, or neither"):
        TlsSettings("required", cert="/c.pem")
    with pytest.raises(InvalidValue, match="^A TLS client certificate needs an encrypted connection; mode preferred"):
        TlsSettings("preferred", cert="/c.pem", key="/k.pem")


def test_pymysql_arguments_of_each_mode(files: tuple[Path, Issued]) -> None:
    ca, client = files
    assert TlsSettings("disabled").pymysql_args() == {"ssl_disabled": True}
    assert TlsSettings().pymysql_args() == {}  # preferred: PyMySQL tries TLS and verifies nothing
    required = TlsSettings("required").pymysql_args()["ssl"]
    assert (required.verify_mode, required.check_hostname) == (ssl.CERT_NONE, False)
    verify_ca = TlsSettings("verify-ca", str(ca)).pymysql_args()["ssl"]
    assert (verify_ca.verify_mode, verify_ca.check_hostname) == (ssl.CERT_REQUIRED, False)
    identity = TlsSettings("verify-identity", str(ca), str(client.cert), str(client.key)).pymysql_args()["ssl"]
    assert (identity.verify_mode, identity.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert [c["subject"] for c in identity.get_ca_certs()] == [((("commonName", "gate test CA"),),)]


def test_connector_j_properties(files: tuple[Path, Issued]) -> None:
    ca, client = files
    assert TlsSettings("preferred").jdbc_properties() == {"useSsl": "false"}
    assert TlsSettings("required").jdbc_properties() == {"useSsl": "true", "trustServerCertificate": "true"}
    assert TlsSettings("verify-ca", str(ca)).jdbc_properties() == {
        "useSsl": "true", "serverSslCert": str(ca), "disableSslHostnameVerification": "true"}
    assert TlsSettings("verify-identity", str(ca)).jdbc_properties() == {"useSsl": "true", "serverSslCert": str(ca)}
    with pytest.raises(TlsFailed, match="cannot use a PEM client certificate"):
        TlsSettings("verify-identity", str(ca), str(client.cert), str(client.key)).jdbc_properties()


def test_key_readable_by_others_is_refused_with_chmod(files: tuple[Path, Issued], tmp_path: Path) -> None:
    ca, client = files
    key = tmp_path / "open-key.pem"
    key.write_bytes(client.key.read_bytes())
    key.chmod(0o640)
    with pytest.raises(TlsFailed) as caught:
        tls_settings("verify-ca", str(ca), str(client.cert), str(key))
    assert str(caught.value) == (f"The TLS client key file {key} can be read or written by other users (mode 640); "
                                 f"gate refuses to use a key others can read. Run: chmod 600 {key}")
    key.chmod(0o600)
    assert tls_settings("verify-ca", str(ca), str(client.cert), str(key)).key == str(key)
    with pytest.raises(TlsFailed, match=f"^The TLS CA file {tmp_path}/none.pem does not exist or cannot be read"):
        tls_settings("verify-ca", str(tmp_path / "none.pem"), None, None)


def test_options_keep_and_clear_paths(files: tuple[Path, Issued], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca, _ = files
    monkeypatch.chdir(ca.parent)
    kept = tls_settings("verify-ca", ca.name, None, None)
    assert kept == TlsSettings("verify-ca", str(ca))  # relative paths are made absolute
    assert tls_settings("verify-identity", None, None, None, keep=kept) == TlsSettings("verify-identity", str(ca))
    assert tls_settings("required", "", None, None, keep=kept) == TlsSettings("required")


def test_config_yaml_tls_sections(files: tuple[Path, Issued], tmp_path: Path) -> None:
    ca, client = files
    (tmp_path / "ca.pem").write_bytes(ca.read_bytes())
    source = str(tmp_path / "config.yaml")
    config = parse_config(f"dc:\n  host: dc1\n  tls:\n    mode: verify-identity\n    ca: ca.pem\n"
                          f"channel_defaults:\n  tls:\n    mode: verify-ca\n    ca: {ca}\n"
                          f"    cert: {client.cert}\n    key: {client.key}\n", source)
    assert config.dc.tls == TlsSettings("verify-identity", str(tmp_path / "ca.pem"))  # relative to the file
    assert config.channel_defaults.tls == TlsSettings("verify-ca", str(ca), str(client.cert), str(client.key))
    with pytest.raises(ConfigError) as caught:
        parse_config("dc:\n  tls:\n    mode: verify-ca\n    crt: x\n", source)
    assert str(caught.value) == (f"{source} line 2: dc.tls has unknown key(s) crt; it accepts mode, ca, cert, key.")
    with pytest.raises(ConfigError) as caught:
        parse_config("dc:\n  tls:\n    mode: required\n    ca: ca.pem\n", source)
    assert str(caught.value).startswith(f"{source} line 2: dc.tls: A TLS CA file ({tmp_path}/ca.pem) is only used")


def test_channel_stores_paths_per_server_never_contents(files: tuple[Path, Issued]) -> None:
    from gate.common.config import Secret, ServerConfig

    ca, client = files
    tls = TlsSettings("verify-identity", str(ca), str(client.cert), str(client.key))
    settings = ChannelSettings("shop", ServerConfig("db1", 3306, "gate", Secret("${PW}"), tls))
    rows = settings.as_rows()
    assert rows["source"] == {"host": "db1", "port": 3306, "user": "gate", "password": "${PW}",
                              "tls": {"mode": "verify-identity", "ca": str(ca), "cert": str(client.cert),
                                      "key": str(client.key)}}
    assert "tls" not in rows  # channel_defaults.tls only seeds new channels' servers
    assert ChannelSettings.from_rows("shop", rows).source.tls == tls
    old = {**rows, "source": {k: v for k, v in rows["source"].items() if k != "tls"}}
    assert ChannelSettings.from_rows("shop", old).source.tls == TlsSettings()  # stored before TLS settings


REPO = Path(__file__).resolve().parent.parent
# what opens a connection -> the only files allowed to (everything else goes through them)
_OPENERS = {
    r"pymysql\.connect\(": {"gate/common/connection.py"},
    r"pymysql\.Connection\(": set(),
    r"create_engine\(": {"gate/consume/link.py"},  # dc_engine (connections from gate) and an application's URL
    r"BinLogStreamReader\(": set(),
    r"(?<!class )OwnedStream\(": {"gate/capture/reader.py", "gate/capture/lag.py"},  # with stream_connector(...)
    r'f"jdbc:': {"spark_readers/session.py"},  # a JDBC URL built: ChannelSource, whose options carry TLS
}


def test_nothing_opens_a_connection_past_the_one_place() -> None:
    found: dict[str, set[str]] = {pattern: set() for pattern in _OPENERS}
    jdbc_reads = []
    for path in sorted([*(REPO / "gate").rglob("*.py"), *(REPO / "spark_readers").rglob("*.py")]):
        text = path.read_text()
        name = str(path.relative_to(REPO))
        for pattern in _OPENERS:
            if re.search(pattern, text):
                found[pattern].add(name)
        jdbc_reads += [(name, line) for line in text.splitlines() if 'read.format("jdbc")' in line and "``" not in line]
    assert found == _OPENERS
    assert jdbc_reads and all("jdbc_options()" in line for _, line in jdbc_reads)
    reader = (REPO / "gate/capture/reader.py").read_text()
    assert 'pymysql_wrapper=stream_connector(self.server, "source")' in reader
