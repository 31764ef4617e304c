"""Compressed binlogs (log_bin_compress) and event types gate does not read, on real servers; the
decompression of MariaDB's compressed events, on their bytes."""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pymysql
import pytest

from gate.capture.compressed import CompressedEventError, inflate_event, inflate_record
from gate.capture.libshim import Ctl, StreamFormat, raw_packet, rebuild_rows_event
from gate.capture.reader import EVENT_TYPES, BinlogReader, Commit, Position, Rows, current_position
from gate.capture.translate import TableFilter, Translator
from gate.common.errors import UnhandledEvent
from gate.devtools.sandbox import MariaDBServer, Sandbox
from tests.replay import (
    dc_rows,
    fresh_target,
    make_channel,
    replay,
    running,
    server_config,
    table_contents,
    wait_caught_up,
    wait_sampled,
    wait_stopped,
)
from tests.test_failover import FAST, SteadyLoad, _exact, _switches, _wait_switch
from tests.test_refusals import Gate, checkpoint, gtid_event_start, run_sql

COMPRESSED = ("--log-bin-compress=ON", "--log-bin-compress-min-len=10")

# Events of a MariaDB 10.11 binlog written with log_bin_compress=ON, log_bin_compress_min_len=10 (CRC32 on), for
# CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(100)); INSERT (1, REPEAT('x', 50)), (2, 'short');
# UPDATE v = 'z' WHERE id = 1; DELETE WHERE id = 2 (table id 18)
QUERY_165 = bytes.fromhex(
    "386f0b6ba501000000870000007402000000000500000001000000000000230000000000010100002054000000000603737464042d002d002d"
    "00810800000000000000008135789c730e72750c7155087174f2715548d12b51d0c84c51f0f40b510808f2f4750c8a54f0768dd451285308"
    "730c72f6700cd2303430d0d40400800a0dc47fea1cc6")
WRITE_166 = bytes.fromhex(
    "396f0b6ba601000000400000006a0300000000120000000000010002038145789cfbc3c8c0c060c4504132f8c304d4c8ca509c915f5402"
    "00d2971bd3e32e7b01")
UPDATE_167 = bytes.fromhex(
    "396f0b6ba7010000003c00000045050000000012000000000001000203038141789cfbc3c8c0c060c4504132f803d2c8c850050065ee1a"
    "1812d15608")
DELETE_168 = bytes.fromhex(
    "396f0b6ba8010000003700000032060000000012000000000001000203810c789cfbc3c4c0c0c0ca509c915f54020012990334b1b1b19e")


def _row(id_: int, v: bytes) -> bytes:
    """A row of d.t in a v1 row event: its null bitmap (no NULLs; MariaDB sets the unused bits), INT id,
    VARCHAR(100) utf8mb4 (2 length bytes)."""
    return b"\xfc" + struct.pack("<iH", id_, len(v)) + v


def _event(compressed: bytes, type_code: int, body: bytes, checksum: bool = True) -> bytes:
    """``compressed``'s header with ``type_code`` and the new length, then ``body`` (and its CRC32)."""
    event = compressed[:4] + bytes([type_code]) + compressed[5:9] + struct.pack("<I", 19 + len(body) + 4 * checksum) \
        + compressed[13:19] + body
    return event + struct.pack("<I", zlib.crc32(event)) if checksum else event


