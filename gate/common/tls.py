"""TLS settings of one server connection: the mode (the names MySQL clients use) and certificate paths.

Only paths are kept, never file contents. ``disabled`` speaks plaintext; ``preferred`` encrypts when the
server offers TLS and verifies nothing; ``required`` insists on TLS and verifies nothing; ``verify-ca``
also checks that the server's certificate chains to the CA file (or the system's CAs without one);
``verify-identity`` also checks that the certificate names the host gate connects to. A client
certificate and key (for accounts created ``REQUIRE X509``) need ``required`` or stronger.
"""

from __future__ import annotations

import os
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.common.errors import InvalidValue, TlsFailed

MODES = ("disabled", "preferred", "required", "verify-ca", "verify-identity")
VERIFYING = ("verify-ca", "verify-identity")
ENCRYPTING = ("required", *VERIFYING)


_HANDSHAKE, _CERTIFICATE_REQUEST = 22, 13  # TLS content type and handshake message type


class RecordingContext(ssl.SSLContext):
    """An SSL context that keeps, of the last handshake it completed, the server's certificate and whether
    the server asked for a client certificate (it does when it can verify them: ssl_ca set). The latter is
    seen through CPython's message callback (``_msg_callback``, its debugging hook), during the handshake
    only; a Python without it reports False."""

    peer: dict[str, Any] | None = None
    certificate_asked = False

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self.certificate_asked = False
        watch = hasattr(self, "_msg_callback")
        if watch:
            setattr(self, "_msg_callback", self._note)  # noqa: B010 (a private hook: typeshed does not know it)
        try:
            sock = super().wrap_socket(*args, **kwargs)
        finally:
            if watch:
                setattr(self, "_msg_callback", None)  # noqa: B010
        self.peer = sock.getpeercert() or None
        return sock

    def _note(self, _conn: Any, direction: str, _version: Any, content_type: int, message_type: int,
              _data: bytes) -> None:
        if direction == "read" and content_type == _HANDSHAKE and message_type == _CERTIFICATE_REQUEST:
            self.certificate_asked = True


