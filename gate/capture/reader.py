"""Reader: a fake replica that turns the source's row binlog into a stream of transaction items.

It owns reconnects. python-mysql-replication 1.0.17 silently reconnects by itself after a lost
connection, from a position that may lie inside a transaction (rows are then lost until the next
TableMap); :class:`~gate.capture.libshim.OwnedStream` turns that second connect into
:class:`StreamLost`, and the reader reconnects from the last transaction boundary, skipping the items
of the open transaction it has already delivered. The same class corrects the library's MariaDB GTID
dump packet (a 14-byte length header on 15 bytes of payload made the server drop the connection).

It reads only the event types of :data:`EVENT_TYPES`: any other type stops gate with
:class:`~gate.common.errors.UnhandledEvent` before the stream moves past it (the library would drop it
silently). It is a refused transaction: the pipeline writes and checkpoints everything before it, and
``gate channel skip`` passes exactly its transaction; between transactions, its message names the
set-position that passes the event alone. MariaDB's compressed events (``log_bin_compress``) arrive
inflated into the events they compress.
"""

from __future__ import annotations

import logging
import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import pymysql
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from gate.capture.compressed import CompressedEventError
from gate.capture.libshim import EventHeader, OwnedStream, fix_library_charsets, reuse_table_maps
from gate.common.config import ServerConfig
from gate.common.connection import stream_connector
from gate.common.dc import connect, describe_position, one_row
from gate.common.errors import (
    ConnectionFailed,
    PositionPurged,
    SourceDown,
    StreamLost,
    UnhandledEvent,
    UnsupportedEvent,
)
from gate.common.retry import backoff, is_transient, refusal

log = logging.getLogger(__name__)

ROW_EVENTS = {WriteRowsEvent: "INSERT", UpdateRowsEvent: "UPDATE", DeleteRowsEvent: "DELETE"}


class EventType(NamedTuple):
    name: str  # as mariadb-binlog names it
    read: bool  # True: gate reads it; False: gate knowingly passes it by
    why: str


