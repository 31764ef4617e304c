"""Decoders: processes that decode row events and render them to contract rows, off the reader's core.

python-mysql-replication decodes a row event's rows only when they are first asked for, and that
decoding is most of the reader's cost. The reader's process never asks: it puts each captured row
event's raw packet, with a pickled copy of its table map, into a :class:`Job`, and a decoder process
rebuilds the event and translates it with the same :class:`~gate.capture.translate.Translator` gate uses
everywhere. Jobs come back in any order; the pipeline applies them in binlog order. So decoding runs
on another core than reading and writing, which the GIL would otherwise serialise.

Each row's data comes back as its UTF-8 bytes (:data:`Decoded`), the form the writers send: text would
be encoded to UTF-8 and decoded again by each pickle on its way (decoder to main process to writer),
at 4 bytes a character in memory for text with a character beyond U+FFFF.
"""

from __future__ import annotations

import pickle
import queue
import time
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

from gate.capture.libshim import Ctl, StreamFormat, fix_library_charsets, raw_packet, rebuild_rows_event
from gate.capture.reader import Rows
from gate.capture.translate import Decoded, TableFilter, Translator
from gate.capture.values import BinaryFormat
from gate.common.columns import ColumnRule
from gate.common.errors import DecoderFailed
from gate.common.process import WorkerPool, start_child


@dataclass
class Job:
    """Row events for one decoder, in binlog order: (optype, index into ``tables``, raw packet)."""

    no: int
    fmt: StreamFormat
    events: list[tuple[str, int, bytes]] = field(default_factory=list)
    tables: list[Any] = field(default_factory=list)  # pymysqlreplication Table objects, pickled with the job
    rules: tuple[ColumnRule, ...] = ()  # the channel's column rules when the job's first event was read
    nbytes: int = 0
    started: float = field(default_factory=time.monotonic)
    result: list[list[Decoded]] | None = None  # per event, once decoded
    _keys: dict[int, int] = field(default_factory=dict)  # table_id -> index in tables
    _seen: dict[int, tuple[Any, int]] = field(default_factory=dict)  # id(table) -> (table, index in tables)

    def add(self, item: Rows) -> int:
        """Add a row event; returns its index in the job. The library makes a new Table for every
        TableMap (every transaction): an equal one already in the job is not pickled again, and each
        Table is compared once (comparing compares every column's attributes)."""
        event = item.event
        table = event.table_map[event.table_id]
        seen = self._seen.get(id(table))
        if seen is not None and seen[0] is table:
            key = seen[1]
        else:
            known = self._keys.get(event.table_id)
            if known is None or not (self.tables[known] is table or self.tables[known] == table):
                known = self._keys[event.table_id] = len(self.tables)
                self.tables.append(table)
            key = known
            self._seen[id(table)] = (table, key)
        raw = raw_packet(event)
        self.events.append((item.optype, key, raw))
        self.nbytes += len(raw)
        return len(self.events) - 1


def _decode(job: tuple[int, StreamFormat, list[tuple[str, int, bytes]], list[Any], tuple[ColumnRule, ...]],
            translator: Translator) -> list[list[Decoded]]:
    _no, fmt, events, tables, rules = job
    translator.set_rules(rules)  # the keys of hash rules come from this process's environment, inherited from gate
    ctl = Ctl(fmt)
    out: list[list[Decoded]] = []
    for optype, key, raw in events:
        table = tables[key]
        event = rebuild_rows_event(raw, table, fmt, ctl)
        out.append([(db, name, op, data.encode()) for db, name, op, data in translator.rows(Rows(optype, event))])
    return out


def _decoder_main(timezone: str, binary_format: BinaryFormat, inbox: Any, outbox: Any) -> None:
    start_child("gate-decoder")
    fix_library_charsets()
    # the reader's process filtered; row data is decoded by compiled per-table decoders
    translator = Translator(ZoneInfo(timezone), binary_format, TableFilter(), compiled=True)
    while (message := inbox.get()) is not None:
        no = -1
        try:
            job = pickle.loads(message)
            no = job[0]
            outbox.put((no, _decode(job, translator), None))
        except Exception as exc:  # reported to the main process, which stops with it
            outbox.put((no, None, f"{type(exc).__name__}: {exc}"))


class DecoderPool(WorkerPool):
    """N decoder processes sharing one inbox; :meth:`collect` fills in the results of finished jobs."""

    kind = "decoder"
    failure = DecoderFailed

    def __init__(self, timezone: str, binary_format: BinaryFormat, processes: int, depth: int = 2) -> None:
        super().__init__(_decoder_main, (timezone, binary_format), processes, depth)
        self._waiting: dict[int, Job] = {}

    def submit(self, job: Job) -> None:
        """Blocks while the decoders are all busy and the queue is full: backpressure on the reader.

        The job is pickled here: the queue's own pickling, in its feeder thread, would only print an
        error and drop a job that does not pickle, and gate would wait for it for ever."""
        try:
            message = pickle.dumps((job.no, job.fmt, job.events, job.tables, job.rules), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise DecoderFailed(f"Job {job.no} of row events cannot be handed to a decoder: {exc!r}") from exc
        self._put(message)
        self._waiting[job.no] = job

    def collect(self, timeout: float = 0.0) -> None:
        """Store the results that have arrived; with ``timeout``, wait that long for the first one.
        At least once a second it also checks that no decoder has died (its job would never return)."""
        try:
            item = self._outbox.get(timeout)
            while True:
                no, result, error = item
                if error is not None:
                    raise DecoderFailed(f"A decoder could not decode the row events of job {no}: {error}")
                self._waiting.pop(no).result = result
                item = self._outbox.get()
        except queue.Empty:
            if self._waiting:
                self._check_alive(every=0.0 if timeout else 1.0)

    def close(self, graceful: bool = False, wait: float | None = 1.0) -> None:
        """Stop the decoders (a second for them to leave, then SIGKILL); results not taken are dropped:
        a restart reads their rows again."""
        super().close(graceful, wait)
