"""The binlog reader opened early (its login, SET and dump in a thread while gate's start-up goes on) against
one opened by its first read, on a real source."""

from __future__ import annotations

import time

import pytest

from gate.capture.reader import BinlogReader, Commit, Idle, Item, Position, Rows, current_position
from gate.common.errors import PositionPurged
from gate.devtools.sandbox import Sandbox
from tests.replay import server_config


def _read(reader: BinlogReader, db: str, commits: int) -> list[tuple[str, object]]:
    """What ``reader`` yields until ``commits`` transactions and then a heartbeat: each commit's position and
    each row event of ``db`` as its table and rows."""
    seen: list[tuple[str, object]] = []
    ended = 0
    item: Item
    for item in reader:
        if type(item) is Rows and item.event.schema == db:
            seen.append((item.event.table, list(item.event.rows)))
        elif type(item) is Commit:
            ended += 1
            seen.append(("commit", item.position))
        elif type(item) is Idle and ended >= commits:
            reader.stop()
    return seen


def _dump_running(sandbox: Sandbox, connection_id: int) -> bool:
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s AND command LIKE 'Binlog Dump%%'",
                    (connection_id,))
        return bool(cur.fetchone()[0])


def test_a_stream_opened_early_reads_the_same_and_one_discarded_leaves_the_source(sandbox: Sandbox,
                                                                                   unique_name: str) -> None:
    db = f"src_{unique_name}"
    source = server_config(sandbox.source)
    start = current_position(source)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(8))")
        cur.execute(f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b')")
        cur.execute(f"UPDATE {db}.t SET v = 'c' WHERE id = 2")
        conn.commit()
    early = BinlogReader(source, 4701, start)
    early.open_now()
    read_early = _read(early, db, 4)
    read_late = _read(BinlogReader(source, 4702, start), db, 4)
    assert read_early == read_late
    assert [entry[0] for entry in read_early if entry[0] != "commit"] == ["t", "t"]
    assert read_early[-1] == ("commit", current_position(source))

    unread = BinlogReader(source, 4703, current_position(source))
    unread.open_now()
    deadline = time.monotonic() + 10
    while getattr(unread.stream, "_stream_connection", None) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    connection_id = unread.stream._stream_connection.thread_id()
    while not _dump_running(sandbox, connection_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dump_running(sandbox, connection_id)  # its dump runs on the source
    unread.discard()
    while _dump_running(sandbox, connection_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _dump_running(sandbox, connection_id)


def test_an_early_stream_that_fails_says_so_at_its_first_read_as_a_late_one_does(sandbox: Sandbox) -> None:
    source = server_config(sandbox.source)
    gone = Position("mysql-bin.999999", 4, None)
    errors = []
    for early in (True, False):
        reader = BinlogReader(source, 4704, gone, channel="ch")
        if early:
            reader.open_now()
        with pytest.raises(PositionPurged) as err:
            next(iter(reader))
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert errors[0].startswith(f"The source {sandbox.source.address} cannot send the binlog from "
                                "mysql-bin.999999:4: ")
    assert "'gate channel set-position ch --now'" in errors[0]
