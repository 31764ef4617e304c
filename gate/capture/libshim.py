"""Every use gate makes of python-mysql-replication's private internals, in one place.

gate pins the library (1.0.17); an upgrade must re-check exactly what is here, and nothing else in
gate touches the library's private names. What gate relies on, and why:

- ``BinLogStreamReader._BinLogStreamReader__connect_to_stream``: overridden by :class:`OwnedStream`.
  The library reconnects by itself after a lost connection, from a position that may lie inside a
  transaction (its rows up to the next TableMap are then lost); gate must own reconnects, from the
  last transaction boundary, so the second connect raises :class:`StreamLost` instead.
- ``__connection_settings``, ``__blocking``, ``__server_id``, ``__resume_stream``, ``__connected_stream``
  and ``_stream_connection``: :class:`OwnedStream` opens the stream itself, with one SET after the login
  (the library's are up to seven round trips), and sends COM_BINLOG_DUMP itself: the library's MariaDB
  GTID dump packet declares a 14-byte length for 15 bytes of payload, and MariaDB drops the connection.
  The SET and the dump go in one write, through PyMySQL's ``_execute_command`` and ``_write_bytes``,
  then the SET's answer is read (``_read_query_result``); a failing SET closes the connection with
  ``_force_close`` (a dump is behind it). :meth:`OwnedStream.connect_now` runs all that in a thread.
- ``_stream_connection._read_packet``: wrapped by :class:`OwnedStream` once it has connected, to see
  every event's type before the library filters it (the library drops the types it has no parser for,
  and those outside ``only_events``, without a trace), so gate can refuse the types it does not handle
  (``admit`` sees their header; the handled types pass at once), and to hand the library MariaDB's
  compressed events (``log_bin_compress``) as the uncompressed events they stand for
  (:mod:`gate.capture.compressed`), which it can parse. The library reads ``__use_checksum`` and
  ``__post_header_lengths`` for that too.
- ``__use_checksum`` (the library's ``__checksum_enabled`` is not called any more): the library asks
  the server's binlog_checksum once, at connect, and strips (or not) the 4 trailing bytes of every event
  by that answer, while the server writes each binlog file with the checksum setting it had when the file
  began (``SET GLOBAL binlog_checksum`` rotates to a new file) and says which in the file's Format
  Description event. When the setting was NONE at connect, the library also left
  ``@master_binlog_checksum`` unset, and the server refuses (1236) to send a file with checksums to such
  a replica. :class:`OwnedStream` always announces that it reads checksums (asking for none on the
  server's first, made-up Rotate event) and follows each file's Format Description event, as a MariaDB
  replica does.
- ``BinLogStreamReader._BinLogStreamReader__connect_to_ctl``, ``__connected_ctl``, ``__connection_settings``
  and ``_ctl_connection_settings``: the library opens its control connection before the first event (a login,
  several round trips over a slow link) although gate's streams ask it nothing (the column names are in the
  table maps); :class:`LazyControl` opens it only at a first query. The library's heartbeat, capability and
  MariaDB GTID SETs go into gate's one SET of the stream (with its SET NAMES: the stream connection is opened
  ``names_later``).
- ``BinLogStreamReader._BinLogStreamReader__check_optional_meta_data`` and ``__optional_meta_data``: the
  library parses a table map's optional metadata (column names, signedness, charsets, ENUM and SET
  labels) only when the server's binlog_row_metadata was FULL when it connected; gate parses whatever each
  table map carries, and refuses a table map without column names (see
  :meth:`~gate.capture.translate.Translator.check_metadata`), whatever the setting is now.
- ``__use_checksum``, ``__optional_meta_data``, ``__post_header_lengths`` and the control
  connection's ``charset`` and ``_get_dbms()``: what the library needs to rebuild a row event from its
  raw bytes in a decoder process (:class:`StreamFormat`, :func:`rebuild_rows_event`), along with
  ``BinLogPacketWrapper``'s positional arguments and the raw packet ``event.packet.packet._data``
  (:func:`raw_packet`); its read position ``_position`` and the wrapper's ``read_bytes``, where a row
  event's rows begin and end once the library has read its header (:func:`row_data`).
- ``RowsEvent.charset_to_encoding``: replaced by :func:`fix_library_charsets`, because the library
  decodes MySQL's latin1 as Python's cp1252 (which has no mapping for 0x81, 0x8D, 0x8F, 0x90, 0x9D
  and raises) and names utf16/utf32/ucs2/utf16le codecs wrongly.
- ``TableMapEvent.__init__``: wrapped by :func:`reuse_table_maps`. The library parses every TableMap
  in full (the server writes one before every row event) and builds its Table twice, comparing
  every column's attribute dict; on wide tables that is most of the reading process's CPU. A TableMap
  whose bytes (from the table id to the optional metadata) equal an earlier one's describes the same
  table the same way, so the earlier parse is reused (the attributes ``BinLogEvent.__init__`` does not
  set, and the Table object).
"""