# Every binlog event type gate accepts, by type code: the types it reads and those it knowingly passes by.
# Any other type stops gate (UnhandledEvent) before the stream moves past it.
EVENT_TYPES: dict[int, EventType] = {
    2: EventType("Query", True, "BEGIN, COMMIT, ROLLBACK, DDL, TRUNCATE and XA statements (a change of a "
                 "captured table logged as a statement is refused by translate.py)"),
    4: EventType("Rotate", True, "the next binlog file (the library follows it; positions name the file)"),
    15: EventType("Format_desc", True, "the binlog's format: post-header lengths, checksums (the library keeps it)"),
    16: EventType("Xid", True, "a transaction's commit"),
    19: EventType("Table_map", True, "the table and columns of the row events that follow (the library keeps it)"),
    23: EventType("Write_rows_v1", True, "inserted rows (MariaDB's row events)"),
    24: EventType("Update_rows_v1", True, "updated rows, before and after"),
    25: EventType("Delete_rows_v1", True, "deleted rows"),
    27: EventType("Heartbeat", True, "the server has nothing to send: a chance to checkpoint"),
    30: EventType("Write_rows", True, "inserted rows (v2 row events)"),
    31: EventType("Update_rows", True, "updated rows, before and after (v2)"),
    32: EventType("Delete_rows", True, "deleted rows (v2)"),
    33: EventType("MySQL Gtid", True, "a transaction's start and GTID (MySQL)"),
    38: EventType("XA_prepare", True, "the end of XA PREPARE, or of XA COMMIT ... ONE PHASE (MySQL)"),
    162: EventType("Gtid", True, "a transaction's start and GTID (MariaDB), with the xid of an XA PREPARE"),
    # compressed events (log_bin_compress) are read as the events they compress (gate/capture/compressed.py)
    165: EventType("Query_compressed", True, "a Query event with compressed text"),
    166: EventType("Write_rows_compressed_v1", True, "a Write_rows_v1 event with compressed rows"),
    167: EventType("Update_rows_compressed_v1", True, "an Update_rows_v1 event with compressed rows"),
    168: EventType("Delete_rows_compressed_v1", True, "a Delete_rows_v1 event with compressed rows"),
    169: EventType("Write_rows_compressed", True, "a Write_rows (v2) event with compressed rows"),
    170: EventType("Update_rows_compressed", True, "an Update_rows (v2) event with compressed rows"),
    171: EventType("Delete_rows_compressed", True, "a Delete_rows (v2) event with compressed rows"),
    3: EventType("Stop", False, "the server stopped; the binlog goes on in the next file"),
    5: EventType("Intvar", False, "an auto-increment value for the statement-logged Query event that follows: "
                 "that event is what gate reads (and refuses if it changes a captured table)"),
    13: EventType("RAND", False, "RAND() seeds for the statement-logged Query event that follows (as Intvar)"),
    14: EventType("User var", False, "a user variable for the statement-logged Query event that follows (as Intvar)"),
    29: EventType("MySQL Rows_query", False, "the statement text of the row events that follow (MySQL): the rows "
                  "are what gate reads"),
    34: EventType("MySQL Anonymous_Gtid", False, "a transaction start without a GTID (MySQL): its BEGIN follows"),
    35: EventType("MySQL Previous_gtids", False, "the GTIDs of earlier binlogs (MySQL): no change"),
    160: EventType("Annotate_rows", False, "the statement text of the row events that follow "
                   "(binlog_annotate_row_events): the rows are what gate reads"),
    161: EventType("Binlog_checkpoint", False, "the server's crash-recovery marker: no change"),
    164: EventType("Start_encryption", False, "the start of an encrypted binlog file (encrypt_binlog): the server "
                   "decrypts the events it sends a replica, so the ones that follow are plain; no change"),
    163: EventType("Gtid_list", False, "the GTID state at the start of a binlog file: no change (gate keeps its "
                   "own from the Gtid events)"),
}
# The names of the other types MariaDB and MySQL define, for the error that stops gate at one.
_OTHER_NAMES = {
    1: "Start_v3", 6: "Load", 7: "Slave", 8: "Create_file", 9: "Append_block", 10: "Exec_load", 11: "Delete_file",
    12: "New_load", 17: "Begin_load_query", 18: "Execute_load_query", 20: "Write_rows_event_old",
    21: "Update_rows_event_old", 22: "Delete_rows_event_old", 26: "Incident", 28: "Ignorable log event",
    36: "Transaction_context", 37: "View_change", 39: "Partial_update_rows", 40: "Transaction_payload",
}
_TXN_CONTROL = ("SAVEPOINT", "ROLLBACK TO", "RELEASE SAVEPOINT", "XA END")
_XA_STATEMENT = re.compile(r"XA\s+(START|BEGIN|COMMIT|ROLLBACK)\s+X'([0-9A-Fa-f]*)',X'([0-9A-Fa-f]*)',(\d+)\s*$", re.I)
_FL_STANDALONE, _FL_GROUP_COMMIT_ID, _FL_PREPARED_XA = 0x01, 0x02, 0x40  # MariaDB GTID event flags


@dataclass(frozen=True)
class Position:
    """A resume point: a transaction boundary in one server's binlog."""

    log_file: str | None
    log_pos: int | None
    gtid_pos: str | None  # MariaDB GTID list ('0-1-27,1-1-4') or the last MySQL GTID

    def describe(self) -> str:
        return describe_position(self.log_file, self.log_pos, self.gtid_pos)


def xid_text(gtrid: bytes, bqual: bytes, format_id: int) -> str:
    """An XA transaction's xid as the binlog's XA statements write it: X'6162',X'',1."""
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{format_id}"


@dataclass(slots=True)
class Begin:
    """A transaction starts. ``gtid`` is its GTID where the binlog carries one; ``xid`` is set when the
    group is the first phase of an XA transaction (its rows, ended by XA PREPARE)."""

    timestamp: int
    server_id: int
    gtid: str | None
    xid: str | None = None


@dataclass(slots=True)
class Rows:
    """One row event (many rows of one table) of the open transaction."""

    optype: str
    event: Any  # pymysqlreplication.row_event.RowsEvent


@dataclass(slots=True)
class Statement:
    """A DDL or TRUNCATE statement: a transaction of its own, ended by the Commit that follows."""

    schema: str
    sql: str
    timestamp: int


@dataclass(slots=True)
class Commit:
    """The open transaction ended; ``position`` is where reading resumes after it. ``xa`` is set when the
    group was an XA step: ("PREPARE", xid) ends a group whose rows wait for the outcome, ("COMMIT", xid)
    and ("ROLLBACK", xid) are groups of their own that give it."""

    position: Position
    timestamp: int
    xa: tuple[str, str] | None = None


@dataclass(slots=True)
class Idle:
    """No event for a heartbeat period: a chance to flush and checkpoint."""


Item = Begin | Rows | Statement | Commit | Idle


