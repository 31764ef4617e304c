"""Initial snapshots in `gate run`: requests in gate_snapshot, SNAPSHOTSTART/SNAPSHOT/SNAPSHOTEND rows placed in
the binlog stream at each chunk's exact position, folded by tests.replay and compared with the source."""

from __future__ import annotations

import json
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pymysql
import pytest

from gate.admin import snapshot as snapshots
from gate.capture.reader import Position
from gate.capture.snapshot import compare
from gate.capture.snapshot_reader import after, after_args, decode_key, encode_key
from gate.capture.values import ImageRenderer, text_renderer
from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import MariaDBServer, Sandbox
from tests.replay import (
    dc_rows,
    fresh_target,
    make_channel,
    replay,
    running,
    server_config,
    start_gate,
    wait_caught_up,
    wait_row,
    wait_running,
    wait_sampled,
)
from tests.test_metrics import free_port, scrape, value, wait_status
from tests.test_type_matrix import (
    COLUMNS,
    MAX_ROW,
    MIN_ROW,
    MIXED_ROWS,
    NAMES,
    NUMBER_COLUMNS,
    ZERO_ROW,
    Recorder,
    _random_rows,
)

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


@pytest.mark.parametrize(("channel_zone", "binary_format"), [("UTC", "base64"), ("Etc/GMT-8", "hex")])
def test_snapshot_rows_carry_the_insert_text_of_every_type(sandbox: Sandbox, unique_name: str, source_db: str,
                                                           channel_zone: str, binary_format: str) -> None:
    """Rows of every type of the type matrix are inserted while the channel streams, then snapshotted: each
    SNAPSHOT row's data is byte for byte the data of the INSERT row of the same source row."""
    db = source_db
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=ChannelDefaults(
        timezone=channel_zone, binary_format=binary_format, snapshot_chunk_rows=3, batch_rows=25))  # type: ignore[arg-type]
    with running(dc, unique_name), sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        every = Recorder(cur, "everything", COLUMNS)
        numbers = Recorder(cur, "numbers", NUMBER_COLUMNS)
        for rec in (every, numbers):
            cur.execute(f"CREATE TABLE `{rec.table}` (" + ", ".join(f"`{n}` {d}" for n, d, _ in rec.columns) + ")")
        every.insert([{"id": 1, **MIN_ROW}, {"id": 2, **MAX_ROW}])
        cur.execute("SET SESSION sql_mode = ''")
        every.insert([{"id": 3, **ZERO_ROW}])
        cur.execute("SET SESSION sql_mode = DEFAULT")
        every.insert([{"id": 4}])
        every.insert([{"id": 5 + n, **row} for n, row in enumerate(MIXED_ROWS)])
        numbers.insert(_random_rows(random.Random(20241103), 200))
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        ids = [request(sandbox.dc, unique_name, db, table) for table in ("everything", "numbers")]
        for snap_id in ids:
            assert wait_finished(sandbox.dc, unique_name, snap_id) == ("done", None)
    rows = dc_rows(sandbox.dc, unique_name)
    for table, count in (("everything", 4 + len(MIXED_ROWS)), ("numbers", 200)):
        inserted = {json.loads(r[7])["NEW"][0]["id"]: r[7] for r in rows if r[3] == table and r[6] == "INSERT"}
        snapped = {json.loads(r[7])["NEW"][0]["id"]: r[7] for r in rows if r[3] == table and r[6] == "SNAPSHOT"}
        assert len(inserted) == count and snapped.keys() == inserted.keys()
        for key, data in inserted.items():
            assert snapped[key] == data, f"{table} id {key}"
    start = next(json.loads(r[7]) for r in rows if r[3] == "everything" and r[6] == "SNAPSHOTSTART")
    assert [c["field_name"] for c in start["NEW"]] == NAMES
    assert start["NEW"][0] == {"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int(11)"}
    assert start["SNAPSHOT"] == {"id": ids[0], "reason": "test", "key": ["id"]}