from __future__ import annotations

import codecs
import struct
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from pymysql.connections import DEFAULT_CHARSET
from pymysql.constants.COMMAND import COM_BINLOG_DUMP, COM_QUERY
from pymysql.cursors import DictCursor
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import BinLogEvent, FormatDescriptionEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from gate.capture.compressed import (
    HEADER_LEN,
    QUERY_COMPRESSED_EVENT,
    UNCOMPRESSED_TYPE,
    CompressedEventError,
    inflate_event,
)
from gate.common.connection import set_names
from gate.common.errors import StreamLost, UnsupportedEvent

ROW_EVENT_CLASSES = frozenset({WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent})


_CHECKSUM_ALGORITHMS = {0: False, 1: True}  # a Format Description event's checksum algorithm: OFF, CRC32


@dataclass(frozen=True)
class EventHeader:
    """An event's common header as it arrives, before the library parses or drops it."""

    type_code: int
    flags: int
    log_file: str | None  # the binlog file it is in
    start: int  # its position in that file (0 for an event the server made up for the stream)
    end: int  # the position after it (0 for an event the server made up)


Admit = Callable[[EventHeader], None]  # raises for an event gate must not read past


class OwnedStream(BinLogStreamReader):
    """BinLogStreamReader that connects once and says so when it would reconnect on its own, shows every
    event's header to ``admit`` first, inflates compressed events and follows each binlog file's checksum
    setting (see the module docstring)."""

    _connected_once = False
    _format: StreamFormat | None = None

    def __init__(self, *, admit: Admit, handled: Collection[int] = (), **kwargs: Any) -> None:
        """The library's keyword arguments; Format Description events are read (and not yielded) whatever
        ``only_events`` asks. ``admit(header)``: called, before the library sees it, for every event the server
        sends whose type is not in ``handled`` (compressed types are always inflated, never just passed);
        raises for one that must stop the stream. The stream's connection is opened ``names_later`` (its SET
        NAMES goes with its one SET, as its heartbeat period does, see ``__connect_to_stream``) and without
        PyMySQL's SET AUTOCOMMIT after the login (a binlog stream runs no transaction)."""
        settings = kwargs["connection_settings"]
        heartbeat = kwargs.pop("slave_heartbeat", None)  # as the library would set it, in gate's first SET
        net_timeout = float(settings.get("read_timeout", 4294967))
        self._heartbeat_ns = int(min(net_timeout / 2.0, heartbeat, 4294967) * 1e9) if heartbeat else None
        super().__init__(**{**kwargs, "only_events": [*kwargs["only_events"], FormatDescriptionEvent],
                            "connection_settings": {**settings, "names_later": True, "autocommit": None}})
        self._admit = admit
        self._handled = frozenset(handled) - UNCOMPRESSED_TYPE.keys()

    @property
    def format(self) -> StreamFormat:
        """What rebuilding a row event of the binlog file being read needs (a new object for each file)."""
        if self._format is None:
            self._format = StreamFormat.of(self)
        return self._format

    _opening: threading.Thread | None = None
    _open_error: BaseException | None = None

    def connect_now(self) -> None:
        """Begin opening the stream in a thread of its own (the login, the SET and the dump), so that its round
        trips to the source overlap what the caller does meanwhile; the first :meth:`fetchone` waits for it and
        raises its error, where the stream's own connecting would have raised it."""

        def opening() -> None:
            try:
                self._BinLogStreamReader__connect_to_stream()
            except BaseException as exc:  # noqa: BLE001 (raised again by the first fetchone)
                self._open_error = exc

        self._opening = threading.Thread(target=opening, name="gate-binlog-open", daemon=True)
        self._opening.start()

    def _opened(self) -> BaseException | None:
        """Wait for :meth:`connect_now`'s thread, if any; its error, once."""
        opening, self._opening = self._opening, None
        if opening is not None:
            opening.join()
        error, self._open_error = self._open_error, None
        return error

    def close(self) -> None:
        """Close the stream (after the thread of :meth:`connect_now`, should it still be connecting)."""
        self._opened()
        super().close()

    def fetchone(self) -> Any:
        """The library's next event; a Format Description event (each binlog file's first) sets whether the
        events after it end with a checksum."""
        if self._opening is not None and (error := self._opened()) is not None:
            raise error
        while True:
            event = super().fetchone()
            if type(event) is not FormatDescriptionEvent:
                return event
            use_checksum = _CHECKSUM_ALGORITHMS.get(event.checksum_algorithm)
            if use_checksum is None:
                raise UnsupportedEvent(
                    f"The binlog file {self.log_file} is written with checksum algorithm {event.checksum_algorithm}, "
                    "which gate does not know (it reads binlog_checksum NONE and CRC32). Run SET GLOBAL "
                    "binlog_checksum = 'CRC32' (and binlog_checksum = CRC32 under [mysqld] in my.cnf); gate stops "
                    "rather than guess where the file's events end.")
            self._BinLogStreamReader__use_checksum = use_checksum
            self._format = None

    def _BinLogStreamReader__connect_to_ctl(self) -> None:  # noqa: N802
        """The library's control connection, opened only when the library asks it a query (the column names of
        a table map without them, which gate then refuses): the library opened it before the first event, a
        login's round trips on the way to reading. What it tells without a query (its charset, whether the
        server is MariaDB) is what the library's would tell."""
        settings = dict(self._ctl_connection_settings or self._BinLogStreamReader__connection_settings)
        settings.pop("names_later", None)
        settings.update(db="information_schema", cursorclass=DictCursor, autocommit=True)
        self._ctl_connection = LazyControl(self.pymysql_wrapper, settings, self._stream_connection)
        self._BinLogStreamReader__connected_ctl = True
        self._BinLogStreamReader__check_optional_meta_data()

    def _BinLogStreamReader__check_optional_meta_data(self) -> None:  # noqa: N802
        """Parse the optional metadata of every table map, whatever binlog_row_metadata is now."""
        self._BinLogStreamReader__optional_meta_data = True

    def _BinLogStreamReader__connect_to_stream(self) -> None:  # noqa: N802 (name-mangled override)
        """Open the stream, once (a second call raises :class:`StreamLost`: gate reconnects itself), with one SET
        after the login (the library's are one round trip each: the checksum, the heartbeat, the capability and
        in MariaDB GTID mode three more) sent together with COM_BINLOG_DUMP (one round trip for both) from the
        file and position, or in GTID mode from
        ``@slave_connect_state`` (with a length header that matches its payload, as the library's does not).
        The SET tells the server that gate reads checksummed binlogs (else it refuses to send them) and that
        its first, made-up Rotate event carries none: from there on each file's Format Description event says
        (:meth:`fetchone`). ``@mariadb_slave_capability = 4``: gate reads GTID events (MariaDB 10.6.12 fails
        to replace them with dummy ones for a replica of a lower capability)."""
        if self._connected_once:
            raise StreamLost("binlog connection lost")
        self._connected_once = True
        connection = self.pymysql_wrapper(**self._BinLogStreamReader__connection_settings)
        self._stream_connection = connection
        variables = [set_names(connection), "@master_binlog_checksum = 'NONE'", "@mariadb_slave_capability = 4"]
        if self._heartbeat_ns is not None:
            variables.append(f"@master_heartbeat_period = {self._heartbeat_ns}")
        gtid = self.auto_position is not None
        if gtid:
            variables += ["@slave_connect_state = %s", "@slave_gtid_strict_mode = 1", "@slave_gtid_ignore_duplicates = 0"]
        cur = connection.cursor()
        set_query = cur.mogrify(", ".join(variables), (self.auto_position,) if gtid else None)
        cur.close()
        self._BinLogStreamReader__use_checksum = False
        self._register_slave()
        flags = 0 if self._BinLogStreamReader__blocking else 0x01  # BINLOG_DUMP_NON_BLOCK
        server_id = self._BinLogStreamReader__server_id
        if gtid:
            payload = bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", 4, flags, server_id)
        else:
            position = self.log_pos if self._BinLogStreamReader__resume_stream else 4
            payload = bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", position, flags, server_id) + self.log_file.encode()
        # The SET (the connection's first query: its SET NAMES too, names_later) and the dump go in one write: the
        # server runs them in turn, so the dump sees the SET's variables, and the stream starts a round trip
        # sooner. Should the SET fail, its error is raised and the connection closed, dump and all.
        try:
            connection._execute_command(COM_QUERY, set_query)
            connection._write_bytes(struct.pack("<i", len(payload)) + payload)
            connection._read_query_result()
        except BaseException:
            connection._force_close()  # what PyMySQL does itself on a broken link; no COM_QUIT behind the dump
            raise
        connection._next_seq_id = 1
        self._BinLogStreamReader__connected_stream = True
        read_packet = connection._read_packet

        def _gate_read_packet(*args: Any, **kwargs: Any) -> MysqlPacket:
            return self._event_packet(read_packet(*args, **kwargs))

        connection._read_packet = _gate_read_packet

    def _event_packet(self, packet: MysqlPacket) -> MysqlPacket:
        """An event packet (its OK byte, then the event): a handled type as it is, a compressed one inflated,
        any other shown to ``admit``."""
        data = packet.get_all_data()
        if len(data) < 20 or data[0] or data[5] in self._handled:
            return packet  # an EOF or error packet (the library handles it), or an event of a handled type
        type_code = data[5]
        if type_code not in UNCOMPRESSED_TYPE:
            self._admit(self._header(data))
            return packet
        try:
            event = inflate_event(bytes(data[1:]), self._BinLogStreamReader__post_header_lengths,
                                  self._BinLogStreamReader__use_checksum)
        except CompressedEventError as exc:
            exc.header = self._header(data)
            if type_code != QUERY_COMPRESSED_EVENT:  # a row event: its table id, for the table map's names
                exc.table_id = int.from_bytes(data[1 + HEADER_LEN:7 + HEADER_LEN], "little")
            raise
        return MysqlPacket(b"\x00" + event, None)

    def _header(self, data: bytes) -> EventHeader:
        size, next_pos, flags = struct.unpack_from("<IIH", data, 10)
        return EventHeader(data[5], flags, self.log_file, next_pos - size if next_pos else 0, next_pos)


