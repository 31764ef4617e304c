"""Faults around a running gate: source and DC restarts (clean and kill -9), purged binlogs."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gate.capture.pipeline import Pipeline
from gate.common.config import ChannelDefaults
from gate.common.errors import PositionPurged
from gate.devtools.sandbox import MariaDBServer, Sandbox
from gate.devtools.workload import RandomWorkload
from tests.replay import (
    dc_rows,
    fresh_target,
    make_channel,
    replay,
    running,
    server_config,
    start_gate,
    table_contents,
    wait_caught_up,
    wait_running,
    wait_started,
)


def _bounce(server: MariaDBServer, kill: bool) -> None:
    server.kill() if kill else server.stop()
    time.sleep(0.5)
    server.start()


def _resume_behind_source_end(box: Sandbox, channel: str) -> bool:
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()[:2]
    with box.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT log_file, log_pos FROM gate_resume")
        return tuple(cur.fetchone()) < tuple(end)


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_source_and_dc_restarts_mid_stream_end_exactly_once(
        make_sandbox: Callable[..., Sandbox], kill: bool) -> None:
    """Each phase ends with a 6,000-row transaction; the victim restarts right after its commit, while
    gate is still reading or writing it (asserted), so gate must resume from the last whole transaction.
    The first phase waits for gate's start-up to end: a source that cannot be reached while gate starts
    stops it, naming the source (the restarts here are mid-stream; on a quiet machine the first phase's
    load took 1 s and the source went down before gate had read its binary logs)."""
    box = make_sandbox()
    db = "shop"
    dc = make_channel(box.dc, box.source, "faults", defaults=ChannelDefaults(batch_rows=50, writers=2))
    make_channel(box.dc, box.source, "reference")
    with running(dc, "faults") as pipeline:
        wait_started(pipeline)
        for phase, victim in enumerate((box.source, box.dc, None)):
            with box.source.connect() as conn, conn.cursor() as cur:
                work = RandomWorkload(conn, f"{db}{phase}", seed=phase, ddl_every=20)
                work.setup()
                work.run(150)
                cur.execute(f"CREATE TABLE {db}{phase}.bulk (id INT PRIMARY KEY, v VARCHAR(20))")
                conn.begin()
                cur.executemany(f"INSERT INTO {db}{phase}.bulk VALUES (%s, %s)", [(i, f"v{i}") for i in range(6000)])
                conn.commit()
            if victim is not None:
                assert _resume_behind_source_end(box, "faults"), "gate had caught up before the restart"
                _bounce(victim, kill)
        wait_caught_up(box.source, box.dc, "faults", timeout=120)
    with running(dc, "reference"):
        wait_caught_up(box.source, box.dc, "reference", timeout=120)
    rows = dc_rows(box.dc, "faults")
    assert rows == dc_rows(box.dc, "reference")
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    with box.source.connect() as source:
        for phase in range(3):
            with fresh_target(box.dc, f"{db}{phase}") as target:
                replay([r for r in rows if r[2] == f"{db}{phase}"], target)
                assert table_contents(target, f"{db}{phase}") == table_contents(source, f"{db}{phase}")


def test_purged_resume_position_is_refused_with_the_oldest_binlog_named(make_sandbox: Callable[..., Sandbox]) -> None:
    box = make_sandbox()
    dc = make_channel(box.dc, box.source, "purged")
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE p")
        cur.execute("CREATE TABLE p.t (id INT PRIMARY KEY)")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("INSERT INTO p.t VALUES (1)")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("PURGE BINARY LOGS TO 'mysql-bin.000003'")
        cur.execute("SHOW BINARY LOGS")
        oldest = cur.fetchone()[0]
    with box.dc.connect("purged") as conn, conn.cursor() as cur:
        cur.execute("SELECT log_file, log_pos FROM gate_resume")
        file, pos = cur.fetchone()
    assert file == "mysql-bin.000001" and oldest > file
    with pytest.raises(PositionPurged) as err:
        Pipeline(dc, "purged", preflight=False).run()
    assert str(err.value) == (
        f"The resume position {file}:{pos} is no longer on the source "
        f"{box.source.address}: its oldest binary log is {oldest}. The changes in between are lost "
        "to gate. Rebuild the consumers' copy and set a new start position "
        "('gate channel set-position purged --now'), or restore the binlogs."
    )
    with box.dc.connect("purged") as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM transfer_data")
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT log_file, log_pos FROM gate_resume")
        assert cur.fetchone() == (file, pos)


def test_second_signal_stops_without_draining_while_the_dc_is_down(
        make_sandbox: Callable[..., Sandbox], tmp_path: Path) -> None:
    """SIGTERM drains, and so waits for a DC that is down; a second SIGTERM ends gate at once (exit 1,
    the checkpoint named). The restart removes and rewrites what was in flight: the result is exact."""
    box = make_sandbox()
    make_channel(box.dc, box.source, "drain", defaults=ChannelDefaults(batch_rows=50, writers=2))
    make_channel(box.dc, box.source, "reference")
    gate = start_gate(tmp_path, box.dc, "drain")
    wait_running(box.dc, "drain", gate)
    with box.source.connect() as conn:
        work = RandomWorkload(conn, "shop", seed=3, ddl_every=20)
        work.setup()
        work.run(100)
        wait_caught_up(box.source, box.dc, "drain")
        box.dc.kill()
        work.run(200)  # read by gate while its writers cannot reach the DC
    time.sleep(1.0)
    gate.send_signal(signal.SIGTERM)
    time.sleep(3.0)
    assert gate.poll() is None, "gate stopped without draining after one SIGTERM"
    gate.send_signal(signal.SIGTERM)
    assert gate.wait(timeout=20) == 1
    log = (tmp_path / "drain.log").read_text()
    assert "second stop signal" in log
    assert re.search(r"error: Channel drain stopped at the second signal without draining its writers\. The "
                     r"checkpoint stored in the DC is at most id=\d+ tid=\d+", log)
    box.dc.start()
    gate = start_gate(tmp_path, box.dc, "drain")
    wait_running(box.dc, "drain", gate)
    wait_caught_up(box.source, box.dc, "drain")
    gate.send_signal(signal.SIGTERM)
    assert gate.wait(timeout=30) == 0
    with running(server_config(box.dc), "reference"):
        wait_caught_up(box.source, box.dc, "reference")
    rows = dc_rows(box.dc, "drain")
    assert rows == dc_rows(box.dc, "reference") and [r[0] for r in rows] == list(range(1, len(rows) + 1))
