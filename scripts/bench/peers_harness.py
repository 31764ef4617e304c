"""The benchmark's peers: Debezium (embedded engine, MariaDB connector) and Maxwell (stdout producer), the
replicators users compare gate with, reading the same binlog range as gate on the same machine.

Each peer is a small Java main under scripts/bench/peers/NAME/ built against its published artifacts:
scripts/setup.sh resolves them once into ~/.m2, and :func:`build` writes the class path offline
(``mvn -o dependency:build-classpath``) and compiles the main with javac into the work folder. A peer
prints ``started T`` when its engine starts and ``rows N T`` at every tenth of the range's rows; it exits
when it has counted them all. The peers only capture (and count); gate captures and writes the DC.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from monitors import Position, TreeMonitor, busy_percent, machine_busy, mariadbd_cpu

from gate.devtools.sandbox import MariaDBServer

PEERS_DIR = Path(__file__).resolve().parent / "peers"
PEERS = ("debezium", "maxwell")
MAIN_CLASS = {"debezium": "DebeziumCount", "maxwell": "MaxwellCount"}
VERSION = {"debezium": "Debezium 3.5.0.Final, MariaDB connector", "maxwell": "Maxwell 1.22.6, stdout producer"}
PEER_USER, PEER_PASSWORD = "bench_peer", "bench-peer"  # Maxwell refuses the sandbox root's empty password
MB = 1024 * 1024


class PeerUnavailable(Exception):
    """A peer's artifacts are not resolved, or its main does not compile."""


def build(name: str, workdir: Path) -> str:
    """The class path of peer ``name`` (its compiled main first), from ~/.m2 without the network."""
    project = PEERS_DIR / name
    out = workdir / f"peer-{name}"
    classes = out / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    cp_file = out / "classpath.txt"
    done = subprocess.run(["mvn", "-o", "-q", "-B", "-f", str(project / "pom.xml"), "dependency:build-classpath",
                           f"-Dmdep.outputFile={cp_file}"], capture_output=True, text=True)
    if done.returncode != 0:
        text = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)  # Maven's colours
        said = [line for line in text.splitlines() if "[ERROR]" in line] or ["(no message)"]
        raise PeerUnavailable(
            f"the {name} peer's Maven artifacts are not all in ~/.m2 (mvn -o dependency:build-classpath: "
            f"{said[0].replace('[ERROR]', '').strip()[:400]}). scripts/setup.sh fetches them from Maven Central "
            f"(it needs the network once); or run the benchmark with --peers none.")
    classpath = cp_file.read_text().strip()
    sources = [str(p) for p in sorted(project.rglob("*.java"))]
    done = subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(classes), *sources],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise PeerUnavailable(f"the {name} peer's main does not compile:\n{done.stderr[-2000:]}")
    return f"{classes}:{classpath}"


def ensure_user(source: MariaDBServer) -> None:
    """The peers' account on the source (both need replication rights; Maxwell also its schema database)."""
    with source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER IF NOT EXISTS '{PEER_USER}'@'%' IDENTIFIED BY '{PEER_PASSWORD}'")
        cur.execute(f"GRANT ALL ON *.* TO '{PEER_USER}'@'%'")


def command(name: str, classpath: str, source: MariaDBServer, db: str, start: Position, rows: int,
            run_dir: Path, tag: str) -> list[str]:
    java = ["java", "-cp", classpath, MAIN_CLASS[name]]
    if name == "debezium":
        with source.connect() as conn, conn.cursor() as cur:  # the GTID position at the range's start
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", start)
            row = cur.fetchone()
            gtids = str(row[0]) if row and row[0] else ""
        return java + ["127.0.0.1", str(source.port), PEER_USER, PEER_PASSWORD, db, start[0], str(start[1]), gtids,
                       str(rows), str(run_dir)]
    return java + [str(rows), "--host=127.0.0.1", f"--port={source.port}", f"--user={PEER_USER}",
                   f"--password={PEER_PASSWORD}", "--producer=stdout", f"--init_position={start[0]}:{start[1]}:0",
                   f"--schema_database=maxwell_{tag}", "--replica_server_id=6161", f"--client_id={tag}",
                   f"--filter=exclude: *.*, include: {db}.*", "--log_level=warn"]