def _merge_gtid(state: dict[str, str], gtid: str) -> None:
    """MariaDB: the GTID position keeps the last GTID of each replication domain."""
    state[gtid.split("-", 1)[0]] = gtid


def _gtid_state(gtid_pos: str | None) -> dict[str, str]:
    state: dict[str, str] = {}
    for gtid in filter(None, (g.strip() for g in (gtid_pos or "").split(","))):
        _merge_gtid(state, gtid)
    return state


def gtid_position_after(gtid_pos: str | None, gtid: str) -> str:
    """The MariaDB GTID position ``gtid_pos`` once transaction ``gtid`` is passed, as the reader keeps it."""
    state = _gtid_state(gtid_pos)
    _merge_gtid(state, gtid)
    return ",".join(state[d] for d in sorted(state))


def binlog_files(server: ServerConfig) -> list[str]:
    """SHOW BINARY LOGS of a server, oldest first."""
    with connect(server, "source") as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return [row[0] for row in cur.fetchall()]


def current_position(server: ServerConfig) -> Position:
    """The server's binlog end right now ('now' as a start position)."""
    with connect(server, "source") as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = one_row(cur)[0]
    if row is None:
        raise PositionPurged(f"{server.address} has binary logging off; there is no position to start from.")
    return Position(row[0], int(row[1]), gtid or None)


def _fatal(server: ServerConfig, boundary: Position, exc: pymysql.err.MySQLError, channel: str) -> Exception:
    """Errors that retrying cannot fix, as messages that say what to do."""
    code, text = exc.args[0], exc.args[1] if len(exc.args) > 1 else str(exc)
    if code == 1236:
        return PositionPurged(
            f"The source {server.address} cannot send the binlog from {boundary.describe()}: {text}. "
            f"Set a new start position with 'gate channel set-position {channel} --now' (the changes in "
            "between are lost to gate) or restore the missing binlogs."
        )
    return refusal(exc, "source", server, f"the binlog stream from {boundary.describe()}")


