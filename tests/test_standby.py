"""A channel's gate on several "hosts" (separate `gate run` processes, each with its own working folder and
config): a standby takes the channel over when the active one is killed, stopped (SIGSTOP) or cut off from
the DC (a black-holed link), and the deposed one lands nothing after that (fencing). Whatever happens, the
DC's ids and tids are gap-free and its fold equals the source."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pymysql
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gate.common.config import ChannelDefaults
from gate.common.dc import drop_channel
from gate.devtools.sandbox import MariaDBServer, Sandbox, free_port
from gate.devtools.workload import RandomWorkload
from tests.linkproxy import LinkProxy
from tests.replay import (
    GATE,
    STARTED,
    config_yaml,
    dc_rows,
    fresh_target,
    make_channel,
    replay,
    server_config,
    table_contents,
    wait_caught_up,
    wait_row,
    wait_sampled,
)

LEASE = 2.0  # lease_seconds of the tests' channels
BOUND = 10.0  # seconds a takeover may take after the active gate dies or goes silent


def _host(tmp_path: Path, name: str, dc: MariaDBServer, channel: str, *args: str, port: int | None = None,
          user: str = "root") -> subprocess.Popen[bytes]:
    """``gate run CHANNEL --no-check ARGS`` as host ``name``: its own folder, config and log, its own process
    group (so that SIGSTOP stops its writers too); ``port``: the DC through a proxy there."""
    home = tmp_path / name
    home.mkdir(exist_ok=True)
    config = home / "config.yaml"
    text = config_yaml(dc, user)
    config.write_text(text if port is None else text.replace(f"port: {dc.port}", f"port: {port}"))
    log = open(home / "gate.log", "ab")
    gate = subprocess.Popen([GATE, "--config", str(config), "run", channel, "--no-check", *args], stdout=log,
                            stderr=log, cwd=home, start_new_session=True)
    STARTED.append(gate)
    return gate


def _gate(tmp_path: Path, *args: str) -> str:
    """A gate command's output, with host a's config."""
    return subprocess.run([GATE, "--config", str(tmp_path / "a" / "config.yaml"), *args], check=True,
                          capture_output=True, text=True).stdout


def _metrics(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {family.name: [(sample.labels, sample.value) for sample in family.samples]
            for family in text_string_to_metric_families(text)}


def _log(tmp_path: Path, name: str) -> str:
    return (tmp_path / name / "gate.log").read_text()


def _holder(dc: MariaDBServer, channel: str) -> tuple[int, int] | None:
    """The channel's (epoch, pid) in gate_holder."""
    with dc.connect(channel) as conn, conn.cursor() as cur:
        if not cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = "
                           "'gate_holder'", (channel,)):
            return None
        cur.execute("SELECT epoch, pid FROM gate_holder")
        row = cur.fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def _channel_exists(dc: MariaDBServer, channel: str) -> bool:
    """Whether the channel's database exists."""
    with dc.connect() as conn, conn.cursor() as cur:
        return bool(cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (channel,)))


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not so after {timeout} s"
        time.sleep(0.02)


def _wait_holder(dc: MariaDBServer, channel: str, pids: set[int], timeout: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _holder(dc, channel)
        if found is not None and found[1] in pids:
            return found
        time.sleep(0.05)
    raise AssertionError(f"none of {pids} holds {channel} after {timeout} s (holder: {_holder(dc, channel)})")


def _load(source: MariaDBServer, db: str, transactions: int, pace: float = 0.01) -> threading.Thread:
    """Random transactions (inserts, updates, deletes, some DDL) in a thread, ``pace`` seconds apart."""

    def run() -> None:
        with source.connect() as conn:
            work = RandomWorkload(conn, db, seed=3, ddl_every=50)
            work.setup()
            for _ in range(transactions):
                work.run(1)
                time.sleep(pace)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _assert_exact(sandbox: Sandbox, channel: str, db: str, kept: str | None = None) -> None:
    """Ids and tids gap-free, and the fold of the DC's rows equal to the source's tables; ``kept``: a table of
    the channel that holds the rows retention removed, counted with them."""
    wait_caught_up(sandbox.source, sandbox.dc, channel, timeout=60)
    rows = dc_rows(sandbox.dc, channel)
    if kept is not None:
        with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, tid, dbname, tablename, create_time, instance_name, optype, data FROM {kept}")
            rows = sorted([*cur.fetchall(), *rows])
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    tids = sorted({r[1] for r in rows})
    assert tids == list(range(1, len(tids) + 1))
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)
    target = fresh_target(sandbox.dc, db)
    try:
        replay(rows, target)
        with sandbox.source.connect() as source:
            assert table_contents(target, db) == table_contents(source, db)
    finally:
        with target.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        target.close()


