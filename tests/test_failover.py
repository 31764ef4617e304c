"""Failover to the standby on a real source + standby + DC: exact, in GTID and fingerprint mode, with
gate killed mid-switch, a lagging standby, a short blip, a planned switch, and the standby's preflight."""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql
import pytest
from click.testing import Result

from gate.admin.channel import set_failover
from gate.admin.preflight import Problem, check_server, require_channel
from gate.capture import failover
from gate.capture.failover import MARKER, PLANNED, parse_gtids, plan_switch, read_marker
from gate.capture.pipeline import Pipeline
from gate.common.config import ChannelDefaults, Secret, ServerConfig
from gate.common.dc import ChannelSettings, connect, read_resume, read_settings
from gate.common.errors import ConnectionFailed, FailoverError, PreflightFailed
from gate.devtools.sandbox import MariaDBServer, Sandbox, free_port
from gate.devtools.workload import RandomWorkload
from tests.replay import (
    dc_rows,
    make_channel,
    replay,
    running,
    server_config,
    start_gate,
    table_contents,
    wait_caught_up,
    wait_row,
    wait_running,
    wait_sampled,
    wait_stopped,
)

FAST = ChannelDefaults(batch_rows=50, writers=2, standby_sample_seconds=0.3, failover_after_seconds=2.0,
                       failover_margin_seconds=1.0)
Gate = Callable[..., Result]


class SteadyLoad(threading.Thread):
    """Small transactions on the source until it dies or ``stop`` is set."""

    def __init__(self, box: Sandbox, db: str) -> None:
        super().__init__(daemon=True)
        self.box, self.db = box, db
        self.stop = threading.Event()
        self.committed = 0

    def run(self) -> None:
        with self.box.source.connect() as conn:
            work = RandomWorkload(conn, self.db, seed=5, ddl_every=25)
            work.setup()
            try:
                while not self.stop.is_set():
                    work.transaction()
                    self.committed += 1
                    time.sleep(0.01)
            except pymysql.err.Error:
                pass  # the source died under us


def _switches(box: Sandbox, channel: str) -> list[tuple[str, str]]:
    with box.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT from_instance, to_instance FROM gate_switch")
        return list(cur.fetchall())


def _exact(box: Sandbox, channel: str, server: MariaDBServer, *dbs: str) -> list[tuple[Any, ...]]:
    """The channel's rows: ids gap-free from 1, and their replay equals ``server``'s tables of ``dbs``."""
    rows = dc_rows(box.dc, channel)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    with server.connect() as conn, box.dc.connect() as target:
        with target.cursor() as cur:
            for db in dbs:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        replay(rows, target)
        for db in dbs:
            assert table_contents(target, db) == table_contents(conn, db)
    return rows


def _write_on(server: MariaDBServer, sql: str) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(sql)


def _wait_switch(box: Sandbox, channel: str, timeout: float) -> float:
    started = time.monotonic()
    while not _switches(box, channel):
        assert time.monotonic() - started < timeout, "gate did not switch to the standby"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.parametrize(("mode", "tls"), [("gtid", False), ("fingerprint", False), ("gtid", True)])
def test_source_killed_under_load_switches_to_standby_exactly_once(
        make_sandbox: Callable[..., Sandbox], mode: str, tls: bool) -> None:
    """With ``tls``, every server refuses plaintext and gate verifies each one's certificate and name."""
    box = make_sandbox(with_standby=True, tls=tls)
    assert box.standby is not None
    dc = make_channel(box.dc, box.source, "fo", standby=server_config(box.standby), failover_mode=mode,
                      defaults=FAST)
    load = SteadyLoad(box, "shop")
    with running(dc, "fo"):
        wait_sampled(box.dc, "fo")
        load.start()
        time.sleep(3.0)
        box.source.kill()
        load.stop.set()
        load.join()
        took = _wait_switch(box, "fo", timeout=FAST.failover_after_seconds + 10)
        with box.standby.connect() as conn, conn.cursor() as cur:  # the new source takes writes
            cur.execute("INSERT INTO shop.t0 (id, name) VALUES (1000000, 'after the switch')")
        wait_caught_up(box.standby, box.dc, "fo", timeout=60)
    assert _switches(box, "fo") == [(box.source.address, box.standby.address)]
    assert took < FAST.failover_after_seconds + 5
    rows = _exact(box, "fo", box.standby, "shop")
    assert load.committed > 20
    assert rows[-1][5] == box.standby.address and rows[0][5] == box.source.address


