"""Writers: N processes that insert chunks of numbered rows into transfer_data.

Each chunk goes in one DC transaction, so it is either wholly there or not at all. The writers run
in their own processes because building and escaping rows is CPU work that the GIL would serialise
with decoding (FIELD-NOTES: 1 connection 23k rows/s, 2 processes 41k). A writer that loses its DC
connection reconnects with backoff; if it cannot tell whether its last commit landed, it looks.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import signal
import threading
import time
from typing import Any

import pymysql

from gate.common.config import ServerConfig
from gate.common.dc import connect, q
from gate.common.errors import ConnectionFailed, DrainAbandoned, GateError
from gate.common.process import die_with_multiprocessing_parent, name_process
from gate.capture.sequencer import DCRow

INSERT = ("INSERT INTO transfer_data (id, tid, dbname, tablename, create_time, instance_name, optype, data) "
          "VALUES ")
MAX_STATEMENT = 1 << 18  # characters of SQL per INSERT: at most 1 MB in utf8mb4 (max_allowed_packet >= 4 MB)
_CTX = mp.get_context("spawn")


class WriterFailed(GateError):
    """A writer hit an error that retrying cannot fix."""


def _dc_session(server: ServerConfig, database: str) -> pymysql.Connection:
    conn = connect(server, "DC", database, autocommit=False)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT @@SESSION.sql_mode")
        modes = [m for m in cur.fetchone()[0].split(",") if m and m != "NO_BACKSLASH_ESCAPES"]
        cur.execute("SET SESSION sql_mode = %s", (",".join(modes),))  # _literal escapes with backslashes
    return conn


def _literal(text: str) -> str:
    """A quoted SQL string literal. With backslash escapes on (the session ensures it) only the
    backslash, the quote and NUL need escaping; the text goes as utf8mb4, as the connection's charset."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "'" in text:
        text = text.replace("'", "\\'")
    if "\0" in text:
        text = text.replace("\0", "\\0")
    return "'" + text + "'"


def insert_statements(rows: list[DCRow]) -> list[str]:
    """Multi-row INSERTs of at most about MAX_STATEMENT characters each (one row can make a longer one).

    Built by hand: pymysql's executemany escapes every value through its generic converters,
    which cost the writer processes about as much CPU as the rest of their work."""
    statements: list[str] = []
    values: list[str] = []
    size = 0
    lit = _literal
    for r in rows:  # create_time and optype are gate's own text (digits, '-', ':', ' ' and capitals)
        value = f"({r[0]},{r[1]},{lit(r[2])},{lit(r[3])},'{r[4]}',{lit(r[5])},'{r[6]}',{lit(r[7])})"
        if values and size + len(value) > MAX_STATEMENT:
            statements.append(INSERT + ",".join(values))
            values, size = [], 0
        values.append(value)
        size += len(value) + 1
    if values:
        statements.append(INSERT + ",".join(values))
    return statements


def _write(conn: pymysql.Connection, rows: list[DCRow]) -> None:
    try:
        with conn.cursor() as cur:
            for statement in insert_statements(rows):
                cur.execute(statement)
        conn.commit()
    except BaseException:
        try:
            conn.rollback()
        except pymysql.err.Error:
            pass
        raise


def _landed(conn: pymysql.Connection, rows: list[DCRow]) -> bool:
    """After an unclear commit: the chunk is atomic, so its first and last id tell."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM transfer_data WHERE id IN (%s, %s)", (rows[0][0], rows[-1][0]))
        count = cur.fetchone()[0]
    conn.commit()
    return bool(count)


def _writer_main(server: ServerConfig, database: str, inbox: Any, outbox: Any) -> None:
    die_with_multiprocessing_parent()
    name_process("gate-writer")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # gate's main process decides when writers stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn: pymysql.Connection | None = None
    try:  # connect now, not when the first chunk is already waiting
        conn = _dc_session(server, database)
    except (pymysql.err.Error, ConnectionFailed, OSError):
        pass  # the first chunk retries
    while True:
        job = inbox.get()
        if job is None:
            break
        seq, rows = job
        attempt = 0
        while True:
            try:
                if conn is None:
                    conn = _dc_session(server, database)
                    if attempt and _landed(conn, rows):
                        break
                _write(conn, rows)
                break
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, ConnectionFailed, OSError) as exc:
                code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
                if code is not None and code < 2000 and code not in (1053, 1205, 1213, 1927):
                    outbox.put((seq, f"DC rejected rows {rows[0][0]}..{rows[-1][0]}: {exc}"))
                    return
                attempt += 1
                conn = None
                time.sleep(min(2.0, 0.05 * 2 ** min(attempt, 6)))
            except pymysql.err.Error as exc:
                outbox.put((seq, f"DC rejected rows {rows[0][0]}..{rows[-1][0]}: {exc}"))
                return
        outbox.put((seq, None))
    if conn is not None:
        conn.close()


class WriterPool:
    """Hands chunks to writer processes; ``acks`` returns the chunk numbers that are committed."""

    def __init__(self, server: ServerConfig, database: str, processes: int, depth: int = 4,
                 cancel: threading.Event | None = None) -> None:
        q(database)  # validated identifier
        self._cancel = cancel  # once set, submit stops waiting for room in the queue
        self._inbox = _CTX.Queue(maxsize=max(2, depth * processes))
        self._outbox = _CTX.Queue()
        self._procs = [
            _CTX.Process(target=_writer_main, args=(server, database, self._inbox, self._outbox),
                         name=f"gate-writer-{n}", daemon=True)
            for n in range(processes)
        ]
        for proc in self._procs:
            proc.start()
        self.in_flight = 0
        self._next_check = 0.0

    def submit(self, seq: int, rows: list[DCRow]) -> None:
        """Blocks while every writer is busy and the queue is full: backpressure on the reader."""
        while True:
            try:
                self._inbox.put((seq, rows), timeout=1.0)
                break
            except queue.Full:
                self._check_alive()
                if self._cancel is not None and self._cancel.is_set():
                    raise DrainAbandoned(f"chunk {seq} not handed to a writer: stopping without draining")
        self.in_flight += 1

    def acks(self, timeout: float = 0.0) -> list[int]:
        done: list[int] = []
        try:
            item = self._outbox.get(timeout=timeout) if timeout else self._outbox.get_nowait()
            while True:
                seq, error = item
                if error:
                    raise WriterFailed(error)
                done.append(seq)
                item = self._outbox.get_nowait()
        except queue.Empty:
            pass
        self.in_flight -= len(done)
        if not done and time.monotonic() >= self._next_check:
            self._next_check = time.monotonic() + 1.0
            self._check_alive()
        return done

    def _check_alive(self) -> None:
        dead = [p.name for p in self._procs if not p.is_alive()]
        if dead:
            raise WriterFailed(f"writer process(es) {', '.join(dead)} died; see the log above.")

    def close(self, graceful: bool = True) -> None:
        """Graceful: let the writers finish their queue. Otherwise kill them; their open DC
        transactions roll back, and a restart removes whatever they committed above the checkpoint."""
        if graceful:
            for _ in self._procs:
                self._inbox.put(None)
        else:  # chunks no writer will take must not hold up gate's exit (the queue's feeder thread)
            self._inbox.cancel_join_thread()
        for proc in self._procs:
            proc.join(timeout=10 if graceful else 0)
            if proc.is_alive():
                proc.kill()
                proc.join()
