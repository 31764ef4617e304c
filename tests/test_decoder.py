"""Decoder processes against the in-process translation of the same row events, from a real binlog."""

from __future__ import annotations

import time
from zoneinfo import ZoneInfo

import pytest

from gate.capture.decoder import DecoderPool, Job
from gate.capture.libshim import StreamFormat
from gate.capture.reader import BinlogReader, Commit, Idle, Rows, current_position
from gate.capture.translate import TableFilter, Translator
from gate.common.errors import DecoderFailed
from gate.devtools.sandbox import Sandbox
from tests.replay import server_config


def test_decoders_give_what_the_translator_gives_in_process(sandbox: Sandbox, unique_name: str) -> None:
    """The failover dedupe translates row events in the reader's process before they go to the decoders:
    the tables they carry must still pickle (renderers of TIME, SET and others do not). The decoders hand
    each row's data over as the UTF-8 bytes of the same text (the writers send bytes)."""
    db = f"src_{unique_name}"
    start = current_position(server_config(sandbox.source))
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, tm TIME(3), s SET('a','b','c'), e ENUM('x','y'), "
                    "ts TIMESTAMP(2) NULL, d DECIMAL(9,3), b VARBINARY(8), j JSON, bt BIT(5))")
        cur.execute(f"INSERT INTO {db}.t VALUES (1, '-838:59:58.5', 'a,c', 'y', '2024-05-01 10:00:00.25', "
                    "-1.5, x'00ff', '{\"k\": [1], \"é\": \"🚀\"}', b'10101'), "
                    "(2, NULL, '', NULL, NULL, NULL, NULL, NULL, NULL)")
        cur.execute(f"UPDATE {db}.t SET tm = '00:00:01', s = 'b' WHERE id = 1")
        cur.execute(f"DELETE FROM {db}.t WHERE id = 2")
        conn.commit()
    reader = BinlogReader(server_config(sandbox.source), 4321, start)
    translator = Translator(ZoneInfo("Asia/Tokyo"), "hex", TableFilter())
    in_process, job = [], None
    commits = 0
    for item in reader:
        if type(item) is Rows and item.event.schema == db:
            in_process.append(list(translator.rows(item)))  # as the dedupe does, before the job is sent
            job = job or Job(1, StreamFormat.of(reader.stream))
            job.add(item)
        commits += type(item) is Commit
        if type(item) is Idle and commits >= 4:
            reader.stop()
    assert job is not None and len(in_process) == 3
    pool = DecoderPool("Asia/Tokyo", "hex", 2)
    try:
        pool.submit(job)
        while job.result is None:
            pool.collect(timeout=0.5)
    finally:
        pool.close()
    assert job.result == [[(db_, table, optype, data.encode()) for db_, table, optype, data in changes]
                          for changes in in_process]
    assert [c[2] for changes in in_process for c in changes] == ["INSERT", "INSERT", "UPDATE", "DELETE"]
    assert '{"tm":"-838:59:58.500"},{"s":"a,c"}' in in_process[0][0][3]


def test_a_dead_decoder_is_noticed_while_data_flows() -> None:
    """Without waiting (the pipeline polls while it reads), a job held by a dead decoder still stops gate."""
    pool = DecoderPool("UTC", "base64", 1)
    try:
        (decoder,) = pool._procs
        decoder.kill()
        decoder.join()
        pool.submit(Job(1, StreamFormat(None, False, False, None, "utf8mb4", "mariadb")))
        deadline = time.monotonic() + 3
        with pytest.raises(DecoderFailed, match="gate-decoder-0 died"):
            while time.monotonic() < deadline:
                pool.collect()
                time.sleep(0.05)
    finally:
        pool.close()
