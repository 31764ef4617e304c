"""Decoders: processes that decode row events and render them to contract rows, off the reader's core.

python-mysql-replication decodes a row event's rows only when they are first asked for, and that
decoding is most of the reader's cost. The reader's process never asks: it puts each captured row
event's raw packet, with a pickled copy of its table map, into a :class:`Job`, and a decoder process
rebuilds the event and translates it with the same :class:`~gate.capture.translate.Translator` gate uses
everywhere. Jobs come back in any order; the pipeline applies them in binlog order. So decoding runs
on another core than reading and writing, which the GIL would otherwise serialise.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import signal
import time
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

from pymysql.protocol import MysqlPacket
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from gate.capture.reader import Rows
from gate.capture.translate import Change, TableFilter, Translator
from gate.capture.values import BinaryFormat, fix_library_charsets
from gate.common.errors import DecoderFailed
from gate.common.process import die_with_multiprocessing_parent, name_process

_CTX = mp.get_context("spawn")
_ROW_EVENTS = frozenset({WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent})


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


@dataclass
class Job:
    """Row events for one decoder, in binlog order: (optype, index into ``tables``, raw packet)."""

    no: int
    fmt: StreamFormat
    events: list[tuple[str, int, bytes]] = field(default_factory=list)
    tables: list[Any] = field(default_factory=list)  # pymysqlreplication Table objects, pickled with the job
    nbytes: int = 0
    started: float = field(default_factory=time.monotonic)
    result: list[list[Change]] | None = None  # per event, once decoded
    _keys: dict[int, int] = field(default_factory=dict)  # table_id -> index in tables

    def add(self, item: Rows) -> int:
        """Add a row event; returns its index in the job. The library makes a new Table for every
        TableMap (every transaction): an equal one already in the job is not pickled again."""
        event = item.event
        table = event.table_map[event.table_id]
        key = self._keys.get(event.table_id)
        if key is None or not (self.tables[key] is table or self.tables[key] == table):
            key = self._keys[event.table_id] = len(self.tables)
            self.tables.append(table)
        raw = event.packet.packet._data
        self.events.append((item.optype, key, raw))
        self.nbytes += len(raw)
        return len(self.events) - 1


class _Ctl:
    """The little of the library's control connection that building a row event asks for."""

    def __init__(self, fmt: StreamFormat) -> None:
        self.charset, self._dbms = fmt.charset, fmt.dbms

    def _get_dbms(self) -> str:
        return self._dbms


def _decode(job: tuple[int, StreamFormat, list[tuple[str, int, bytes]], list[Any]],
            translator: Translator) -> list[list[Change]]:
    _no, fmt, events, tables = job
    ctl = _Ctl(fmt)
    out: list[list[Change]] = []
    for optype, key, raw in events:
        table = tables[key]
        wrapper = BinLogPacketWrapper(
            MysqlPacket(raw, None), {table.table_id: table}, ctl, fmt.mysql_version, fmt.use_checksum,
            _ROW_EVENTS, None, None, None, None, False, False, False, fmt.optional_meta_data, False, False,
            fmt.post_header_lengths)
        out.append(list(translator.rows(Rows(optype, wrapper.event))))
    return out


def _decoder_main(timezone: str, binary_format: BinaryFormat, inbox: Any, outbox: Any) -> None:
    die_with_multiprocessing_parent()
    name_process("gate-decoder")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # gate's main process decides when decoders stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fix_library_charsets()
    translator = Translator(ZoneInfo(timezone), binary_format, TableFilter())  # the reader's process filtered
    while (message := inbox.get()) is not None:
        no = -1
        try:
            job = pickle.loads(message)
            no = job[0]
            outbox.put((no, _decode(job, translator), None))
        except Exception as exc:  # reported to the main process, which stops with it
            outbox.put((no, None, f"{type(exc).__name__}: {exc}"))


class DecoderPool:
    """N decoder processes sharing one inbox; :meth:`collect` fills in the results of finished jobs."""

    def __init__(self, timezone: str, binary_format: BinaryFormat, processes: int, depth: int = 2) -> None:
        self._inbox = _CTX.Queue(maxsize=max(2, depth * processes))
        self._outbox = _CTX.Queue()
        self._procs = [_CTX.Process(target=_decoder_main, args=(timezone, binary_format, self._inbox, self._outbox),
                                    name=f"gate-decoder-{n}", daemon=True) for n in range(processes)]
        for proc in self._procs:
            proc.start()
        self._waiting: dict[int, Job] = {}
        self._next_check = 0.0

    def submit(self, job: Job) -> None:
        """Blocks while the decoders are all busy and the queue is full: backpressure on the reader.

        The job is pickled here: the queue's own pickling, in its feeder thread, would only print an
        error and drop a job that does not pickle, and gate would wait for it for ever."""
        try:
            message = pickle.dumps((job.no, job.fmt, job.events, job.tables), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise DecoderFailed(f"Job {job.no} of row events cannot be handed to a decoder: {exc!r}") from exc
        while True:
            try:
                self._inbox.put(message, timeout=1.0)
                break
            except queue.Full:
                self._check_alive()
        self._waiting[job.no] = job

    def collect(self, timeout: float = 0.0) -> None:
        """Store the results that have arrived; with ``timeout``, wait that long for the first one.
        At least once a second it also checks that no decoder has died (its job would never return)."""
        try:
            item = self._outbox.get(timeout=timeout) if timeout else self._outbox.get_nowait()
            while True:
                no, result, error = item
                if error is not None:
                    raise DecoderFailed(f"A decoder could not decode the row events of job {no}: {error}")
                self._waiting.pop(no).result = result
                item = self._outbox.get_nowait()
        except queue.Empty:
            if self._waiting and (timeout or time.monotonic() >= self._next_check):
                self._next_check = time.monotonic() + 1.0
                self._check_alive()

    def _check_alive(self) -> None:
        dead = [p.name for p in self._procs if not p.is_alive()]
        if dead:
            raise DecoderFailed(f"decoder process(es) {', '.join(dead)} died; see the log above.")

    def close(self) -> None:
        """Stop the decoders (a second for them to leave, then SIGKILL); results not taken are dropped:
        a restart reads their rows again."""
        self._inbox.cancel_join_thread()
        for _ in self._procs:
            try:
                self._inbox.put_nowait(None)
            except queue.Full:
                break
        for proc in self._procs:
            proc.join(timeout=1.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