def test_composite_string_and_unique_keys_and_a_table_without_a_key(sandbox: Sandbox, unique_name: str,
                                                                   source_db: str) -> None:
    """A composite key (OR-expanded pages), a string key, a table with only a NOT NULL unique key, each
    snapshotted under writes and folded equal to the source; a table without any key is refused with
    a message naming it and the fix, and gets no rows."""
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE comp (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))")
        cur.execute("INSERT INTO comp VALUES " + ", ".join(f"({a}, 'k{b:02d}', {a * b})"
                                                            for a in range(8) for b in range(12)))
        cur.execute("CREATE TABLE strkey (k VARCHAR(20) PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO strkey VALUES " + ", ".join(f"('s{n * 7919 % 1000:03d}é', {n})"
                                                              for n in range(80)))
        cur.execute("CREATE TABLE uniq (id INT NULL, u VARCHAR(10) NOT NULL, w INT NOT NULL, UNIQUE KEY (id), "
                    "UNIQUE KEY (u, w))")
        cur.execute("INSERT INTO uniq VALUES " + ", ".join(f"({n}, 'u{n % 9}', {n})" for n in range(60)))
        cur.execute("CREATE TABLE nokey (a INT, b INT)")
        cur.execute("INSERT INTO nokey VALUES (1, 1), (1, 1)")
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=SMALL)
    with running(dc, unique_name), sandbox.source.connect(db) as conn, conn.cursor() as cur:
        ids = {table: request(sandbox.dc, unique_name, db, table) for table in ("comp", "strkey", "uniq", "nokey")}
        for n in range(60):
            cur.execute("UPDATE comp SET v = v + 1 WHERE a = %s AND b = %s", (n % 8, f"k{n % 12:02d}"))
            cur.execute("DELETE FROM comp WHERE a = %s AND b = %s", ((n * 3) % 8, f"k{(n * 5) % 12:02d}"))
            cur.execute("INSERT IGNORE INTO strkey VALUES (%s, %s)", (f"s{n * 31 % 1000:03d}é", n))
            cur.execute("UPDATE uniq SET u = 'moved', w = %s WHERE id = %s", (1000 + n, n))
            time.sleep(0.005)
        states = {table: wait_finished(sandbox.dc, unique_name, snap_id) for table, snap_id in ids.items()}
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert states["comp"] == states["strkey"] == states["uniq"] == ("done", None)
    state, message = states["nokey"]
    assert state == "cancelled" and message.startswith(
        f"{db}.nokey has neither a primary key nor a unique key on NOT NULL columns")
    assert "ADD PRIMARY KEY" in message
    rows = dc_rows(sandbox.dc, unique_name)
    assert not [r for r in rows if r[3] == "nokey"]
    starts = {r[3]: json.loads(r[7])["SNAPSHOT"]["key"] for r in rows if r[6] == "SNAPSHOTSTART"}
    assert starts == {"comp": ["a", "b"], "strkey": ["k"], "uniq": ["u", "w"]}
    for table in ("comp", "strkey", "uniq"):
        assert_snapshot_rows(rows, ids[table])
    with folded(sandbox, unique_name, db) as target, sandbox.source.connect() as source:
        for table in ("comp", "strkey", "uniq"):
            assert rows_of(target, db, table) == rows_of(source, db, table), table


def assert_one_transaction(rows: list[tuple[Any, ...]], snap_id: int) -> list[tuple[Any, ...]]:
    """The ids are 1..n; a table read whole is one transaction: its SNAPSHOTSTART, SNAPSHOT rows and SNAPSHOTEND
    (done, counting them) alone under one tid, at consecutive ids. Returns the SNAPSHOT rows."""
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    start = next(r for r in rows if r[6] == "SNAPSHOTSTART" and json.loads(r[7])["SNAPSHOT"]["id"] == snap_id)
    txn = [r for r in rows if r[1] == start[1]]
    assert [r[0] for r in txn] == list(range(start[0], start[0] + len(txn)))
    assert [r[6] for r in txn] == ["SNAPSHOTSTART"] + ["SNAPSHOT"] * (len(txn) - 2) + ["SNAPSHOTEND"]
    assert json.loads(start[7])["SNAPSHOT"]["key"] == []
    assert json.loads(txn[-1][7])["SNAPSHOT"] == {"id": snap_id, "rows": len(txn) - 2, "state": "done", "reason": None}
    return txn[1:-1]