# MySQL's latin1 is cp1252 except that 0x81, 0x8D, 0x8F, 0x90 and 0x9D are the C1 controls U+0081...;
# Python's cp1252 has no mapping for them and raises.
_MYSQL_LATIN1 = "gate_mysql_latin1"
_LATIN1_TABLE = "".join(
    bytes([b]).decode("cp1252", "replace").replace("\ufffd", chr(b)) for b in range(256)
)
_LATIN1_ENCODING = codecs.charmap_build(_LATIN1_TABLE)
_LATIN1_CODEC = codecs.CodecInfo(
    name=_MYSQL_LATIN1,
    encode=lambda s, errors="strict": codecs.charmap_encode(s, errors, _LATIN1_ENCODING),
    decode=lambda b, errors="strict": codecs.charmap_decode(b, errors, _LATIN1_TABLE),
)
# The library's codec name for a charset (its Charset.encoding) -> the Python codec that decodes it right.
_CODEC_FIXES = {
    "cp1252": _MYSQL_LATIN1,  # latin1
    "utf16": "utf-16-be",  # the library's "utf16" decodes as little-endian and garbles or raises
    "utf32": "utf-32-be",
    "ucs2": "utf-16-be",  # no Python codec of that name: values would arrive undecoded
    "utf16le": "utf-16-le",
}