def _stop(gate: subprocess.Popen[bytes]) -> int:
    gate.send_signal(signal.SIGTERM)
    return gate.wait(timeout=60)


@pytest.fixture
def channel(sandbox: Sandbox, unique_name: str) -> str:
    make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"src_{unique_name}.*",),
                 defaults=ChannelDefaults(lease_seconds=LEASE, batch_rows=200, writers=2, snapshot_chunk_rows=100,
                                          snapshot_chunk_seconds=0.01))
    return unique_name


def _snapshot(dc: MariaDBServer, channel: str) -> tuple[str, int]:
    """The state of the channel's snapshot and its rows at or below the checkpoint."""
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT state, rows_done FROM gate_snapshot")
        state, done = cur.fetchone()
    return state, int(done)


SLOW_SNAPSHOT = """CREATE TRIGGER slow_snapshot AFTER INSERT ON transfer_data FOR EACH ROW
  IF SUBSTRING_INDEX(USER(), '@', 1) = 'gate_a' AND NEW.optype = 'SNAPSHOT' THEN DO SLEEP(0.003); END IF"""
# gate_a's snapshot rows are slow (the 3,000 rows of 100-row chunks land in 0.2 s otherwise): it is killed in the
# middle of the snapshot whatever the machine's load


def test_kill_9_of_the_active_gate_one_of_two_racing_standbys_takes_over_exactly(
        sandbox: Sandbox, channel: str, tmp_path: Path) -> None:
    """... while it snapshots a table: the new holder continues the snapshot from its last stored chunk."""
    db = f"src_{channel}"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.old (id INT PRIMARY KEY, v VARCHAR(40))")
        cur.executemany(f"INSERT INTO {db}.old VALUES (%s, %s)", [(i, f"row {i}") for i in range(3000)])
    _audited(sandbox.dc, channel, [SLOW_SNAPSHOT])
    active = _host(tmp_path, "a", sandbox.dc, channel, user="gate_a")
    _wait_holder(sandbox.dc, channel, {active.pid}, 30)
    _gate(tmp_path, "snapshot", channel, "--table", f"{db}.old")
    ports = {name: free_port() for name in "bc"}
    standbys = {gate.pid: gate for gate in (
        _host(tmp_path, name, sandbox.dc, channel, "--standby", "--metrics-port", str(ports[name])) for name in "bc")}
    names = dict(zip(standbys, "bc", strict=True))
    load = _load(sandbox.source, db, 300)
    _wait(lambda: _snapshot(sandbox.dc, channel)[0] == "running" and _snapshot(sandbox.dc, channel)[1] > 0, 30)
    active.kill()
    killed = time.monotonic()
    assert active.wait() == -signal.SIGKILL
    epoch, winner = _wait_holder(sandbox.dc, channel, set(standbys), BOUND)
    assert time.monotonic() - killed < BOUND
    load.join()
    _wait(lambda: _snapshot(sandbox.dc, channel) == ("done", 3000), 60)  # continued by the new holder
    loser = next(pid for pid in standbys if pid != winner)
    assert standbys[loser].poll() is None  # still standing by
    with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT pid, standby, from_pid, reason FROM gate_takeover WHERE epoch = %s", (epoch,))
        pid, by_standby, from_pid, reason = cur.fetchone()
        cur.execute("SELECT pid, role FROM gate_process ORDER BY pid")
        roles = dict(cur.fetchall())
    assert (pid, by_standby, from_pid) == (winner, 1, active.pid)
    assert f"pid {active.pid} ended without a clean stop" in reason
    assert roles == {winner: "active", loser: "standby"}
    host = os.uname().nodename
    status = json.loads(_gate(tmp_path, "--json", "status", channel, "--sample", "0"))
    assert [(g["role"], g["pid"]) for g in status["gates"]] == [("active", winner), ("standby", loser)]
    assert [(t["pid"], t["standby"], t["from_pid"]) for t in status["takeovers"]] == [
        (active.pid, False, None), (winner, True, active.pid)]
    text = _gate(tmp_path, "status", channel, "--sample", "0")
    rows = [line.split()[:3] for line in text.splitlines()]
    assert ["active", host, str(winner)] in rows and ["standby", host, str(loser)] in rows
    assert "gates (the active one runs the channel; standbys take it over):" in text
    assert "takeovers by a standby (UTC):" in text and "ended without a clean stop" in text
    listed = next(row for row in json.loads(_gate(tmp_path, "--json", "channel", "list")) if row["channel"] == channel)
    assert listed["standing_by"] == [f"{host}/{loser}"] and listed["gate"]["pid"] == winner
    assert listed["last_takeover"]["from_pid"] == active.pid
    assert _metrics(ports[names[loser]])["gate_standing_by"] == [({"channel": channel}, 1)]
    _wait(lambda: _metrics(ports[names[winner]])["gate_standby_gates"] == [({"channel": channel}, 1)], 30)
    figures = _metrics(ports[names[winner]])  # its heartbeat counted the loser's (every lease / 5)
    assert figures["gate_holder_epoch"] == [({"channel": channel}, epoch)]
    [(labels, took)] = figures["gate_takeover_timestamp_seconds"]
    assert labels == {"channel": channel, "from_gate": f"{host} pid {active.pid}"} and time.time() - took < 60
    # a clean stop of the winner hands the channel to the other standby at once
    assert _stop(standbys[winner]) == 0
    _wait_holder(sandbox.dc, channel, {loser}, BOUND)
    with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT reason FROM gate_takeover ORDER BY epoch DESC LIMIT 1")
        assert cur.fetchone()[0] == f"{os.uname().nodename} pid {winner} had stopped cleanly"
    assert _stop(standbys[loser]) == 0
    _assert_exact(sandbox, channel, db)
    rows = [r for r in dc_rows(sandbox.dc, channel) if r[3] == "old" and r[6].startswith("SNAPSHOT")]
    assert [r[6] for r in rows if r[6] != "SNAPSHOT"] == ["SNAPSHOTSTART", "SNAPSHOTEND"]  # not started again
    assert sorted(int(json.loads(r[7])["NEW"][0]["id"]) for r in rows if r[6] == "SNAPSHOT") == list(range(3000))


