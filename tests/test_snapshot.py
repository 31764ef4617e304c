"""Initial snapshots in `gate run`: requests in gate_snapshot, SNAPSHOTSTART/SNAPSHOT/SNAPSHOTEND rows placed in
the binlog stream at each chunk's exact position, folded by tests.replay and compared with the source."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import MariaDBServer, Sandbox
from tests.replay import dc_rows, fresh_target, make_channel, replay, running, wait_caught_up

SMALL = ChannelDefaults(snapshot_chunk_rows=7, snapshot_chunk_seconds=0.01, batch_rows=20)


def request(dc: MariaDBServer, channel: str, db: str, table: str) -> int:
    """What the admin side does: one gate_snapshot row in state 'requested'."""
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO gate_snapshot (dbname, tablename, reason) VALUES (%s, %s, 'test')", (db, table))
        return int(cur.lastrowid)


def wait_finished(dc: MariaDBServer, channel: str, snap_id: int, timeout: float = 60.0) -> tuple[str, str | None]:
    """Until the snapshot is done or cancelled (its SNAPSHOTEND at or below the checkpoint): (state, message)."""
    deadline = time.monotonic() + timeout
    with dc.connect(channel) as conn, conn.cursor() as cur:
        while True:
            cur.execute("SELECT state, message FROM gate_snapshot WHERE id = %s", (snap_id,))
            state, message = cur.fetchone()
            if state in ("done", "cancelled"):
                return state, message
            assert time.monotonic() < deadline, f"snapshot {snap_id} still {state} after {timeout} s"
            time.sleep(0.05)


def rows_of(conn: pymysql.Connection, db: str, table: str) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{db}`.`{table}` ORDER BY 1, 2")
        return list(cur.fetchall())


def folded(sandbox: Sandbox, channel: str, db: str) -> pymysql.Connection:
    """The channel's rows folded, in id order, into a fresh database ``db`` on the DC server. The changes
    of a table before its first SNAPSHOTSTART are left out: that row resets the table (and creates it in
    the target, which never saw its CREATE TABLE)."""
    rows = dc_rows(sandbox.dc, channel)
    first: dict[tuple[str, str], int] = {}
    for r in rows:
        if r[6] == "SNAPSHOTSTART":
            first.setdefault((r[2], r[3]), r[0])
    rows = [r for r in rows if r[0] >= first.get((r[2], r[3]), 0)]
    target = fresh_target(sandbox.dc, db)
    replay(rows, target)
    return target


def assert_snapshot_rows(rows: list[tuple[Any, ...]], snap_id: int) -> list[tuple[Any, ...]]:
    """The ids are 1..n; the snapshot's SNAPSHOTSTART and SNAPSHOTEND are transactions of their own around
    its SNAPSHOT rows, and SNAPSHOTEND counts them. Returns the SNAPSHOT rows."""
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    tids = [r[1] for r in rows]
    assert tids == sorted(tids) and len(set(tids)) == tids[-1] - tids[0] + 1
    starts = [r for r in rows if r[6] == "SNAPSHOTSTART" and json.loads(r[7])["SNAPSHOT"]["id"] == snap_id]
    ends = [r for r in rows if r[6] == "SNAPSHOTEND" and json.loads(r[7])["SNAPSHOT"]["id"] == snap_id]
    assert len(starts) == 1 and len(ends) == 1
    start, end = starts[0], ends[0]
    snap = [r for r in rows if start[0] < r[0] < end[0] and r[6] == "SNAPSHOT" and (r[2], r[3]) == start[2:4]]
    for marker in (start, end):
        assert [r for r in rows if r[1] == marker[1]] == [marker]
    assert json.loads(end[7])["SNAPSHOT"]["rows"] == len(snap)
    return snap


@pytest.fixture
def source_db(sandbox: Sandbox, unique_name: str) -> Iterator[str]:
    db = f"src_{unique_name}"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
    yield db
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def test_snapshot_of_a_table_with_rows_under_concurrent_writes(sandbox: Sandbox, unique_name: str,
                                                               source_db: str) -> None:
    """Inserts, updates, deletes and primary-key changes run while the table is read in chunks of 7 rows;
    the folded channel equals the source, and every chunk sits at a position where the stream is exact
    (the replay's DELETE asserts that the row it removes exists)."""
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n INT)")
        cur.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}', {i})" for i in range(1, 301)))
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=SMALL)
    stop = threading.Event()

    def writes() -> None:
        rnd = random.Random(5)
        with sandbox.source.connect(db) as conn, conn.cursor() as cur:
            while not stop.is_set():
                k = rnd.randint(1, 400)
                action = rnd.random()
                if action < 0.3:
                    cur.execute("INSERT IGNORE INTO t VALUES (%s, 'new', 0)", (k,))
                elif action < 0.6:
                    cur.execute("UPDATE t SET n = n + 1, v = 'upd' WHERE id = %s", (k,))
                elif action < 0.8:
                    cur.execute("DELETE FROM t WHERE id = %s", (k,))
                else:
                    cur.execute("UPDATE IGNORE t SET id = %s WHERE id = %s", (rnd.randint(401, 900), k))

    with running(dc, unique_name):
        snap_id = request(sandbox.dc, unique_name, db, "t")
        writer = threading.Thread(target=writes)
        writer.start()
        try:
            assert wait_finished(sandbox.dc, unique_name, snap_id) == ("done", None)
        finally:
            stop.set()
            writer.join()
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    rows = dc_rows(sandbox.dc, unique_name)
    snap = assert_snapshot_rows(rows, snap_id)
    assert len(snap) > 40
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT state, rows_done, chunks_done > 5 FROM gate_snapshot WHERE id = %s", (snap_id,))
        assert cur.fetchone() == ("done", len(snap), 1)
    with folded(sandbox, unique_name, db) as target, sandbox.source.connect() as source:
        assert rows_of(target, db, "t") == rows_of(source, db, "t")
