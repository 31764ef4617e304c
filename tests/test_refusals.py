"""The way past a refused transaction: gate stops at a transaction it cannot capture (a session's
statement-format INSERT, a session's MINIMAL row image) with everything before it written and checkpointed,
'gate channel skip' moves the channel past exactly that transaction with a SKIPPED row, and gate goes on."""

from __future__ import annotations

import itertools
import json
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from gate.admin.skip import transaction_end
from gate.common.config import ChannelDefaults
from gate.common.errors import SkipRefused
from gate.devtools.sandbox import MariaDBServer, Sandbox
from tests.replay import (
    dc_rows,
    fresh_target,
    make_channel,
    replay,
    start_gate,
    table_contents,
    wait_caught_up,
    wait_running,
)

Gate = Callable[..., Result]
_server_ids = itertools.count(7300)

# (scenario, table of the refused change, the refused transaction's statements, what the error begins with)
SCENARIOS = [
    ("statement", "a",
     ["SET SESSION binlog_format = 'MIXED'", "INSERT INTO a VALUES (4, 'refused', NULL)"],
     "{db}.a changed by a statement (INSERT) logged as text at binlog position "),
    ("minimal", "a",
     ["SET SESSION binlog_row_image = 'MINIMAL'", "BEGIN", "UPDATE a SET v = 'refused' WHERE id = 1",
      "UPDATE a SET v = 'refused too' WHERE id = 2", "COMMIT"],
     "A row event of {db}.a ending at binlog position "),
]


def run_sql(server: MariaDBServer, db: str, statements: list[str]) -> Any:
    """Run ``statements`` in one session; returns @@last_gtid after them (the GTID of its last transaction)."""
    with server.connect(db) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        cur.execute("SELECT @@last_gtid")
        return cur.fetchone()[0]


def checkpoint(dc: MariaDBServer, channel: str) -> tuple[int, int, str, int]:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT c.id, c.tid, r.log_file, r.log_pos FROM transfer_checkpoint c, gate_resume r")
        return cur.fetchone()


def gtid_event_start(source: MariaDBServer, gtid: str) -> tuple[str, int, int]:
    """(file, start, end) of the transaction ``gtid`` in the source's binlog: its Gtid event's position, and
    the end of its Xid (or XA PREPARE) event."""
    with source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cur.fetchall()]
        for file in files:
            cur.execute(f"SHOW BINLOG EVENTS IN '{file}'")
            events = cur.fetchall()
            for at, event in enumerate(events):
                if event[2] == "Gtid" and event[5].split()[-1] == gtid:
                    end = next(e[4] for e in events[at:] if e[2] in ("Xid", "XA_prepare"))
                    return file, event[1], end
    raise AssertionError(f"no transaction {gtid} in the source's binlog")