def _lose_five(box: Sandbox, channel: str, mode: str,
               before_kill: Callable[[], None] = lambda: None) -> tuple[ServerConfig, FailoverError]:
    """20 inserts reach the standby, 5 more only the DC (replication stopped), ``before_kill`` runs, then the
    source dies; gate stops with the divergence. Returns the DC and the error."""
    assert box.standby is not None
    dc = make_channel(box.dc, box.source, channel, standby=server_config(box.standby), failover_mode=mode,
                      defaults=FAST)
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE d")
        cur.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")
        box.wait_standby_caught_up()
        with pytest.raises(FailoverError) as err, running(dc, channel) as pipeline:
            wait_sampled(box.dc, channel)
            for n in range(20):
                cur.execute(f"INSERT INTO d.t VALUES ({n})")
                time.sleep(0.1)
            box.wait_standby_caught_up()
            _write_on(box.standby, "STOP SLAVE")
            for n in range(20, 25):
                cur.execute(f"INSERT INTO d.t VALUES ({n})")
            wait_caught_up(box.source, box.dc, channel)
            before_kill()
            box.source.kill()
            wait_stopped(pipeline, timeout=FAST.failover_after_seconds + 60)  # retries, then stops at the divergence
    return dc, err.value


def test_lost_transactions_are_reported_and_stop_the_switch(make_sandbox: Callable[..., Sandbox]) -> None:
    box = make_sandbox(with_standby=True)
    _, err = _lose_five(box, "div", "gtid")
    assert "DIVERGENCE on channel 'div': the DC holds GTIDs the standby never received" in str(err)
    assert "(0-1-23..0-1-27)" in str(err)
    assert _switches(box, "div") == []


def test_gtid_divergence_is_reported_even_without_a_standby_sample(sandbox: Sandbox, unique_name: str) -> None:
    """The GTIDs alone prove the loss: no sample is needed to report it, and nothing is switched."""
    assert sandbox.standby is not None
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, standby=server_config(sandbox.standby), defaults=FAST)
    sandbox.wait_standby_caught_up()
    with connect(dc, "DC") as conn:
        settings, state = read_settings(conn, unique_name), read_resume(conn, unique_name)
        standby_seq = parse_gtids(state.gtid_pos).get(("0", 1), 0)
        ahead = replace(state, gtid_pos=f"0-1-{standby_seq + 3}", event_time=int(time.time()))
        with pytest.raises(FailoverError) as err:
            plan_switch(conn, settings, ahead, 1, "test")
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM `{unique_name}`.gate_standby_sample")
            assert cur.fetchone() == (0,)
        assert read_settings(conn, unique_name).source == settings.source  # not switched
    assert (f"DIVERGENCE on channel '{unique_name}': the DC holds GTIDs the standby never received "
            f"(0-1-{standby_seq + 1}..0-1-{standby_seq + 3})") in str(err.value)
    assert _switches(sandbox, unique_name) == []


def test_lost_transactions_in_fingerprint_mode_are_reported_then_accepted(
        make_sandbox: Callable[..., Sandbox]) -> None:
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    dc, err = _lose_five(box, "fdiv", "fingerprint")
    tids = sorted({r[1] for r in dc_rows(box.dc, "fdiv")})
    lost = tids[-5:]  # the five inserts after STOP SLAVE
    assert (f"DIVERGENCE on channel 'fdiv': the DC holds 5 transactions the standby never received (tids "
            f"{lost[0]}..{lost[-1]})") in str(err)
    assert "gate channel set fdiv --on-divergence continue" in str(err)
    assert _switches(box, "fdiv") == [(box.source.address, box.standby.address)]
    # the DBA accepts the loss: gate goes on from the standby, the lost rows stay in the DC
    set_failover(dc, "fdiv", on_divergence="continue")
    with running(dc, "fdiv"):
        _write_on(box.standby, "INSERT INTO d.t VALUES (100)")
        wait_caught_up(box.standby, box.dc, "fdiv")
    rows = dc_rows(box.dc, "fdiv")
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    assert [r[1] for r in rows[-6:]] == lost + [lost[-1] + 1]
    assert rows[-1][5] == box.standby.address and json.loads(rows[-1][7]) == {"NEW": [{"id": "100"}]}


