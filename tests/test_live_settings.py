"""Source settings changed while gate runs: binlog_checksum is followed, binlog_row_metadata below FULL stops gate.

Each test has its own source and DC (SET GLOBAL would reach every other test's channel on a shared source).
The source's global settings change between workloads; the sessions that write after a change are new
connections, as the sessions of applications would be.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from gate.common.errors import RowMetadataMissing
from gate.devtools.sandbox import MariaDBServer, Sandbox
from tests.replay import (
    dc_rows,
    fresh_target,
    make_channel,
    replay,
    running,
    table_contents,
    wait_caught_up,
    wait_stopped,
)

TABLE = ("CREATE TABLE t (id INT UNSIGNED PRIMARY KEY, v VARCHAR(20) CHARACTER SET latin1, e ENUM('x','y'), "
         "s SET('a','b'), d DECIMAL(6,2))")


def _work(source: MariaDBServer, db: str, n: int) -> None:
    """Phase ``n`` on a new connection: one transaction inserting two rows (one with an id above 2^31),
    an update of the first, a delete of the second."""
    with source.connect(db) as conn, conn.cursor() as cur:
        conn.begin()
        cur.execute("INSERT INTO t VALUES (%s, %s, 'y', 'a,b', %s), (%s, NULL, 'x', '', -1.5)",
                    (10 * n + 1, f"w{n}é", n + 0.25, 3_000_000_000 + n))
        conn.commit()
        cur.execute("UPDATE t SET v = %s, e = 'x' WHERE id = %s", (f"u{n}", 10 * n + 1))
        cur.execute("DELETE FROM t WHERE id = %s", (3_000_000_000 + n,))


def _images(n: int) -> list[tuple[str, dict[str, Any]]]:
    """The DC rows (optype, data) of phase ``n``."""
    first = [{"id": str(10 * n + 1)}, {"v": f"w{n}é"}, {"e": "y"}, {"s": "a,b"}, {"d": f"{n}.25"}]
    updated = [{"id": str(10 * n + 1)}, {"v": f"u{n}"}, {"e": "x"}, {"s": "a,b"}, {"d": f"{n}.25"}]
    big = [{"id": str(3_000_000_000 + n)}, {"v": None}, {"e": "x"}, {"s": ""}, {"d": "-1.50"}]
    return [("INSERT", {"NEW": first}), ("INSERT", {"NEW": big}), ("UPDATE", {"NEW": updated, "OLD": first}),
            ("DELETE", {"OLD": big})]


def _set_global(source: MariaDBServer, setting: str, value: str) -> None:
    with source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"SET GLOBAL {setting} = %s", (value,))


def _checkpoint(dc: MariaDBServer, channel: str) -> tuple[int, int, str, int]:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT c.id, c.tid, r.log_file, r.log_pos FROM transfer_checkpoint c, gate_resume r")
        row = cur.fetchone()
        return int(row[0]), int(row[1]), str(row[2]), int(row[3])


def _binlog_event(source: MariaDBServer, kind: str, after: tuple[str, int]) -> tuple[str, int, int]:
    """(file, start, end) of the first event of type ``kind`` after binlog position ``after``."""
    with source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        for (name, *_rest) in cur.fetchall():
            if name < after[0]:
                continue
            cur.execute(f"SHOW BINLOG EVENTS IN '{name}'")
            for _log, pos, event_type, _sid, end, _info in cur.fetchall():
                if event_type == kind and (name, pos) >= after:
                    return name, int(pos), int(end)
    raise AssertionError(f"no {kind} event after {after}")


def _assert_captured(box: Sandbox, channel: str, db: str, phases: int) -> None:
    """The DC holds the CREATE TABLE and every phase's rows exactly, ids and tids gap-free, nothing above the
    checkpoint, and its fold equals the source."""
    rows = dc_rows(box.dc, channel)
    assert [(r[6], json.loads(r[7])) for r in rows[1:]] == [image for n in range(phases) for image in _images(n)]
    assert rows[0][6] == "CREATETABLE"
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    assert [r[1] for r in rows] == [1] + [2 + 3 * n + k for n in range(phases) for k in (0, 0, 1, 2)]
    assert _checkpoint(box.dc, channel)[:2] == (rows[-1][0], rows[-1][1])
    with fresh_target(box.dc, db) as target, box.source.connect() as source:
        replay(rows, target)
        assert table_contents(target, db) == table_contents(source, db)


def test_binlog_checksum_changed_while_gate_runs_is_followed_and_a_restart_resumes(
        make_sandbox: Callable[..., Sandbox], unique_name: str) -> None:
    """CRC32 -> NONE -> CRC32 while gate runs (the server rotates its binlog at each change and the new file's
    Format Description event says its checksum), then a restart under NONE from a position in a CRC32 file
    (the server refused it with error 1236 when gate did not announce that it reads checksums)."""
    box = make_sandbox()
    db = f"src_{unique_name}"
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    dc = make_channel(box.dc, box.source, unique_name, allow=(f"{db}.*",))
    with box.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute(TABLE)
    with running(dc, unique_name):
        _work(box.source, db, 0)
        wait_caught_up(box.source, box.dc, unique_name, timeout=20)
        _set_global(box.source, "binlog_checksum", "NONE")
        _work(box.source, db, 1)
        wait_caught_up(box.source, box.dc, unique_name, timeout=20)
        _set_global(box.source, "binlog_checksum", "CRC32")
        _work(box.source, db, 2)
        wait_caught_up(box.source, box.dc, unique_name, timeout=20)
    _assert_captured(box, unique_name, db, 3)
    # stopped inside a CRC32 file, which phase 3 continues; phase 4 goes to a file without checksums, and gate
    # connects under NONE: it reads both files in one go
    _work(box.source, db, 3)
    _set_global(box.source, "binlog_checksum", "NONE")
    _work(box.source, db, 4)
    with running(dc, unique_name):
        wait_caught_up(box.source, box.dc, unique_name, timeout=20)
        _set_global(box.source, "binlog_checksum", "CRC32")
        _work(box.source, db, 5)
        wait_caught_up(box.source, box.dc, unique_name, timeout=20)
    _assert_captured(box, unique_name, db, 6)


def test_binlog_row_metadata_minimal_while_gate_runs_stops_it_before_the_table_map(
        make_sandbox: Callable[..., Sandbox], unique_name: str) -> None:
    """MINIMAL table maps carry no column names (nor ENUM and SET labels): gate stops at the first one of a
    captured table, writes none of its rows, keeps the checkpoint before it, and stops there again on a restart
    (also once the setting is FULL again: the binlog keeps what was logged)."""
    box = make_sandbox()
    db = f"src_{unique_name}"
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
    dc = make_channel(box.dc, box.source, unique_name, allow=(f"{db}.*",))
    with box.source.connect(db) as conn, conn.cursor() as cur:
        cur.execute(TABLE)
    errors: list[str] = []
    with pytest.raises(RowMetadataMissing) as stopped:
        with running(dc, unique_name) as pipeline:
            _work(box.source, db, 0)
            wait_caught_up(box.source, box.dc, unique_name, timeout=20)
            with box.source.connect() as conn, conn.cursor() as cur:
                cur.execute("SHOW MASTER STATUS")
                before = cur.fetchone()[:2]
            _set_global(box.source, "binlog_row_metadata", "MINIMAL")
            _work(box.source, db, 1)
            wait_stopped(pipeline, 20)
    errors.append(str(stopped.value))
    _set_global(box.source, "binlog_row_metadata", "FULL")
    _work(box.source, db, 2)
    with pytest.raises(RowMetadataMissing) as again:
        with running(dc, unique_name) as pipeline:
            wait_stopped(pipeline, 20)
    errors.append(str(again.value))

    file, _start, end = _binlog_event(box.source, "Write_rows_v1", (before[0], before[1]))
    _tm_file, table_map, _tm_end = _binlog_event(box.source, "Table_map", (before[0], before[1]))
    message = (
        f"The binlog holds a table map of {db}.t without column names (its row event ends at binlog position "
        f"{file}:{end}): the source logged it with binlog_row_metadata below FULL (MINIMAL or NO_LOG), which "
        "leaves out the column names, ENUM and SET labels and primary key that gate needs to write the rows. Run "
        "SET GLOBAL binlog_row_metadata = 'FULL' (and binlog_row_metadata = FULL under [mysqld] in my.cnf). The "
        "transactions logged before that cannot be decoded, and gate stops at each of them: skip them one by one "
        "('gate channel skip', once gate stops with the checkpoint at the transaction's start), or all at once "
        f"by moving the channel with 'gate channel set-position {unique_name} "
        "--file FILE --pos POS' (the first transaction logged after the change back, see SHOW BINLOG EVENTS), "
        f"then snapshot the tables they changed ('gate snapshot {unique_name} --table {db}.t', and so on) so "
        "that the consumers' copy converges. Everything before this transaction is in the DC and checkpointed "
        f"(id=5 tid=4); gate stops here again until it is dealt with. To go on without it, run 'gate channel skip "
        f"{unique_name} --transaction ")
    assert [error.startswith(message) for error in errors] == [True, True], errors
    assert errors[0] == errors[1]
    rows = dc_rows(box.dc, unique_name)
    assert [(r[6], json.loads(r[7])) for r in rows[1:]] == _images(0)
    assert not [r for r in rows if "UNKNOWN_COL" in (r[7] or "")]
    cid, ctid, resume_file, resume_pos = _checkpoint(box.dc, unique_name)
    assert (cid, ctid) == (rows[-1][0], rows[-1][1]) == (5, 4)
    assert (resume_file, resume_pos) <= (file, table_map)
    with box.source.connect() as conn, conn.cursor() as cur:  # the way on once FULL is back: nothing invented
        cur.execute("SELECT @@global.binlog_row_metadata")
        assert cur.fetchone() == ("FULL",)