def peer_names(peer: dict[str, Any]) -> list[str]:
    """The names a certificate (as ``getpeercert()`` gives it) is for: its subjectAltName entries, else its
    subject's common name."""
    names = [str(value) for _, value in peer.get("subjectAltName", ())]
    if names:
        return names
    return [str(value) for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"]


def describe_peer(peer: dict[str, Any] | None) -> str | None:
    """A verified certificate in words: its names, issuer and end of validity."""
    if not peer:
        return None
    issuer = [str(value) for rdn in peer.get("issuer", ()) for key, value in rdn if key == "commonName"]
    return (f"{', '.join(peer_names(peer)) or 'no name'} (issued by {', '.join(issuer) or 'unknown'}, valid until "
            f"{peer.get('notAfter', 'unknown')})")


@dataclass(frozen=True)
class TlsSettings:
    """How gate protects one server connection. Paths are absolute (see :func:`tls_settings`)."""

    mode: str = "preferred"
    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise InvalidValue(problem)

    def _problem(self) -> str | None:
        if self.mode not in MODES:
            return f"TLS mode {self.mode!r} is unknown. Use one of {', '.join(MODES)}."
        if self.ca and self.mode not in VERIFYING:
            return (f"A TLS CA file ({self.ca}) is only used to verify the server's certificate, which mode "
                    f"{self.mode} does not do. Use mode verify-ca or verify-identity, or leave the CA out.")
        if bool(self.cert) != bool(self.key):
            return ("A TLS client certificate and its key go together: give both the certificate file and the key "
                    "file, or neither.")
        if self.cert and self.mode not in ENCRYPTING:
            return (f"A TLS client certificate needs an encrypted connection; mode {self.mode} may not encrypt. "
                    "Use mode required, verify-ca or verify-identity.")
        return None

    @property
    def verifies(self) -> str:
        """What a successful connection has proved about the server, in words."""
        if self.mode == "verify-identity":
            return f"certificate signed by {self.ca or 'a system CA'}, naming the host"
        if self.mode == "verify-ca":
            return f"certificate signed by {self.ca or 'a system CA'} (host name not checked)"
        if self.mode == "disabled":
            return "nothing (plaintext)"
        return "nothing (the server's certificate is not checked)"

    def as_row(self) -> dict[str, Any]:
        return {"mode": self.mode, "ca": self.ca, "cert": self.cert, "key": self.key}

    @classmethod
    def from_row(cls, row: dict[str, Any] | None) -> TlsSettings:
        """The stored form; servers stored before TLS settings existed get the default."""
        return cls(**row) if row else cls()

    def check_files(self) -> None:
        """Refuse a file that is missing or unreadable, and a key file that others could read."""
        for what, path in (("CA", self.ca), ("client certificate", self.cert), ("client key", self.key)):
            if path and not os.access(path, os.R_OK):
                raise TlsFailed(f"The TLS {what} file {path} does not exist or cannot be read by this user. "
                                "Give the path of a readable PEM file.")
        if self.key:
            mode = stat.S_IMODE(os.stat(self.key).st_mode)
            if mode & 0o077:
                raise TlsFailed(f"The TLS client key file {self.key} can be read or written by other users (mode "
                                f"{mode:03o}); gate refuses to use a key others can read. Run: chmod 600 {self.key}")

    def context(self) -> RecordingContext | None:
        """The SSL context of a connection that must be encrypted; None for disabled and preferred."""
        if self.mode not in ENCRYPTING:
            return None
        self.check_files()
        try:
            ctx = RecordingContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            if self.mode in VERIFYING:
                ctx.verify_mode = ssl.CERT_REQUIRED
                if self.ca:
                    ctx.load_verify_locations(self.ca)
                else:
                    ctx.load_default_certs()
                ctx.check_hostname = self.mode == "verify-identity"
            else:
                ctx.verify_mode = ssl.CERT_NONE
            if self.cert:
                ctx.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, ValueError) as exc:
            raise TlsFailed(f"The TLS files {', '.join(p for p in (self.ca, self.cert, self.key) if p)} could not be "
                            f"loaded ({exc}). Give PEM files: a CA certificate, a client certificate and its "
                            "unencrypted private key.") from None
        return ctx

    def pymysql_args(self) -> dict[str, Any]:
        """PyMySQL's connection arguments for this mode (PyMySQL itself tries TLS when given none)."""
        if self.mode == "disabled":
            return {"ssl_disabled": True}
        ctx = self.context()
        return {"ssl": ctx} if ctx is not None else {}

    def jdbc_properties(self) -> dict[str, str]:
        """MariaDB Connector/J 2.7's properties. It has no preferred mode: preferred connects in plaintext.
        A client certificate needs a keystore, which Connector/J 2.7 cannot read from PEM files."""
        if self.mode not in ENCRYPTING:
            return {"useSsl": "false"}
        if self.cert:
            raise TlsFailed("Spark's JDBC reads (MariaDB Connector/J 2.7) cannot use a PEM client certificate and "
                            "key. Read with format(\"gate\"), which uses them, or give the DC account no REQUIRE "
                            "X509 for the JDBC reader.")
        if self.mode == "required":
            return {"useSsl": "true", "trustServerCertificate": "true"}
        properties = {"useSsl": "true"}
        if self.ca:
            self.check_files()
            properties["serverSslCert"] = self.ca
        if self.mode == "verify-ca":
            properties["disableSslHostnameVerification"] = "true"
        return properties


TlsOptions = tuple[str | None, str | None, str | None, str | None]  # mode, ca, cert, key as given; None: keep


def given(options: TlsOptions) -> bool:
    """Whether any of the options was given."""
    return any(value is not None for value in options)


def tls_settings(mode: str | None, ca: str | None, cert: str | None, key: str | None,
                 keep: TlsSettings | None = None, base: Path | None = None) -> TlsSettings:
    """Settings from options or config keys: what is not given comes from ``keep``; an empty path removes
    a kept one; relative paths are taken from ``base`` (default: the working directory). The files are
    checked (readable, and the key private)."""
    keep = keep or TlsSettings()

    def path(value: str | None, kept: str | None) -> str | None:
        if value is None:
            return kept
        return str(((base or Path.cwd()) / value).absolute()) if value.strip() else None

    settings = TlsSettings(mode if mode is not None else keep.mode, path(ca, keep.ca), path(cert, keep.cert),
                           path(key, keep.key))
    settings.check_files()
    return settings