class _Progress(threading.Thread):
    """Reads a peer's ``started T`` and ``rows N T`` lines; the CPU of the JVM when the first tenth is in."""

    def __init__(self, proc: subprocess.Popen[str], monitor: TreeMonitor) -> None:
        super().__init__(daemon=True)
        self.proc, self.monitor = proc, monitor
        self.started: float | None = None
        self.trace: list[tuple[float, int]] = []  # (wall time, rows counted)
        self.early_cpu: float | None = None
        self.last_change = time.time()

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, *rest = line.split()
            if word == "started":
                self.started = float(rest[0])
            elif word == "rows":
                if self.early_cpu is None:
                    self.early_cpu = self.monitor.snapshot_cpu().get("main", 0.0)
                self.trace.append((float(rest[1]), int(rest[0])))
            self.last_change = time.time()


def run_peer(name: str, classpath: str, source: MariaDBServer, db: str, start: Position, rows: int,
             workdir: Path, tag: str, startup_timeout: float = 60.0, stall_timeout: float = 30.0) -> dict[str, Any]:
    """Peer ``name`` over the range from ``start`` until it has counted ``rows`` row changes, or until it
    makes no progress for ``stall_timeout`` s (``startup_timeout`` before its first tenth)."""
    run_dir = workdir / f"{name}-{tag}"
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "stderr.log"
    cpu0 = mariadbd_cpu(source)
    busy0 = machine_busy()
    launched = time.time()
    with open(log, "w") as err:
        proc = subprocess.Popen(command(name, classpath, source, db, start, rows, run_dir, tag),
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=run_dir)
        monitor = TreeMonitor(proc.pid)
        monitor.start()
        progress = _Progress(proc, monitor)
        progress.start()
        while proc.poll() is None:
            limit = stall_timeout if progress.trace else startup_timeout
            if time.time() - progress.last_change > limit:
                proc.kill()
                break
            time.sleep(0.05)
        proc.wait()
        progress.join(timeout=5)
        busy1 = machine_busy()
        sample = monitor.stop()
    if name == "maxwell":
        with source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS maxwell_{tag}")
    counted = progress.trace[-1][1] if progress.trace else 0
    complete = counted == rows and proc.returncode == 0
    cpu = sample.cpu.get(proc.pid, ("main", 0.0))[1]
    result: dict[str, Any] = {
        "peer": name, "version": VERSION[name], "rows": counted, "expected_rows": rows, "complete": complete,
        "exit_code": proc.returncode, "peak_rss_mb": sample.peak_tree_rss / MB,
        "cpu_us_per_row": round(cpu / max(1, counted) * 1e6, 2),
        "source_cpu_us_per_row": round((mariadbd_cpu(source) - cpu0) / max(1, counted) * 1e6, 2),
        "launch_to_done_s": (progress.trace[-1][0] - launched) if progress.trace else None,
        "machine_busy_percent": busy_percent(busy0, busy1),
    }
    if not complete:
        lines = log.read_text(errors="replace").strip().splitlines()
        first = next((k for k, line in enumerate(lines) if "Exception" in line or "ERROR" in line), len(lines) - 2)
        cause = " | ".join(line.strip() for line in lines[max(0, first):first + 2])[:400]
        result.update(seconds=None, rows_per_s=None, steady_rows_per_s=None, steady_cpu_us_per_row=None,
                      error=f"counted {counted} of {rows} rows, exit code {proc.returncode}; first error: {cause}")
        return result
    t_start = progress.started if progress.started is not None else launched
    t_first, n_first = progress.trace[0]
    t_done = progress.trace[-1][0]
    steady = (rows - n_first) / (t_done - t_first) if t_done > t_first else None
    steady_cpu = None
    if progress.early_cpu is not None and rows > n_first:
        steady_cpu = round((cpu - progress.early_cpu) / (rows - n_first) * 1e6, 2)
    result.update(seconds=t_done - t_start, rows_per_s=rows / (t_done - t_start), first_tenth_s=t_first - t_start,
                  steady_rows_per_s=steady, steady_cpu_us_per_row=steady_cpu)
    return result