def test_a_table_without_a_key_read_whole_in_one_read_view_under_writes(sandbox: Sandbox, unique_name: str,
                                                                          source_db: str) -> None:
    """--whole-table: a table without a key, with repeated rows, is read whole in one read view while rows are
    inserted, updated and deleted: one transaction in the stream, and the fold equals the source as a multiset.
    Above the channel's snapshot_whole_table_rows it is not requested; one that grew past it after its
    request is cancelled by gate run, named, with no row written."""
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE log (n INT, v VARCHAR(10))")
        cur.execute("INSERT INTO log VALUES " + ", ".join(f"({i % 40}, 'v{i % 7}')" for i in range(300)))
        cur.execute("CREATE TABLE big (n INT)")
        cur.execute("INSERT INTO big VALUES " + ", ".join("(1)" for _ in range(1001)))
        cur.execute("CREATE TABLE grows (n INT)")
        cur.execute("INSERT INTO grows VALUES " + ", ".join("(1)" for _ in range(1000)))
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      defaults=ChannelDefaults(snapshot_whole_table_rows=1000, batch_rows=20))
    made = snapshots.request(dc, unique_name, ways=snapshots.Ways(whole=(f"{db}.*",)))
    assert [(r["table"], r["whole_table"]) for r in made.requested] == [(f"{db}.grows", True), (f"{db}.log", True)]
    assert made.refused == [{"table": f"{db}.big", "reason": (
        f"{db}.big has more than 1000 rows, the most a whole-table snapshot reads (the channel's "
        f"snapshot_whole_table_rows): raise it ('gate channel set {unique_name} --snapshot-whole-table-rows N') or "
        f"page it on a key (a primary key, or --key {db}.big=COL,...), then request it again")}]
    ids = {r["table"].split(".")[1]: r["id"] for r in made.requested}
    stop = threading.Event()

    def writes() -> None:
        rnd = random.Random(7)
        with sandbox.source.connect(db) as conn, conn.cursor() as cur:
            while not stop.is_set():
                n = rnd.randint(0, 45)
                action = rnd.random()
                if action < 0.4:
                    cur.execute("INSERT INTO log VALUES (%s, 'new'), (%s, 'new')", (n, n))
                elif action < 0.7:
                    cur.execute("UPDATE log SET v = 'upd' WHERE n = %s LIMIT 1", (n,))
                else:
                    cur.execute("DELETE FROM log WHERE n = %s LIMIT 1", (n,))
                time.sleep(0.001)

    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO grows VALUES (2)")
    with running(dc, unique_name):
        writer = threading.Thread(target=writes)
        writer.start()
        try:
            time.sleep(0.3)
            states = {table: wait_finished(sandbox.dc, unique_name, snap_id) for table, snap_id in ids.items()}
            time.sleep(0.2)
        finally:
            stop.set()
            writer.join()
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert states == {"log": ("done", None), "grows": ("cancelled", (
        f"{db}.grows has more than 1000 rows, the most a whole-table snapshot reads (the channel's "
        "snapshot_whole_table_rows); gate does not snapshot it. Add a primary key, or raise the bound ('gate channel "
        "set CHANNEL --snapshot-whole-table-rows N'), and request it again."))}
    rows = dc_rows(sandbox.dc, unique_name)
    assert not [r for r in rows if r[3] in ("grows", "big") and r[6].startswith("SNAPSHOT")]
    snap = assert_one_transaction(rows, ids["log"])
    assert 290 < len(snap) and len({r[7] for r in snap}) < len(snap)  # repeated rows, each written
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT state, rows_done, chunks_done, snap_key FROM gate_snapshot WHERE id = %s", (ids["log"],))
        assert cur.fetchone() == ("done", len(snap), 1, "[]")
    with fresh_target(sandbox.dc, db) as target, sandbox.source.connect() as source:
        replay([r for r in rows if r[3] == "log" and r[0] >= snap[0][0] - 1], target)
        assert sorted(rows_of(target, db, "log")) == sorted(rows_of(source, db, "log"))
        assert len(rows_of(source, db, "log")) > 300