# The promoted standby's own transactions: an ALTER TABLE among the first five, so that a GTID compared by
# sequence number alone (the DC holds five of the old source's beyond the standby's last) drops it.
STANDBY_WRITES = ("INSERT INTO d.t VALUES (100)", "INSERT INTO d.t VALUES (101)", "ALTER TABLE d.t ADD COLUMN c INT",
                  "INSERT INTO d.t VALUES (102, 2)", "INSERT INTO d.t VALUES (103, 3)",
                  "INSERT INTO d.t VALUES (104, 4)", "INSERT INTO d.t VALUES (105, 5)")


@pytest.mark.parametrize("mode", ["gtid", "fingerprint"])
@pytest.mark.parametrize("when", ["before the switch", "after the switch"])
def test_standby_writes_after_a_divergence_are_all_kept(make_sandbox: Callable[..., Sandbox],
                                                        caplog: pytest.LogCaptureFixture, mode: str, when: str) -> None:
    """The DC holds five transactions the standby never received. The standby, promoted, writes seven of its
    own, which MariaDB numbers on from its last applied sequence number with its own server_id: the first
    five have the sequence numbers of the five lost ones. They are written before gate switches (the
    application moved first), or after gate has stopped at the divergence. gate reports the divergence
    each time and, once the DBA accepts it, writes all seven, after the five lost ones, exactly once."""
    box = make_sandbox(with_standby=True)
    standby = box.standby
    assert standby is not None
    channel = f"{mode[0]}{when[0]}"

    def write_on_standby() -> None:
        for sql in STANDBY_WRITES:
            _write_on(standby, sql)

    dc, err = _lose_five(box, channel, mode, write_on_standby if when.startswith("before") else lambda: None)
    if when.startswith("after"):
        write_on_standby()
    with standby.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_state")
        state = parse_gtids(cur.fetchone()[0])
    received = state["0", 1]  # the standby's last transaction of the source; its own are 0-2-...
    assert state == {("0", 1): received, ("0", 2): received + len(STANDBY_WRITES)}
    tids = sorted({r[1] for r in dc_rows(box.dc, channel)})
    gtid_report = (f"DIVERGENCE on channel '{channel}': the DC holds GTIDs the standby never received "
                   f"(0-1-{received + 1}..0-1-{received + 5}).")
    fingerprint_report = (f"DIVERGENCE on channel '{channel}': the DC holds 5 transactions the standby never "
                          f"received (tids {tids[-5]}..{tids[-1]}).")
    report = gtid_report if mode == "gtid" else fingerprint_report
    assert str(err).startswith(report)
    switched = [(box.source.address, standby.address)]
    assert _switches(box, channel) == ([] if mode == "gtid" else switched)  # gtid mode stops before switching
    caplog.clear()
    set_failover(dc, channel, on_divergence="continue")
    with running(dc, channel):
        _wait_switch(box, channel, timeout=FAST.failover_after_seconds + 10)
        wait_caught_up(standby, box.dc, channel)
    assert [r.getMessage() for r in caplog.records if "DIVERGENCE" in r.getMessage()] == [
        report + " Those changes were lost by asynchronous replication and exist only in the DC."]
    assert _switches(box, channel) == switched
    rows = dc_rows(box.dc, channel)
    assert [(r[0], r[1]) for r in rows] == [(n, n) for n in range(1, 34)]  # one row per transaction
    assert (rows[0][5], rows[0][6]) == (box.source.address, "CREATETABLE")
    assert [(r[5], r[6], json.loads(r[7])) for r in rows[1:]] == [
        (box.source.address, "INSERT", {"NEW": [{"id": str(n)}]}) for n in range(25)] + [
        (standby.address, "INSERT", {"NEW": [{"id": "100"}]}), (standby.address, "INSERT", {"NEW": [{"id": "101"}]}),
        (standby.address, "ALTERTABLE", {"ADDCOLUMN": [{"field_name": "c", "data_type": "int"}],
                                          "SQL": STANDBY_WRITES[2]})] + [
        (standby.address, "INSERT", {"NEW": [{"id": str(n)}, {"c": str(n - 100)}]}) for n in range(102, 106)]


