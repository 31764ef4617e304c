"""Writers: N processes that insert chunks of numbered rows into transfer_data.

Each chunk goes whole into one DC transaction (with the chunks queued behind it when a connection comes free),
so it is either wholly there or not at all. The writers run
in their own processes because building and escaping rows is CPU work that the GIL would serialise
with decoding (measured: 1 connection 23k rows/s, 2 processes 41k). A writer that loses its DC
connection reconnects with backoff; if it cannot tell whether its last commit landed, it looks.
INSERTs are sized to the DC server's max_allowed_packet; a single row larger than that waits, loudly
(an ERROR in gate's log and a ``stuck_row:ID`` entry in gate_meta that ``gate status`` shows), until
the setting is raised: the row cannot be skipped without a gap in the ids.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from gate.capture.holder import Fence, tag_expression, tag_session
from gate.capture.sequencer import DCRow
from gate.common.config import ServerConfig
from gate.common.connection import set_names
from gate.common.dc import connect, one_row, q, round_trips
from gate.common.errors import DrainAbandoned, GateError, RowTooLarge, WriterFailed
from gate.common.process import WorkerPool, start_child
from gate.common.retry import backoff, is_transient, refusal

INSERT = ("INSERT INTO transfer_data (id, tid, dbname, tablename, create_time, instance_name, optype, data) "
          "VALUES ")
MAX_STATEMENT = 1 << 18  # characters of SQL per INSERT (at most 1 MB in utf8mb4), fewer for a smaller packet
_INSERT = INSERT.encode()
LARGEST_PACKET = 1 << 30  # the largest max_allowed_packet MariaDB and MySQL accept
STUCK_RETRY = 5.0  # seconds between attempts to write a row larger than the DC's max_allowed_packet
REPORT_EVERY = 60.0  # seconds between repeated log lines about the same chunk
LANE_SPAN = 0.025  # seconds of round trip to the DC per extra connection of a writer (about a chunk's time in the DC)
MAX_LANES = 3  # connections per writer at most: a free lane takes the chunks waiting (GROUP_ROWS), so more only
# contend in the DC: each is one more transaction inserting at the end of transfer_data's key at once, and the DC
# server's CPU per row grows with them (1,000,000 rows at 100 ms: workload a 15.7 us a row with 5 lanes a writer,
# 14.1 with 3; c 13.1 and 11.0), on a machine where the DC server's CPU is the rate (a DC with an 8 MB redo log;
# with 256 MB that growth is small, and from FAR_RTT on the rows in flight bound the rate: FAR_REACH)
QUEUED_PER_LANE = 4  # chunks waiting for each writer, per lane of it: with fewer lanes, larger groups keep the rate
GROUP_ROWS = 10_000  # rows of chunks already waiting that a lane coming free takes into one transaction, at most,
GROUP_BYTES = 20 << 20  # ... and bytes of their data (one chunk alone may be larger): b's 10,000 rows, some 2 KB each
FAR_RTT = 0.2  # seconds of round trip to the DC from which a writer keeps FAR_REACH times the chunks waiting and
FAR_REACH = 3  # the rows in a group: the rows in flight must cover the round trip plus a group's time in the DC
# (workload a at 300 ms: 0.89 of its 0 ms rate with 4 chunks a lane, 0.96 to 1.01 with 12, docs/benchmark.md)
FLIGHT_BYTES = 128 << 20  # bytes of data handed to the writers and not committed yet, at most (the reader waits;
# one chunk alone always goes): the queue's depth in chunks bounds narrow rows, this wide ones (b's 2 KB rows at
# 300 ms kept 0.81 of their 0 ms rate with 64 MB, 1.00 to 1.02 with 128)
QUEUED_WAIT = 0.05  # seconds a lane waits for a chunk counted as queued that is not through the pipe yet
STUCK_KEY = "stuck_row:"  # gate_meta names (then the row id) of rows waiting for a larger max_allowed_packet

log = logging.getLogger(__name__)


PACKET_QUERY = "SELECT @@GLOBAL.max_allowed_packet"  # what a session opened now takes as its own
Job = tuple[int, list[DCRow], int]  # what a writer is handed: a chunk's number, its rows and their bytes of data


@dataclass(frozen=True)
class DcLink:
    """What gate's control connection measured of the DC before the writers start: the round trip of its first
    query (seconds) and the server's max_allowed_packet. With it a writer opens its lanes at once, all of them,
    and sends each session's set-up at the head of its first transaction, not in a round trip of its own."""

    rtt: float
    max_packet: int


