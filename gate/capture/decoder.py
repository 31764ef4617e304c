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

from gate.capture.libshim import Ctl, StreamFormat, fix_library_charsets, raw_packet, rebuild_rows_event
from gate.capture.reader import Rows
from gate.capture.translate import Change, TableFilter, Translator
from gate.capture.values import BinaryFormat
from gate.common.errors import DecoderFailed
from gate.common.process import die_with_multiprocessing_parent, name_process

_CTX = mp.get_context("spawn")





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
        raw = raw_packet(event)
        self.events.append((item.optype, key, raw))
        self.nbytes += len(raw)
        return len(self.events) - 1




def _decode(job: tuple[int, StreamFormat, list[tuple[str, int, bytes]], list[Any]],
            translator: Translator) -> list[list[Change]]:
    _no, fmt, events, tables = job
    ctl = Ctl(fmt)
    out: list[list[Change]] = []
    for optype, key, raw in events:
        table = tables[key]
        event = rebuild_rows_event(raw, table, fmt, ctl)
        out.append(list(translator.rows(Rows(optype, event))))
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