AUDIT = [
    "CREATE TABLE audit (seq BIGINT AUTO_INCREMENT PRIMARY KEY, who VARCHAR(80), what VARCHAR(20), id BIGINT)",
    # gate_a's rows are slow (4 ms each): its writers are nearly always inside a transaction when it is stopped
    """CREATE TRIGGER audit_rows AFTER INSERT ON transfer_data FOR EACH ROW BEGIN
         INSERT INTO audit (who, what, id) VALUES (SUBSTRING_INDEX(USER(), '@', 1), 'row', NEW.id);
         IF SUBSTRING_INDEX(USER(), '@', 1) = 'gate_a' THEN DO SLEEP(0.004); END IF;
       END""",
    """CREATE TRIGGER audit_removals AFTER DELETE ON transfer_data FOR EACH ROW
         INSERT INTO audit (who, what, id) VALUES (SUBSTRING_INDEX(USER(), '@', 1), 'delete', OLD.id)""",
    """CREATE TRIGGER audit_checkpoints AFTER UPDATE ON transfer_checkpoint FOR EACH ROW
         INSERT INTO audit (who, what, id) VALUES (SUBSTRING_INDEX(USER(), '@', 1), 'checkpoint', NEW.id)""",
]


def _audited(dc: MariaDBServer, channel: str, triggers: list[str] = AUDIT) -> None:
    """DC users gate_a and gate_b for the two hosts (each may end the other's connections: CONNECTION ADMIN),
    and ``triggers``: by default those that log who wrote each row, removed one, or moved the checkpoint, in
    the same transaction."""
    with dc.connect(channel) as conn, conn.cursor() as cur:
        for user in ("gate_a", "gate_b"):
            cur.execute(f"CREATE USER IF NOT EXISTS '{user}'@'%'")
            cur.execute(f"GRANT ALL ON `{channel}`.* TO '{user}'@'%'")
            cur.execute(f"GRANT CONNECTION ADMIN ON *.* TO '{user}'@'%'")
        for statement in triggers:
            cur.execute(statement)