def test_a_table_without_a_key_paged_on_a_key_the_dba_chose(sandbox: Sandbox, unique_name: str,
                                                            source_db: str) -> None:
    """--key: a table without a key is paged on columns the DBA names, unique and NOT NULL on the source, under
    writes: SNAPSHOTSTART names that key and the fold by it equals the source. No index enforces it, so each
    chunk counts its keys: a key repeated after the request cancels the snapshot, named."""
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        for table in ("legacy", "dup"):
            cur.execute(f"CREATE TABLE {table} (code INT NOT NULL, day VARCHAR(8) NOT NULL, v INT, KEY (code))")
            cur.execute(f"INSERT INTO {table} VALUES " + ", ".join(f"({n % 30}, 'd{n // 30:02d}', {n})"
                                                                    for n in range(300)))
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      defaults=ChannelDefaults(snapshot_chunk_rows=25, snapshot_chunk_seconds=0.01, batch_rows=20))
    made = snapshots.request(dc, unique_name, ways=snapshots.Ways(keys={f"{db}.legacy": ["code", "day"],
                                                                        f"{db}.dup": ["code", "day"]}))
    ids = {r["table"].split(".")[1]: r["id"] for r in made.requested}
    assert [r["key"] for r in made.requested] == [["code", "day"]] * 2 and made.refused == []
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO dup VALUES (29, 'd09', -1)")  # the last key, twice: its last chunk sees it
    with running(dc, unique_name), sandbox.source.connect(db) as conn, conn.cursor() as cur:
        for n in range(60):
            cur.execute("UPDATE legacy SET v = -v WHERE code = %s AND day = %s", (n % 30, f"d{n % 10:02d}"))
            cur.execute("DELETE FROM legacy WHERE code = %s AND day = %s", ((n * 7) % 30, f"d{(n * 3) % 10:02d}"))
            cur.execute("INSERT INTO legacy VALUES (%s, 'new', %s)", (n, n))
            time.sleep(0.005)
        states = {table: wait_finished(sandbox.dc, unique_name, snap_id) for table, snap_id in ids.items()}
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert states["legacy"] == ("done", None) and states["dup"][0] == "cancelled"
    assert re.fullmatch(re.escape(f"{db}.dup has rows that repeat a value of the key chosen for its snapshot (code, "
                                  "day), after ") + r"\[.+\]" + re.escape(
        ' up to ["29", "d09"]: the key is not unique, so the snapshot would not be exact; gate cancels it. Choose '
        "other columns (--key) or read it whole (--whole-table), and request it again."), states["dup"][1])
    rows = dc_rows(sandbox.dc, unique_name)
    assert len(assert_snapshot_rows(rows, ids["legacy"])) > 250
    end = next(json.loads(r[7]) for r in rows if r[3] == "dup" and r[6] == "SNAPSHOTEND")
    assert (end["SNAPSHOT"]["state"], end["SNAPSHOT"]["reason"]) == ("cancelled", states["dup"][1])
    start = next(json.loads(r[7]) for r in rows if r[3] == "legacy" and r[6] == "SNAPSHOTSTART")
    assert start["SNAPSHOT"]["key"] == ["code", "day"]
    with fresh_target(sandbox.dc, db) as target, sandbox.source.connect() as source:
        legacy = [r for r in rows if r[3] == "legacy"]  # from its own SNAPSHOTSTART (dup's may come first)
        replay([r for r in legacy if r[0] >= min(r[0] for r in legacy if r[6] == "SNAPSHOTSTART")], target)
        assert sorted(rows_of(target, db, "legacy")) == sorted(rows_of(source, db, "legacy"))