@pytest.mark.parametrize("mode", ["gtid", "fingerprint"])
def test_gate_killed_in_the_middle_of_the_switch_then_restarted(
        make_sandbox: Callable[..., Sandbox], tmp_path: Path, mode: str) -> None:
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    make_channel(box.dc, box.source, "mid", standby=server_config(box.standby), failover_mode=mode, defaults=FAST)
    gate = start_gate(tmp_path, box.dc, "mid")
    wait_running(box.dc, "mid", gate)
    wait_sampled(box.dc, "mid")
    load = SteadyLoad(box, "shop")
    load.start()
    time.sleep(3.0)
    box.source.kill()
    load.join()
    time.sleep(FAST.failover_after_seconds / 2)  # gate retries the source: killed before it switches ...
    gate.send_signal(signal.SIGKILL)
    gate.wait()
    assert _switches(box, "mid") == []
    gate = start_gate(tmp_path, box.dc, "mid")  # ... it starts on the dead source and fails over
    wait_row(box.dc, "mid", f"SELECT 1 FROM gate_meta WHERE name = '{MARKER}'")  # switch stored, dropping starts
    gate.send_signal(signal.SIGKILL)  # killed again, in the middle of the switch
    gate.wait()
    assert _switches(box, "mid") == [(box.source.address, box.standby.address)]
    with box.dc.connect("mid") as conn:  # the switch is stored with the marker of the channel's mode
        marker = read_marker(conn, "mid")
    assert marker is not None and marker.mode == mode
    _write_on(box.standby, "INSERT INTO shop.t0 (id, name) VALUES (1000000, 'after the switch')")
    gate = start_gate(tmp_path, box.dc, "mid")
    wait_running(box.dc, "mid", gate)
    try:
        wait_caught_up(box.standby, box.dc, "mid")
    finally:
        gate.send_signal(signal.SIGTERM)
        assert gate.wait(timeout=60) == 0
    assert _switches(box, "mid") == [(box.source.address, box.standby.address)]
    rows = _exact(box, "mid", box.standby, "shop")
    assert load.committed > 20 and rows[-1][5] == box.standby.address
    with box.dc.connect("mid") as conn, conn.cursor() as cur:
        assert cur.execute("SELECT 1 FROM gate_meta WHERE name = %s", (MARKER,)) == 0