def test_compressed_row_events_inflate_to_the_row_events_they_compress() -> None:
    post_header = b"\x12\x00\x00\x00\x00\x00\x01\x00" + b"\x02"  # table id 18, STMT_END_F; 2 columns
    assert inflate_event(WRITE_166, None, True) == _event(
        WRITE_166, 23, post_header + b"\x03" + _row(1, b"x" * 50) + _row(2, b"short"))
    assert inflate_event(UPDATE_167, None, True) == _event(
        UPDATE_167, 24, post_header + b"\x03\x03" + _row(1, b"x" * 50) + _row(1, b"z"))
    assert inflate_event(DELETE_168, None, True) == _event(DELETE_168, 25, post_header + b"\x03" + _row(2, b"short"))
    # the v2 form (169-171): a 10-byte post-header whose last 2 bytes give the length of a variable header
    v2 = WRITE_166[:4] + b"\xa9" + WRITE_166[5:27] + b"\x04\x00\xaa\xbb" + WRITE_166[27:-4]
    lengths = bytes(168) + b"\x0a"  # the format description's post-header lengths: 10 for type 169
    assert inflate_event(v2, lengths, False) == _event(
        v2, 30, post_header[:8] + b"\x04\x00\xaa\xbb" + post_header[8:] + b"\x03" + _row(1, b"x" * 50)
        + _row(2, b"short"), checksum=False)


def test_a_compressed_query_event_inflates_to_its_query_event() -> None:
    event = inflate_event(QUERY_165, None, True)
    text = b"CREATE TABLE d.t (id INT PRIMARY KEY, v VARCHAR(100))"
    head = QUERY_165[:QUERY_165.index(bytes.fromhex("8135789c"))]  # before the record: header 0x81, length 0x35
    assert event == _event(QUERY_165, 2, head[19:] + text)


def test_compressed_records_of_each_length_size_and_the_damaged_ones() -> None:
    for size, data in ((1, b"a" * 200), (2, b"b" * 300), (3, bytes(range(256)) * 300), (4, b"c" * 20)):
        record = bytes([0x80 | size]) + len(data).to_bytes(size, "big") + zlib.compress(data)
        assert inflate_record(record) == data
    good = b"\x81\x05" + zlib.compress(b"short")
    for record, reason in [
        (b"", "the compressed record is empty"),
        (b"\x01\x05" + good[2:], "its record header byte 0x01 lacks the compressed flag (0x80)"),
        (b"\x91\x05" + good[2:], "it names compression algorithm 1; MariaDB defines only 0 (zlib)"),
        (b"\x85\x05" + good[2:], "its record header byte 0x85 gives no valid uncompressed length"),
        (b"\x81\x06" + good[2:], "it inflates to 5 bytes where its header says 6"),
        (good[:-3], "its zlib stream is damaged (Error -5 while decompressing data: incomplete or truncated stream)"),
    ]:
        with pytest.raises(CompressedEventError) as err:
            inflate_record(record)
        assert str(err.value) == reason
    with pytest.raises(CompressedEventError, match="^it ends before its compressed record$"):
        inflate_event(WRITE_166[:29], None, False)