class BinlogReader:
    """Yields :data:`Item` s from ``start`` on, forever (or until ``stop()``), reconnecting as needed."""

    def __init__(self, server: ServerConfig, server_id: int, start: Position, heartbeat: float = 0.1,
                 read_timeout: float = 3.0, retry_for: float = float("inf"), channel: str = "CHANNEL") -> None:
        """``channel``: the channel's name, for the fixes messages give."""
        self.server = server
        self.channel = channel
        self.server_id = server_id
        self.boundary = start
        self.heartbeat = heartbeat
        self.read_timeout = read_timeout
        self.retry_for = retry_for
        self._gtids = _gtid_state(start.gtid_pos)
        self._stopped = False
        self._stream: OwnedStream | None = None
        self._unread: OwnedStream | None = None  # the stream open_now opened, not read yet
        self.connected = False  # the stream delivers (events or heartbeats)
        self.disconnects = 0  # streams lost since this reader started

    def stop(self) -> None:
        self._stopped = True

    def open_now(self) -> None:
        """Begin opening the binlog stream now, in a thread of its own: its round trips to the source (the
        login, then the SET and the dump in one) overlap the rest of gate's start-up. The first item waits for
        it; an error of it comes there, as the stream's own connecting would raise it. :meth:`discard` closes a
        stream opened so that is not read after all."""
        self._stream = self._unread = self._open()
        self._unread.connect_now()

    def discard(self) -> None:
        """Close the stream :meth:`open_now` opened, unless iterating took it over."""
        unread, self._unread = self._unread, None
        if unread is not None:
            unread.close()

    @property
    def stream(self) -> OwnedStream:
        """The library's stream now open (row events it yielded are rebuilt elsewhere by its format)."""
        assert self._stream is not None, "no stream before iterating"
        return self._stream

    def check_position(self, files: list[str] | None = None) -> None:
        """Refuse to start from a binlog file the source no longer has (never a silent jump); ``files``: the
        source's binary logs, if already read (else they are)."""
        if not self.boundary.log_file:
            return
        if files is None:
            files = binlog_files(self.server)
        if self.boundary.log_file not in files:
            oldest = files[0] if files else "none"
            raise PositionPurged(
                f"The resume position {self.boundary.describe()} is no longer on the source "
                f"{self.server.address}: its oldest binary log is {oldest}. The changes in between are lost "
                "to gate. Rebuild the consumers' copy and set a new start position "
                f"('gate channel set-position {self.channel} --now'), or restore the binlogs."
            )

    def _open(self) -> OwnedStream:
        fix_library_charsets()
        reuse_table_maps()
        settings = {**self.server.connect_args(), "read_timeout": self.read_timeout}
        common: dict[str, Any] = dict(
            connection_settings=settings, pymysql_wrapper=stream_connector(self.server, "source"),
            server_id=self.server_id, blocking=True,
            only_events=[MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, XAPrepareEvent, RotateEvent,
                         WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, HeartbeatLogEvent],
            admit=self._admit, handled=EVENT_TYPES, slave_heartbeat=self.heartbeat, enable_logging=False,
        )
        if self.boundary.log_file:
            return OwnedStream(resume_stream=True, log_file=self.boundary.log_file,
                                log_pos=self.boundary.log_pos, **common)
        return OwnedStream(is_mariadb=True, auto_position=self.boundary.gtid_pos, **common)

    def _admit(self, header: EventHeader) -> None:
        """Let the stream read an event of :data:`EVENT_TYPES`; stop at any other."""
        if header.type_code not in EVENT_TYPES:
            name = _OTHER_NAMES.get(header.type_code, "unknown")
            article = "an" if name[0] in "AEIOUaeiou" else "a"
            raise self._refusal(header, f"{article} {name} event (type {header.type_code}) at "
                                f"{_event_position(header)}, and gate does not know what it changes, so it stops "
                                "there rather than pass it by",
                                "turn off the server setting or feature that wrote it (the sources page of gate's "
                                "documentation lists what gate reads), or run a gate that reads it", [])

    def _undecodable(self, exc: CompressedEventError) -> UnhandledEvent:
        header: EventHeader = exc.header
        table = self.stream.table_map.get(exc.table_id) if exc.table_id is not None else None
        return self._refusal(header, f"the compressed event {EVENT_TYPES[header.type_code].name} (type "
                             f"{header.type_code}) at {_event_position(header)}, which cannot be decompressed: {exc}",
                             "report the event with the source's version if the server decodes it (it reads it "
                             "the same way)", [(table.schema, table.table)] if table is not None else [])

    def _refusal(self, header: EventHeader, what: str, fix: str, tables: list[tuple[str, str]]) -> UnhandledEvent:
        """The error that stops gate at ``header``'s event: inside a transaction the pipeline refuses that
        transaction; between transactions (the checkpoint at ``self.boundary``) ``way_past`` passes the event alone."""
        return UnhandledEvent(
            f"The source's binlog holds {what}. See the event with 'mariadb-binlog --read-from-remote-server "
            f"--verbose --start-position={header.start} {header.log_file}' and {fix}.", tables,
            after=(self.boundary.log_file, self.boundary.log_pos),
            way_past=f"To go on without the event, run 'gate channel set-position {self.channel} --file "
                     f"{header.log_file} --pos {header.end}' (its end): the binlog holds no transaction between the "
                     "checkpoint and there, so the channel passes that event alone.")

    def __iter__(self) -> Iterator[Item]:
        delivered = 0  # items of the open transaction already yielded; skipped after a reconnect
        failing_since: float | None = None
        while not self._stopped:
            stream, self._unread = self._unread or self._open(), None
            self._stream = stream
            skip = delivered
            try:
                for item in self._items(stream):
                    failing_since = None
                    self.connected = True
                    if isinstance(item, Idle):
                        yield item
                    elif skip:
                        skip -= 1
                    else:
                        delivered = 0 if isinstance(item, Commit) else delivered + 1
                        yield item
                    if self._stopped and not delivered:  # a stop ends the stream between transactions
                        break
            except CompressedEventError as exc:
                raise self._undecodable(exc) from None
            except (StreamLost, ConnectionFailed, pymysql.err.MySQLError, OSError) as exc:
                if isinstance(exc, pymysql.err.MySQLError) and not is_transient(exc):
                    raise _fatal(self.server, self.boundary, exc, self.channel) from None
                if self.connected:
                    self.connected = False
                    self.disconnects += 1
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.retry_for:
                    raise SourceDown(
                        f"The source {self.server.address} has been unreachable for {now - failing_since:.0f} s "
                        f"({exc}); last boundary {self.boundary.describe()}."
                    ) from exc
                log.warning("binlog connection to %s lost (%s); reconnecting from %s",
                            self.server.address, exc, self.boundary.describe())
                time.sleep(backoff(int(now - failing_since)))
            finally:
                stream.close()

    def _items(self, stream: OwnedStream) -> Iterator[Item]:
        in_txn = False
        standalone = True  # the open transaction is one statement without a commit event (a MariaDB GTID says so)
        for event in stream:
            kind = type(event)
            if kind in ROW_EVENTS:
                if not in_txn:  # row events without BEGIN/GTID (should not happen): open one
                    in_txn = True
                    yield Begin(event.timestamp, event.packet.server_id, None)
                yield Rows(ROW_EVENTS[kind], event)
            elif kind is XidEvent:
                in_txn = False
                yield self._commit(stream, event.timestamp)
            elif kind is XAPrepareEvent:  # MySQL logs XA COMMIT ... ONE PHASE this way, MariaDB as a plain commit
                in_txn = False
                xid = xid_text(event.xid_gtrid, event.xid_bqual, event.xid_format_id)
                yield self._commit(stream, event.timestamp, ("COMMIT" if event.one_phase else "PREPARE", xid))
            elif kind is MariadbGtidEvent or kind is GtidEvent:
                if kind is MariadbGtidEvent:
                    _merge_gtid(self._gtids, event.gtid)
                else:  # MySQL: gate keeps the last GTID; its gtid_executed set is the server's business
                    self._gtids = {"": event.gtid}
                in_txn = True
                standalone = kind is GtidEvent or bool(event.flags & _FL_STANDALONE)
                prepared = _prepared_xid(event) if kind is MariadbGtidEvent else None
                yield Begin(event.timestamp, event.packet.server_id, event.gtid, prepared)
            elif kind is QueryEvent:
                sql = event.query.strip()
                upper = sql[:20].upper()
                if upper == "BEGIN":
                    if not in_txn:
                        in_txn = True
                        yield Begin(event.timestamp, event.packet.server_id, None)
                elif upper in ("COMMIT", "ROLLBACK"):
                    in_txn = False
                    yield self._commit(stream, event.timestamp)
                elif upper.startswith(_TXN_CONTROL):
                    continue
                elif upper.startswith("XA "):
                    action, xid = _xa_statement(sql)
                    if action in ("START", "BEGIN"):  # MySQL: the first phase starts with a statement
                        in_txn = True
                        yield Begin(event.timestamp, event.packet.server_id, None, xid)
                    else:
                        in_txn = False
                        yield self._commit(stream, event.timestamp, (action, xid))
                else:
                    ends = not in_txn or standalone  # else its transaction goes on: CREATE TABLE ... SELECT's rows
                    if not in_txn:
                        yield Begin(event.timestamp, event.packet.server_id, None)
                    schema = event.schema.decode() if isinstance(event.schema, bytes) else (event.schema or "")
                    yield Statement(schema, sql, event.timestamp)
                    if ends:
                        in_txn = False
                        yield self._commit(stream, event.timestamp)
            elif kind is HeartbeatLogEvent:
                yield Idle()
            if self._stopped and not in_txn:
                return

    def _commit(self, stream: OwnedStream, timestamp: int, xa: tuple[str, str] | None = None) -> Commit:
        gtid_pos = ",".join(self._gtids[d] for d in sorted(self._gtids)) or self.boundary.gtid_pos
        self.boundary = Position(stream.log_file, stream.log_pos, gtid_pos)
        return Commit(self.boundary, timestamp, xa)