def test_ddl_during_a_snapshot(sandbox: Sandbox, unique_name: str, source_db: str) -> None:
    """ADD COLUMN and DROP COLUMN while a table is read, TRUNCATE of another, RENAME of a third: the first
    two fold equal to the source; the renamed one ends as cancelled with the reason."""
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        for table in ("alt", "tru", "ren"):
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(10), w INT)")
            cur.execute(f"INSERT INTO {table} VALUES " + ", ".join(f"({n}, 'v{n}', {n})" for n in range(1, 601)))
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      defaults=ChannelDefaults(snapshot_chunk_rows=3, snapshot_chunk_seconds=0.01, snapshot_readers=3))
    with running(dc, unique_name), sandbox.source.connect(db) as conn, conn.cursor() as cur:
        ids = {table: request(sandbox.dc, unique_name, db, table) for table in ("alt", "tru", "ren")}
        wait_row(sandbox.dc, unique_name, "SELECT 1 FROM transfer_data WHERE optype = 'SNAPSHOT' AND id > 100")
        cur.execute("ALTER TABLE alt ADD COLUMN extra VARCHAR(5) DEFAULT 'x'")
        cur.execute("UPDATE alt SET extra = 'y' WHERE id % 7 = 0")
        cur.execute("TRUNCATE TABLE tru")
        cur.execute("INSERT INTO tru VALUES (5, 'again', 5), (590, 'again', 590)")
        cur.execute("RENAME TABLE ren TO ren2")
        time.sleep(0.3)
        cur.execute("ALTER TABLE alt DROP COLUMN w")
        states = {table: wait_finished(sandbox.dc, unique_name, snap_id) for table, snap_id in ids.items()}
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert states["alt"] == states["tru"] == ("done", None)
    assert states["ren"][0] == "cancelled" and "renamed" in states["ren"][1]  # seen by the stream or by a reader
    rows = dc_rows(sandbox.dc, unique_name)
    end = next(json.loads(r[7]) for r in rows if r[3] == "ren" and r[6] == "SNAPSHOTEND")
    assert end["SNAPSHOT"]["state"] == "cancelled"
    ddl = [r[0] for r in rows if r[3] == "alt" and r[6] == "ALTERTABLE"]
    alt_start, alt_end = (next(r[0] for r in rows if r[3] == "alt" and r[6] == kind)
                          for kind in ("SNAPSHOTSTART", "SNAPSHOTEND"))
    assert alt_start < ddl[0] < alt_end  # the ALTER came in the middle of the snapshot
    with folded(sandbox, unique_name, db) as target, sandbox.source.connect() as source:
        for table in ("alt", "tru"):
            assert rows_of(target, db, table) == rows_of(source, db, table), table


def test_cancel_then_snapshot_again_while_streaming(sandbox: Sandbox, unique_name: str, source_db: str) -> None:
    """A running snapshot cancelled by the flag ends with SNAPSHOTEND(cancelled); a new request of the same
    table while the channel streams starts over with its own SNAPSHOTSTART and folds equal to the source."""
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO t VALUES " + ", ".join(f"({n}, {n})" for n in range(1, 601)))
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      # chunks of 10 rows that do not grow (a 1 ms target): the snapshot is still running when
                      # gate next polls the cancel flag (every 2 s), however fast the machine
                      defaults=ChannelDefaults(snapshot_chunk_rows=10, snapshot_chunk_seconds=0.001))
    with running(dc, unique_name), sandbox.dc.connect(unique_name) as dconn, dconn.cursor() as dcur:
        first = request(sandbox.dc, unique_name, db, "t")
        wait_row(sandbox.dc, unique_name, "SELECT 1 FROM transfer_data WHERE optype = 'SNAPSHOT'")
        dcur.execute("UPDATE gate_snapshot SET cancel = 1 WHERE state = 'running'")
        assert wait_finished(sandbox.dc, unique_name, first) == ("cancelled", "cancelled by 'gate snapshot --cancel'")
        with sandbox.source.connect(db) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t SET v = -v WHERE id % 3 = 0")
        second = request(sandbox.dc, unique_name, db, "t")
        with sandbox.source.connect(db) as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM t WHERE id % 5 = 0")
        assert wait_finished(sandbox.dc, unique_name, second, timeout=90) == ("done", None)
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    rows = dc_rows(sandbox.dc, unique_name)
    end = next(json.loads(r[7]) for r in rows if r[6] == "SNAPSHOTEND")
    assert end["SNAPSHOT"]["id"] == first and end["SNAPSHOT"]["state"] == "cancelled"
    assert 0 < end["SNAPSHOT"]["rows"] < 600
    assert len(assert_snapshot_rows(rows, second)) > 400
    with folded(sandbox, unique_name, db) as target, sandbox.source.connect() as source:
        assert rows_of(target, db, "t") == rows_of(source, db, "t")


