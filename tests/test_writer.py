"""The writers' hand-built INSERT statements, against a real DC server: exact text back, split by size, and
rows larger than the DC's max_allowed_packet."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.admin.status import ChannelStatus, channel_status
from gate.capture.sequencer import DCRow
from gate.capture.writer import (
    FAR_REACH,
    GROUP_BYTES,
    GROUP_ROWS,
    INSERT,
    MAX_STATEMENT,
    _dc_session,
    _take,
    _write,
    insert_statements,
)
from gate.cli import main
from gate.common.dc import ChannelSettings, connect, create_channel
from gate.common.errors import RowTooLarge
from gate.devtools.sandbox import Sandbox
from tests.replay import make_channel, running, server_config, start_gate, wait_caught_up, wait_running

AWKWARD = ["", "'", "''", "\\", "\\'", "\\\\0", "\0", "a\0b", "\n\r\t\x1a", '"', "é🚀", "%s", "{}", "?", "`x`;",
           "\\N", "NULL", "--", "/*", "*/", "x" * 30000]


def test_awkward_text_comes_back_exactly_and_long_chunks_split(sandbox: Sandbox, unique_name: str) -> None:
    dc = server_config(sandbox.dc)
    with connect(dc, "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, server_config(sandbox.source)))
    rows = [(n + 1, 1, text[:64], f"t{n}", "2024-05-01 10:00:00", "h:1", "INSERT", f'{{"NEW":[{{"c":"{text}"}}]}}')
            for n, text in enumerate(AWKWARD * 40)]
    statements = insert_statements(rows)
    assert len(statements) > 1 and all(len(s) <= MAX_STATEMENT + 4000 for s in statements)
    session, _ = _dc_session(dc, unique_name)
    conn = session.conn
    try:
        with conn.cursor() as cur:  # a DC server configured without backslash escapes: the session undoes it
            cur.execute("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES')")
        conn.close()
        session, _ = _dc_session(dc, unique_name)
        conn = session.conn
        _write(session, rows)
        with conn.cursor() as cur:
            cur.execute("SELECT id, tid, dbname, tablename, DATE_FORMAT(create_time, '%Y-%m-%d %H:%i:%s'), "
                        "instance_name, optype, data FROM transfer_data ORDER BY id")
            assert list(cur.fetchall()) == rows
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = REPLACE(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES', '')")
        conn.close()


def _text_statements(rows: list[Any], max_packet: int, data_as_bytes: bool) -> list[str]:
    """The INSERTs as text, split as insert_statements splits them (at most about MAX_STATEMENT characters
    each, a statement of (max_packet - 1) // 4 characters always fitting; data the decoders give as UTF-8
    counted a character per byte): the model of what is sent."""
    def literal(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\0", "\\0") + "'"

    budget = min(MAX_STATEMENT, (max_packet - 1) // 4 - len(INSERT))
    statements: list[list[str]] = [[]]
    size = 0
    for r in rows:
        value = f"({r[0]},{r[1]},{','.join(literal(t) for t in r[2:])})"
        length = len(value) + (len(r[7].encode()) - len(r[7]) if data_as_bytes else 0)
        if statements[-1] and size + length > budget:
            statements.append([])
            size = 0
        statements[-1].append(value)
        size += length + 1
    return [INSERT + ",".join(values) for values in statements if values]


TEXTS = st.lists(st.sampled_from(["a", "é", "数", "🚀", "'", "\\", "\0", '"', "\n", "x" * 500, "🚀" * 60, "é" * 99]),
                 max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.tuples(TEXTS, st.sampled_from(["db", "dé", "d'b"]), st.sampled_from(["h:1", "hé🚀"]),
                                st.sampled_from(["INSERT", "DELETE"])), min_size=1, max_size=30),
       max_packet=st.sampled_from([1 << 30, 1 << 16, 4096, 1500, 700]), data_as_bytes=st.booleans())
def test_insert_statements_are_the_utf8_of_the_text_statements(texts: list[tuple[str, str, str, str]],
                                                               max_packet: int, data_as_bytes: bool) -> None:
    """The INSERTs are built as UTF-8 bytes (escaped in the bytes, sized in characters, data the decoders
    hand over as UTF-8 in bytes): they are the text statements encoded, split at the same rows; a row whose
    INSERT alone is more than the packet raises RowTooLarge with its size in bytes."""
    rows = [(n + 1, 7, db, f"t{n % 3}", "2024-05-01 10:00:00", instance, optype, text)
            for n, (text, db, instance, optype) in enumerate(texts)]
    want = [statement.encode() for statement in _text_statements(rows, max_packet, data_as_bytes)]
    given_rows = [(*r[:7], r[7].encode()) for r in rows] if data_as_bytes else rows
    too_large = [s for s in want if len(s) + 1 > max_packet]
    if too_large:
        with pytest.raises(RowTooLarge) as raised:
            insert_statements(given_rows, max_packet)
        assert raised.value.size == len(too_large[0])
    else:
        assert insert_statements(given_rows, max_packet) == want


def test_writer_sessions_are_set_up_and_tagged_in_one_query_each(sandbox: Sandbox, unique_name: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer has up to MAX_LANES DC sessions, set up at once over a link whose round trip may be long: each
    session's set-up and its tag (the session lock a standby's takeover finds it by) are one query, however
    many sessions the channel has (they used to try the tags one by one: the 24th session 24 more queries)."""
    import pymysql.connections

    from gate.capture.holder import SESSION_SLOTS
    from gate.capture.writer import MAX_LANES
    from gate.common.dc import lock_name

    assert SESSION_SLOTS >= 64 * MAX_LANES + 3  # every lane of the most writers, retention, heartbeat, sampler
    dc = server_config(sandbox.dc)
    with connect(dc, "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, server_config(sandbox.source)))
    asked: list[int] = []
    original = pymysql.connections.Connection.query

    def counted(self: pymysql.connections.Connection, sql: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(self.thread_id())
        return original(self, sql, *args, **kwargs)

    monkeypatch.setattr(pymysql.connections.Connection, "query", counted)
    sessions = [_dc_session(dc, unique_name)[0].conn for _ in range(24)]
    monkeypatch.undo()
    try:
        ids = sorted(session.thread_id() for session in sessions)
        assert sorted(asked) == ids  # one query each
        names = [f"{lock_name(unique_name)}:s{slot}" for slot in range(SESSION_SLOTS)]
        with sandbox.dc.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT " + ", ".join(["IS_USED_LOCK(%s)"] * len(names)), names)
            assert sorted(int(thread) for thread in cur.fetchone() if thread is not None) == ids
    finally:
        for session in sessions:
            session.close()


def test_a_lane_coming_free_takes_the_chunks_waiting_into_one_transaction() -> None:
    """Over a long round trip the lanes are busy and chunks queue: the next lane free takes them all (up to
    GROUP_ROWS rows, FAR_REACH times that from a far DC, and GROUP_BYTES bytes of data), whole, in their order,
    instead of one each (at 300 ms and 5,000 rows/s in 100-row transactions the queue grew behind 26 busy
    lanes); a writer's end (None) ends it after what it took."""
    import queue

    def chunk(seq: int, rows: int) -> tuple[int, list[tuple[int]], int]:
        return seq, [(seq * 100_000 + n,) for n in range(rows)], rows * 10

    inbox: queue.Queue[object] = queue.Queue()
    for seq in range(1, 6):
        inbox.put(chunk(seq, GROUP_ROWS // 4))
    group, last = _take(inbox)
    assert [seq for seq, _rows, _size in group] == [1, 2, 3, 4] and not last  # 4 chunks reach GROUP_ROWS
    assert group[2] == chunk(3, GROUP_ROWS // 4)
    inbox.put(None)
    group, last = _take(inbox)
    assert [seq for seq, _rows, _size in group] == [5] and last
    inbox.put(None)
    assert _take(inbox) == ([], True)
    for seq, size in enumerate([GROUP_BYTES // 2, GROUP_BYTES // 2, 1, GROUP_BYTES * 2, 1], start=6):  # wide rows
        inbox.put((seq, [(seq,)], size))
    assert [[seq for seq, _rows, _size in _take(inbox)[0]] for _ in range(3)] == [[6, 7], [8, 9], [10]]
    for seq in range(11, 18):  # a lane of a writer on a far DC takes FAR_REACH times the rows
        inbox.put(chunk(seq, GROUP_ROWS // 2))
    group, last = _take(inbox, GROUP_ROWS * FAR_REACH)
    assert [seq for seq, _rows, _size in group] == [11, 12, 13, 14, 15, 16] and not last


def _put_chunks(inbox: Any, put: Any, chunks: int, rows: int) -> None:
    """A main process's part: ``chunks`` chunks of ``rows`` rows of 200 bytes each (larger than the pipe), then
    2 s of work, as gate's main process goes on reading: the queue's feeder thread, which writes the chunks
    into the pipe, gets the interpreter only now and then (here every 20 ms)."""
    sys.setswitchinterval(0.02)
    for seq in range(1, chunks + 1):
        inbox.put((seq, [(seq * 100_000 + n, "x" * 200) for n in range(rows)], rows * 200))
    put.set()  # the puts have returned; the bytes are still on their way through the pipe
    until = time.monotonic() + 2.0
    while time.monotonic() < until:
        pass


def test_chunks_still_in_the_pipe_are_taken_into_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between processes a chunk counts as queued once put, while its bytes still cross the 64 KB pipe behind
    the one being read: the lane takes those too (a look at the pipe alone found one or two chunks). The wait
    for each is a second here, not QUEUED_WAIT: a loaded machine may hold the feeder back longer."""
    from gate.capture import writer
    from gate.common.process import _CTX

    monkeypatch.setattr(writer, "QUEUED_WAIT", 1.0)
    inbox, put = _CTX.Queue(maxsize=8), _CTX.Event()
    feeder = _CTX.Process(target=_put_chunks, args=(inbox, put, 6, 1_000))
    feeder.start()
    try:
        assert put.wait(30)
        group, last = _take(inbox)
        assert [seq for seq, _rows, _size in group] == [1, 2, 3, 4, 5, 6] and not last
        assert group[5][1][-1] == (600_999, "x" * 200)
    finally:
        feeder.join(10)


PACKET = 128 * 1024  # the DC's max_allowed_packet in the test below
COLUMNS = "id, tid, dbname, tablename, CAST(create_time AS CHAR), instance_name, optype, data"  # as DCRow


def status_of(config: Path, channel: str, *options: str) -> str:
    result = CliRunner().invoke(main, ["--config", str(config), *options, "status", channel, "--sample", "0"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.1)
    return found


def test_rows_against_a_small_max_allowed_packet_split_or_wait_loudly(make_sandbox: Callable[..., Sandbox],
                                                                      unique_name: str, tmp_path: Path) -> None:
    """A chunk too large for one INSERT goes as several; a single row too large stops the channel's
    checkpoint with an ERROR in the log and in 'gate status' (id, size, setting) until the DC's
    max_allowed_packet is raised, and then is written without restarting gate."""
    sb = make_sandbox(dc_args=(f"--max-allowed-packet={PACKET}",))
    name = unique_name
    dc = make_channel(sb.dc, sb.source, name)
    with sb.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE src")
        cur.execute("CREATE TABLE src.t (id INT PRIMARY KEY, v LONGTEXT)")
    gate = start_gate(tmp_path, sb.dc, name)
    wait_running(sb.dc, name, gate)
    texts = [f"{n:03d}" + "é" * 4000 for n in range(40)]  # 8 KB each: 320 KB in one transaction, one chunk
    with sb.source.connect() as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        for n, text in enumerate(texts):
            cur.execute("INSERT INTO src.t VALUES (%s, %s)", (n, text))
        cur.execute("COMMIT")
    assert wait_caught_up(sb.source, sb.dc, name, timeout=30) == (41, 2)  # CREATE TABLE, then the 40 rows
    with sb.dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {COLUMNS} FROM transfer_data WHERE id > 1 ORDER BY id")
        chunk = cur.fetchall()
    assert [(r[0], r[1], r[6], json.loads(r[7])) for r in chunk] == [
        (n + 2, 2, "INSERT", {"NEW": [{"id": str(n)}, {"v": text}]}) for n, text in enumerate(texts)]
    [whole] = insert_statements(list(chunk))  # what the writers sent before: one INSERT of 320 KB
    split = insert_statements(list(chunk), PACKET)
    assert len(whole) > PACKET and len(split) == 6 and all(len(s) < PACKET for s in split)  # bytes, as sent

    with sb.source.connect() as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO src.t VALUES (100, %s)", ("x" * 200_000,))  # row 42: no INSERT of it fits
        cur.execute("INSERT INTO src.t VALUES (101, 'after')")  # row 43, its own transaction

    def dc_status() -> ChannelStatus:
        return channel_status(dc, name, 0)

    [stuck] = wait_for(lambda: dc_status().stuck_rows, "stuck row in status")
    log_file = tmp_path / f"{name}.log"
    wait_for(lambda: " ERROR gate.capture.writer: " in log_file.read_text(), "ERROR in the log")
    assert dc_status().checkpoint_id == 41
    as_json = json.loads(status_of(tmp_path / "config.yaml", name, "--json"))
    as_text = status_of(tmp_path / "config.yaml", name)

    with sb.dc.connect() as conn, conn.cursor() as cur:
        cur.execute("SET GLOBAL max_allowed_packet = 1048576")
    assert wait_caught_up(sb.source, sb.dc, name, timeout=30) == (43, 4)
    with sb.dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {COLUMNS} FROM transfer_data WHERE id > 41 ORDER BY id")
        big, after = cur.fetchall()
        cur.execute("SELECT name FROM gate_meta WHERE name LIKE 'stuck%'")
        assert cur.fetchall() == ()
    assert (json.loads(big[7]), json.loads(after[7])) == ({"NEW": [{"id": "100"}, {"v": "x" * 200_000}]},
                                                          {"NEW": [{"id": "101"}, {"v": "after"}]})
    size = len(insert_statements([big])[0])
    message = (
        f"Channel '{name}': row id 42 does not fit the DC server's max_allowed_packet: its INSERT is {size} bytes "
        f"and the DC server {sb.dc.address} accepts packets of {PACKET} bytes. The checkpoint stays below id 42 "
        f"until it is written; gate retries it every 5 s. Raise max_allowed_packet on the DC server to at least "
        f"{size + 1} bytes, e.g. 'SET GLOBAL max_allowed_packet = 1048576;' and 'max_allowed_packet = 1048576' "
        "under [mysqld] in its my.cnf; gate's writers use the new value when they reconnect, within seconds, "
        "without a restart. gate's own connections set no client-side limit, but a client that reads the row "
        "needs one as large (e.g. the mariadb client's --max-allowed-packet).")
    assert stuck == {"id": 42, "bytes": size, "max_allowed_packet": PACKET, "since": stuck["since"],
                     "message": message}
    assert as_json["stuck_rows"] == [stuck] and as_json["checkpoint_id"] == 41
    assert re.search(r"^stuck_rows +1$", as_text, re.M)
    assert as_text.endswith(f"\n\nERROR since {stuck['since']} UTC: {message}\n")
    assert dc_status().stuck_rows == []
    gate.send_signal(signal.SIGTERM)
    assert gate.wait(timeout=30) == 0
    log = log_file.read_text()
    assert log.count(f" ERROR gate.capture.writer: {message}\n") == 1  # repeated once a minute while it lasts
    assert (f" INFO gate.capture.writer: Channel '{name}': row id 42 written, now that the DC server's max_allowed_packet "
            "is 1048576 bytes\n") in log


def test_stuck_row_notes_left_by_a_killed_gate_go_once_the_checkpoint_passes_them(sandbox: Sandbox,
                                                                                    unique_name: str) -> None:
    """A note at or below the checkpoint goes when gate starts; one above it with the checkpoint that passes it.
    Before, both stayed in gate_meta for ever."""
    db = f"{unique_name}_s"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))

    def insert(*ids: int) -> None:
        with sandbox.source.connect() as conn, conn.cursor() as cur:
            for row_id in ids:
                cur.execute(f"INSERT INTO `{db}`.t VALUES ({row_id})")
                conn.commit()

    def notes() -> list[str]:
        with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
            cur.execute("SELECT name FROM gate_meta WHERE name LIKE 'stuck\\_row:%' ORDER BY name")
            return [name for (name,) in cur.fetchall()]

    insert(1, 2, 3)
    with running(dc, unique_name):
        assert wait_caught_up(sandbox.source, sandbox.dc, unique_name) == (3, 3)
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:  # as a gate killed while they waited left them
        for row_id in (2, 5):
            cur.execute("INSERT INTO gate_meta (name, value) VALUES (%s, %s)", (
                f"stuck_row:{row_id}", json.dumps({"id": row_id, "bytes": 9, "max_allowed_packet": 8,
                                                   "since": "2026-01-01 00:00:00", "message": "too large"})))
    with running(dc, unique_name) as pipeline:
        wait_for(lambda: pipeline.stats.started, "the run's start")
        assert notes() == ["stuck_row:5"]  # row 2 is below the checkpoint (3): written
        insert(4, 5, 6)
        assert wait_caught_up(sandbox.source, sandbox.dc, unique_name) == (6, 6)
        assert notes() == []


def test_a_fenced_chunk_and_checkpoint_are_one_query_each_and_a_stale_epoch_writes_nothing(
        sandbox: Sandbox, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fence (the holder's epoch read LOCK IN SHARE MODE) travels in the same query as a writer's chunk
    and as a checkpoint (it used to be a round trip of its own before each); a deposed gate's chunk and
    checkpoint fail with Deposed and leave nothing, the COMMIT after the fence not run."""
    import pymysql.connections

    from gate.capture.holder import Fence
    from gate.common.dc import in_one_round_trip
    from gate.common.errors import Deposed

    dc = server_config(sandbox.dc)
    with connect(dc, "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, server_config(sandbox.source)))
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("REPLACE INTO gate_holder (singleton, epoch, host, pid, connection, since) VALUES "
                    "(1, 3, 'hostb', 42, 0, UTC_TIMESTAMP(6))")
        conn.commit()
    rows = [(n, 1, "db", "t", "2024-05-01 10:00:00", "h:1", "INSERT", f'{{"NEW":[{{"n":{n}}}]}}') for n in (1, 2, 3)]
    queries: list[str] = []
    original = pymysql.connections.Connection.query

    def counted(self: pymysql.connections.Connection, sql: str | bytes, *args: Any, **kwargs: Any) -> Any:
        queries.append(sql if isinstance(sql, str) else sql.decode())  # the writers send bytes
        return original(self, sql, *args, **kwargs)

    def checkpoint(cur: Any) -> None:
        cur.execute("UPDATE transfer_checkpoint SET id = 2, tid = 1")

    def state() -> tuple[list[int], tuple[int, int]]:
        with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM transfer_data ORDER BY id")
            ids = [int(i) for (i,) in cur.fetchall()]
            cur.execute("SELECT id, tid FROM transfer_checkpoint")
            return ids, tuple(int(v) for v in cur.fetchone())  # type: ignore[return-value]

    session, _ = _dc_session(dc, unique_name)
    conn = session.conn
    try:
        monkeypatch.setattr(pymysql.connections.Connection, "query", counted)
        _write(session, rows[:2], fence=Fence(unique_name, 3))
        in_one_round_trip(conn, checkpoint, Fence(unique_name, 3).guard())
        assert len(queries) == 2 and all(q.startswith("BEGIN") for q in queries)  # one query each
        assert state() == ([1, 2], (2, 1))
        queries.clear()
        with pytest.raises(Deposed, match=r"taken over by hostb pid 42 \(epoch 3\) while this gate \(epoch 2\)"):
            _write(session, rows[2:], fence=Fence(unique_name, 2))
        with pytest.raises(pymysql.err.OperationalError) as refused:
            in_one_round_trip(conn, lambda cur: cur.execute("UPDATE transfer_checkpoint SET id = 3, tid = 1"),
                              Fence(unique_name, 2).guard())
        with pytest.raises(Deposed):
            Fence(unique_name, 2).deposed(conn, refused.value)
        monkeypatch.undo()
        assert state() == ([1, 2], (2, 1))
    finally:
        conn.close()


def test_with_the_control_connections_round_trip_every_lane_connects_at_once_and_sets_up_with_its_first_chunk(
        sandbox: Sandbox, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over a slow link each round trip of the start-up counts: given the round trip gate's control connection
    measured (and the DC's max_allowed_packet), a writer opens all its lanes at once, before any chunk (they
    used to wait for the first session's set-up to measure it), and a session's set-up (character set,
    autocommit, UTC, its tag) goes at the head of its first transaction's query instead of a round trip of its
    own; after it the session has the server's packet size, its tag and autocommit off."""
    import pymysql.connections

    from gate.capture.holder import SESSION_SLOTS
    from gate.capture.writer import (
        FAR_REACH,
        FAR_RTT,
        MAX_LANES,
        PACKET_QUERY,
        QUEUED_PER_LANE,
        DcLink,
        WriterPool,
        lanes_for,
        reach_for,
    )
    from gate.common.dc import lock_name

    dc = server_config(sandbox.dc)
    with connect(dc, "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, server_config(sandbox.source)))
        with conn.cursor() as cur:
            cur.execute(PACKET_QUERY)
            packet = int(cur.fetchone()[0])
    link = DcLink(0.3, packet)
    assert lanes_for(link.rtt) == MAX_LANES

    pool = WriterPool(dc, unique_name, 2, link=link)
    assert reach_for(link.rtt) == FAR_REACH and reach_for(FAR_RTT - 0.001) == 1
    assert pool.capacity == 2 * QUEUED_PER_LANE * MAX_LANES * FAR_REACH  # chunks waiting: 12 a lane of a writer
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _connected(sandbox, unique_name) < 2 * MAX_LANES:
            time.sleep(0.05)
        assert _connected(sandbox, unique_name) == 2 * MAX_LANES  # before any chunk: no set-up sent yet
    finally:
        pool.close(graceful=False)

    queries: list[str] = []
    original = pymysql.connections.Connection.query

    def counted(self: pymysql.connections.Connection, sql: str | bytes, *args: Any, **kwargs: Any) -> Any:
        queries.append(sql if isinstance(sql, str) else sql.decode())  # the writers send bytes
        return original(self, sql, *args, **kwargs)

    session, seconds = _dc_session(dc, unique_name, link)
    try:
        assert seconds == 0.0 and session.setup is not None and session.max_packet == packet
        rows = [(1, 1, "db", "t", "2024-05-01 10:00:00", "h:1", "INSERT", '{"NEW":[{"c":"%s"}]}')]
        monkeypatch.setattr(pymysql.connections.Connection, "query", counted)
        _write(session, rows)
        monkeypatch.undo()
        assert len(queries) == 1 and queries[0].startswith("SET NAMES utf8mb4;SET autocommit = 0")
        assert "INSERT INTO transfer_data" in queries[0] and queries[0].endswith(";COMMIT")
        assert session.setup is None and session.max_packet == packet
        with session.conn.cursor() as cur:
            cur.execute("SELECT @@autocommit, @@time_zone, IS_USED_LOCK(CONCAT(%s, CONNECTION_ID() %% %s)) "
                        "= CONNECTION_ID()", (f"{lock_name(unique_name)}:s", SESSION_SLOTS))
            assert cur.fetchone() == (0, "+00:00", 1)
        with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, data FROM transfer_data")
            assert cur.fetchall() == ((1, '{"NEW":[{"c":"%s"}]}'),)
    finally:
        session.conn.close()


def test_the_reader_waits_while_the_bytes_in_flight_would_pass_flight_bytes(
        sandbox: Sandbox, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide rows are bounded in bytes, not only in chunks: a chunk that would bring the data handed to the
    writers and not yet committed past FLIGHT_BYTES waits for commits (here the DC holds the first chunk's
    INSERT back), and goes once there is room; one chunk alone always goes, however large."""
    import threading

    from gate.capture import writer
    from gate.capture.writer import WriterPool

    dc = server_config(sandbox.dc)
    with connect(dc, "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, server_config(sandbox.source)))
    monkeypatch.setattr(writer, "FLIGHT_BYTES", 1_500)

    def chunk(first: int) -> list[DCRow]:
        data = f'"{"x" * 398}"'
        return [(first + n, first + n, "db", "t", "2024-05-01 10:00:00", "h:1", "INSERT", data) for n in range(2)]

    holder = sandbox.dc.connect(unique_name)
    pool = WriterPool(dc, unique_name, 1)
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("SELECT * FROM transfer_data FOR UPDATE")  # its next-key lock holds inserts back
        pool.submit(1, chunk(1))
        assert pool.flight_bytes == 800
        second = threading.Thread(target=pool.submit, args=(2, chunk(3)))
        second.start()
        second.join(1.5)
        assert second.is_alive() and pool.in_flight == 1  # 1,600 bytes would pass the bound
        holder.commit()
        second.join(20)
        assert not second.is_alive() and pool.acks()[:1] == [1]  # committed before chunk 2 went
        pool.submit(3, [(5, 5, "db", "t", "2024-05-01 10:00:00", "h:1", "INSERT", f'"{"y" * 4_998}"')])  # waits for 2
        assert pool.flight_bytes == 5_000
        deadline = time.monotonic() + 20
        while pool.in_flight and time.monotonic() < deadline:
            pool.acks(timeout=0.5)
        assert pool.flight_bytes == 0
        with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, LENGTH(data) FROM transfer_data ORDER BY id")
            assert cur.fetchall() == ((1, 400), (2, 400), (3, 400), (4, 400), (5, 5_000))
    finally:
        pool.close(graceful=False)
        holder.close()


def _connected(sandbox: Sandbox, channel: str) -> int:
    """DC sessions connected to ``channel``'s database (the writers' lanes)."""
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.processlist WHERE db = %s", (channel,))
        return int(cur.fetchone()[0])
