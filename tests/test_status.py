"""``gate status``: the standby, the age of its newest sample, the failover settings and the switch history."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from click.testing import Result

from gate.admin.status import channel_status
from gate.capture.failover import PLANNED
from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import Sandbox
from tests.replay import dc_rows, make_channel, running, server_config, wait_caught_up, wait_row, wait_sampled

Gate = Callable[..., Result]
FAST = ChannelDefaults(standby_sample_seconds=0.3, failover_margin_seconds=1.0)


def test_status_shows_the_standby_its_sample_age_and_the_switches(
        gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    assert sandbox.standby is not None
    source, standby = sandbox.source.address, sandbox.standby.address
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, standby=server_config(sandbox.standby),
                      failover_mode="fingerprint", defaults=FAST)
    with running(dc, unique_name):
        wait_sampled(sandbox.dc, unique_name)
        time.sleep(2.1)  # then a checkpoint newer than a sample plus the margin (whole seconds)
        with sandbox.source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE src_{unique_name}")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        live = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)
        text = gate("status", unique_name, "--sample", "0").stdout
    assert (live["state"], live["source"], live["standby"]) == ("running", source, standby)
    assert 0 <= live["standby_sample_age_seconds"] < 2
    assert (live["failover_mode"], live["on_divergence"], live["switches"]) == ("fingerprint", "stop", [])
    width = len("standby_sample_age_seconds") + 2
    for key, value in (("standby", standby), ("failover_mode", "fingerprint"), ("on_divergence", "stop"),
                       ("switches", "0")):
        assert f"\n{key.ljust(width)}{value}\n" in text + "\n"
    assert re.search(r"\nstandby_sample_age_seconds  \d+\.\d\n", text)

    checkpoint = live["checkpoint_id"]
    assert gate("channel", "switch", unique_name, "--yes").exit_code == 0
    after = json.loads(gate("--json", "status", unique_name).stdout)
    assert (after["state"], after["source"], after["standby"], after["standby_sample_age_seconds"]) == (
        "stopped", standby, None, None)  # the old source replicates from nobody: no standby, no samples
    [switch] = after["switches"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", switch.pop("switched_at"))
    assert switch == {"from_instance": source, "to_instance": standby, "reason": PLANNED, "at_id": checkpoint}
    lines = gate("status", unique_name).stdout.splitlines()
    assert lines[-4:-2] == [f"{'switches'.ljust(width)}1", ""]
    assert lines[-2].split() == ["switched_at", "from_instance", "to_instance", "at_id", "reason"]
    assert lines[-1].split()[2:] == [source, standby, str(checkpoint), *PLANNED.split()]


def _source_now(sandbox: Sandbox) -> tuple[str, int]:
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        cur.execute("SELECT UNIX_TIMESTAMP()")
        return f"{file}:{pos}", int(cur.fetchone()[0])


def test_status_figures_come_from_real_positions(gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        with running(dc, unique_name):
            cur.execute(f"CREATE DATABASE {db}")  # no table: no row, no tid
            cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")  # id 1, tid 1
            for n in range(10):  # ids 2..31, tids 2..11
                cur.execute(f"INSERT INTO {db}.t VALUES ({3 * n}), ({3 * n + 1}), ({3 * n + 2})")
            cur.execute("SELECT UNIX_TIMESTAMP()")
            inserted_at = int(cur.fetchone()[0])
            wait_caught_up(sandbox.source, sandbox.dc, unique_name)
            position, _ = _source_now(sandbox)
            caught_up = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)

            loaded: list[float] = []  # when the load started and ended

            def load() -> None:  # at most 500 rows/s: 10-row transactions every 20 ms (fewer on a busy machine)
                with sandbox.source.connect() as lconn, lconn.cursor() as lcur:
                    loaded.append(time.monotonic())
                    for n in range(150):
                        values = ", ".join(f"({1000 + 10 * n + k})" for k in range(10))
                        lcur.execute(f"INSERT INTO {db}.t VALUES {values}")
                        time.sleep(0.02)
                    loaded.append(time.monotonic())

            loader = threading.Thread(target=load)
            loader.start()
            time.sleep(0.5)
            moving = json.loads(gate("--json", "status", unique_name, "--sample", "2").stdout)
            loader.join()
            wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        checkpointed = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)
        time.sleep(2.2)  # the source's clock moves on; then a transaction gate does not read
        cur.execute(f"INSERT INTO {db}.t VALUES (-1)")
        behind_position, source_now = _source_now(sandbox)
        stopped = json.loads(gate("--json", "status", unique_name, "--sample", "1").stdout)
        text = gate("status", unique_name, "--sample", "0").stdout
    assert caught_up["state"] == "running"
    assert (caught_up["checkpoint_id"], caught_up["checkpoint_tid"]) == (31, 11)
    assert caught_up["source_position"] == caught_up["resume_position"] == position
    assert caught_up["lag_seconds"] == 0.0
    last = datetime.strptime(caught_up["last_create_time"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    assert inserted_at - 1 <= last.timestamp() <= inserted_at
    achieved = 1500 / (loaded[1] - loaded[0])  # the source's own rate: what gate's figure must follow
    assert moving["state"] == "running" and 0.5 * achieved <= moving["rows_per_second"] <= 750, (moving, achieved)
    assert (checkpointed["checkpoint_id"], checkpointed["checkpoint_tid"]) == (31 + 1500, 11 + 150)
    assert stopped["state"] == "stopped" and stopped["rows_per_second"] is None
    assert stopped["checkpoint_id"] == checkpointed["checkpoint_id"]
    assert stopped["source_position"] == behind_position != stopped["resume_position"]
    assert stopped["resume_position"] == checkpointed["resume_position"]
    last_event = datetime.strptime(checkpointed["last_create_time"], "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=timezone.utc).timestamp()
    # the age of the INSERT gate did not read (the oldest transaction it lacks), not that of the last one it
    # checkpointed, 2.2 s older
    assert 0 <= stopped["lag_seconds"] <= 1 < source_now - last_event  # whole seconds: 2.2 s reads as 2 or 3
    assert re.search(rf"\ncheckpoint_id +{stopped['checkpoint_id']}\n", text)
    assert re.search(r"\nlag_seconds +\d+\.\d+\n", text) and "\nstate " in text and " stopped\n" in text


@pytest.mark.parametrize("mode", ["gtid", "fingerprint"])
def test_lag_is_zero_after_a_failover_to_an_idle_standby(make_sandbox: Callable[..., Sandbox], mode: str) -> None:
    """The standby repeats transactions the DC holds from the sample on; once gate has dropped them and the
    standby has nothing more, gate is at its end: lag 0, resume position = SHOW MASTER STATUS, and the next
    transaction takes the next tid."""
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    defaults = replace(FAST, failover_after_seconds=2.0)
    dc = make_channel(box.dc, box.source, "idle", standby=server_config(box.standby), failover_mode=mode,
                      defaults=defaults)
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE d")
        cur.execute("CREATE TABLE d.t (id INT PRIMARY KEY)")  # id 1, tid 1
        with running(dc, "idle"):
            wait_sampled(box.dc, "idle")
            for n in range(10):  # ids and tids 2..11, read again from the standby after the switch
                cur.execute(f"INSERT INTO d.t VALUES ({n})")
                time.sleep(0.2)
            box.wait_standby_caught_up()
            wait_caught_up(box.source, box.dc, "idle")
            box.source.kill()
            wait_row(box.dc, "idle", "SELECT 1 FROM gate_switch", timeout=60)  # with up to 30 s for the relay log
            time.sleep(3.0)  # the standby stays idle: its clock moves on
            with box.standby.connect() as sconn, sconn.cursor() as scur:
                scur.execute("SHOW MASTER STATUS")
                file, pos = scur.fetchone()[:2]
            status = channel_status(dc, "idle", sample_seconds=0)
            assert (status.source, status.checkpoint_id, status.checkpoint_tid) == (box.standby.address, 11, 11)
            assert status.source_position == status.resume_position == f"{file}:{pos}"
            assert status.lag_seconds == 0.0
            with box.standby.connect() as sconn, sconn.cursor() as scur:
                scur.execute("INSERT INTO d.t VALUES (100)")
            wait_caught_up(box.standby, box.dc, "idle")
    rows = dc_rows(box.dc, "idle")
    assert [(r[0], r[1]) for r in rows] == [(n, n) for n in range(1, 13)]
    assert [(r[5], json.loads(r[7])) for r in rows[1:]] == [
        (box.source.address, {"NEW": [{"id": str(n)}]}) for n in range(10)] + [
        (box.standby.address, {"NEW": [{"id": "100"}]})]


def test_lag_is_zero_when_only_a_binlog_rotation_follows_the_checkpoint(
        gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    """FLUSH BINARY LOGS moves the source's end to a new file without a transaction gate could checkpoint:
    gate is still at the end (lag 0); a transaction after the rotation makes it behind again."""
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        with running(dc, unique_name):
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY)")
            wait_caught_up(sandbox.source, sandbox.dc, unique_name)
            caught_up = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)
            cur.execute("FLUSH BINARY LOGS")
            time.sleep(2.2)
            rotated_to, _ = _source_now(sandbox)
            rotated = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)
        cur.execute(f"INSERT INTO {db}.t VALUES (1)")  # gate is stopped: it does not read it
        time.sleep(1.2)  # its age: the lag
        behind = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)
    assert caught_up["lag_seconds"] == 0.0
    assert caught_up["resume_position"] == rotated["resume_position"] == behind["resume_position"]
    assert rotated["source_position"] == rotated_to != rotated["resume_position"]
    assert rotated["lag_seconds"] == 0.0
    assert behind["source_position"] != rotated_to and 1 <= behind["lag_seconds"] <= 3