def _master_status(server: MariaDBServer) -> tuple[str, int, str, int]:
    """The server's SHOW MASTER STATUS file and position, @@gtid_binlog_pos and UNIX_TIMESTAMP()."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("SELECT @@gtid_binlog_pos, UNIX_TIMESTAMP()")
        gtid, now = cur.fetchone()
    return file, int(pos), gtid, int(now)


def _logged(caplog: pytest.LogCaptureFixture, pattern: str, timeout: float) -> re.Match[str]:
    """Until a log record matches ``pattern`` (records of the pipeline thread too); returns the match."""
    deadline = time.monotonic() + timeout
    while True:
        for record in list(caplog.records):
            if found := re.search(pattern, record.getMessage()):
                return found
        assert time.monotonic() < deadline, f"nothing logged like {pattern!r} in {timeout} s"
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["gtid", "fingerprint"])
def test_standby_lagging_at_the_switch(make_sandbox: Callable[..., Sandbox],
                                        caplog: pytest.LogCaptureFixture, mode: str) -> None:
    """The standby's SQL thread stops while the source takes writes: its binlog (and so every sample)
    stays at one position while its clock runs on. The source dies; when gate switches, the standby
    still has a relay log to apply and the DC holds transactions it has not applied. gate waits for it,
    restarts at a sample inside the lag (the frozen position) and drops exactly what it already holds."""
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    dc = make_channel(box.dc, box.source, "lag", standby=server_config(box.standby), failover_mode=mode,
                      defaults=FAST)
    load = SteadyLoad(box, "shop")
    caplog.set_level(logging.INFO, logger="gate.capture.failover")
    with running(dc, "lag"):
        wait_sampled(box.dc, "lag")
        load.start()
        time.sleep(1.5)
        _write_on(box.standby, "STOP SLAVE SQL_THREAD")  # the standby only receives, for a while
        frozen_file, frozen_pos, frozen_gtid, frozen_at = _master_status(box.standby)
        # more than failover_margin_seconds + 2: samples of at least one whole second after the freeze are
        # older than the last transaction minus the margin, so the switch starts at one of them
        time.sleep(4.0)
        box.source.kill()
        load.join()
        # gate retries the source for failover_after_seconds, then starts the switch, which waits for the standby
        _logged(caplog, "Failing over to the standby", timeout=FAST.failover_after_seconds + 10)
        time.sleep(0.5)
        assert _switches(box, "lag") == []  # still waiting: the standby lags at the switch
        with box.standby.connect() as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW SLAVE STATUS")
            status = cur.fetchone()
            cur.execute("SELECT @@gtid_binlog_pos AS pos")
            applied = parse_gtids(cur.fetchone()["pos"])["0", 1]
        assert ((status["Relay_Master_Log_File"], status["Exec_Master_Log_Pos"])
                < (status["Master_Log_File"], status["Read_Master_Log_Pos"])), status
        received = parse_gtids(status["Gtid_IO_Pos"])["0", 1]
        assert applied == parse_gtids(frozen_gtid)["0", 1]
        with box.dc.connect("lag") as conn, conn.cursor() as cur:
            cur.execute("SELECT gtid_pos FROM gate_resume")
            checkpointed = parse_gtids(cur.fetchone()[0])["0", 1]
        # the DC holds well over a second of transactions the standby has received but not applied
        assert applied + 30 < checkpointed <= received, (applied, checkpointed, received)
        _write_on(box.standby, "START SLAVE SQL_THREAD")
        _wait_switch(box, "lag", timeout=30)
        _write_on(box.standby, "INSERT INTO shop.t0 (id, name) VALUES (1000000, 'after the switch')")
        wait_caught_up(box.standby, box.dc, "lag", timeout=60)
    assert _switches(box, "lag") == [(box.source.address, box.standby.address)]
    _exact(box, "lag", box.standby, "shop")
    # the restart point lay in the lag: a sample taken after the freeze, at the frozen position ...
    where = _logged(caplog, r"reading it from (\S+):(\d+), sample of (\d+), (\w+) dedupe", timeout=0)
    assert (where[1], int(where[2]), where[4]) == (frozen_file, frozen_pos, mode)
    assert int(where[3]) > frozen_at
    # ... so every transaction the DC held beyond the freeze was dropped again, and no other (the standby may
    # have received a last one or two that gate had not read from the dying source: those are new to the DC)
    skipped = int(_logged(caplog, r"skipped (\d+) transactions", timeout=0)[1])
    assert skipped == checkpointed - applied, (skipped, checkpointed, applied)
    assert len([r for r in caplog.records if "skipped" in r.getMessage()]) == 1


def _samples(dc: MariaDBServer, channel: str) -> list[tuple[int, str, int, str | None]]:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT sampled_at, log_file, log_pos, gtid_pos FROM gate_standby_sample ORDER BY sampled_at")
        return [(int(t), f, int(p), g) for t, f, p, g in cur.fetchall()]


def _steps(samples: list[tuple[int, str, int, str | None]], statuses: list[tuple[str, int, str, int]]) -> list[int]:
    """For each sample, which of the standby's successive ``statuses`` it shows: it must be one of them
    (the position is read before the GTID position, so a commit may fall between the two), in order."""
    positions, gtids = [st[:2] for st in statuses], [st[2] for st in statuses]
    steps = []
    for at, file, pos, gtid in samples:
        assert (file, pos) in positions, (at, file, pos, statuses)  # a position the standby had
        step = positions.index((file, pos))
        assert gtid in gtids[step:step + 2], (at, file, pos, gtid, statuses)
        steps.append(step)
    assert steps == sorted(steps), (samples, statuses)
    return steps


def test_standby_sampler_stores_the_standbys_position_and_keeps_a_bounded_history(
        sandbox: Sandbox, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sample is the standby's real SHOW MASTER STATUS, @@gtid_binlog_pos and clock; samples older
    than KEEP_SAMPLES intervals are deleted, recent ones kept."""
    standby = sandbox.standby
    assert standby is not None
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, standby=server_config(standby),
                      allow=(f"{db}.*",), defaults=FAST)
    _write_on(sandbox.source, f"CREATE DATABASE {db}")
    _write_on(sandbox.source, f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")
    sandbox.wait_standby_caught_up()
    statuses = [_master_status(standby)]  # what the standby's binlog has been at while gate samples it
    started_at = statuses[0][3]
    history = failover.KEEP_SAMPLES * FAST.standby_sample_seconds  # 2000 intervals of 0.3 s: 600 s
    # older than the history: deleted by the first sample; younger: kept
    fake = {started_at - age: ("fake-bin.000001", age, "0-1-1") for age in (10_000, 900, 500, 300)}
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO gate_standby_sample VALUES (%s, %s, %s, %s)",
                        [(at, *row) for at, row in fake.items()])
    with running(dc, unique_name):
        wait_row(sandbox.dc, unique_name, "SELECT 1 FROM gate_standby_sample WHERE log_file <> 'fake-bin.000001'")
        assert _samples(sandbox.dc, unique_name)[-1][1:] == statuses[0][:3]
        for n in range(3):  # the standby moves on; then, once caught up, the next sample shows where it is
            _write_on(sandbox.source, f"INSERT INTO {db}.t VALUES ({n})")
            sandbox.wait_standby_caught_up()
            statuses.append(_master_status(standby))
            wait_row(sandbox.dc, unique_name,  # a sample taken after the standby had caught up
                     f"SELECT 1 FROM gate_standby_sample WHERE sampled_at > {statuses[-1][3]} "
                     "AND log_file <> 'fake-bin.000001'", timeout=10)
            assert _samples(sandbox.dc, unique_name)[-1][1:] == statuses[-1][:3] != statuses[-2][:3]
        samples = _samples(sandbox.dc, unique_name)
        file, pos, gtid, standby_now = _master_status(standby)
        assert (samples[-1][1:], (file, pos, gtid)) == (statuses[-1][:3], statuses[-1][:3])
        assert 0 <= standby_now - samples[-1][0] <= 2
        # the samples too old for the history are gone, those in it are still there
        assert [s for s in samples if s[1] == "fake-bin.000001"] == [
            (at, *fake[at]) for at in sorted(fake) if at >= started_at - history] != []
        # every other sample: the standby's position and GTID position at one moment, in order
        real = [s for s in samples if s[1] != "fake-bin.000001"]
        assert len(real) >= 3 and started_at <= real[0][0] and real[-1][0] <= standby_now
        assert _steps(real, statuses)[-1] == len(statuses) - 1
        # a shorter history: the sampler's next sample deletes all older than KEEP_SAMPLES intervals
        monkeypatch.setattr(failover, "KEEP_SAMPLES", 10)  # 3 s at 0.3 s
        wait_row(sandbox.dc, unique_name, "SELECT 1 FROM gate_standby_sample HAVING COUNT(*) <= 4", timeout=10)
        time.sleep(1.0)
    kept = _samples(sandbox.dc, unique_name)  # the sampler has stopped: nothing changes any more
    newest_at = kept[-1][0]
    # the samples of the last 3 s, one a second (a later sample in the same second replaces one)
    assert [s[0] for s in kept] == list(range(newest_at - 3, newest_at + 1))
    assert kept[-1][1:] == statuses[-1][:3]
    _steps(kept, statuses)