def _event_position(header: EventHeader) -> str:
    return f"{header.log_file}:{header.start}" if header.start else f"the start of {header.log_file}"


def _prepared_xid(event: MariadbGtidEvent) -> str | None:
    """The xid a MariaDB GTID event carries when it starts the first phase of an XA transaction."""
    if not event.flags & _FL_PREPARED_XA:
        return None
    packet = event.packet
    if event.flags & _FL_GROUP_COMMIT_ID:
        packet.read(8)
    format_id, gtrid_length, bqual_length = struct.unpack("<IBB", packet.read(6))
    return xid_text(packet.read(gtrid_length), packet.read(bqual_length), format_id)


def _xa_statement(sql: str) -> tuple[str, str]:
    """("COMMIT", xid) for the binlog's "XA COMMIT X'61',X'',1", and so on for START and ROLLBACK."""
    match = _XA_STATEMENT.match(sql)
    if match is None:
        raise UnsupportedEvent(
            f"The binlog holds the XA statement {sql[:200]!r} in a form gate does not know, so it cannot tell "
            "which prepared transaction it ends. Report it with the source's version; gate stops rather than "
            "guess, and resumes from the same place once it understands the statement.")
    action, gtrid, bqual, format_id = match.groups()
    return action.upper(), xid_text(bytes.fromhex(gtrid), bytes.fromhex(bqual), int(format_id))