def _audit(dc: MariaDBServer, channel: str) -> list[tuple[int, str, str, int]]:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT seq, who, what, id FROM audit ORDER BY seq")
        return list(cur.fetchall())


def _assert_fenced(dc: MariaDBServer, channel: str) -> None:
    """Nothing of gate_a (rows, removals, checkpoints) after gate_b's first write, and gate_b did write."""
    audit = _audit(dc, channel)
    first_b = next(seq for seq, who, _, _ in audit if who == "gate_b")
    late = [entry for entry in audit if entry[1] == "gate_a" and entry[0] > first_b]
    assert late == []
    assert any(who == "gate_a" and what == "row" for _, who, what, _ in audit)


@contextmanager
def _general_log(dc: MariaDBServer) -> Iterator[None]:
    """The DC's general log into mysql.general_log for the block: every statement, rolled back or not."""
    with dc.connect() as conn, conn.cursor() as cur:
        cur.execute("TRUNCATE mysql.general_log")
        cur.execute("SET GLOBAL log_output = 'TABLE', general_log = 1")
        try:
            yield
        finally:
            cur.execute("SET GLOBAL general_log = 0")


def _late_statements(dc: MariaDBServer) -> list[tuple[str, str]]:
    """The queries gate_a sent after gate_b's first row that write (INSERT, UPDATE, DELETE, REPLACE) and do
    not begin with the fence's guard, even those that failed or were rolled back (the general log, which
    holds a multi-statement query once, as sent). One that begins with the guard runs nothing after it once
    the epoch is another one (test_writer.py checks that on its own)."""
    with dc.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT MIN(event_time) FROM mysql.general_log WHERE user_host LIKE 'gate\\_b%' AND "
                    "argument LIKE '%INSERT INTO transfer_data %'")
        [first_b] = cur.fetchone()
        assert first_b is not None
        cur.execute("SELECT event_time, LEFT(argument, 80) FROM mysql.general_log WHERE user_host LIKE 'gate\\_a%%' "
                    "AND command_type = 'Query' AND argument REGEXP '(^|;)[[:space:]]*(INSERT|UPDATE|DELETE|REPLACE)' "
                    "AND argument NOT REGEXP '^(BEGIN;)?BEGIN NOT ATOMIC DECLARE e BIGINT; SELECT epoch INTO e ' "
                    "AND event_time >= %s ORDER BY event_time", (first_b,))
        return [(str(at), text) for at, text in cur.fetchall()]