def test_blip_shorter_than_the_detection_time_is_no_switch(make_sandbox: Callable[..., Sandbox]) -> None:
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    defaults = replace(FAST, failover_after_seconds=10.0)
    dc = make_channel(box.dc, box.source, "blip", standby=server_config(box.standby), defaults=defaults)
    with running(dc, "blip"):
        load = SteadyLoad(box, "shop")
        load.start()
        time.sleep(1.5)
        down = time.monotonic()
        box.source.stop()  # SIGTERM: a clean shutdown ...
        load.join()
        box.source.start()  # ... and back
        outage = time.monotonic() - down
        assert outage < defaults.failover_after_seconds - 3, outage
        again = SteadyLoad(box, "shop2")
        again.start()
        time.sleep(1.5)
        again.stop.set()
        again.join()
        wait_caught_up(box.source, box.dc, "blip")
    assert _switches(box, "blip") == []
    rows = _exact(box, "blip", box.source, "shop", "shop2")
    assert {r[5] for r in rows} == {box.source.address}
    assert load.committed > 10 and again.committed > 10


def test_planned_switch_from_the_cli(sandbox: Sandbox, gate: Gate, unique_name: str) -> None:
    assert sandbox.standby is not None
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, standby=server_config(sandbox.standby),
                      allow=(f"{db}.*",), defaults=FAST)
    load = SteadyLoad(sandbox, db)  # on the source, all along: it stays alive
    load.start()
    with running(dc, unique_name):
        wait_sampled(sandbox.dc, unique_name)
        time.sleep(2.0)
        busy = gate("channel", "switch", unique_name, "--yes")
        assert busy.exit_code == 1
        assert re.fullmatch(rf"error: Channel '{unique_name}' is running: a gate process holds its lock \(DC "
                            r"connection \d+\)\. Stop gate first \(SIGTERM or Ctrl-C; it stores its checkpoint\), "
                            r"then switch\.\n", busy.stderr)
    unconfirmed = gate("channel", "switch", unique_name)
    assert (unconfirmed.exit_code, unconfirmed.stderr) == (1, (
        f"error: Channel '{unique_name}' was not switched: confirmation is needed and this session has no terminal "
        "to ask on. Add --yes to switch it to its standby.\n"))
    result = gate("--json", "channel", "switch", unique_name, "--yes")
    assert result.exit_code == 0, result.stderr
    switched = json.loads(result.stdout)
    checkpoint = dc_rows(sandbox.dc, unique_name)[-1][0]
    assert {k: v for k, v in switched.items() if k != "resume"} == {
        "channel": unique_name, "from": sandbox.source.address, "to": sandbox.standby.address, "at_id": checkpoint,
        "failover_mode": "gtid", "removed_rows_above_checkpoint": 0}
    with running(dc, unique_name):
        time.sleep(1.0)
        load.stop.set()
        load.join()
        sandbox.wait_standby_caught_up()
        wait_caught_up(sandbox.standby, sandbox.dc, unique_name)
    assert sandbox.source.is_running()
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT from_instance, to_instance, reason, at_id FROM gate_switch")
        assert cur.fetchall() == ((sandbox.source.address, sandbox.standby.address, PLANNED, checkpoint),)
    rows = _exact(sandbox, unique_name, sandbox.standby, db)
    assert {r[5] for r in rows[:checkpoint]} == {sandbox.source.address}
    assert len(rows) > checkpoint and {r[5] for r in rows[checkpoint:]} == {sandbox.standby.address}