def test_kill_9_during_a_snapshot_then_rerun(sandbox: Sandbox, unique_name: str, source_db: str,
                                             tmp_path: Path) -> None:
    """`gate run` killed with SIGKILL three times at random moments while two tables are snapshotted under
    writes, and a third without a key is read whole: the reruns resume from the progress stored with the
    checkpoint (the whole table from its start), ids stay gap-free, each snapshot has one SNAPSHOTSTART and
    one SNAPSHOTEND around its rows, and the fold equals the source."""
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        for table in ("a", "b"):
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {table} VALUES " + ", ".join(f"({n}, {n})" for n in range(1, 701)))
        cur.execute("CREATE TABLE c (id INT, v INT)")
        cur.execute("INSERT INTO c VALUES " + ", ".join(f"({n % 300}, 0)" for n in range(1, 701)))
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      defaults=ChannelDefaults(snapshot_chunk_rows=4, snapshot_chunk_seconds=0.01, batch_rows=10))
    ids = [request(sandbox.dc, unique_name, db, table) for table in ("a", "b")]
    whole = snapshots.request(dc, unique_name, ways=snapshots.Ways(whole=(f"{db}.c",))).requested[0]["id"]
    stop = threading.Event()

    def writes() -> None:
        rnd = random.Random(9)
        with sandbox.source.connect(db) as conn, conn.cursor() as cur:
            while not stop.is_set():
                table, k = rnd.choice("ab"), rnd.randint(1, 800)
                cur.execute(f"INSERT INTO {table} VALUES (%s, 0) ON DUPLICATE KEY UPDATE v = v + 1", (k,))
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (rnd.randint(1, 800),))
                cur.execute("INSERT INTO c VALUES (%s, 1)", (k % 300,))
                cur.execute("DELETE FROM c WHERE id = %s LIMIT 1", (rnd.randint(1, 300),))
                time.sleep(0.002)

    writer = threading.Thread(target=writes)
    writer.start()
    rnd = random.Random(3)
    try:
        for _ in range(3):
            gate = start_gate(tmp_path, sandbox.dc, unique_name)
            wait_running(sandbox.dc, unique_name, gate)
            time.sleep(rnd.uniform(0.5, 2.0))
            gate.send_signal(signal.SIGKILL)
            gate.wait()
        gate = start_gate(tmp_path, sandbox.dc, unique_name)
        states = [wait_finished(sandbox.dc, unique_name, snap_id, timeout=120) for snap_id in (*ids, whole)]
    finally:
        stop.set()
        writer.join()
    assert states == [("done", None)] * 3
    wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    gate.send_signal(signal.SIGTERM)
    assert gate.wait(30) == 0
    rows = dc_rows(sandbox.dc, unique_name)
    for snap_id in ids:
        assert_snapshot_rows(rows, snap_id)
    assert_one_transaction(rows, whole)
    with folded(sandbox, unique_name, db) as target, sandbox.source.connect() as source:
        for table in ("a", "b"):
            assert rows_of(target, db, table) == rows_of(source, db, table), table
        assert sorted(rows_of(target, db, "c")) == sorted(rows_of(source, db, "c"))


def test_failover_in_the_middle_of_a_snapshot(make_sandbox: Callable[..., Sandbox]) -> None:
    """The source is killed while a table is snapshotted: gate switches to the standby and reads the rest of
    the table there (each chunk is exact at its own position, on whichever server); the fold equals the
    standby."""
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE d")
        cur.execute("CREATE TABLE d.t (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO d.t VALUES " + ", ".join(f"({n}, {n})" for n in range(1, 3001)))
    box.wait_standby_caught_up()
    dc = make_channel(box.dc, box.source, "snapfo", standby=server_config(box.standby), allow=("d.*",),
                      defaults=ChannelDefaults(batch_rows=50, standby_sample_seconds=0.3, failover_after_seconds=2.0,
                                               failover_margin_seconds=1.0, snapshot_chunk_rows=5,
                                               snapshot_chunk_seconds=0.01))
    with running(dc, "snapfo"):
        wait_sampled(box.dc, "snapfo")
        snap_id = request(box.dc, "snapfo", "d", "t")
        with box.source.connect() as conn, conn.cursor() as cur:
            for n in range(40):
                cur.execute("UPDATE d.t SET v = -v WHERE id = %s", (n * 70 + 1,))
        wait_row(box.dc, "snapfo", "SELECT 1 FROM gate_snapshot WHERE rows_done > 200")
        box.wait_standby_caught_up()
        box.source.kill()
        with box.standby.connect() as conn, conn.cursor() as cur:
            for n in range(40):
                cur.execute("UPDATE d.t SET v = v + 1000 WHERE id = %s", (n * 70 + 2,))
        assert wait_finished(box.dc, "snapfo", snap_id, timeout=120) == ("done", None)
        wait_caught_up(box.standby, box.dc, "snapfo")
    rows = dc_rows(box.dc, "snapfo")
    snap = assert_snapshot_rows(rows, snap_id)
    assert {r[5] for r in snap} == {box.source.address, box.standby.address}
    first = min(r[0] for r in rows if r[6] == "SNAPSHOTSTART")
    with fresh_target(box.dc, "d") as target, box.standby.connect() as standby:
        replay([r for r in rows if r[0] >= first], target)
        assert rows_of(target, "d", "t") == rows_of(standby, "d", "t")