def _wait_audit(dc: MariaDBServer, channel: str, who: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(entry[1] == who and entry[2] == "row" for entry in _audit(dc, channel)):
        assert time.monotonic() < deadline, f"{who} wrote no row within {timeout} s"
        time.sleep(0.05)


def test_a_stopped_active_gate_is_taken_over_and_lands_nothing_when_it_wakes(
        sandbox: Sandbox, channel: str, tmp_path: Path) -> None:
    db = f"src_{channel}"
    _audited(sandbox.dc, channel)
    active = _host(tmp_path, "a", sandbox.dc, channel, user="gate_a")
    _wait_holder(sandbox.dc, channel, {active.pid}, 30)
    standby = _host(tmp_path, "b", sandbox.dc, channel, "--standby", user="gate_b")
    load = _load(sandbox.source, db, 300)
    _wait_audit(sandbox.dc, channel, "gate_a")
    time.sleep(0.5)
    with _general_log(sandbox.dc):
        os.killpg(active.pid, signal.SIGSTOP)  # gate and its writers, in the middle of their work
        stopped = time.monotonic()
        _wait_holder(sandbox.dc, channel, {standby.pid}, BOUND)
        assert time.monotonic() - stopped < BOUND
        _wait_audit(sandbox.dc, channel, "gate_b")
        time.sleep(0.5)
        for child in psutil.Process(active.pid).children(recursive=True):  # its writers wake first and retry
            child.send_signal(signal.SIGCONT)
        time.sleep(1.5)
        os.kill(active.pid, signal.SIGCONT)
        assert active.wait(timeout=30) == 5
    assert _late_statements(sandbox.dc) == []  # each one the fence's guard first, which refused it
    assert f"was taken over by {os.uname().nodename} pid {standby.pid}" in _log(tmp_path, "a")
    load.join()
    _assert_exact(sandbox, channel, db)
    _assert_fenced(sandbox.dc, channel)
    with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT reason FROM gate_takeover ORDER BY epoch DESC LIMIT 1")
        assert f"pid {active.pid} was silent (no heartbeat for" in cur.fetchone()[0]
    assert _stop(standby) == 0


def test_the_active_gate_cut_off_from_the_dc_is_taken_over_and_exits_when_the_link_returns(
        sandbox: Sandbox, channel: str, tmp_path: Path) -> None:
    db = f"src_{channel}"
    _audited(sandbox.dc, channel)
    link = LinkProxy(sandbox.dc.port)
    try:
        active = _host(tmp_path, "a", sandbox.dc, channel, port=link.port, user="gate_a")
        _wait_holder(sandbox.dc, channel, {active.pid}, 30)
        standby = _host(tmp_path, "b", sandbox.dc, channel, "--standby", user="gate_b")
        load = _load(sandbox.source, db, 300)
        _wait_audit(sandbox.dc, channel, "gate_a")
        time.sleep(0.5)
        link.black_hole()
        cut = time.monotonic()
        _wait_holder(sandbox.dc, channel, {standby.pid}, BOUND)
        assert time.monotonic() - cut < BOUND
        _wait_audit(sandbox.dc, channel, "gate_b")
        time.sleep(1.0)
        link.heal()
        assert active.wait(timeout=30) == 5
    finally:
        link.close()
    assert f"was taken over by {os.uname().nodename} pid {standby.pid}" in _log(tmp_path, "a")
    load.join()
    _assert_exact(sandbox, channel, db)
    _assert_fenced(sandbox.dc, channel)
    assert _stop(standby) == 0


def _wait_log(tmp_path: Path, name: str, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in _log(tmp_path, name):
        assert time.monotonic() < deadline, f"no '{text}' in the log of {name} after {timeout} s"
        time.sleep(0.05)


def test_a_standby_started_before_its_channel_exists_or_while_it_is_dropped_waits_for_it(
        sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    db = f"src_{unique_name}"
    waiting = "no such channel on the DC server"
    standby = _host(tmp_path, "b", sandbox.dc, unique_name, "--standby")
    _wait_log(tmp_path, "b", waiting)
    assert standby.poll() is None and not _channel_exists(sandbox.dc, unique_name)
    make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                 defaults=ChannelDefaults(lease_seconds=LEASE))
    _wait_holder(sandbox.dc, unique_name, {standby.pid}, BOUND)
    _load(sandbox.source, db, 30, pace=0).join()
    _assert_exact(sandbox, unique_name, db)
    assert _stop(standby) == 0
    with pymysql.connect(**server_config(sandbox.dc).connect_args()) as conn:
        drop_channel(conn, unique_name)
    standby = _host(tmp_path, "c", sandbox.dc, unique_name, "--standby")
    _wait_log(tmp_path, "c", waiting)
    make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                 defaults=ChannelDefaults(lease_seconds=LEASE))
    assert _wait_holder(sandbox.dc, unique_name, {standby.pid}, BOUND)[0] == 1  # the new channel's first epoch
    assert _stop(standby) == 0


RETAINED = [  # the rows retention removes (its session alone runs at READ COMMITTED; reading the checkpoint
    # here would lock it for the whole DELETE), kept in the same transaction; gate_a's rows and removals are
    # slow (its writers in a transaction nearly always, its retention's first batch of 573 rows takes 23 s)
    "CREATE TABLE purged LIKE transfer_data",
    """CREATE TRIGGER slow_rows AFTER INSERT ON transfer_data FOR EACH ROW
         IF SUBSTRING_INDEX(USER(), '@', 1) = 'gate_a' THEN DO SLEEP(0.02); END IF""",
    """CREATE TRIGGER keep_purged BEFORE DELETE ON transfer_data FOR EACH ROW
         IF @@SESSION.tx_isolation = 'READ-COMMITTED' THEN
           INSERT INTO purged (id, tid, dbname, tablename, create_time, instance_name, optype, data) VALUES
             (OLD.id, OLD.tid, OLD.dbname, OLD.tablename, OLD.create_time, OLD.instance_name, OLD.optype, OLD.data);
           IF SUBSTRING_INDEX(USER(), '@', 1) = 'gate_a' THEN DO SLEEP(0.04); END IF;
         END IF""",
]
OLD_TIME = "SET timestamp = UNIX_TIMESTAMP('2020-01-02')"  # the source's events: old enough for retention


def _scalar(dc: MariaDBServer, channel: str, sql: str) -> int:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return int(cur.fetchone()[0] or 0)


def _purging(dc: MariaDBServer, channel: str) -> bool:
    """Whether the channel's first retention batch is in flight: rows in ``purged`` read uncommitted, none
    committed."""
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
        cur.execute("SELECT COUNT(*) FROM purged")
        removing = int(cur.fetchone()[0])
    return removing > 0 and _scalar(dc, channel, "SELECT COUNT(*) FROM purged") == 0


def test_kill_9_of_the_active_gate_inside_a_large_transaction_while_retention_removes(
        sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    """The active host dies inside a 3,000-row transaction (its chunks in its writers' open transactions or
    committed above the checkpoint) with a retention batch in flight: the new holder removes those chunks and
    writes the transaction again, its retention removes what the killed batch did not (rolled back), and the
    DC's rows, with those retention removed, are each source transaction once, gap-free, equal to the
    source."""
    channel, db = unique_name, f"src_{unique_name}"
    make_channel(sandbox.dc, sandbox.source, channel, allow=(f"{db}.*",),
                 defaults=ChannelDefaults(lease_seconds=LEASE, batch_rows=200, writers=2,
                                          retention_interval_seconds=0.2))
    _audited(sandbox.dc, channel, RETAINED)
    active = _host(tmp_path, "a", sandbox.dc, channel, user="gate_a")
    _wait_holder(sandbox.dc, channel, {active.pid}, 30)
    standby = _host(tmp_path, "b", sandbox.dc, channel, "--standby", user="gate_b")
    with sandbox.source.connect() as src, src.cursor() as cur:
        cur.execute(OLD_TIME)
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (k INT PRIMARY KEY, v INT)")
        for n in range(20):  # 500 rows in small transactions, then some of them changed
            cur.execute(f"INSERT INTO {db}.t VALUES " + ",".join(f"({n * 25 + i}, {n})" for i in range(25)))
            src.commit()
        cur.execute(f"UPDATE {db}.t SET v = v + 100 WHERE k % 7 = 0")
        src.commit()
    wait_caught_up(sandbox.source, sandbox.dc, channel)
    with sandbox.source.connect() as src, src.cursor() as cur:
        cur.execute(OLD_TIME)
        cur.executemany(f"INSERT INTO {db}.t VALUES (%s, %s)", [(k, -k) for k in range(1000, 4000)])
        src.commit()

    def above() -> int:  # rows committed above the checkpoint
        return _scalar(sandbox.dc, channel, "SELECT COUNT(*) FROM transfer_data WHERE id > (SELECT id FROM "
                                            "transfer_checkpoint)")

    def written() -> int:  # rows above the checkpoint, committed or in a writer's open transaction
        with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
            cur.execute("SELECT COUNT(*) FROM transfer_data WHERE id > (SELECT id FROM transfer_checkpoint)")
            return int(cur.fetchone()[0])

    # gate_a's writers are inside the large transaction first (its 3,000 rows take them 60 s of triggers; a
    # writer may take all its chunks into one DC transaction), then its retention starts on the 573 rows
    # below the checkpoint: its first batch takes 23 s (gate_b stands by: it does not purge). The other way
    # round, the writers sometimes waited for the whole batch before their first row.
    _wait(lambda: written() > 0, 30)
    _gate(tmp_path, "channel", "set", channel, "--retain-days", "1")
    _wait(lambda: written() > 0 and above() < 3000 and _purging(sandbox.dc, channel), 60)
    os.killpg(active.pid, signal.SIGKILL)  # its host dies: gate and its writers
    killed = time.monotonic()
    assert active.wait() == -signal.SIGKILL
    _wait_holder(sandbox.dc, channel, {standby.pid}, BOUND)
    assert time.monotonic() - killed < BOUND
    end = wait_caught_up(sandbox.source, sandbox.dc, channel)
    _wait(lambda: _scalar(sandbox.dc, channel, "SELECT value FROM gate_meta WHERE name = 'purged_through'")
          == end[0], 60)  # every row is old: the new holder's retention removes up to the checkpoint
    assert _scalar(sandbox.dc, channel, "SELECT COUNT(*) FROM transfer_data") == 0
    _assert_exact(sandbox, channel, db, kept="purged")  # the killed batch rolled back: no row twice in purged
    assert _stop(standby) == 0


def test_kill_9_of_the_active_gate_in_the_middle_of_a_source_failover(
        make_sandbox: Callable[..., Sandbox], tmp_path: Path) -> None:
    """The source dies, the active gate starts the switch to the source's standby server (its marker stored)
    and its host dies then: the standby gate takes the channel over and finishes the switch, each source
    transaction once."""
    from gate.capture.failover import MARKER
    from tests.test_failover import SteadyLoad, _exact, _switches

    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    make_channel(box.dc, box.source, "fo", standby=server_config(box.standby), failover_mode="gtid",
                 defaults=ChannelDefaults(lease_seconds=LEASE, batch_rows=50, writers=2, standby_sample_seconds=0.3,
                                          failover_after_seconds=2.0, failover_margin_seconds=1.0))
    active = _host(tmp_path, "a", box.dc, "fo")
    _wait_holder(box.dc, "fo", {active.pid}, 30)
    standby = _host(tmp_path, "b", box.dc, "fo", "--standby")
    wait_sampled(box.dc, "fo")
    load = SteadyLoad(box, "shop")
    load.start()
    _wait(lambda: load.committed >= 30, 30)
    box.source.kill()
    load.join()
    wait_row(box.dc, "fo", f"SELECT 1 FROM gate_meta WHERE name = '{MARKER}'")  # the switch is under way
    os.killpg(active.pid, signal.SIGKILL)
    assert active.wait() == -signal.SIGKILL
    _wait_holder(box.dc, "fo", {standby.pid}, BOUND)
    with box.standby.connect() as conn, conn.cursor() as cur:  # the new source takes writes
        cur.execute("INSERT INTO shop.t0 (id, name) VALUES (1000000, 'after the switch')")
    wait_caught_up(box.standby, box.dc, "fo", timeout=60)
    assert _switches(box, "fo") == [(box.source.address, box.standby.address)]
    rows = _exact(box, "fo", box.standby, "shop")
    assert rows[0][5] == box.source.address and rows[-1][5] == box.standby.address
    with box.dc.connect("fo") as conn, conn.cursor() as cur:
        assert cur.execute("SELECT 1 FROM gate_meta WHERE name = %s", (MARKER,)) == 0  # the switch was finished
        cur.execute("SELECT pid, from_pid FROM gate_takeover ORDER BY epoch DESC LIMIT 1")
        assert cur.fetchone() == (standby.pid, active.pid)
    assert _stop(standby) == 0


def test_an_idle_standby_has_not_imported_the_capture(sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    """A standby waits before gate's capture modules (the pipeline, the binlog library, the writers, the
    metrics, the commands' administration) are imported: they load at the takeover, so that a host's idle
    standbys stay small."""
    config = tmp_path / "config.yaml"
    config.write_text(config_yaml(sandbox.dc))
    script = ("import atexit, sys\n"
              "atexit.register(lambda: print('loaded:', sorted(m for m in sys.modules if m.startswith(("
              "'gate.capture.pipeline', 'gate.capture.writer', 'gate.capture.metrics', 'gate.admin', "
              "'pymysqlreplication', 'prometheus_client')))))\n"
              "from gate.cli import main\n"
              f"main(['--config', '{config}', 'run', '{unique_name}', '--standby'])\n")
    (tmp_path / "b").mkdir()
    with open(tmp_path / "b" / "gate.log", "w") as log:
        standby = subprocess.Popen([str(Path(GATE).with_name("python")), "-c", script], stdout=log, stderr=log)
    STARTED.append(standby)
    _wait_log(tmp_path, "b", "no such channel on the DC server")
    standby.send_signal(signal.SIGTERM)
    assert standby.wait(timeout=30) == 0
    lines = _log(tmp_path, "b").splitlines()
    assert lines[-2].endswith(f" INFO gate.capture.holder: channel {unique_name}: stopped while standing by")
    assert lines[-1] == "loaded: []"
