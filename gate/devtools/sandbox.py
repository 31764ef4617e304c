"""Private MariaDB servers in a state directory: a source, a standby replicating from it, and a DC.

Used by ``gate sandbox up|status|down``, the demo, the benchmark and the test fixtures alike.
Each server gets its own datadir, socket, pid file and a free TCP port on 127.0.0.1. Its root
account has an empty password and listens on loopback only: a sandbox is for trying gate out,
never for production data.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil
import pymysql

from gate.common.config import Secret, ServerConfig
from gate.common.connection import open_connection
from gate.common.dc import one_row
from gate.common.errors import SandboxError
from gate.common.process import die_with_parent
from gate.common.tls import TlsSettings
from gate.devtools.certs import make_authority

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
REPL_USER = "repl"
REPL_PASSWORD = "repl-sandbox"

SOURCE_ARGS = (
    "--log-bin=mysql-bin",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--log-slave-updates",
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class MariaDBServer:
    """One private mariadbd. ``start`` creates the datadir on first use."""

    name: str
    basedir: Path
    port: int
    server_id: int
    args: tuple[str, ...] = ()
    tied_to_parent: bool = False
    tls: TlsSettings = field(default_factory=lambda: TlsSettings("disabled"))  # how its own connections go
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def datadir(self) -> Path:
        return self.basedir / "data"

    @property
    def pid_file(self) -> Path:
        return self.basedir / "mariadbd.pid"

    @property
    def tmpdir(self) -> Path:
        """Its own: servers sharing /tmp have crashed dropping each other's Aria temporary tables."""
        return self.basedir / "tmp"

    @property
    def error_log(self) -> Path:
        return self.basedir / "error.log"

    @property
    def socket_path(self) -> Path:
        return self.basedir / "mariadbd.sock"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def config(self) -> ServerConfig:
        """How gate logs in to it: root without password, over TLS when the sandbox has it (else plaintext:
        PyMySQL would otherwise build a TLS context per connect)."""
        return ServerConfig("127.0.0.1", self.port, "root", Secret(""), self.tls)

    def connection_settings(self) -> dict[str, object]:
        return self.config().connect_args()

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection:
        return open_connection(self.config(), self.name, database=database,
                               **{"autocommit": True, "charset": "utf8mb4", **kwargs})

    def pid(self) -> int | None:
        """The pid of this server's live mariadbd (not a zombie, not a stranger that reused the pid)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if self._is_mine(pid) else None

    def _is_mine(self, pid: int) -> bool:
        try:
            proc = psutil.Process(pid)
            return proc.status() != psutil.STATUS_ZOMBIE and f"--datadir={self.datadir}" in proc.cmdline()
        except psutil.Error:
            return False

    def is_running(self) -> bool:
        return self.pid() is not None

    def _initialise(self) -> None:
        self.basedir.mkdir(parents=True, exist_ok=True)
        template = _template_datadir()
        shutil.copytree(template, self.datadir)

    def start(self, timeout: float = 30.0) -> None:
        if self.is_running():
            return
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as mariadbd does: TIME_WAIT is fine
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError:
                raise SandboxError(
                    f"Sandbox server {self.name} cannot use port {self.port}: another process listens there. "
                    "Stop that process, or pick other ports in the sandbox section of config.yaml "
                    "(they take effect after 'gate sandbox down --remove')."
                ) from None
        if not self.datadir.exists():
            self._initialise()
        self.tmpdir.mkdir(exist_ok=True)
        cmd = [
            MARIADBD, "--no-defaults", "--user=root", f"--datadir={self.datadir}",
            f"--socket={self.socket_path}", f"--port={self.port}", "--bind-address=127.0.0.1",
            f"--pid-file={self.pid_file}", f"--log-error={self.error_log}", "--skip-name-resolve",
            f"--server-id={self.server_id}", "--innodb-log-file-size=8M", f"--tmpdir={self.tmpdir}",
            "--innodb-buffer-pool-size=256M", "--max-connections=300",
            "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
            *self.args,
        ]
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            preexec_fn=functools.partial(die_with_parent, os.getpid()) if self.tied_to_parent else None,
            start_new_session=not self.tied_to_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise SandboxError(
                    f"Sandbox server {self.name} exited during start-up (code {self._proc.returncode}). "
                    f"Its error log is {self.error_log}; a common cause is a port taken by another "
                    f"process (port {self.port}) or a damaged datadir ({self.datadir}: remove it)."
                )
            try:
                self.connect(connect_timeout=1).close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.05)
        raise SandboxError(f"Sandbox server {self.name} did not answer within {timeout:.0f} s; see {self.error_log}.")

    def stop(self, timeout: float = 30.0) -> None:
        """Clean shutdown (SIGTERM), waiting for the process to go."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """kill -9: the server dies without flushing anything."""
        self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: int, timeout: float) -> None:
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    break
            elif not self._is_mine(pid):
                break
            time.sleep(0.02)
        else:
            os.kill(pid, signal.SIGKILL)
        if sig == signal.SIGKILL:
            self.pid_file.unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()


def _template_datadir() -> Path:
    """A freshly initialised datadir, made once per machine and copied for each new server."""
    root = Path(os.environ.get("GATE_SANDBOX_CACHE", Path.home() / ".cache" / "gate-sandbox"))
    template = root / "template-datadir"
    if template.exists():
        return template
    for tool in (MARIADBD, INSTALL_DB):
        if not Path(tool).exists():
            raise SandboxError(
                f"{tool} is missing. Install MariaDB: apt-get install -y mariadb-server mariadb-client "
                "(scripts/setup.sh does this for you)."
            )
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f"template-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    result = subprocess.run(
        [INSTALL_DB, "--no-defaults", f"--datadir={staging}", "--user=root",
         "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
         "--innodb-log-file-size=8M"],
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        raise SandboxError(f"mariadb-install-db failed: {result.stderr.strip()[-800:]}")
    try:
        staging.rename(template)
    except OSError:  # another process made it first
        shutil.rmtree(staging, ignore_errors=True)
    return template


@dataclass
class SandboxState:
    """What ``gate sandbox up`` records so that ``status`` and ``down`` find the servers again."""

    source_port: int
    dc_port: int
    standby_port: int | None
    tls: bool = False  # every server has a certificate of the sandbox's CA and accepts only TLS connections


class Sandbox:
    """A source (server_id 1), an optional standby (server_id 2) and a DC (server_id 3)."""

    def __init__(self, state_dir: Path, with_standby: bool = True, tied_to_parent: bool = False,
                 source_args: tuple[str, ...] = (), ports: SandboxState | None = None,
                 dc_args: tuple[str, ...] = (), tls: bool = False) -> None:
        """Ports come from the state file of an earlier ``up``, else ``ports``, else free ones. ``source_args``
        (source and standby) and ``dc_args`` are extra mariadbd options. ``tls``: the servers get
        certificates of a CA made in the sandbox directory (see :attr:`tls_dir`) and refuse plaintext; a
        sandbox made with TLS keeps it."""
        self.state_dir = Path(state_dir)
        self.state_file = self.state_dir / "sandbox.json"
        state = self._load_state() or ports
        if state is None:
            state = SandboxState(free_port(), free_port(), free_port() if with_standby else None)
        self.state = state = replace(state, tls=state.tls or tls)
        server_tls = TlsSettings("verify-identity", str(self.tls_dir / "ca.pem")) if state.tls else None
        tls_args = (f"--ssl-ca={self.tls_dir / 'ca.pem'}", f"--ssl-cert={self.tls_dir / 'server.pem'}",
                    f"--ssl-key={self.tls_dir / 'server-key.pem'}", "--require-secure-transport=ON") if state.tls else ()

        def server(name: str, port: int, server_id: int, args: tuple[str, ...]) -> MariaDBServer:
            made = MariaDBServer(name, self.state_dir / name, port, server_id, args + tls_args, tied_to_parent)
            return replace(made, tls=server_tls) if server_tls else made

        self.source = server("source", state.source_port, 1, SOURCE_ARGS + source_args)
        self.dc = server("dc", state.dc_port, 3, dc_args)
        self.standby = (server("standby", state.standby_port, 2, SOURCE_ARGS + source_args)
                        if state.standby_port is not None else None)

    @property
    def tls_dir(self) -> Path:
        """Where a TLS sandbox keeps its CA (ca.pem), the servers' certificate (server.pem, for 127.0.0.1
        and localhost) and a client certificate (client.pem) with their keys."""
        return self.state_dir / "tls"

    def _make_certificates(self) -> None:
        if (self.tls_dir / "server.pem").exists():
            return
        authority = make_authority(self.tls_dir, "ca", "gate sandbox CA")
        authority.issue(self.tls_dir, "server", ("127.0.0.1", "localhost"))
        authority.issue(self.tls_dir, "client", ("gate",), client=True)

    def _load_state(self) -> SandboxState | None:
        try:
            return SandboxState(**json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise SandboxError(f"{self.state_file} is damaged ({exc}); remove the directory {self.state_dir}.") from exc

    @property
    def servers(self) -> list[MariaDBServer]:
        return [s for s in (self.source, self.standby, self.dc) if s is not None]

    def up(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(asdict(self.state)))
        if self.state.tls:
            self._make_certificates()
        fresh_standby = self.standby is not None and not self.standby.datadir.exists()
        for server in self.servers:
            server.start()
        if self.standby is not None and fresh_standby:
            self.attach_standby()

    def attach_standby(self) -> None:
        """Make the standby replicate from the source with GTIDs (slave_pos)."""
        assert self.standby is not None
        with self.source.connect() as conn, conn.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")
            cur.execute(f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'127.0.0.1' IDENTIFIED BY '{REPL_PASSWORD}'")
            cur.execute(f"GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '{REPL_USER}'@'127.0.0.1'")
        with self.standby.connect() as conn, conn.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, "
                "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1"
                + (", MASTER_SSL=1, MASTER_SSL_VERIFY_SERVER_CERT=1, MASTER_SSL_CA=%s" if self.state.tls else ""),
                (self.source.port, REPL_USER, REPL_PASSWORD) + ((str(self.tls_dir / "ca.pem"),) if self.state.tls else ()),
            )
            cur.execute("START SLAVE")

    def status(self) -> list[dict[str, object]]:
        return [
            {"server": s.name, "address": s.address, "server_id": s.server_id,
             "running": s.is_running(), "pid": s.pid(), "datadir": str(s.datadir)}
            for s in self.servers
        ]

    def down(self, remove: bool = False) -> None:
        for server in self.servers:
            server.stop()
        if remove:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def wait_standby_caught_up(self, timeout: float = 30.0) -> None:
        """Block until the standby has applied everything the source has binlogged."""
        assert self.standby is not None
        with self.source.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            target = one_row(cur)[0]
        with self.standby.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (target, timeout))
            if one_row(cur)[0] != 0:
                raise SandboxError(f"standby did not reach GTID {target} within {timeout} s")