# --- pure parts ----------------------------------------------------------------------------------

def test_keyset_condition_is_the_or_expansion_never_the_row_constructor() -> None:
    assert after(["a"]) == "((`a` > %s))"
    assert after(["a", "b", "c"]) == ("((`a` > %s) OR (`a` = %s AND `b` > %s) OR (`a` = %s AND `b` = %s AND `c` > %s))")
    assert after(["a", "b"], inclusive=True, below=True) == "((`a` < %s) OR (`a` = %s AND `b` <= %s))"
    assert after_args(["x", 2, b"\x00"]) == ["x", "x", 2, "x", 2, b"\x00"]
    assert decode_key(encode_key(["a", b"\x00\xff", "3"])) == ["a", b"\x00\xff", "3"]
    assert encode_key(None) is None and decode_key(None) is None


def test_a_read_view_is_compared_with_the_stream_by_gtid_then_by_file_and_offset() -> None:
    stream = Position("bin.000002", 500, "0-1-10,1-2-5")
    assert compare(("0-1-10,1-2-5", "bin.000002", 400), stream) == 0  # same GTIDs: offsets may differ
    assert compare(("0-1-9,1-2-5", "bin.000002", 400), stream) == -1  # the stream has numbered 0-1-10
    assert compare(("0-1-11,1-2-5", "bin.000002", 700), stream) == 1  # not read that far yet
    assert compare(("0-1-11,1-2-4", "bin.000002", 700), stream) == -1  # behind in one domain: stale
    assert compare((None, "bin.000002", 500), Position("bin.000002", 500, None)) == 0
    assert compare((None, "bin.000001", 900), Position("bin.000002", 4, None)) == -1


def test_text_protocol_values_render_as_the_binlog_path_does() -> None:
    tz = ZoneInfo("Etc/GMT-8")
    assert text_renderer("timestamp", 3, False, tz)("2024-01-01 00:00:00.500") == "2024-01-01 08:00:00.500"
    assert text_renderer("timestamp", 0, False, tz)("0000-00-00 00:00:00") == "0000-00-00 00:00:00"
    assert text_renderer("bit", 0, True)(b"\x01\x00") == "256"
    assert text_renderer("varbinary", 0, True)(b"\x00\xff") == "AP8="
    assert text_renderer("varbinary", 0, True, binary_format="hex")(b"\x00\xff") == "00ff"
    assert text_renderer("blob", 0, True, change=lambda v: v[:1])(b"\x00\xff") == "AA=="
    assert text_renderer("varchar", 0, False, change=lambda v: "***")("secret") == "***"
    image = ImageRenderer.of_text([("id", str), ("v", str)])
    assert image.row_json(["1", None]) == '[{"id":"1"},{"v":null}]'


def test_metrics_show_running_snapshots_and_their_rows(sandbox: Sandbox, unique_name: str, source_db: str) -> None:
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES " + ", ".join(f"({n})" for n in range(1, 61)))
    port = free_port()
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=ChannelDefaults(
        metrics_port=port, snapshot_chunk_rows=2, snapshot_chunk_seconds=0.01))
    with running(dc, unique_name):
        wait_status(port, "/readyz", 200)
        assert value(scrape(port), "gate_snapshot_tables", unique_name) == 0
        snap_id = request(sandbox.dc, unique_name, db, "t")
        deadline = time.monotonic() + 30
        while value(scrape(port), "gate_snapshot_tables", unique_name) != 1:
            assert time.monotonic() < deadline, "the gauge never showed the running snapshot"
            time.sleep(0.05)
        assert wait_finished(sandbox.dc, unique_name, snap_id) == ("done", None)
        time.sleep(0.5)
        figures = scrape(port)
    assert value(figures, "gate_snapshot_tables", unique_name) == 0
    assert value(figures, "gate_rows_written_total", unique_name, optype="SNAPSHOT") == 60
    assert value(figures, "gate_rows_written_total", unique_name, optype="SNAPSHOTSTART") == 1