def fix_library_charsets() -> None:
    """Make python-mysql-replication decode latin1, utf16, utf16le, utf32 and ucs2 text as the server
    defines them. Without this a latin1 value holding 0x81 (as in UTF-8 bytes stored in latin1, e.g.
    'Á' = C3 81) stops the stream with UnicodeDecodeError, utf16/utf32 text is garbled or raises, and
    ucs2/utf16le text arrives as bytes. Idempotent; call before reading any row event."""
    original = RowsEvent.charset_to_encoding
    if original.__name__ == "_gate_charset_to_encoding":
        return
    codecs.register(lambda name: _LATIN1_CODEC if name == _MYSQL_LATIN1 else None)

    def _gate_charset_to_encoding(name: str) -> str:
        return _CODEC_FIXES.get(name) or original(name)

    RowsEvent.charset_to_encoding = staticmethod(_gate_charset_to_encoding)


_TABLE_MAPS: dict[tuple[Any, ...], dict[str, Any]] = {}  # a TableMap event's body (and more) -> what parsing it set
_TABLE_MAPS_KEPT = 512
_FILTERS = ("only_tables", "ignored_tables", "only_schemas", "ignored_schemas", "freeze_schema")


def reuse_table_maps() -> None:
    """Parse each distinct TableMap once per process (see the module docstring). Streams with table or
    schema filters, or a frozen schema, parse every TableMap as before. Idempotent."""
    original = TableMapEvent.__init__
    if original.__name__ == "_gate_table_map_init":
        return

    def _gate_table_map_init(self: Any, from_packet: Any, event_size: int, table_map: dict[int, Any],
                             ctl_connection: Any, **kwargs: Any) -> None:
        packet = from_packet.packet
        # the parse depends on the bytes, and on the server kind (charset ids) and the stream's options
        body = (packet._data[packet._position:packet._position + event_size], ctl_connection._get_dbms(),
                kwargs.get("optional_meta_data"), kwargs.get("use_column_name_cache"))
        filtered = any(kwargs.get(name) for name in _FILTERS)
        known = None if filtered else _TABLE_MAPS.get(body)
        if known is None:
            original(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
            if not filtered and self._processed:
                base = BinLogEvent.__new__(BinLogEvent)
                BinLogEvent.__init__(base, from_packet, event_size, table_map, ctl_connection, **kwargs)
                if len(_TABLE_MAPS) >= _TABLE_MAPS_KEPT:
                    _TABLE_MAPS.clear()
                _TABLE_MAPS[body] = {k: v for k, v in vars(self).items() if k not in vars(base)}
            return
        BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs)
        vars(self).update(known)
        table_map[self.table_id] = self.table_obj

    TableMapEvent.__init__ = _gate_table_map_init


