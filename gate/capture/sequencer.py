"""Sequencer: gap-free ids (one per change) and tids (one per transaction that has a change).

A transaction whose changes were all filtered out takes no tid, so tids stay gap-free in
transfer_data. Given the same binlog from the same boundary, it hands out the same numbers: this
is what makes a restart produce the ids and tids of an uninterrupted run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from gate.capture.translate import Change, Decoded

DCRow = tuple[int, int, str, str, str, str, str, str | bytes]
"""id, tid, dbname, tablename, create_time (UTC text), instance_name, optype, data (text, or the decoders'
UTF-8 bytes of it)."""


class Sequencer:
    def __init__(self, last_id: int, last_tid: int, instance_name: str) -> None:
        self.id = last_id
        self.tid = last_tid
        self.instance_name = instance_name
        self._open = False
        self._times: dict[int, str] = {}

    def begin(self) -> None:
        self._open = False

    def _create_time(self, timestamp: int) -> str:
        text = self._times.get(timestamp)
        if text is None:
            if len(self._times) > 4096:
                self._times.clear()
            text = self._times[timestamp] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(timestamp))
        return text

    def number(self, changes: Iterable[Change | Decoded], timestamp: int) -> list[DCRow]:
        """Give ids (and, for the first change of a transaction, a new tid) to changes."""
        out: list[DCRow] = []
        created = self._create_time(timestamp)
        instance = self.instance_name
        for dbname, tablename, optype, data in changes:
            if not self._open:
                self._open = True
                self.tid += 1
            self.id += 1
            out.append((self.id, self.tid, dbname, tablename, created, instance, optype, data))
        return out
