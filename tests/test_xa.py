"""XA transactions: prepared rows reach the DC only with their XA COMMIT, as one transaction at the commit's
place, never after XA ROLLBACK; a restart or kill -9 between PREPARE and COMMIT loses nothing."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
import pytest

from gate.common.config import ChannelDefaults
from gate.common.errors import FailoverError
from gate.devtools.sandbox import MariaDBServer, Sandbox
from tests.replay import (
    dc_rows,
    make_channel,
    running,
    server_config,
    start_gate,
    wait_caught_up,
    wait_row,
    wait_running,
    wait_sampled,
)

PREPARED_AT, COMMITTED_AT = 1600000000, 1700000000  # source times given to the two phases (SET timestamp)


def _setup(source: MariaDBServer, db: str, *tables: str) -> None:
    with source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for table in tables:
            cur.execute(f"CREATE TABLE {db}.{table} (id INT PRIMARY KEY, v VARCHAR(10))")


def _sql(source: MariaDBServer, *statements: str) -> None:
    """Statements on a connection of their own (a prepared XA transaction outlives its session)."""
    with source.connect() as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _prepare(source: MariaDBServer, xid: str, *statements: str, at: int | None = PREPARED_AT) -> None:
    _sql(source, f"SET timestamp = {at or 'DEFAULT'}", f"XA START '{xid}'", *statements, f"XA END '{xid}'",
         f"XA PREPARE '{xid}'")


def _commit(source: MariaDBServer, xid: str, at: int | None = COMMITTED_AT, outcome: str = "COMMIT") -> None:
    """XA COMMIT (or ROLLBACK) from another session. The server detaches a prepared transaction from the
    session that prepared it after that session has gone, so for a moment the xid may be unknown."""
    spec = xid if "," in xid else f"'{xid}'"  # "0x61,0x62,7" is given as it is
    deadline = time.monotonic() + 10
    while True:
        try:
            return _sql(source, f"SET timestamp = {at or 'DEFAULT'}", f"XA {outcome} {spec}")
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != 1397 or time.monotonic() > deadline:  # XAER_NOTA: Unknown XID
                raise
            time.sleep(0.05)


def _rows(dc: MariaDBServer, channel: str) -> list[tuple[Any, ...]]:
    """id, tid, table, source unix time, optype, NEW image of every DC row."""
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid, tablename, UNIX_TIMESTAMP(create_time), optype, data FROM transfer_data "
                    "ORDER BY id")
        return [(i, t, table, int(ts), op, json.loads(data)["NEW"]) for i, t, table, ts, op, data in cur.fetchall()]


def _pending(dc: MariaDBServer, channel: str) -> list[tuple[Any, ...]]:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT xid, seq, tablename, optype, data, created FROM gate_xa_pending ORDER BY xid, seq")
        return [(*row[:4], json.loads(row[4]), row[5]) for row in cur.fetchall()]


def _checkpoint(dc: MariaDBServer, channel: str) -> tuple[int, int]:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid FROM transfer_checkpoint")
        return tuple(cur.fetchone())  # type: ignore[return-value]


def _new(n: int) -> list[dict[str, str]]:
    return [{"id": str(n)}, {"v": f"v{n}"}]


def _insert(db: str, table: str, *ids: int) -> str:
    return f"INSERT INTO {db}.{table} VALUES " + ", ".join(f"({n}, 'v{n}')" for n in ids)


def _xid(unique_name: str, name: str) -> str:
    return f"{unique_name}_{name}"  # the session's servers are shared: xids must not collide between tests


def _hex(xid: str) -> str:
    return f"X'{xid.encode().hex()}',X'',1"


def test_commit_after_prepare_numbers_the_rows_at_the_commit(sandbox: Sandbox, unique_name: str) -> None:
    db = f"src_{unique_name}"
    _setup(sandbox.source, db, "t")
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      defaults=ChannelDefaults(batch_rows=7, writers=2))
    a, again = _xid(unique_name, "a"), _xid(unique_name, "again")
    with running(dc, unique_name):
        _prepare(sandbox.source, a, _insert(db, "t", *range(1, 11)), f"UPDATE {db}.t SET v = 'x' WHERE id = 1")
        _sql(sandbox.source, f"SET timestamp = {PREPARED_AT + 1}", _insert(db, "t", 100))
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        assert _rows(sandbox.dc, unique_name) == [(1, 1, "t", PREPARED_AT + 1, "INSERT", _new(100))]
        assert [(seq, op) for _xid_, seq, _t, op, _d, _c in _pending(sandbox.dc, unique_name)] == [
            *((n, "INSERT") for n in range(1, 11)), (11, "UPDATE")]
        _commit(sandbox.source, a)
        _sql(sandbox.source, f"SET timestamp = {COMMITTED_AT + 1}", _insert(db, "t", 101))
        # the same xid used again at once: the checkpoint that passes the first use's commit must not
        # delete the second use's stored rows
        _prepare(sandbox.source, again, _insert(db, "t", 200))
        _commit(sandbox.source, again)
        _prepare(sandbox.source, again, _insert(db, "t", 201))
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        _commit(sandbox.source, again)
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert _rows(sandbox.dc, unique_name) == [
        (1, 1, "t", PREPARED_AT + 1, "INSERT", _new(100)),
        *((1 + n, 2, "t", COMMITTED_AT, "INSERT", _new(n)) for n in range(1, 11)),
        (12, 2, "t", COMMITTED_AT, "UPDATE", [{"id": "1"}, {"v": "x"}]),
        (13, 3, "t", COMMITTED_AT + 1, "INSERT", _new(101)),
        (14, 4, "t", COMMITTED_AT, "INSERT", _new(200)),
        (15, 5, "t", COMMITTED_AT, "INSERT", _new(201)),
    ]
    assert _checkpoint(sandbox.dc, unique_name) == (15, 5)
    assert _pending(sandbox.dc, unique_name) == []


def test_rollback_after_prepare_and_never_resolved_give_no_rows(sandbox: Sandbox, unique_name: str) -> None:
    db = f"src_{unique_name}"
    _setup(sandbox.source, db, "t")
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    rolled, hanging = _xid(unique_name, "rolled"), _xid(unique_name, "hanging")
    try:
        with running(dc, unique_name):
            _prepare(sandbox.source, rolled, _insert(db, "t", 1, 2))
            _prepare(sandbox.source, hanging, _insert(db, "t", 3))
            _commit(sandbox.source, rolled, outcome="ROLLBACK")
            _sql(sandbox.source, f"SET timestamp = {COMMITTED_AT}", _insert(db, "t", 4))
            wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        assert _rows(sandbox.dc, unique_name) == [(1, 1, "t", COMMITTED_AT, "INSERT", _new(4))]
        assert _checkpoint(sandbox.dc, unique_name) == (1, 1)  # past the unresolved PREPARE
        assert _pending(sandbox.dc, unique_name) == [
            (_hex(hanging), 1, "t", "INSERT", {"NEW": _new(3)}, PREPARED_AT)]
    finally:
        _commit(sandbox.source, hanging, outcome="ROLLBACK")


def test_one_phase_commit_and_filtered_xa_transactions(sandbox: Sandbox, unique_name: str) -> None:
    db = f"src_{unique_name}"
    _setup(sandbox.source, db, "t", "skip")
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), deny=(f"{db}.skip",))
    one, skipped = _xid(unique_name, "one"), _xid(unique_name, "skipped")
    with running(dc, unique_name):
        _sql(sandbox.source, f"SET timestamp = {COMMITTED_AT}", f"XA START '{one}'", _insert(db, "t", 1, 2),
             f"XA END '{one}'", f"XA COMMIT '{one}' ONE PHASE")
        _prepare(sandbox.source, skipped, _insert(db, "skip", 1))
        _commit(sandbox.source, skipped)
        _sql(sandbox.source, f"SET timestamp = {COMMITTED_AT + 1}", _insert(db, "t", 3))
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert _rows(sandbox.dc, unique_name) == [
        (1, 1, "t", COMMITTED_AT, "INSERT", _new(1)),
        (2, 1, "t", COMMITTED_AT, "INSERT", _new(2)),
        (3, 2, "t", COMMITTED_AT + 1, "INSERT", _new(3)),
    ]
    assert _pending(sandbox.dc, unique_name) == []


def test_prepared_rows_survive_a_restart_and_a_channel_of_an_older_gate(sandbox: Sandbox, unique_name: str) -> None:
    db = f"src_{unique_name}"
    _setup(sandbox.source, db, "t")
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    _sql(sandbox.dc, f"DROP TABLE IF EXISTS `{unique_name}`.gate_xa_pending")  # as a channel created before XA support
    x = _xid(unique_name, "x")
    with running(dc, unique_name):
        _prepare(sandbox.source, x, _insert(db, "t", 1, 2))
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert _rows(sandbox.dc, unique_name) == []
    assert [(xid, seq, data) for xid, seq, _t, _o, data, _c in _pending(sandbox.dc, unique_name)] == [
        (_hex(x), 1, {"NEW": _new(1)}), (_hex(x), 2, {"NEW": _new(2)})]
    _commit(sandbox.source, x)
    with running(dc, unique_name):
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert _rows(sandbox.dc, unique_name) == [(1, 1, "t", COMMITTED_AT, "INSERT", _new(1)),
                                              (2, 1, "t", COMMITTED_AT, "INSERT", _new(2))]
    assert _pending(sandbox.dc, unique_name) == []
    # a row stored under the xid that no PREPARE read from here on explains (as a start position moved
    # past an XA COMMIT leaves them) is not taken for a change of the xid's next use
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO gate_xa_pending VALUES (%s, 2, %s, 't', 'INSERT', %s, 0)",
                    (_hex(x), db, json.dumps({"NEW": _new(9)})))
    with running(dc, unique_name):
        _prepare(sandbox.source, x, _insert(db, "t", 3))
        _commit(sandbox.source, x)
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert _rows(sandbox.dc, unique_name)[2:] == [(3, 2, "t", COMMITTED_AT, "INSERT", _new(3))]
    assert _pending(sandbox.dc, unique_name) == []


def test_kill_9_between_prepare_and_commit_gives_the_uninterrupted_result(
        sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    db = f"src_{unique_name}"
    _setup(sandbox.source, db, "t")
    crashy, reference = f"{unique_name}_k", f"{unique_name}_r"
    defaults = ChannelDefaults(batch_rows=3, writers=2)
    make_channel(sandbox.dc, sandbox.source, crashy, allow=(f"{db}.*",), defaults=defaults)
    dc = make_channel(sandbox.dc, sandbox.source, reference, allow=(f"{db}.*",), defaults=defaults)
    k = _xid(unique_name, "k")
    gate = start_gate(tmp_path, sandbox.dc, crashy)
    wait_running(sandbox.dc, crashy, gate)
    _sql(sandbox.source, _insert(db, "t", 100))
    _prepare(sandbox.source, k, _insert(db, "t", *range(1, 8)))
    _sql(sandbox.source, _insert(db, "t", 101))
    wait_caught_up(sandbox.source, sandbox.dc, crashy)
    assert [r[0] for r in dc_rows(sandbox.dc, crashy)] == [1, 2]
    assert len(_pending(sandbox.dc, crashy)) == 7
    gate.send_signal(signal.SIGKILL)
    gate.wait()
    _sql(sandbox.source, _insert(db, "t", 102))
    _commit(sandbox.source, k)
    _sql(sandbox.source, _insert(db, "t", 103))
    gate = start_gate(tmp_path, sandbox.dc, crashy)
    wait_running(sandbox.dc, crashy, gate)
    try:
        wait_caught_up(sandbox.source, sandbox.dc, crashy)
    finally:
        gate.send_signal(signal.SIGTERM)
        assert gate.wait(timeout=60) == 0
    with running(dc, reference):
        wait_caught_up(sandbox.source, sandbox.dc, reference)
    got = dc_rows(sandbox.dc, crashy)
    assert got == dc_rows(sandbox.dc, reference)
    assert [(r[0], r[1], json.loads(r[7])["NEW"][0]["id"]) for r in got] == [
        (1, 1, "100"), (2, 2, "101"), (3, 3, "102"), *((3 + n, 4, str(n)) for n in range(1, 8)), (11, 5, "103")]
    assert _pending(sandbox.dc, crashy) == [] and _pending(sandbox.dc, reference) == []


def test_xid_text_is_what_the_xa_statements_in_the_binlog_name(sandbox: Sandbox, unique_name: str) -> None:
    """A binary xid with a branch qualifier and a format id: stored under the name its XA COMMIT uses."""
    db = f"src_{unique_name}"
    _setup(sandbox.source, db, "t")
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
    gtrid = unique_name.encode().hex()
    xid = f"0x{gtrid}ff,0x00ab,7"
    with running(dc, unique_name):
        _sql(sandbox.source, f"XA START {xid}", _insert(db, "t", 1), f"XA END {xid}", f"XA PREPARE {xid}")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        assert [r[0] for r in _pending(sandbox.dc, unique_name)] == [f"X'{gtrid}ff',X'00ab',7"]
        _commit(sandbox.source, xid, at=None)
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    assert [(r[0], r[1], r[5]) for r in _rows(sandbox.dc, unique_name)] == [(1, 1, _new(1))]
    assert _pending(sandbox.dc, unique_name) == []


def test_failover_between_prepare_and_commit(make_sandbox: Callable[..., Sandbox]) -> None:
    """The source commits a prepared transaction gate has stored, then dies before gate reads the commit:
    the standby's copy of the XA COMMIT numbers the stored rows, and the PREPARE it repeats is dropped."""
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    _setup(box.source, "shop", "t")
    box.wait_standby_caught_up()
    defaults = ChannelDefaults(standby_sample_seconds=0.3, failover_after_seconds=2.0, failover_margin_seconds=1.0)
    dc = make_channel(box.dc, box.source, "xafo", standby=server_config(box.standby), defaults=defaults)
    with running(dc, "xafo"):
        wait_sampled(box.dc, "xafo")
        time.sleep(2.5)  # the switch resumes at a sample older than the last transaction minus the margin
        _sql(box.source, _insert("shop", "t", 100))
        _prepare(box.source, "fo", _insert("shop", "t", 1, 2, 3), at=None)
        wait_caught_up(box.source, box.dc, "xafo")
    assert [r[0] for r in dc_rows(box.dc, "xafo")] == [1] and len(_pending(box.dc, "xafo")) == 3
    _commit(box.source, "fo", at=None)
    _sql(box.source, _insert("shop", "t", 101))
    box.wait_standby_caught_up()
    box.source.kill()
    with running(dc, "xafo"):
        wait_caught_up(box.standby, box.dc, "xafo", timeout=60)
    got = [(r[0], r[1], r[5], json.loads(r[7])["NEW"]) for r in dc_rows(box.dc, "xafo")]
    src, standby = box.source.address, box.standby.address
    assert got == [(1, 1, src, _new(100)), *((1 + n, 2, standby, _new(n)) for n in (1, 2, 3)),
                   (5, 3, standby, _new(101))]
    assert _pending(box.dc, "xafo") == []


