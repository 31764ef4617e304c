"""The one place gate opens MySQL connections: every PyMySQL connection (also the binlog stream's, the
snapshot readers', the sandbox's and format("gate")'s) is made here, from :meth:`ServerConfig.connect_args`
with the server's TLS settings. TLS failures become :class:`TlsFailed` with what to fix; retrying never
helps them, so no caller mistakes them for an unreachable server. A refused login (1045) is one when what
the server shows says so: a plaintext login it accepts over TLS (require_secure_transport=ON, or an account
REQUIRE SSL), or a TLS login without a client certificate after the server asked for one (an account
REQUIRE X509 is refused so).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pymysql

from gate.common.config import ServerConfig
from gate.common.errors import ConnectionFailed, ServerRefused, TlsFailed
from gate.common.retry import UNREACHABLE, error_code, is_transient, refusal
from gate.common.tls import RecordingContext, TlsSettings, describe_peer, peer_names

_ER_ACCESS_DENIED = 1045
_CR_SSL_CONNECTION_ERROR = 2026  # PyMySQL: TLS required and the server offers none
_ER_SECURE_TRANSPORT_REQUIRED = (3159, 4036)  # MySQL, MariaDB: require_secure_transport refuses plaintext
_NAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
_EXPIRED, _NOT_YET_VALID = 10, 9
_UNTRUSTED = (18, 19, 20, 21)  # self-signed, self-signed in chain, unknown issuer, leaf not verifiable


def open_connection(server: ServerConfig, role: str, **options: Any) -> pymysql.Connection:
    """A PyMySQL connection to ``server`` with ``options`` added to its arguments. PyMySQL's errors pass
    through, except TLS failures, which raise :class:`TlsFailed`."""
    return _open(server, role, {**server.connect_args(), **options})


def stream_connector(server: ServerConfig, role: str) -> Callable[..., pymysql.Connection]:
    """What python-mysql-replication connects with (its ``pymysql_wrapper``): the library passes back the
    arguments it was given (:meth:`ServerConfig.connect_args` and its own), and TLS failures are reported
    as here."""

    def connect(**arguments: Any) -> pymysql.Connection:
        if "db" in arguments:  # the library's control connection still uses PyMySQL's deprecated name
            arguments["database"] = arguments.pop("db")
        return _open(server, role, arguments)

    return connect


class _NamesLater(pymysql.connections.Connection):
    """A connection that leaves out PyMySQL's SET NAMES after the login (a round trip of its own): the caller
    sends :func:`set_names` at the head of its first query instead (the login already asked for the same
    character set, in which the server reads that query)."""

    _connecting = False

    def connect(self, sock: Any = None) -> None:
        self._connecting = True
        try:
            super().connect(sock)
        finally:
            self._connecting = False

    def set_character_set(self, charset: str, collation: str | None = None) -> None:
        if not self._connecting:
            super().set_character_set(charset, collation)


def set_names(conn: pymysql.Connection) -> str:
    """The SET NAMES statement PyMySQL sends after the login, which the first query of a connection opened
    with ``names_later=True`` begins with (its ``NAMES ...`` may also go first in a SET of variables)."""
    return f"SET NAMES {conn.charset}" + (f" COLLATE {conn.collation}" if conn.collation else "")


def _open(server: ServerConfig, role: str, arguments: dict[str, Any]) -> pymysql.Connection:
    """``names_later=True`` among the arguments: a :class:`_NamesLater` connection."""
    kind = _NamesLater if arguments.pop("names_later", False) else pymysql.connections.Connection
    try:
        return kind(**arguments)
    except pymysql.err.OperationalError as exc:
        failure = _tls_failure(exc, server, role) or _tls_login_failure(exc, server, role, arguments.get("ssl"))
        if failure is not None:
            raise failure from None
        raise


def connect(server: ServerConfig, role: str, database: str | None = None, **kwargs: Any) -> pymysql.Connection:
    """Connect with a clear, password-free message for the usual failures."""
    options: dict[str, Any] = {"charset": "utf8mb4", "autocommit": True, **kwargs}
    try:
        return open_connection(server, role, database=database, **options)
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else 0
        if code == 1045:
            hint = ""
            if server.tls.mode == "disabled":
                hint = (" With TLS mode disabled, a server with require_secure_transport=ON refuses every login: set "
                        "a TLS mode.")
            elif server.tls.mode != "preferred" and not server.tls.cert:
                hint = (" If the account was created REQUIRE X509 it also needs a client certificate and key in "
                        "gate's TLS settings of this server.")
            raise ServerRefused(
                f"The {role} server {server.address} refused user '{server.user}': wrong password or no such "
                f"user from this host. Check the {role} credentials (password via an ${{ENV}} reference)."
                + hint
            ) from None
        if code == 1049:
            raise ServerRefused(f"The {role} server {server.address} has no database '{database}': was the channel "
                                "dropped? 'gate channel list' shows the channels there.") from None
        if code in UNREACHABLE:
            raise ConnectionFailed(
                f"Cannot reach the {role} server at {server.address} ({exc.args[1] if len(exc.args) > 1 else exc}). "
                f"Check that it is running and that host and port are right."
            ) from None
        if not is_transient(exc):
            raise refusal(exc, role, server, "the connection", database) from None
        raise ConnectionFailed(f"The {role} server {server.address} rejected the connection: {exc}") from None


def tls_status(conn: pymysql.Connection, server: ServerConfig) -> dict[str, Any]:
    """What a connection negotiated: protocol and cipher (the server's Ssl_version and Ssl_cipher), and
    what was verified of the server's certificate."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        found = {str(name): str(value) for name, value in cur.fetchall()}
    encrypted = bool(found.get("Ssl_version"))
    context = getattr(conn, "ctx", None)
    peer = context.peer if isinstance(context, RecordingContext) else None
    return {"mode": server.tls.mode, "encrypted": encrypted,
            "protocol": found.get("Ssl_version") or None, "cipher": found.get("Ssl_cipher") or None,
            "verified": server.tls.verifies if encrypted else "nothing (plaintext)",
            "peer": describe_peer(peer) if server.tls.mode in ("verify-ca", "verify-identity") else None}


def _tls_failure(exc: pymysql.err.OperationalError, server: ServerConfig, role: str) -> TlsFailed | None:
    """The TLS failure behind a PyMySQL error, as a message that says what to fix; None for other errors."""
    where = f"The {role} server {server.address}"
    original = getattr(exc, "original_exception", None)
    code = error_code(exc)
    if isinstance(original, ssl.SSLCertVerificationError):
        return TlsFailed(_verification_message(server, role, original))
    if isinstance(original, ssl.SSLError):
        return TlsFailed(f"{where}: the TLS handshake failed ({original.reason or original}). Check that the server's "
                         "TLS setup and gate's TLS settings of it (mode, CA, client certificate) belong together.")
    if code == _CR_SSL_CONNECTION_ERROR:
        return TlsFailed(f"{where} does not offer TLS, and gate's TLS mode for it is {server.tls.mode}. Give the "
                         "server a certificate (ssl_cert, ssl_key and ssl_ca in its my.cnf), or lower the mode to "
                         "preferred or disabled if plaintext is acceptable on that network.")
    if code in _ER_SECURE_TRANSPORT_REQUIRED:
        return TlsFailed(f"{where} accepts only TLS connections (require_secure_transport=ON), and gate's TLS mode "
                         f"for it is {server.tls.mode}. Set it to verify-identity (with the CA file that signed the "
                         "server's certificate), verify-ca or required.")
    return None


def _tls_login_failure(exc: pymysql.err.OperationalError, server: ServerConfig, role: str,
                       context: Any) -> TlsFailed | None:
    """A refused login (1045) whose cause is TLS, as the server shows it; None for other errors and for a
    refusal nothing shows to be about TLS (a wrong password, an unknown user)."""
    if error_code(exc) != _ER_ACCESS_DENIED:
        return None
    where = f"The {role} server {server.address}"
    answer = f"[1045] {exc.args[1] if len(exc.args) > 1 else exc}"
    modes = ("Set gate's TLS mode for it to verify-identity (with the CA file that signed the server's certificate), "
             "verify-ca or required.")
    if server.tls.mode == "disabled":
        secure_transport = _require_secure_transport(server)
        if secure_transport is None:
            return None
        if secure_transport:
            return TlsFailed(f"{where} accepts only TLS connections (require_secure_transport=ON), and gate's TLS mode "
                             f"for it is disabled: it refused the plaintext login of user '{server.user}' ({answer}), "
                             f"and accepts the same login over TLS. {modes}")
        return TlsFailed(f"{where} accepts user '{server.user}' only over TLS (the account was created REQUIRE SSL), and "
                         f"gate's TLS mode for it is disabled: it refused the plaintext login ({answer}), and accepts "
                         f"the same login over TLS. {modes}")
    if isinstance(context, RecordingContext) and context.certificate_asked and not server.tls.cert:
        options = "tls.cert and tls.key of dc in config.yaml" if role == "DC" else f"--{role}-tls-cert and --{role}-tls-key"
        return TlsFailed(f"{where} asked for a client certificate in the TLS handshake, gate's TLS settings of it have "
                         f"none, and it refused user '{server.user}' ({answer}): so MariaDB refuses an account created "
                         "REQUIRE X509 (or REQUIRE ISSUER or SUBJECT) that presents no certificate. Give gate the "
                         f"account's client certificate and key ({options}). If the account requires no certificate, "
                         f"the user or password is wrong: check the {role} credentials (password via an ${{ENV}} "
                         "reference).")
    return None


def _require_secure_transport(server: ServerConfig) -> bool | None:
    """The server's require_secure_transport, read by logging in as ``server``'s user over TLS (mode required:
    the login that was refused in plaintext, now encrypted); None when that login fails too."""
    probe = replace(server, tls=TlsSettings("required"))
    try:
        conn = pymysql.connect(**{**probe.connect_args(), "connect_timeout": 5})
    except pymysql.err.MySQLError:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.require_secure_transport")
            row = cur.fetchone()
    finally:
        conn.close()
    return bool(row and row[0])


def _verification_message(server: ServerConfig, role: str, error: ssl.SSLCertVerificationError) -> str:
    where = f"The {role} server {server.address}"
    refused = f"gate refused it (TLS mode {server.tls.mode})"
    ca = server.tls.ca or "the system's CAs"
    if error.verify_code in _NAME_MISMATCH:
        names = _certificate_names(server)
        return (f"{where} presented a certificate for {names}, not for the host {server.host} gate connects to; "
                f"{refused}. Connect by a name the certificate holds, or give the server a certificate with "
                f"{server.host} in its subjectAltName.")
    if error.verify_code == _EXPIRED:
        return f"{where} presented an expired certificate; {refused}. Renew the server's certificate."
    if error.verify_code == _NOT_YET_VALID:
        return (f"{where} presented a certificate that is not valid yet; {refused}. Check the clocks of both hosts "
                "and the certificate's start date.")
    if error.verify_code in _UNTRUSTED:
        return (f"{where} presented a certificate that {ca} did not sign ({error.verify_message}); {refused}. Give "
                "the CA file that signed the server's certificate.")
    return f"{where} presented a certificate that could not be verified ({error.verify_message}); {refused}."


def _certificate_names(server: ServerConfig) -> str:
    """The names in the certificate of a server that failed the host name check, read by a handshake that
    checks the CA only."""
    probe = replace(server, tls=replace(server.tls, mode="verify-ca"))
    arguments = probe.connect_args()
    context = arguments["ssl"]
    try:
        pymysql.connect(**arguments).close()
    except pymysql.err.MySQLError:
        pass  # the handshake is done before the login; what happens after it does not matter here
    peer = context.peer if isinstance(context, RecordingContext) else None
    return ", ".join(peer_names(peer)) if peer else "other names"