@dataclass(frozen=True)
class StreamFormat:
    """What the library needs to rebuild an event of this stream: taken from the reading stream."""

    mysql_version: Any
    use_checksum: bool
    optional_meta_data: bool
    post_header_lengths: Any
    charset: str
    dbms: str

    @classmethod
    def of(cls, stream: Any) -> StreamFormat:
        return cls(stream.mysql_version, stream._BinLogStreamReader__use_checksum,
                   stream._BinLogStreamReader__optional_meta_data, stream._BinLogStreamReader__post_header_lengths,
                   stream._ctl_connection.charset, stream._ctl_connection._get_dbms())


class LazyControl:
    """The library's control connection (:meth:`OwnedStream._BinLogStreamReader__connect_to_ctl`), opened with
    ``settings`` at its first query; its charset and server kind come without one (the kind from ``stream``,
    the stream's connection to the same server, as the library reads it from its own)."""

    def __init__(self, connect: Callable[..., Any], settings: dict[str, Any], stream: Any) -> None:
        self.charset = settings.get("charset") or DEFAULT_CHARSET
        self._connect, self._settings = connect, settings
        self._dbms = "mariadb" if "MariaDB" in stream.get_server_info() else "mysql"
        self._conn: Any = None

    def _get_dbms(self) -> str:
        return self._dbms

    def cursor(self, *args: Any) -> Any:
        if self._conn is None:
            self._conn = self._connect(**self._settings)
        return self._conn.cursor(*args)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Ctl:
    """The little of the library's control connection that building a row event asks for."""

    def __init__(self, fmt: StreamFormat) -> None:
        self.charset, self._dbms = fmt.charset, fmt.dbms

    def _get_dbms(self) -> str:
        return self._dbms


def raw_packet(event: Any) -> bytes:
    """The bytes of a row event as the server sent them (its header included)."""
    return event.packet.packet._data


def row_data(event: Any) -> tuple[bytes, int, int]:
    """A row event's raw packet and where its rows lie in it: the library has read the header and the
    columns-present bitmaps and not yet the rows (it reads them when ``event.rows`` is first asked for)."""
    wrapper = event.packet
    packet = wrapper.packet
    start = packet._position
    return packet._data, start, start + event.event_size - wrapper.read_bytes


def rebuild_rows_event(raw: bytes, table: Any, fmt: StreamFormat, ctl: Ctl) -> Any:
    """The library's row event for ``raw`` (see :func:`raw_packet`) of ``table``'s table map."""
    wrapper = BinLogPacketWrapper(
        MysqlPacket(raw, None), {table.table_id: table}, ctl, fmt.mysql_version, fmt.use_checksum,
        ROW_EVENT_CLASSES, None, None, None, None, False, False, False, fmt.optional_meta_data, False, False,
        fmt.post_header_lengths)
    return wrapper.event