def test_set_failover_settings(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    make_channel(sandbox.dc, sandbox.source, unique_name)
    result = gate("channel", "set", unique_name, "--on-divergence", "continue", "--failover-mode", "fingerprint")
    assert (result.exit_code, result.stdout) == (
        0, f"channel                 {unique_name}\nfailover_mode           fingerprint\non_divergence           continue\n"
           "retain_days             0\nconsumer_max_idle_days  7.0\nmetrics_port            0\n"
           "metrics_address         127.0.0.1\nstuck_after_seconds     120.0\nready_lag_seconds       60.0\n"
           "on_rows_without_events  snapshot\n")
    shown = json.loads(gate("--json", "channel", "show", unique_name).stdout)
    assert (shown["failover_mode"], shown["on_divergence"]) == ("fingerprint", "continue")
    result = gate("--json", "channel", "set", unique_name, "--on-divergence", "stop")
    assert json.loads(result.stdout) == {"channel": unique_name, "failover_mode": "fingerprint",
                                         "on_divergence": "stop", "retain_days": 0, "consumer_max_idle_days": 7.0,
                                         "metrics_port": 0, "metrics_address": "127.0.0.1",
                                         "stuck_after_seconds": 120.0, "ready_lag_seconds": 60.0,
                                         "on_rows_without_events": "snapshot"}
    result = gate("--json", "channel", "set", unique_name, "--on-rows-without-events", "flag")
    assert json.loads(result.stdout)["on_rows_without_events"] == "flag"
    assert json.loads(gate("--json", "channel", "show", unique_name).stdout)["defaults"]["on_rows_without_events"] == (
        "flag")
    wrong = gate("channel", "set", unique_name, "--failover-mode", "guess")
    assert wrong.exit_code == 2 and "'guess' is not one of 'gtid', 'fingerprint'" in wrong.stderr


# --- the standby's preflight ---------------------------------------------------------------------


def test_standby_preflight(sandbox: Sandbox) -> None:
    assert sandbox.standby is not None
    source, standby = server_config(sandbox.source), server_config(sandbox.standby)
    assert check_server(standby, 4242, "standby", source) == []
    assert check_server(standby, None, "standby", replace(source, host="localhost")) == []  # the same server
    fix = ("on the standby, STOP SLAVE; CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={port}, "
           "MASTER_USER='...', MASTER_PASSWORD='...', MASTER_USE_GTID=slave_pos; START SLAVE; or make a replica of "
           "the source the channel's standby ('gate channel set-standby').")
    other = ServerConfig("127.0.0.1", free_port())
    assert check_server(standby, None, "standby", other) == [Problem(
        "replication source", sandbox.source.address, f"the channel's source {other.address}",
        fix.format(port=other.port))]
    assert check_server(source, None, "standby", standby) == [Problem(  # the source replicates from nobody
        "replication", "not set up (SHOW SLAVE STATUS is empty)",
        f"the standby replicating from the source {standby.address}", fix.format(port=standby.port))]
    # an account that may not look: a warning whose fix works
    with sandbox.standby.connect() as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute("CREATE USER IF NOT EXISTS 'pf_standby'@'127.0.0.1' IDENTIFIED BY 'pf-pw'")
        cur.execute("GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'pf_standby'@'127.0.0.1'")
        limited = ServerConfig("127.0.0.1", sandbox.standby.port, "pf_standby", Secret("pf-pw"))
        [denied] = check_server(limited, None, "standby", source)
        assert denied == Problem(
            "SHOW SLAVE STATUS", "denied to 'pf_standby'@'127.0.0.1'",
            f"it to see that the standby replicates from {source.address}",
            "GRANT SLAVE MONITOR ON *.* TO 'pf_standby'@'127.0.0.1'; or make sure yourself that the standby "
            f"replicates from {source.address}.", fatal=False)
        cur.execute(denied.fix.split(";")[0])
        assert check_server(limited, None, "standby", source) == []
        cur.execute("DROP USER 'pf_standby'@'127.0.0.1'")
        # stopped replication is a warning
        cur.execute("STOP SLAVE SQL_THREAD")
        try:
            [stopped] = check_server(standby, None, "standby", source)
        finally:
            cur.execute("START SLAVE SQL_THREAD")
    assert (stopped.setting, stopped.found, stopped.fatal) == (
        f"replication from {sandbox.source.address}", "Slave_IO_Running Yes, Slave_SQL_Running No", False)


def test_gate_run_checks_the_standby(sandbox: Sandbox, unique_name: str) -> None:
    source = server_config(sandbox.source)
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, standby=source)  # not a replica of itself
    with ThreadPoolExecutor(1) as pool, pytest.raises(PreflightFailed) as failed:  # not in the main thread:
        pool.submit(Pipeline(dc, unique_name).run).result(timeout=60)  # run() would take its signals
    assert str(failed.value).startswith(f"The standby server {source.address} is not ready for gate (1 problem(s)):\n"
                                        "  - replication is not set up (SHOW SLAVE STATUS is empty)")
    gone, gone_too = ServerConfig("127.0.0.1", free_port()), ServerConfig("127.0.0.1", free_port())
    # with a standby, a server that does not answer is a warning; without one, an error
    warnings, found = require_channel(ChannelSettings(unique_name, gone, gone_too, server_id=4242), [("SELECT 1", ())])
    assert found == [[]]  # the source's answers to the caller's queries: none, it did not answer
    assert [(w.setting, w.found, w.fatal) for w in warnings] == [
        (f"the source {gone.address}", "unreachable", False), (f"the standby {gone_too.address}", "unreachable", False)]
    assert warnings[0].fix.endswith("Meanwhile gate fails over to the standby if it stays down.")
    assert warnings[1].fix.endswith("Meanwhile gate cannot fail over until it is back.")
    with pytest.raises(ConnectionFailed):
        require_channel(ChannelSettings(unique_name, gone, server_id=4242))


def test_gtid_lists_per_domain_and_server() -> None:
    assert parse_gtids("0-1-100,0-2-5,1-1-7") == {("0", 1): 100, ("0", 2): 5, ("1", 1): 7}  # a binlog state
    assert parse_gtids("0-2-5, 0-1-100,0-2-3") == {("0", 2): 5, ("0", 1): 100}
    assert parse_gtids(None) == {}


def test_a_dedupe_marker_of_an_earlier_gate_is_read() -> None:
    """A switch in progress when gate was upgraded: the old marker kept a sequence number per domain."""
    old = ('{"mode": "gtid", "held_gtids": {"0": 172, "1": 5}, "origin_server_id": 201, "margin": 5.0, '
           '"checkpoint_id": 40, "from_instance": "db1:3306", "sampled_at": 1700000000}')
    marker = failover.DedupeMarker.from_json(old)
    assert marker.held_gtids == {"0": [201, 172], "1": [201, 5]}
    assert failover.DedupeMarker.from_json(marker.to_json()) == marker