class _Session:
    """A writer's DC session on ``channel``'s database and the max_allowed_packet its INSERTs are sized to;
    ``setup``: the statements of its set-up not sent yet (they go first in its first transaction's query, see
    :func:`_write`)."""

    def __init__(self, conn: pymysql.Connection, channel: str, max_packet: int,
                 setup: list[str] | None = None) -> None:
        self.conn, self.channel, self.max_packet, self.setup = conn, channel, max_packet, setup

    def set_up(self, answer: tuple[int, bool]) -> None:
        """Its set-up has run (``answer``: see :func:`_setup_answer`): the server's max_allowed_packet from now
        on, and its session tag (the other slots tried, should the first be taken)."""
        self.max_packet, self.setup = answer[0], None
        tag_session(self.conn, self.channel, answer[1])


def _setup_statements(conn: pymysql.Connection, database: str) -> list[str]:
    """A writer session's set-up: the character set, autocommit off, UTC, backslash escapes on (_literal
    relies on them), then its max_allowed_packet and the first try of its session tag (one row)."""
    expression, args = tag_expression(database)
    return [set_names(conn), "SET autocommit = 0, time_zone = '+00:00', SESSION sql_mode = TRIM(BOTH ',' FROM "
            "REPLACE(CONCAT(',', @@SESSION.sql_mode, ','), ',NO_BACKSLASH_ESCAPES,', ','))",
            "SELECT @@SESSION.max_allowed_packet, " + expression % tuple(conn.escape(a) for a in args)]


def _setup_answer(cur: pymysql.cursors.Cursor) -> tuple[int, bool]:
    """What a query that began with :func:`_setup_statements` answered: the session's max_allowed_packet and
    whether its first session tag was free (the cursor is left at that result)."""
    cur.nextset()
    cur.nextset()
    max_packet, tagged = one_row(cur)
    return int(max_packet), tagged == 1


def _dc_session(server: ServerConfig, database: str, link: DcLink | None = None) -> tuple[_Session, float]:
    """A writer's DC session (tagged for a takeover to find) and the seconds its set-up took. Without ``link``
    the set-up is one round trip of its own (the character set, autocommit, the tag and the server's
    max_allowed_packet in one query, not round trips of their own); with it, none: the session's INSERTs are
    sized to ``link.max_packet`` until its first transaction, which sends the set-up first, reads its own."""
    conn = connect(server, "DC", database, autocommit=None, client_flag=CLIENT.MULTI_STATEMENTS, names_later=True)
    setup = _setup_statements(conn, database)
    if link is not None:
        return _Session(conn, database, link.max_packet, setup), 0.0
    session = _Session(conn, database, LARGEST_PACKET, setup)
    started = time.monotonic()
    with conn.cursor() as cur:
        cur.execute(";".join(setup))
        answer = _setup_answer(cur)
    rtt = time.monotonic() - started
    session.set_up(answer)
    return session, rtt


def _escaped(text: str | bytes) -> tuple[bytes, int]:
    """The body of a quoted SQL string literal of ``text`` as the bytes sent, and how many more bytes than
    characters it has (0 for bytes: counted as if each were a character, at least as many). Text goes as
    utf8mb4, the connection's charset, encoded as PyMySQL encodes a query (strict UTF-8); bytes are that
    already (the decoders' rows). With backslash escapes on (the session ensures it) only the backslash,
    the quote and NUL need escaping: ASCII bytes, which UTF-8 never uses inside a multi-byte character, so
    they are escaped in the bytes (str.replace on text with a character beyond U+FFFF copies 4 bytes a
    character)."""
    if isinstance(text, bytes):
        raw, extra = text, 0
    else:
        raw = text.encode("utf-8")
        extra = len(raw) - len(text)
    if raw.find(b"\\") >= 0:  # find: half the time of ``in`` on bytes
        raw = raw.replace(b"\\", b"\\\\")
    if raw.find(b"'") >= 0:
        raw = raw.replace(b"'", b"\\'")
    if raw.find(b"\0") >= 0:
        raw = raw.replace(b"\0", b"\\0")
    return raw, extra