def test_fingerprint_failover_over_an_xa_step_stops_loudly(make_sandbox: Callable[..., Sandbox]) -> None:
    """Fingerprint mode cannot match XA steps: rather than write them twice or drop them, the switch stops
    with an error that says why and what to do, and the DC keeps exactly what the source gave it."""
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    _setup(box.source, "shop", "t")
    box.wait_standby_caught_up()
    defaults = ChannelDefaults(standby_sample_seconds=0.3, failover_after_seconds=2.0, failover_margin_seconds=1.0)
    dc = make_channel(box.dc, box.source, "xafp", standby=server_config(box.standby), defaults=defaults,
                      failover_mode="fingerprint")
    with running(dc, "xafp"):
        wait_sampled(box.dc, "xafp")
        time.sleep(2.5)  # the switch resumes at a sample older than the last transaction minus the margin
        _sql(box.source, _insert("shop", "t", 100))
        _prepare(box.source, "fp", _insert("shop", "t", 1, 2), at=None)
        wait_caught_up(box.source, box.dc, "xafp")
    box.wait_standby_caught_up()
    box.source.kill()
    with pytest.raises(FailoverError, match=r"^Channel 'xafp' cannot finish its switch to .*an XA transaction step "
                                            r"\(PREPARE at .*fingerprint mode cannot tell.*failover_mode gtid\.$"):
        with running(dc, "xafp"):
            wait_row(box.dc, "xafp", "SELECT 1 FROM gate_switch", timeout=60)
            time.sleep(3)  # time to read the standby's binlog up to the XA step
    assert [(r[0], json.loads(r[7])["NEW"]) for r in dc_rows(box.dc, "xafp")] == [(1, _new(100))]
    assert len(_pending(box.dc, "xafp")) == 2


def test_source_killed_between_prepare_and_commit(make_sandbox: Callable[..., Sandbox]) -> None:
    """A prepared transaction outlives a crash of the source; its XA COMMIT then lies in the next binlog file."""
    box = make_sandbox()
    _setup(box.source, "shop", "t")
    dc = make_channel(box.dc, box.source, "xacrash")
    with running(dc, "xacrash"):
        _prepare(box.source, "crash", _insert("shop", "t", 1, 2))
        wait_caught_up(box.source, box.dc, "xacrash")
        box.source.kill()
        box.source.start()
        with box.source.connect() as conn, conn.cursor() as cur:
            cur.execute("XA RECOVER")
            assert [row[3] for row in cur.fetchall()] == [b"crash"]
        _commit(box.source, "crash")
        wait_caught_up(box.source, box.dc, "xacrash")
    assert _rows(box.dc, "xacrash") == [(1, 1, "t", COMMITTED_AT, "INSERT", _new(1)),
                                        (2, 1, "t", COMMITTED_AT, "INSERT", _new(2))]
    assert _pending(box.dc, "xacrash") == []