@pytest.mark.parametrize(("scenario", "table", "refused", "error"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_a_refused_transaction_is_skipped_exactly(gate: Gate, sandbox: Sandbox, unique_name: str, tmp_path: Path,
                                                  scenario: str, table: str, refused: list[str], error: str) -> None:
    db = channel = unique_name
    run_sql(sandbox.source, "", [f"CREATE DATABASE {db}"])
    make_channel(sandbox.dc, sandbox.source, channel, allow=(f"{db}.*",), server_id=next(_server_ids))
    # the whole workload is in the binlog before gate starts: it reads the refused transaction right after
    # the complete ones, before any checkpoint
    run_sql(sandbox.source, db, ["CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(40), b BLOB)",
                                 "CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(40))",
                                 "INSERT INTO a VALUES (1, 'one', 'x'), (2, 'two', 'y')",
                                 "INSERT INTO b VALUES (1, 'other table, before')"])
    gtid = run_sql(sandbox.source, db, refused)
    run_sql(sandbox.source, db, ["INSERT INTO a VALUES (3, 'after', 'z')", "UPDATE b SET v = 'after' WHERE id = 1"])
    file, start, end = gtid_event_start(sandbox.source, gtid)

    first = start_gate(tmp_path, sandbox.dc, channel)
    assert first.wait(timeout=60) == 1
    log = (tmp_path / f"{channel}.log").read_text()
    assert "error: " + error.format(db=db) in log
    assert (f"Everything before this transaction is in the DC and checkpointed (id=5 tid=4); gate stops here "
            f"again until it is dealt with. To go on without it, run 'gate channel skip {channel} --transaction "
            f"{gtid}': it moves the channel past exactly this transaction (from {file}:{start}) and writes a SKIPPED "
            "row naming it; its changes are then missing from the DC, and a snapshot ('gate snapshot "
            f"{channel} --table {db}.a') brings the consumers' copy of the table level with the source.\n") in log
    assert [(row[0], row[1], row[3], row[6]) for row in dc_rows(sandbox.dc, channel)] == [
        (1, 1, "a", "CREATETABLE"), (2, 2, "b", "CREATETABLE"), (3, 3, "a", "INSERT"), (4, 3, "a", "INSERT"),
        (5, 4, "b", "INSERT")]
    assert checkpoint(sandbox.dc, channel) == (5, 4, file, start)
    status = json.loads(gate("--json", "status", channel, "--sample", "0").stdout)
    assert status["stopped_by"]["transaction"]["name"] == gtid and status["skipped"] == []
    text = gate("status", channel, "--sample", "0").stdout
    assert re.search(rf"^refused_transaction +{gtid} at {file}:{start}$", text, re.M), text

    wrong = gate("channel", "skip", channel, "--transaction", "0-1-999999")
    assert wrong.exit_code == 1
    assert (f"error: Channel '{channel}' stopped at transaction {gtid}, not 0-1-999999: gate skips only the "
            f"transaction it stopped at. Run 'gate channel skip {channel} --transaction {gtid}' to skip that "
            "one.\n") == wrong.stderr
    done = gate("channel", "skip", channel, "--transaction", gtid)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == (f"channel {channel}: skipped transaction {gtid} ({file}:{start} to {file}:{end}); "
                           "SKIPPED row(s) 6\n")
    assert checkpoint(sandbox.dc, channel) == (6, 5, file, end)
    again = gate("channel", "skip", channel, "--transaction", gtid)  # nothing left to skip
    assert again.exit_code == 1 and "did not stop at a transaction it refused" in again.stderr

    second = start_gate(tmp_path, sandbox.dc, channel)
    wait_running(sandbox.dc, channel, second)
    wait_caught_up(sandbox.source, sandbox.dc, channel)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
    rows = dc_rows(sandbox.dc, channel)
    assert [row[0] for row in rows] == list(range(1, 9))  # ids gap-free
    skipped = rows[5]
    assert skipped[1:4] + skipped[6:7] == (5, db, "a", "SKIPPED")
    assert json.loads(skipped[7])["SKIPPED"] == {
        "transaction": gtid, "gtid": gtid, "from": f"{file}:{start}", "to": f"{file}:{end}",
        "tables": [{"dbname": db, "tablename": "a"}],
        "error": {"statement": "StatementFormatChange", "minimal": "PartialRowImage"}[scenario],
        "reason": json.loads(skipped[7])["SKIPPED"]["reason"]}
    assert json.loads(skipped[7])["SKIPPED"]["reason"].startswith(error.format(db=db))
    assert [(row[1], row[3], row[6]) for row in rows[6:]] == [(6, "a", "INSERT"), (7, "b", "UPDATE")]
    status = json.loads(gate("--json", "status", channel, "--sample", "0").stdout)
    assert status["stopped_by"] is None
    assert [(s["transaction"], s["start"], s["end"], s["ids"], s["tables"]) for s in status["skipped"]] == [
        (gtid, f"{file}:{start}", f"{file}:{end}", [6], [f"{db}.a"])]
    text = gate("status", channel, "--sample", "0").stdout
    assert "skipped transactions (their changes are not in the DC; each has SKIPPED rows):" in text

    # the fold is the source except exactly the skipped transaction's changes
    target = fresh_target(sandbox.dc, db)
    try:
        replay(rows, target)
        folded = table_contents(target, db)
    finally:
        with target.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        target.close()
    with sandbox.source.connect() as conn:
        source = table_contents(conn, db)
    without = [(1, "one", b"x"), (2, "two", b"y"), (3, "after", b"z")]  # no row 4, no v = 'refused'
    assert folded["b"] == source["b"]
    assert folded["a"] == [source["a"][0], *without]
    assert source["a"][1:] != without  # the source has the skipped transaction's changes


def event(kind: str, end: int, info: str) -> tuple[str, int, str, int, int, str]:
    """A SHOW BINLOG EVENTS row (its start is not read)."""
    return ("mysql-bin.000001", 0, kind, 1, end, info)


def test_transaction_end_is_the_end_of_its_group_in_the_servers_decoding() -> None:
    begin = [event("Gtid", 400, "BEGIN GTID 0-1-7"), event("Annotate_rows", 450, "UPDATE a SET v = 1"),
             event("Table_map", 500, "table_id: 30 (d.a)"), event("Update_rows_v1", 560, "table_id: 30 flags: STMT_END_F")]
    assert transaction_end([*begin, event("Xid", 591, "COMMIT /* xid=12 */"), event("Gtid", 633, "GTID 0-1-8")],
                           "0-1-7") == 591
    assert transaction_end([*begin, event("Query", 620, "COMMIT")], "0-1-7") == 620  # a non-transactional table
    assert transaction_end([event("Gtid", 400, "BEGIN GTID 0-1-7"), event("Query", 480, "INSERT INTO a VALUES (4)"),
                            event("Xid", 511, "COMMIT /* xid=9 */")], "0-1-7") == 511  # a statement in a group
    assert transaction_end([event("Gtid", 400, "GTID 0-1-9"), event("Query", 470, "CREATE TABLE c (id INT)"),
                            event("Gtid", 512, "GTID 0-1-10")], "0-1-9") == 470  # a statement of its own
    assert transaction_end(begin, "0-1-7") is None  # its end is not read yet
    assert transaction_end([], "0-1-7") is None
    with pytest.raises(SkipRefused, match=r"^The source's binlog holds Gtid 'BEGIN GTID 0-1-7' where transaction "
                                          r"0-1-6 should start"):
        transaction_end(begin, "0-1-6")


# (scenario, what comes before the refused transaction, its statements, what follows it): the refused
# transactions that wedged a channel. 3 MB of wide rows before the refused event: their first decoder jobs
# (256 KiB each) are numbered before gate reads it, so with batch_rows 5 chunks of the refused group reach the
# writers, or gate_xa_pending.
WIDE = "INSERT INTO a SELECT seq, REPEAT(UUID(), 200) FROM seq_2_to_401"
WEDGES = [
    ("larger than batch_rows", [],
     ["SET SESSION binlog_format = 'MIXED'", "BEGIN", WIDE, "UPDATE a SET v = 'x' WHERE id = 1", "COMMIT"], []),
    ("first in a binlog file", ["FLUSH BINARY LOGS"],
     ["SET SESSION binlog_format = 'MIXED'", "UPDATE a SET v = 'x' WHERE id = 1"], []),
    ("an XA PREPARE", [],
     ["SET SESSION binlog_format = 'MIXED'", "XA START 'x1'", WIDE, "UPDATE a SET v = 'x' WHERE id = 1",
      "XA END 'x1'", "XA PREPARE 'x1'", "XA COMMIT 'x1'"], []),
]


@pytest.mark.parametrize(("scenario", "before", "refused", "after"), WEDGES, ids=[w[0] for w in WEDGES])
def test_a_refused_transaction_never_wedges_the_channel(gate: Gate, sandbox: Sandbox, unique_name: str,
                                                        tmp_path: Path, scenario: str, before: list[str],
                                                        refused: list[str], after: list[str]) -> None:
    """The refused group leaves no row above the checkpoint and none in gate_xa_pending, its end is found in
    whatever binlog file it lies, and the skip removes rows a crashed run left above the checkpoint."""
    db = channel = unique_name
    run_sql(sandbox.source, "", [f"CREATE DATABASE {db}"])
    make_channel(sandbox.dc, sandbox.source, channel, allow=(f"{db}.*",), server_id=next(_server_ids),
                 defaults=ChannelDefaults(batch_rows=5))
    run_sql(sandbox.source, db, ["CREATE TABLE a (id INT PRIMARY KEY, v TEXT)", "INSERT INTO a VALUES (1, 'one')"])
    run_sql(sandbox.source, "", before)
    run_sql(sandbox.source, db, refused)
    run_sql(sandbox.source, db, [*after, "INSERT INTO a VALUES (1000, 'after')"])

    first = start_gate(tmp_path, sandbox.dc, channel)
    assert first.wait(timeout=60) == 1
    status = json.loads(gate("--json", "status", channel, "--sample", "0").stdout)
    name = status["stopped_by"]["transaction"]["name"]
    assert [(row[0], row[6]) for row in dc_rows(sandbox.dc, channel)] == [(1, "CREATETABLE"), (2, "INSERT")]
    with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM gate_xa_pending")
        assert cur.fetchone()[0] == 0 or scenario == "an XA PREPARE"
        cur.execute("INSERT INTO transfer_data (id, tid, dbname, tablename, create_time, instance_name, optype, "
                    "data) VALUES (3, 3, 'x', 'y', NOW(), 'z', 'INSERT', '{}')")  # left by a crashed run
        conn.commit()
    done = gate("channel", "skip", channel, "--transaction", name)
    assert done.exit_code == 0, done.stderr
    file, _start, end = gtid_event_start(sandbox.source, name)
    assert checkpoint(sandbox.dc, channel) == (3, 3, file, end)

    second = start_gate(tmp_path, sandbox.dc, channel)
    wait_running(sandbox.dc, channel, second)
    wait_caught_up(sandbox.source, sandbox.dc, channel)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
    rows = dc_rows(sandbox.dc, channel)
    assert [(row[0], row[1], row[6]) for row in rows] == [
        (1, 1, "CREATETABLE"), (2, 2, "INSERT"), (3, 3, "SKIPPED"), (4, 4, "INSERT")]
    target = fresh_target(sandbox.dc, db)
    try:
        replay(rows, target)
        assert table_contents(target, db)["a"][1:] == [(1, "one"), (1000, "after")]
    finally:
        with target.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        target.close()