def _workload(conn: pymysql.Connection, db: str) -> None:
    """Inserts, updates and deletes of many types (long rows and rows under 10 bytes), INSERT ... SELECT, an
    ALTER, a CREATE TABLE and a large transaction."""
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, name VARCHAR(200), price DECIMAL(10,2), born DATE, "
                    "seen DATETIME(3), at TIMESTAMP(6) NULL, span TIME(2), f FLOAT, d DOUBLE, big BIGINT UNSIGNED, "
                    "bits BIT(12), colour ENUM('red','green'), tags SET('a','b','c'), doc JSON, data BLOB, "
                    "bin VARBINARY(20), y YEAR, l1 TEXT CHARACTER SET latin1)")
        cur.execute(f"CREATE TABLE {db}.s (id TINYINT PRIMARY KEY)")  # rows of 2 bytes: never compressed
        for n in range(1, 41):
            cur.execute(f"INSERT INTO {db}.t VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                        "%s, %s)", (
                            n, f"name {n} " + "ü" * (n % 7), f"{n * 3.25:.2f}", f"2024-0{n % 9 + 1}-1{n % 10}",
                            f"2023-12-31 23:59:{n % 60:02d}.123", f"2024-05-01 10:00:{n % 60:02d}.000250",
                            f"-{n}:30:15.5", n / 7, n / 9, 2**64 - n, n * 37 % 4096, ("red", "green")[n % 2],
                            "a,c" if n % 3 else "", json.dumps({"n": n, "list": [1, "x"]}), bytes(range(n % 20)),
                            bytes([n, 0, 255]), 1990 + n, "caf\xe9 " * (n % 4)))
            cur.execute(f"INSERT INTO {db}.s VALUES ({n})")
        conn.commit()
        cur.execute(f"UPDATE {db}.t SET name = CONCAT(name, ' updated'), price = price + 1 WHERE id % 3 = 0")
        cur.execute(f"UPDATE {db}.s SET id = id + 100 WHERE id < 5")
        cur.execute(f"DELETE FROM {db}.t WHERE id % 5 = 0")
        cur.execute(f"CREATE TABLE {db}.u (id INT PRIMARY KEY, ref INT, note TEXT)")
        cur.execute(f"INSERT INTO {db}.u SELECT id + 1000, id, name FROM {db}.t WHERE id % 2 = 0")
        cur.execute(f"ALTER TABLE {db}.t ADD COLUMN extra VARCHAR(30) DEFAULT 'filled in by the alter'")
        cur.execute(f"UPDATE {db}.t SET extra = CONCAT('row ', id) WHERE id < 20")
        conn.begin()
        cur.execute(f"UPDATE {db}.t SET f = f * 2, doc = JSON_SET(doc, '$.twice', true)")
        cur.execute(f"DELETE FROM {db}.u WHERE ref > 30")
        cur.execute(f"DELETE FROM {db}.s WHERE id > 30")
        conn.commit()


def _event_types(server: MariaDBServer, start: Position) -> set[str]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{start.log_file}' FROM {start.log_pos}")
        return {row[2] for row in cur.fetchall()}


def _both_ways(server: MariaDBServer, start: Position, end: Position, db: str) -> list[str]:
    """The row texts of ``db``'s row events between ``start`` and ``end``, decoded by the library and by the
    compiled decoders (asserted equal), as a decoder process rebuilds each event from its bytes."""
    reader = BinlogReader(server_config(server), 4343, start)
    library = Translator(ZoneInfo("UTC"), "base64", TableFilter())
    compiled = Translator(ZoneInfo("UTC"), "base64", TableFilter(), compiled=True)
    texts: list[str] = []
    for item in reader:
        if type(item) is Rows and item.event.schema == db:
            fmt = StreamFormat.of(reader.stream)
            raw, table = raw_packet(item.event), item.event.table_map[item.event.table_id]
            by_library = library.rows(Rows(item.optype, rebuild_rows_event(raw, table, fmt, Ctl(fmt))))
            by_compiled = compiled.rows(Rows(item.optype, rebuild_rows_event(raw, table, fmt, Ctl(fmt))))
            assert by_library == by_compiled
            assert compiled._decoder(item.event) is not None  # the compiled form, not its fallback to the library
            texts += [change[3] for change in by_library]
        if type(item) is Commit and (item.position.log_file, item.position.log_pos) >= (end.log_file, end.log_pos):
            reader.stop()
    return texts