def insert_statements(rows: list[DCRow], max_packet: int = LARGEST_PACKET) -> list[bytes]:
    """Multi-row INSERTs of at most about MAX_STATEMENT characters each that fit a DC server whose
    max_allowed_packet is ``max_packet``, as the bytes sent. A character is at most 4 bytes in utf8mb4, so
    a statement of ``max_packet // 4`` characters always fits; only a single row longer than that is
    measured in bytes, and raises :class:`RowTooLarge` when its INSERT alone does not fit. Data given as
    UTF-8 bytes counts a character per byte (more than it has: such statements are at most smaller).

    Built by hand: pymysql's executemany escapes every value through its generic converters,
    which cost the writer processes about as much CPU as the rest of their work. Built as bytes: the
    rows' text is encoded once, escaped and joined in UTF-8 (a row of wide text with an emoji is 4 bytes
    a character as a str, about 1 as UTF-8), and PyMySQL sends bytes as they are."""
    budget = min(MAX_STATEMENT, (max_packet - 1) // 4 - len(INSERT))  # characters of values per statement
    statements: list[bytes] = []
    parts = [_INSERT]  # the statement being filled, joined once: each row's text is copied once more
    size = 0
    escaped = _escaped
    middles: dict[tuple[str, ...], tuple[bytes, int]] = {}  # dbname to optype: the same few in a chunk
    last_id = 0

    def close() -> None:
        statement = b"".join(parts)
        if size > budget:  # one row alone (row last_id): its INSERT may still fit
            if len(statement) + 1 > max_packet:  # the packet is the statement plus a command byte
                raise RowTooLarge(last_id, len(statement), max_packet)
        statements.append(statement)

    for r in rows:  # create_time and optype are gate's own text (digits, '-', ':', ' ' and capitals)
        key = r[2:7]
        middle = middles.get(key)
        if middle is None:
            texts = [escaped(text) for text in key]
            middle = middles[key] = (b",".join(b"'" + text + b"'" for text, _ in texts), sum(n for _, n in texts))
        data, extra = escaped(r[7])
        head = b"(%d,%d," % (r[0], r[1])
        chars = len(head) + len(middle[0]) + len(data) + 4 - extra - middle[1]  # (id,tid,...,'data') in characters
        if size and size + chars > budget:
            close()
            parts, size = [_INSERT], 0
        if size:
            parts.append(b",")
        parts.extend((head, middle[0], b",'", data, b"')"))
        size += chars + 1
        last_id = r[0]
    if size:
        close()
    return statements


def too_large_message(channel: str, server: ServerConfig, exc: RowTooLarge) -> str:
    """What a row larger than the DC's max_allowed_packet means, and how to let it through."""
    need = -(-(exc.size + 1) // (1 << 20)) << 20  # whole MiB
    if need > LARGEST_PACKET:
        fix = (f"No max_allowed_packet is that large (at most {LARGEST_PACKET} bytes): the row cannot be stored "
               "in the DC, and the channel cannot go past it.")
    else:
        fix = (f"Raise max_allowed_packet on the DC server to at least {exc.size + 1} bytes, e.g. 'SET GLOBAL "
               f"max_allowed_packet = {need};' and 'max_allowed_packet = {need}' under [mysqld] in its my.cnf; "
               "gate's writers use the new value when they reconnect, within seconds, without a restart. gate's "
               "own connections set no client-side limit, but a client that reads the row needs one as large "
               "(e.g. the mariadb client's --max-allowed-packet).")
    return (f"Channel '{channel}': row id {exc.row_id} does not fit the DC server's max_allowed_packet: its INSERT "
            f"is {exc.size} bytes and the DC server {server.address} accepts packets of {exc.max_packet} bytes. "
            f"The checkpoint stays below id {exc.row_id} until it is written; gate retries it every "
            f"{STUCK_RETRY:.0f} s. {fix}")


def _write(session: _Session, rows: list[DCRow], resolved: str | None = None, fence: Fence | None = None) -> None:
    """One DC transaction, its INSERTs and COMMIT in as few round trips as the packet size allows (one for a
    chunk of up to MAX_STATEMENT characters): the server runs a multi-statement query's statements in order
    and stops at the first error, so the COMMIT runs only after every INSERT succeeded. ``fence`` (this run's
    epoch, see gate.capture.holder; None in tests of the writer alone) is its first statement, in the same
    query (:meth:`Fence.guard`): autocommit is off, so its SELECT ... LOCK IN SHARE MODE opens the transaction
    and its lock holds to that COMMIT, and when the epoch is another one it fails, nothing after it runs and
    :class:`Deposed` is raised. ``resolved`` names a gate_meta entry it removes (a stuck row that now fits).
    A session's set-up not sent yet goes first (its answer read from the third result)."""
    conn = session.conn
    statements = insert_statements(rows, session.max_packet)  # a row too large raises before anything is sent
    if resolved is not None:
        statements.append(f"DELETE FROM gate_meta WHERE name = {conn.escape(resolved)}".encode())
    setup = [statement.encode() for statement in session.setup or []]
    head = setup + ([] if fence is None else [fence.guard().encode()])
    answer: tuple[int, bool] | None = None
    try:
        with conn.cursor() as cur:
            for query in round_trips([*head, *statements, b"COMMIT"], session.max_packet):
                cur.execute(query)  # type: ignore[call-overload]  # bytes are sent as they are
                if setup and answer is None:
                    answer = _setup_answer(cur)
                while cur.nextset():
                    pass
    except BaseException as exc:
        try:
            conn.rollback()
        except pymysql.err.Error:
            pass
        if fence is not None:
            fence.deposed(conn, exc)
        raise
    if answer is not None:
        session.set_up(answer)


def _landed(conn: pymysql.Connection, rows: list[DCRow]) -> bool:
    """After an unclear commit: the transaction of ``rows`` (one chunk or a group) is atomic, so its first and
    last id tell."""
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM transfer_data WHERE id IN (%s, %s)", (rows[0][0], rows[-1][0]))
        count = one_row(cur)[0]
    conn.commit()
    return bool(count)


def _record_stuck(conn: pymysql.Connection, exc: RowTooLarge, since: str, message: str) -> None:
    """Keep the stuck row in gate_meta for ``gate status``; not recorded now, it is on the next attempt."""
    value = {"id": exc.row_id, "bytes": exc.size, "max_allowed_packet": exc.max_packet, "since": since,
             "message": message}
    try:
        with conn.cursor() as cur:
            cur.execute("REPLACE INTO gate_meta (name, value) VALUES (%s, %s)",
                        (f"{STUCK_KEY}{exc.row_id}", json.dumps(value)))
        conn.commit()
    except pymysql.err.Error:
        pass


def stuck_query(channel: str) -> tuple[str, tuple[Any, ...]]:
    """The ``stuck_row:ID`` notes in the channel's gate_meta (:func:`stuck_from` reads the answer)."""
    return f"SELECT name FROM {q(channel)}.gate_meta WHERE LEFT(name, %s) = %s", (len(STUCK_KEY), STUCK_KEY)


def stuck_from(rows: list[tuple[Any, ...]]) -> list[int]:
    """The row ids of :func:`stuck_query`'s notes, ascending."""
    return sorted(int(name[len(STUCK_KEY):]) for (name,) in rows)


def forget_stuck(cur: pymysql.cursors.Cursor, channel: str, ids: list[int]) -> None:
    """Remove the notes of rows ``ids``: the checkpoint has passed them, so they are written (a note is left
    behind when gate is killed while a row waits, or when a later run writes the row at once)."""
    cur.executemany(f"DELETE FROM {q(channel)}.gate_meta WHERE name = %s", [(f"{STUCK_KEY}{i}",) for i in ids])


def lanes_for(rtt: float) -> int:
    """Connections a writer keeps chunks in flight on, over a link whose round trip takes ``rtt`` seconds:
    one, and one more per LANE_SPAN of round trip (a chunk waits a round trip for its commit, so the
    chunks in flight grow with it to keep the rows per second of a near DC), at most MAX_LANES."""
    return max(1, min(MAX_LANES, 1 + int(rtt / LANE_SPAN)))


def reach_for(rtt: float) -> int:
    """How many times QUEUED_PER_LANE chunks a lane and GROUP_ROWS rows a group a writer keeps over a link whose
    round trip takes ``rtt`` seconds: 1, or FAR_REACH from FAR_RTT on."""
    return FAR_REACH if rtt >= FAR_RTT else 1


def _writer_main(server: ServerConfig, database: str, fence: Fence | None, link: DcLink | None, inbox: Any,
                 outbox: Any) -> None:
    """A writer process: its lanes (threads with a DC session each, as many as the link's round trip asks,
    see :func:`lanes_for`) take chunks from ``inbox``; each chunk's transaction checks ``fence`` first. A lane
    that comes free takes every chunk waiting then (see :func:`_take`), in one transaction: the chunks in
    flight follow the rate of the reader, not only the number of lanes. With ``link`` (the round trip gate's
    control connection measured) every lane connects at once, its set-up sent with its first transaction;
    without, the first session's set-up measures the round trip, and the other lanes connect after it."""
    start_child("gate-writer")
    first: _Session | None = None
    rtt = 0.0
    if link is not None:
        rtt = link.rtt
    else:
        try:  # connect now, not when the first chunk is already waiting
            first, rtt = _dc_session(server, database)
        except (pymysql.err.Error, GateError, OSError):
            first = None  # the first chunk tries again, and stops gate if the error stays
    lanes, group_rows = lanes_for(rtt), GROUP_ROWS * reach_for(rtt)
    idle = threading.Semaphore(lanes)  # chunks are taken from the inbox only for an idle lane
    jobs: queue.SimpleQueue[list[Job] | None] = queue.SimpleQueue()
    threads = [threading.Thread(target=_lane, args=(server, database, fence, jobs, outbox, idle,
                                                    first if n == 0 else None, link),
                                name=f"lane-{n}", daemon=True) for n in range(lanes)]
    for thread in threads:
        thread.start()
    while True:
        idle.acquire()
        group, last = _take(inbox, group_rows)
        if group:
            jobs.put(group)
        if last:
            break
    for _ in threads:
        jobs.put(None)
    for thread in threads:
        thread.join()


def _take(inbox: Any, group_rows: int = GROUP_ROWS) -> tuple[list[Job], bool]:
    """The next chunk of ``inbox`` (waiting for it), with the chunks queued behind it up to ``group_rows`` rows
    and GROUP_BYTES bytes of data in all: a lane writes them in one transaction (each chunk stays whole, and a
    chunk is reported committed only once the transaction is). True with them once this writer's end (None) was
    taken.

    Queued means put by gate's main process (the queue's count), not already in the pipe: the pipe holds 64 KB
    and a chunk is usually larger, so the pipe alone shows at most the one chunk on its way, and groups stayed
    at one or two chunks while the main process waited for room (at 300 ms, 2,080 rows median in 0.4 s
    transactions, the lanes too few for the rows). A chunk another writer takes first is waited for QUEUED_WAIT."""
    job = inbox.get()
    if job is None:
        return [], True
    group, rows, size = [job], len(job[1]), job[2]
    while rows < group_rows and size < GROUP_BYTES and inbox.qsize() > 0:
        try:
            job = inbox.get(timeout=QUEUED_WAIT)
        except queue.Empty:
            break
        if job is None:
            return group, True
        group.append(job)
        rows += len(job[1])
        size += job[2]
    return group, False


def _lane(server: ServerConfig, database: str, fence: Fence | None,
          jobs: queue.SimpleQueue[list[Job] | None], outbox: Any, idle: threading.Semaphore,
          session: _Session | None, link: DcLink | None = None) -> None:
    """One connection of a writer: writes each group of chunks of ``jobs`` in one transaction until None,
    releasing ``idle`` after each. Without ``session`` it connects at once, before the first chunk comes (else
    that chunk retries it); with ``link``, its set-up goes with that chunk. A session opened again (after an
    error) sends its set-up on its own and reads the server's max_allowed_packet as it is then."""
    if session is None:
        try:
            session, _ = _dc_session(server, database, link)
        except (pymysql.err.Error, GateError, OSError):
            session = None
    while True:
        group = jobs.get()
        if group is None:
            break
        rows = group[0][1] if len(group) == 1 else [row for _seq, chunk, _size in group for row in chunk]
        started = time.monotonic()
        span = f"rows {rows[0][0]}..{rows[-1][0]}"
        attempt = 0
        stuck: int | None = None  # the id of a row of these chunks too large for the DC, while it waits
        since = ""
        failing_since = report_at = 0.0
        while True:
            try:
                if session is None:
                    session, _ = _dc_session(server, database)
                    if attempt and _landed(session.conn, rows):
                        break
                _write(session, rows, None if stuck is None else f"{STUCK_KEY}{stuck}", fence)
                break
            except RowTooLarge as exc:
                now = time.monotonic()
                if stuck is None:
                    stuck, since = exc.row_id, datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
                message = too_large_message(database, server, exc)
                if now >= report_at:  # at once, then every REPORT_EVERY seconds while it lasts
                    outbox.put(("log", logging.ERROR, message))
                    report_at = now + REPORT_EVERY
                assert session is not None
                _record_stuck(session.conn, exc, since, message)
                session.conn.close()
                session = None  # only a new session sees a raised max_allowed_packet
                time.sleep(STUCK_RETRY)
            except (pymysql.err.Error, GateError, OSError) as exc:
                if not is_transient(exc):
                    outbox.put(("failed", refusal(exc, "DC", server, f"the INSERT of {span} into transfer_data",
                                                  database)))
                    return
                attempt += 1
                session = None
                now = time.monotonic()
                failing_since = failing_since or now
                if attempt >= 3 and now >= report_at:
                    outbox.put(("log", logging.WARNING, f"a writer has been retrying {span} on the DC server "
                                f"{server.address} for {now - failing_since:.0f} s: {exc}"))
                    report_at = now + REPORT_EVERY
                time.sleep(backoff(attempt, base=0.05))
        if stuck is not None:
            assert session is not None  # the group was written on it
            outbox.put(("log", logging.INFO, f"Channel '{database}': row id {stuck} written, now that the DC "
                        f"server's max_allowed_packet is {session.max_packet} bytes"))
        seconds = time.monotonic() - started
        for seq, chunk, _size in group:
            outbox.put(("done", seq, dict(Counter(r[6] for r in chunk)), seconds))
        idle.release()
    if session is not None:
        session.conn.close()


class WriterPool(WorkerPool):
    """Hands chunks to writer processes; ``acks`` returns the chunk numbers that are committed. The writers
    report on their outbox: ("done", chunk, rows per optype, seconds it took), ("failed", the error that
    stops gate) or ("log", level, message), logged here. ``close(graceful=False)`` kills them: their open DC
    transactions roll back, and a restart removes whatever they committed above the checkpoint."""

    kind = "writer"
    failure = WriterFailed

    def __init__(self, server: ServerConfig, database: str, processes: int, depth: int | None = None,
                 cancel: threading.Event | None = None,
                 on_written: Callable[[dict[str, int], float], None] | None = None, fence: Fence | None = None,
                 link: DcLink | None = None) -> None:
        """``depth``: chunks waiting for each writer at most (the backpressure on the reader, with FLIGHT_BYTES);
        by default QUEUED_PER_LANE for each of its lanes (FAR_REACH times that from FAR_RTT on), so that over a
        long round trip a lane coming free finds a large group (see :func:`_take`) while the others wait for
        their commits."""
        q(database)  # validated identifier
        self._cancel = cancel  # once set, submit stops waiting for room in the queue
        self._on_written = on_written  # told each committed chunk's rows per optype and its seconds
        if depth is None:
            depth = QUEUED_PER_LANE * (1 if link is None else lanes_for(link.rtt) * reach_for(link.rtt))
        super().__init__(_writer_main, (server, database, fence, link), processes, depth)
        self.in_flight = 0
        self._sizes: dict[int, int] = {}  # bytes of data of the chunks handed over and not committed yet, by number
        self._done: list[int] = []

    @property
    def flight_bytes(self) -> int:
        """Bytes of data handed to the writers and not committed yet."""
        return sum(self._sizes.values())

    def submit(self, seq: int, rows: list[DCRow]) -> None:
        """Blocks while every writer is busy and the queue is full, or while FLIGHT_BYTES of data are in flight
        (one chunk alone always goes): backpressure on the reader."""

        def while_full() -> None:
            self._take_reports(0.0)  # a writer's log lines must not wait for room in the queue
            if self._cancel is not None and self._cancel.is_set():
                raise DrainAbandoned(f"chunk {seq} not handed to a writer: stopping without draining")

        size = sum([len(row[7]) for row in rows])
        while self._sizes and self.flight_bytes + size > FLIGHT_BYTES:
            self._take_reports(1.0)
            while_full()
            self._check_alive(every=1.0)
        self._put((seq, rows, size), while_full)
        self._sizes[seq] = size
        self.in_flight += 1

    def _take_reports(self, timeout: float) -> None:
        """Collect committed chunks into ``_done`` and log the writers' lines; a failed chunk raises its error."""
        try:
            item = self._outbox.get(timeout)
            while True:
                if item[0] == "done":
                    self._done.append(item[1])
                    del self._sizes[item[1]]
                    if self._on_written is not None:
                        self._on_written(item[2], item[3])
                elif item[0] == "log":
                    log.log(item[1], "%s", item[2])
                else:
                    raise item[1]
                item = self._outbox.get()
        except queue.Empty:
            pass

    def acks(self, timeout: float = 0.0) -> list[int]:
        self._take_reports(timeout)
        done, self._done = self._done, []
        self.in_flight -= len(done)
        if not done:
            self._check_alive(every=1.0)
        return done