def test_status_shows_the_sources_row_estimate_from_the_start(sandbox: Sandbox, unique_name: str, source_db: str,
                                                              gate: Callable[..., Any]) -> None:
    """rows_estimate is the source's information_schema TABLE_ROWS when the table's snapshot started (the DC
    has no such table), shown with a percentage while the snapshot runs and kept once it is done."""
    db = source_db
    with sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.execute("INSERT INTO t SELECT seq, REPEAT('x', 40) FROM seq_1_to_60000")
        cur.execute("ANALYZE TABLE t")
        cur.fetchall()
        cur.execute("SELECT table_rows FROM information_schema.tables WHERE table_schema = %s AND table_name = 't'",
                    (db,))
        estimate = int(cur.fetchone()[0])
    assert estimate > 0
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=ChannelDefaults(
        snapshot_chunk_rows=50, snapshot_chunk_seconds=0.01))

    def shown() -> tuple[dict[str, Any], str]:
        snapshots = json.loads(gate("--json", "snapshot", unique_name, "--status").stdout)["snapshots"]
        lines = gate("snapshot", unique_name, "--status").stdout.splitlines()
        assert len(snapshots) == 1 and len(lines) == 2
        return snapshots[0], lines[1]

    snap_id = request(sandbox.dc, unique_name, db, "t")
    row, line = shown()
    assert (row["state"], row["rows_done"], row["rows_estimate"]) == ("requested", 0, None)
    assert line.split()[4] == "0/?"
    with running(dc, unique_name):
        deadline = time.monotonic() + 60
        while not (row["state"] == "running" and row["rows_done"] > 0):
            assert row["state"] != "done", "the snapshot ended before --status saw it run"
            assert time.monotonic() < deadline, f"snapshot still {row} after 60 s"
            row, line = shown()
        assert row["rows_estimate"] == estimate
        cell = re.search(r"(\d+)/(\d+) (\d+)%", line)
        assert cell is not None, line
        done = int(cell[1])
        assert (int(cell[2]), int(cell[3])) == (estimate, 100 * done // estimate) and 0 < done < 60000
        assert wait_finished(sandbox.dc, unique_name, snap_id) == ("done", None)
    row, line = shown()
    assert (row["id"], row["state"], row["rows_done"], row["rows_estimate"]) == (snap_id, "done", 60000, estimate)
    assert line.split()[2:6] == ["done", "test", f"60000/{estimate}", str(row["chunks_done"])]


def test_keys_selected_as_bytes_page_in_the_columns_own_order(sandbox: Sandbox, unique_name: str,
                                                              source_db: str) -> None:
    """A UUID key and a latin1 key whose case-insensitive order is not their bytes' order, read in chunks of
    7: the pages compare the key as it is, so every row comes once, as the text of its INSERT row."""
    db = source_db
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=SMALL)
    words = [f"{c}{n:02d}é" for n in range(20) for c in ("a", "B", "c", "D")]
    with running(dc, unique_name), sandbox.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE uuidkey (u UUID PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO uuidkey SELECT UUID(), seq FROM seq_1_to_50")
        cur.execute("CREATE TABLE l1key (k VARCHAR(10) CHARACTER SET latin1 PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO l1key VALUES " + ", ".join(["(%s, %s)"] * len(words)),
                    [x for n, word in enumerate(words) for x in (word, n)])
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        ids = [request(sandbox.dc, unique_name, db, table) for table in ("uuidkey", "l1key")]
        for snap_id in ids:
            assert wait_finished(sandbox.dc, unique_name, snap_id) == ("done", None)
    rows = dc_rows(sandbox.dc, unique_name)
    for table, count in (("uuidkey", 50), ("l1key", len(words))):
        inserted = sorted(r[7] for r in rows if r[3] == table and r[6] == "INSERT")
        snapped = sorted(r[7] for r in rows if r[3] == table and r[6] == "SNAPSHOT")
        assert len(inserted) == count and snapped == inserted, table
    assert sorted(json.loads(r[7])["NEW"][0]["k"] for r in rows if r[3] == "l1key" and r[6] == "SNAPSHOT") == (
        sorted(words))