def test_a_compressed_binlog_gives_the_rows_of_an_uncompressed_one(sandbox: Sandbox, unique_name: str) -> None:
    """The same workload on the source without and with log_bin_compress: the same DC rows (the source's
    times aside), every compressed type met, and the library and the compiled decoders agree on them."""
    db = f"src_{unique_name}"
    runs: dict[str, list[tuple[Any, ...]]] = {}
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@log_bin_compress, @@log_bin_compress_min_len")
        before = cur.fetchone()
        try:
            cur.execute("SET GLOBAL log_bin_compress_min_len = 10")
            for compress in ("OFF", "ON"):
                cur.execute(f"SET GLOBAL log_bin_compress = {compress}")
                channel = f"{unique_name}_{compress}"
                dc = make_channel(sandbox.dc, sandbox.source, channel, allow=(f"{db}.*",))
                start = current_position(server_config(sandbox.source))
                with running(dc, channel):
                    _workload(conn, db)
                    wait_caught_up(sandbox.source, sandbox.dc, channel)
                end = current_position(server_config(sandbox.source))
                rows = dc_rows(sandbox.dc, channel)
                runs[compress] = [r[:4] + r[5:] for r in rows]  # all but the source's time
                types = _event_types(sandbox.source, start)
                compressed = {"Query_compressed", "Write_rows_compressed_v1", "Update_rows_compressed_v1",
                              "Delete_rows_compressed_v1"}
                assert types & compressed == (compressed if compress == "ON" else set())
                assert {"Write_rows_v1", "Update_rows_v1", "Delete_rows_v1"} <= types  # rows under 10 bytes
                if compress == "ON":
                    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
                    changes = [r[7] for r in rows if r[6] in ("INSERT", "UPDATE", "DELETE")]
                    assert _both_ways(sandbox.source, start, end, db) == changes
                    with fresh_target(sandbox.dc, db) as target:
                        replay(rows, target)
                        assert table_contents(target, db) == table_contents(conn, db)
                cur.execute(f"DROP DATABASE {db}")
        finally:
            cur.execute("SET GLOBAL log_bin_compress = %s, GLOBAL log_bin_compress_min_len = %s", before)
    assert runs["ON"] == runs["OFF"]
    optypes = [r[5] for r in runs["ON"]]
    assert {o: optypes.count(o) for o in set(optypes)} == {
        "CREATETABLE": 3, "ALTERTABLE": 1, "INSERT": 40 + 40 + 16, "UPDATE": 13 + 4 + 16 + 32, "DELETE": 8 + 4 + 14}


def test_failover_to_a_standby_with_a_compressed_binlog(make_sandbox: Callable[..., Sandbox]) -> None:
    """Source and standby both write compressed binlogs; the switch drops what the DC holds by fingerprints
    (row images read from the standby's compressed events) and goes on exactly."""
    box = make_sandbox(with_standby=True, source_args=COMPRESSED)
    assert box.standby is not None
    dc = make_channel(box.dc, box.source, "fo", standby=server_config(box.standby), failover_mode="fingerprint",
                      defaults=FAST)
    start = current_position(server_config(box.standby))
    load = SteadyLoad(box, "shop")
    with running(dc, "fo"):
        wait_sampled(box.dc, "fo")
        load.start()
        time.sleep(3.0)
        box.source.kill()
        load.stop.set()
        load.join()
        _wait_switch(box, "fo", timeout=FAST.failover_after_seconds + 10)
        with box.standby.connect() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO shop.t0 (id, name) VALUES (1000000, 'after the switch, a long enough row')")
        wait_caught_up(box.standby, box.dc, "fo", timeout=60)
    assert _switches(box, "fo") == [(box.source.address, box.standby.address)]
    assert {"Write_rows_compressed_v1", "Query_compressed"} <= _event_types(box.standby, start)
    rows = _exact(box, "fo", box.standby, "shop")
    assert rows[-1][5] == box.standby.address and rows[0][5] == box.source.address
    assert json.loads(rows[-1][7])["NEW"][:2] == [{"id": "1000000"}, {"name": "after the switch, a long enough row"}]


