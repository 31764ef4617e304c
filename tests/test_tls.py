"""TLS on real servers that accept only TLS (require_secure_transport=ON), with certificates made here:
a channel end to end with every connection verified, and each wrong certificate refused by name."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner, Result

from gate.capture.pipeline import Pipeline
from gate.cli import main
from gate.common.config import ChannelDefaults
from gate.common.connection import connect, tls_status
from gate.common.dc import ChannelSettings, create_channel
from gate.common.errors import TlsFailed
from gate.common.tls import TlsSettings
from gate.consume.client import Consumer
from gate.consume.link import dc_engine
from gate.devtools.certs import Authority, make_authority
from gate.devtools.sandbox import MariaDBServer, Sandbox, free_port
from spark_readers.incremental import read_increment
from spark_readers.session import ChannelSource
from tests.replay import config_yaml, dc_rows, running, server_config, wait_caught_up, wait_row

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Gate = Callable[..., Result]


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """Source, standby and DC with certificates of the sandbox's CA, refusing plaintext."""
    sb = Sandbox(tmp_path_factory.mktemp("tls") / "sb", with_standby=True, tied_to_parent=True, tls=True)
    sb.up()
    yield sb
    sb.down()


@pytest.fixture(scope="module")
def config(box: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tls-config") / "config.yaml"
    path.write_text(config_yaml(box.dc))
    return path


@pytest.fixture
def gate(config: Path) -> Gate:
    def run(*args: str) -> Result:
        return CliRunner().invoke(main, ["--config", str(config), *args])
    return run


def ca_options(box: Sandbox, role: str) -> list[str]:
    return [f"--{role}-tls-mode", "verify-identity", f"--{role}-tls-ca", str(box.tls_dir / "ca.pem")]


def test_channel_end_to_end_with_every_connection_verified(gate: Gate, box: Sandbox, config: Path) -> None:
    """Preflight, snapshot readers, binlog stream, writers, checkpoint and standby sampler, all over
    verify-identity to servers that refuse plaintext."""
    assert box.source.config().tls.mode == "verify-identity" and box.standby is not None
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE tlsdb")
        cur.execute("CREATE TABLE tlsdb.t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("INSERT INTO tlsdb.t VALUES (1, 'before')")
    created = gate("channel", "create", "tlsrun", "--source", box.source.address, *ca_options(box, "source"),
                   "--standby", box.standby.address, *ca_options(box, "standby"), "--allow", "tlsdb.*", "--snapshot")
    assert created.exit_code == 0, created.output
    for role, server in (("source", box.source), ("standby", box.standby)):
        assert (f"{role} {server.address}: offers TLS; gate negotiated TLSv1.3 with TLS_AES_256_GCM_SHA384 (TLS mode "
                f"verify-identity), verified: certificate signed by {box.tls_dir / 'ca.pem'}, naming the host; peer "
                "127.0.0.1, localhost (issued by gate sandbox CA, valid until ") in created.output
    shown = json.loads(gate("--json", "channel", "show", "tlsrun").output)
    assert shown["source"]["tls"] == {"mode": "verify-identity", "ca": str(box.tls_dir / "ca.pem"), "cert": None,
                                      "key": None, "verifies": f"certificate signed by {box.tls_dir / 'ca.pem'}, "
                                                                "naming the host"}
    checked = json.loads(gate("--json", "channel", "check", "tlsrun").output)
    assert [(c["role"], c["tls"]["encrypted"], c["tls"]["protocol"]) for c in checked] == [
        ("source", True, "TLSv1.3"), ("standby", True, "TLSv1.3")]
    with running(server_config(box.dc), "tlsrun"):
        wait_row(box.dc, "tlsrun", "SELECT 1 FROM transfer_data WHERE optype = 'SNAPSHOTEND'", timeout=60)
        with box.source.connect() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO tlsdb.t VALUES (2, 'after')")
        wait_caught_up(box.source, box.dc, "tlsrun")
        wait_row(box.dc, "tlsrun", "SELECT 1 FROM transfer_data WHERE optype = 'INSERT'")
        wait_row(box.dc, "tlsrun", "SELECT 1 FROM gate_standby_sample")
    rows = [(r[2], r[3], r[6], r[7]) for r in dc_rows(box.dc, "tlsrun")]
    assert [row for row in rows if row[2] in ("SNAPSHOT", "INSERT")] == [
        ("tlsdb", "t", "SNAPSHOT", '{"NEW":[{"id":"1"},{"v":"before"}]}'),
        ("tlsdb", "t", "INSERT", '{"NEW":[{"id":"2"},{"v":"after"}]}')]


def test_client_and_tail_read_over_tls(box: Sandbox, gate: Gate) -> None:
    """The Python client through gate's own connection and through a SQLAlchemy engine (dc_engine), and
    gate tail, all verifying the DC."""
    expected = [(r[0], r[6]) for r in dc_rows(box.dc, "tlsrun")]
    engine = dc_engine(server_config(box.dc))
    try:
        for dc in (server_config(box.dc), engine):
            with Consumer(dc, "tlsrun", batch=1000) as consumer:
                assert [(c.id, c.optype) for c in consumer.poll()] == expected
                assert tls_status(consumer._link.connection, server_config(box.dc))["encrypted"]
    finally:
        engine.dispose()
    tailed = gate("tail", "tlsrun", "--from", "1", "--no-follow", "--json")
    assert [(json.loads(line)["id"], json.loads(line)["optype"]) for line in tailed.output.splitlines()] == expected


def test_spark_reads_over_tls(spark: SparkSession, box: Sandbox, config: Path) -> None:
    """Connector/J (the JDBC reader) and format("gate")'s executors verify the DC as gate does."""
    source = ChannelSource(server_config(box.dc), "tlsrun")
    assert {k: v for k, v in source.jdbc_options().items() if k not in ("url", "driver", "user", "password")} == {
        "useSsl": "true", "serverSslCert": str(box.tls_dir / "ca.pem"), "connectTimeout": "5000",
        "socketTimeout": "120000"}
    with connect(server_config(box.dc), "DC", "tlsrun") as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM transfer_checkpoint")
        (end,) = cur.fetchone()
    expected = [(r[0], r[6]) for r in dc_rows(box.dc, "tlsrun")]
    jdbc = read_increment(spark, source, 0, end).orderBy("id").collect()
    assert [(r.id, r.optype) for r in jdbc] == expected
    frame = spark.read.format("gate").option("config", str(config)).option("channel", "tlsrun").load()
    assert [(r.id, r.optype) for r in frame.orderBy("id").collect()] == expected
    plain = ChannelSource(replace(server_config(box.dc), tls=TlsSettings("preferred")), "tlsrun")
    with pytest.raises(Exception, match="FAILED_JDBC.CONNECTION"):  # Connector/J 2.7 has no preferred: plaintext
        read_increment(spark, plain, 0, end).collect()


@pytest.fixture(scope="module")
def other(box: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MariaDBServer, Path]]:
    """A server whose certificate the tests replace (FLUSH SSL), and a directory for those certificates."""
    directory = tmp_path_factory.mktemp("other-certs")
    shutil.copy(box.tls_dir / "server.pem", directory / "live.pem")
    shutil.copy(box.tls_dir / "server-key.pem", directory / "live-key.pem")
    server = MariaDBServer("other", directory / "server", free_port(), 9, (
        f"--ssl-ca={box.tls_dir / 'ca.pem'}", f"--ssl-cert={directory / 'live.pem'}",
        f"--ssl-key={directory / 'live-key.pem'}", "--require-secure-transport=ON"), True, box.source.tls)
    server.start()
    yield server, directory
    server.stop()


def serve(server: MariaDBServer, directory: Path, stem: str) -> None:
    """Make ``server`` present the certificate ``directory/stem.pem`` from its next handshake on."""
    shutil.copy(directory / f"{stem}.pem", directory / "live.pem")
    shutil.copy(directory / f"{stem}-key.pem", directory / "live-key.pem")
    with connect(replace(server.config(), tls=TlsSettings("required")), "other") as conn, conn.cursor() as cur:
        cur.execute("FLUSH SSL")


@pytest.fixture(scope="module")
def authority(box: Sandbox) -> Authority:
    """The sandbox's CA, reloaded to sign more certificates."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509 import load_pem_x509_certificate

    cert = load_pem_x509_certificate((box.tls_dir / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((box.tls_dir / "ca-key.pem").read_bytes(), None)
    return Authority(box.tls_dir / "ca.pem", cert.subject, key)  # type: ignore[arg-type]


def refusal(server: MariaDBServer, tls: TlsSettings) -> str:
    with pytest.raises(TlsFailed) as caught:
        connect(replace(server.config(), tls=tls), "source")
    return str(caught.value)


def test_each_wrong_certificate_is_refused_by_name(other: tuple[MariaDBServer, Path], authority: Authority,
                                                   box: Sandbox, tmp_path: Path) -> None:
    server, directory = other
    ca = str(box.tls_dir / "ca.pem")
    where = f"The source server {server.address}"
    authority.issue(directory, "wrong-host", ("db9.example.com",))
    serve(server, directory, "wrong-host")
    assert refusal(server, TlsSettings("verify-identity", ca)) == (
        f"{where} presented a certificate for db9.example.com, not for the host 127.0.0.1 gate connects to; gate "
        "refused it (TLS mode verify-identity). Connect by a name the certificate holds, or give the server a "
        "certificate with 127.0.0.1 in its subjectAltName.")
    with connect(replace(server.config(), tls=TlsSettings("verify-ca", ca)), "source") as conn:
        assert tls_status(conn, server.config())["encrypted"]  # verify-ca does not check the name
    authority.issue(directory, "expired", ("127.0.0.1",), expired=True)
    serve(server, directory, "expired")
    assert refusal(server, TlsSettings("verify-ca", ca)) == (
        f"{where} presented an expired certificate; gate refused it (TLS mode verify-ca). Renew the server's "
        "certificate.")
    make_authority(directory, "stranger", "a stranger's CA").issue(directory, "stranger-server", ("127.0.0.1",))
    serve(server, directory, "stranger-server")
    assert refusal(server, TlsSettings("verify-identity", ca)) == (
        f"{where} presented a certificate that {ca} did not sign (unable to get local issuer certificate); gate "
        "refused it (TLS mode verify-identity). Give the CA file that signed the server's certificate.")
    # and a wrong CA on gate's side, against the right certificate
    serve(server, directory, "wrong-host")
    assert refusal(server, TlsSettings("verify-ca", str(directory / "stranger.pem"))).startswith(
        f"{where} presented a certificate that {directory / 'stranger.pem'} did not sign")


def test_refused_create_writes_nothing(gate: Gate, box: Sandbox, tmp_path: Path) -> None:
    stranger = make_authority(tmp_path, "stranger", "a stranger's CA")
    result = gate("channel", "create", "tlsbad", "--source", box.source.address, "--source-tls-mode", "verify-ca",
                  "--source-tls-ca", str(stranger.cert))
    assert result.exit_code == 3
    assert result.output.startswith(f"error: The source server {box.source.address} presented a certificate that "
                                    f"{stranger.cert} did not sign")
    plain = gate("channel", "create", "tlsbad", "--source", box.source.address, "--source-tls-mode", "disabled")
    assert plain.exit_code == 3
    assert plain.output.startswith(
        f"error: The source server {box.source.address} accepts only TLS connections (require_secure_transport=ON), and "
        "gate's TLS mode for it is disabled: it refused the plaintext login of user 'root' ([1045] Access denied for user "
        "'root'@'127.0.0.1' (using password: NO)), and accepts the same login over TLS. Set gate's TLS mode for it to "
        "verify-identity (with the CA file that signed the server's certificate), verify-ca or required.")
    with box.dc.connect() as conn, conn.cursor() as cur:
        assert cur.execute("SHOW DATABASES LIKE 'tlsbad'") == 0


def test_x509_account_needs_its_client_certificate(box: Sandbox, gate: Gate) -> None:
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'x509'@'127.0.0.1' REQUIRE X509")
        cur.execute("GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'x509'@'127.0.0.1'")
    ca = str(box.tls_dir / "ca.pem")
    account = replace(box.source.config(), user="x509")
    with pytest.raises(TlsFailed) as refused:
        connect(account, "source")
    assert str(refused.value) == (
        f"The source server {box.source.address} asked for a client certificate in the TLS handshake, gate's TLS "
        "settings of it have none, and it refused user 'x509' ([1045] Access denied for user 'x509'@'127.0.0.1' (using "
        "password: NO)): so MariaDB refuses an account created REQUIRE X509 (or REQUIRE ISSUER or SUBJECT) that presents "
        "no certificate. Give gate the account's client certificate and key (--source-tls-cert and --source-tls-key). "
        "If the account requires no certificate, the user or password is wrong: check the source credentials (password "
        "via an ${ENV} reference).")
    nocert = gate("check-source", box.source.address, "--user", "x509", "--tls-mode", "verify-identity", "--tls-ca",
                  str(box.tls_dir / "ca.pem"))
    assert nocert.exit_code == 3 and "asked for a client certificate in the TLS handshake" in nocert.output
    certified = replace(account, tls=TlsSettings("verify-identity", ca, str(box.tls_dir / "client.pem"),
                                                  str(box.tls_dir / "client-key.pem")))
    with connect(certified, "source") as conn, conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        assert cur.fetchone() == ("x509@127.0.0.1",)
    result = gate("check-source", box.source.address, "--user", "x509", "--tls-mode", "verify-identity", "--tls-ca", ca,
                  "--tls-cert", str(box.tls_dir / "client.pem"), "--tls-key", str(box.tls_dir / "client-key.pem"))
    assert f"source {box.source.address}: offers TLS; gate negotiated TLSv1.3" in result.output


def test_sandbox_up_tls_prints_the_settings_that_verify_it(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    base = f"sandbox: {{dir: sb, source_port: {ports[0]}, standby_port: {ports[1]}, dc_port: {ports[2]}}}\n"
    (tmp_path / "config.yaml").write_text(base)
    runner = CliRunner()

    def gate(config: str, *args: str) -> Result:
        return runner.invoke(main, ["--config", str(tmp_path / config), *args])

    try:
        up = gate("config.yaml", "sandbox", "up", "--tls")
        assert up.exit_code == 0, up.output
        ca = tmp_path / "sb" / "tls" / "ca.pem"
        settings = f"  tls:\n    mode: verify-identity\n    ca: {ca}\n"
        assert up.stderr == (f"\nThe servers accept only TLS. In config.yaml, give gate the sandbox's CA:\ndc:\n{settings}"
                             f"channel_defaults:\n{settings}")
        (tmp_path / "tls.yaml").write_text(f"{base}dc:\n  port: {ports[2]}\n{settings}channel_defaults:\n{settings}")
        checked = gate("tls.yaml", "check-source", f"127.0.0.1:{ports[0]}")
        assert checked.stdout.startswith(f"source 127.0.0.1:{ports[0]}: offers TLS; gate negotiated TLSv1.3")
        assert gate("tls.yaml", "channel", "list").exit_code == 0  # the DC over TLS
    finally:
        gate("config.yaml", "sandbox", "down", "--remove")


def test_set_changes_tls_only_after_connecting_with_it(gate: Gate, box: Sandbox, tmp_path: Path) -> None:
    assert box.standby is not None
    created = gate("channel", "create", "tlsset", "--source", box.source.address, *ca_options(box, "source"),
                   "--standby", box.standby.address, *ca_options(box, "standby"))
    assert created.exit_code == 0, created.output
    before = json.loads(gate("--json", "channel", "show", "tlsset").output)
    stranger = make_authority(tmp_path, "stranger", "a stranger's CA")
    refused = gate("channel", "set", "tlsset", "--source-tls-ca", str(stranger.cert))
    assert refused.exit_code == 3 and "did not sign" in refused.output
    assert json.loads(gate("--json", "channel", "show", "tlsset").output) == before
    changed = gate("--json", "channel", "set", "tlsset", "--standby-tls-mode", "verify-ca")
    assert json.loads(changed.output)["standby_tls"] == {"mode": "verify-ca", "ca": str(box.tls_dir / "ca.pem"),
                                                         "cert": None, "key": None}
    kept_ca = gate("channel", "set", "tlsset", "--standby-tls-mode", "required")
    assert kept_ca.exit_code == 2 and "Use mode verify-ca or verify-identity, or leave the CA out." in kept_ca.output
    assert gate("channel", "set", "tlsset", "--standby-tls-mode", "required", "--standby-tls-ca", "").exit_code == 0
    assert json.loads(gate("--json", "channel", "show", "tlsset").output)["standby"]["tls"]["mode"] == "required"


def test_a_source_failing_tls_stops_gate_and_is_never_failed_over(box: Sandbox, tmp_path: Path) -> None:
    """A certificate that fails is not an unreachable source: gate run stops at once with the message,
    although the channel has a standby and a failover after 1 s."""
    assert box.standby is not None
    stranger = make_authority(tmp_path, "stranger", "a stranger's CA")
    source = replace(server_config(box.source), tls=TlsSettings("verify-ca", str(stranger.cert)))
    with connect(server_config(box.dc), "DC") as conn:
        create_channel(conn, ChannelSettings("tlsfatal", source, server_config(box.standby), server_id=4243,
                                             defaults=ChannelDefaults(failover_after_seconds=1)))
    pipeline = Pipeline(server_config(box.dc), "tlsfatal", preflight=False)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run(pipeline, errors), daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "gate kept retrying a certificate that fails"
    assert [type(e) for e in errors] == [TlsFailed]
    assert str(errors[0]).startswith(f"The source server {box.source.address} presented a certificate that "
                                     f"{stranger.cert} did not sign")
    with box.dc.connect("tlsfatal") as conn, conn.cursor() as cur:
        cur.execute("SELECT (SELECT COUNT(*) FROM transfer_data), (SELECT COUNT(*) FROM gate_switch)")
        assert cur.fetchone() == (0, 0)


def _run(pipeline: Pipeline, errors: list[BaseException]) -> None:
    try:
        pipeline.run()
    except BaseException as exc:  # the test reads it
        errors.append(exc)