def test_an_event_type_gate_does_not_read_refuses_its_transaction_and_skip_passes_exactly_it(
        gate: Gate, sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    """A session logs LOAD DATA as a statement: Begin_load_query and Execute_load_query, which gate does not read
    (the library drops them silently). Read right after complete transactions still in flight, gate writes and
    checkpoints them, stops at the LOAD DATA transaction's start (again when restarted), and 'gate channel skip'
    passes exactly it: the fold is the source but for the loaded rows."""
    db, channel = f"src_{unique_name}", unique_name
    run_sql(sandbox.source, "", [f"CREATE DATABASE {db}"])
    dc = make_channel(sandbox.dc, sandbox.source, channel, allow=(f"{db}.*",))
    csv = tmp_path / "rows.csv"
    csv.write_text("1,loaded one\n2,loaded two\n")
    # the whole workload is in the binlog before gate starts: the refused event arrives right after the
    # complete transactions, before any of them is written
    run_sql(sandbox.source, db, ["CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                                 "CREATE TABLE o (id INT PRIMARY KEY, v VARCHAR(20))",
                                 "INSERT INTO t VALUES (100, 'before')", "INSERT INTO o VALUES (1, 'other, before')"])
    with sandbox.source.connect(db, local_infile=True) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_format = 'STATEMENT'")
        cur.execute(f"LOAD DATA LOCAL INFILE '{csv}' INTO TABLE t FIELDS TERMINATED BY ','")
        conn.commit()
        cur.execute("SELECT @@last_gtid")
        gtid = cur.fetchone()[0]
    run_sql(sandbox.source, db, ["INSERT INTO t VALUES (200, 'after')", "UPDATE o SET v = 'after' WHERE id = 1"])
    file, start, end = gtid_event_start(sandbox.source, gtid)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SHOW BINLOG EVENTS IN '{file}' FROM {start}")
        load_at = next(row[1] for row in cur.fetchall() if row[2] == "Begin_load_query")
    message = (
        f"The source's binlog holds a Begin_load_query event (type 17) at {file}:{load_at}, and gate does not know "
        "what it changes, so it stops there rather than pass it by. See the event with 'mariadb-binlog "
        f"--read-from-remote-server --verbose --start-position={load_at} {file}' and turn off the server setting "
        "or feature that wrote it (the sources page of gate's documentation lists what gate reads), or run a gate "
        "that reads it. Everything before this transaction is in the DC and checkpointed (id=4 tid=4); gate stops "
        f"here again until it is dealt with. To go on without it, run 'gate channel skip {channel} --transaction "
        f"{gtid}': it moves the channel past exactly this transaction (from {file}:{start}) and writes a SKIPPED row "
        "naming it; its changes are then missing from the DC, and a snapshot ('gate snapshot "
        f"{channel} --table DB.TABLE') brings the consumers' copy of the table level with the source.")
    before = [(1, 1, "t", "CREATETABLE"), (2, 2, "o", "CREATETABLE"), (3, 3, "t", "INSERT"), (4, 4, "o", "INSERT")]
    for _ in range(2):  # a restart stops at the same transaction
        with pytest.raises(UnhandledEvent) as refused, running(dc, channel) as pipeline:
            wait_stopped(pipeline, timeout=30)
        assert str(refused.value) == message
        assert [(r[0], r[1], r[3], r[6]) for r in dc_rows(sandbox.dc, channel)] == before
        assert checkpoint(sandbox.dc, channel) == (4, 4, file, start)

    done = gate("channel", "skip", channel, "--transaction", gtid)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == (f"channel {channel}: skipped transaction {gtid} ({file}:{start} to {file}:{end}); "
                           "SKIPPED row(s) 5\n")
    with running(dc, channel):
        wait_caught_up(sandbox.source, sandbox.dc, channel)
    rows = dc_rows(sandbox.dc, channel)
    assert [(r[0], r[1], r[3], r[6]) for r in rows] == [
        *before, (5, 5, "", "SKIPPED"), (6, 6, "t", "INSERT"), (7, 7, "o", "UPDATE")]  # ids gap-free
    assert rows[4][2] == ""  # the refused event names no table: one SKIPPED row without one
    skipped = json.loads(rows[4][7])["SKIPPED"]
    assert skipped == {"transaction": gtid, "gtid": gtid, "from": f"{file}:{start}", "to": f"{file}:{end}",
                       "tables": [], "error": "UnhandledEvent", "reason": skipped["reason"]}
    assert skipped["reason"].startswith(message[:message.index(" Everything before")])
    with fresh_target(sandbox.dc, db) as target, sandbox.source.connect() as conn:
        replay(rows, target)
        folded, source = table_contents(target, db), table_contents(conn, db)
    assert folded["o"] == source["o"] and source["o"][1:] == [(1, "after")]
    assert folded["t"] == [source["t"][0], (100, "before"), (200, "after")]  # the source's but for the LOAD DATA
    assert source["t"][1:] == [(1, "loaded one"), (2, "loaded two"), (100, "before"), (200, "after")]


def test_an_event_gate_does_not_read_between_transactions_is_passed_alone_by_set_position(
        gate: Gate, sandbox: Sandbox, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An event of a type gate does not read between transactions (here Binlog_checkpoint, made unknown):
    gate writes and checkpoints every transaction before it, stops naming the set-position that passes the
    event alone, and after that command goes on with nothing lost."""
    db, channel = f"src_{unique_name}", unique_name
    run_sql(sandbox.source, "", [f"CREATE DATABASE {db}"])
    dc = make_channel(sandbox.dc, sandbox.source, channel, allow=(f"{db}.*",))
    monkeypatch.delitem(EVENT_TYPES, 161)
    run_sql(sandbox.source, db, ["CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
                                 "INSERT INTO t VALUES (1, 'before')"])
    boundary = current_position(server_config(sandbox.source))
    run_sql(sandbox.source, db, ["FLUSH BINARY LOGS", "INSERT INTO t VALUES (2, 'after')"])
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        new_file = cur.fetchall()[-1][0]
        cur.execute(f"SHOW BINLOG EVENTS IN '{new_file}'")
        event = next(row for row in cur.fetchall() if row[2] == "Binlog_checkpoint")
    with pytest.raises(UnhandledEvent) as refused, running(dc, channel) as pipeline:
        wait_stopped(pipeline, timeout=30)
    assert str(refused.value) == (
        f"The source's binlog holds an unknown event (type 161) at {new_file}:{event[1]}, and gate does not "
        "know what it changes, so it stops there rather than pass it by. See the event with 'mariadb-binlog "
        f"--read-from-remote-server --verbose --start-position={event[1]} {new_file}' and turn off the server "
        "setting or feature that wrote it (the sources page of gate's documentation lists what gate reads), or run "
        "a gate that reads it. It lies between transactions, and everything before it is in the DC and checkpointed "
        f"(id=2 tid=2, at {boundary.describe()}); gate stops at it again until it is dealt with. To go on without "
        f"the event, run 'gate channel set-position {channel} --file {new_file} --pos {event[4]}' (its end): the "
        "binlog holds no transaction between the checkpoint and there, so the channel passes that event alone.")
    assert checkpoint(sandbox.dc, channel) == (2, 2, boundary.log_file, boundary.log_pos)
    moved = gate("channel", "set-position", channel, "--file", new_file, "--pos", str(event[4]))
    assert moved.exit_code == 0, moved.stderr
    monkeypatch.undo()
    with running(dc, channel):  # the server may log the new file's Binlog_checkpoint again after the INSERT: the
        deadline = time.monotonic() + 30  # checkpoint, not the binlog's end, says the INSERT is in
        while checkpoint(sandbox.dc, channel)[:2] != (3, 3):
            assert time.monotonic() < deadline, checkpoint(sandbox.dc, channel)
            time.sleep(0.05)
    rows = dc_rows(sandbox.dc, channel)
    assert [(r[0], r[1], r[6]) for r in rows] == [(1, 1, "CREATETABLE"), (2, 2, "INSERT"), (3, 3, "INSERT")]
    with fresh_target(sandbox.dc, db) as target, sandbox.source.connect() as conn:
        replay(rows, target)
        folded, source = table_contents(target, db), table_contents(conn, db)
    assert folded == source and source["t"][1:] == [(1, "before"), (2, "after")]
