"""gate run's /metrics, /healthz and /readyz, scraped over HTTP while a channel runs on real servers."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from prometheus_client.parser import text_string_to_metric_families

from gate.capture.metrics import MetricsServer, RunMetrics
from gate.common.config import ChannelDefaults
from gate.common.errors import MetricsPortBusy
from gate.devtools.sandbox import Sandbox, free_port
from tests.replay import GATE, STARTED, make_channel, running, server_config, wait_caught_up, wait_sampled

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except urllib.error.URLError as exc:  # not listening (yet)
        return 0, str(exc.reason)


def scrape(port: int) -> Samples:
    status, text = get(port, "/metrics")
    assert status == 200, text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, channel: str, **labels: str) -> float:
    return samples[(name, tuple(sorted({"channel": channel, **labels}.items())))]


def wait_status(port: int, path: str, status: int, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        got, body = get(port, path)
        if got == status:
            return body
        assert time.monotonic() < deadline, f"{path} still {got} ({body.strip()}) after {timeout} s, not {status}"
        time.sleep(0.2)


def dc_checkpoint_and_optypes(box: Sandbox, channel: str) -> tuple[tuple[int, int], dict[str, int]]:
    with box.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid FROM transfer_checkpoint")
        checkpoint = tuple(cur.fetchone())
        cur.execute("SELECT optype, COUNT(*) FROM transfer_data GROUP BY optype")
        return (checkpoint[0], checkpoint[1]), {optype: count for optype, count in cur.fetchall()}


def test_metrics_follow_the_rows_lag_stays_near_zero_when_idle_and_healthz_sees_a_blocked_dc(
        make_sandbox: Callable[..., Sandbox], unique_name: str) -> None:
    box = make_sandbox()
    port = free_port()
    dc = make_channel(box.dc, box.source, unique_name, defaults=ChannelDefaults(
        batch_rows=50, metrics_port=port, stuck_after_seconds=2.0, ready_lag_seconds=5.0))
    with running(dc, unique_name), box.source.connect() as src, src.cursor() as cur:
        assert wait_status(port, "/readyz", 200).startswith("ready: connected to the source and the DC")
        before = scrape(port)
        assert value(before, "gate_source_connected", unique_name) == 1
        assert value(before, "gate_writer_queue_capacity", unique_name) == 8  # 2 writers, 4 chunks each
        assert value(before, "gate_decoder_queue_capacity", unique_name) == 4
        assert value(before, "gate_build_info", unique_name, version="0.1.0") == 1
        cur.execute("SHOW MASTER STATUS")
        binlog, start = cur.fetchone()[:2]
        cur.execute("CREATE DATABASE m")
        cur.execute("CREATE TABLE m.t (id INT PRIMARY KEY, v VARCHAR(20))")
        for n in range(3):
            cur.execute("INSERT INTO m.t VALUES " + ",".join(f"({n * 100 + i}, 'x')" for i in range(100)))
            src.commit()
        cur.execute("UPDATE m.t SET v = 'y' WHERE id < 10")
        cur.execute("DELETE FROM m.t WHERE id >= 290")
        src.commit()
        checkpoint = wait_caught_up(box.source, box.dc, unique_name)
        time.sleep(0.5)  # the writers' reports and the checkpoint reach the scrape within a loop turn
        stored, optypes = dc_checkpoint_and_optypes(box, unique_name)
        assert stored == checkpoint
        assert optypes == {"CREATETABLE": 1, "INSERT": 300, "UPDATE": 10, "DELETE": 10}
        flowed = scrape(port)
        assert (value(flowed, "gate_checkpoint_id", unique_name),
                value(flowed, "gate_checkpoint_tid", unique_name)) == checkpoint
        assert {optype: value(flowed, "gate_rows_written_total", unique_name, optype=optype)
                for optype in optypes} == optypes
        cur.execute(f"SHOW BINLOG EVENTS IN '{binlog}' FROM {start}")
        events = [row[2] for row in cur.fetchall()]
        assert (value(flowed, "gate_transactions_total", unique_name)
                - value(before, "gate_transactions_total", unique_name)) == events.count("Gtid"), events
        assert value(flowed, "gate_write_batch_duration_seconds_count", unique_name) >= 4  # a chunk per INSERT
        assert value(flowed, "gate_commit_to_checkpoint_seconds_count", unique_name) >= 1
        assert abs(value(flowed, "gate_last_event_timestamp_seconds", unique_name) - time.time()) < 30

        for _ in range(4):  # idle: heartbeats keep the lag at 0, for seconds after the last write
            time.sleep(1.0)
            assert value(scrape(port), "gate_replication_lag_seconds", unique_name) == 0.0
        assert get(port, "/healthz")[0] == 200

        with box.dc.connect(unique_name) as blocker, blocker.cursor() as lock:
            lock.execute("LOCK TABLES transfer_data WRITE")
            cur.execute("INSERT INTO m.t VALUES (1000, 'blocked')")
            src.commit()
            body = wait_status(port, "/healthz", 503, timeout=20)
            assert body.startswith("stuck: the checkpoint has not moved for ")
            assert body.endswith("s (limit 2 s) while 1 chunk(s) wait for the DC writers\n")
            stuck = scrape(port)
            assert value(stuck, "gate_checkpoint_id", unique_name) == checkpoint[0]
            assert value(stuck, "gate_replication_lag_seconds", unique_name) >= 2.0
            assert wait_status(port, "/readyz", 200).startswith("ready")  # lag 2+ s is under 5 s
            lock.execute("UNLOCK TABLES")
        assert wait_status(port, "/healthz", 200).startswith("ok: checkpoint id=")
        after = wait_caught_up(box.source, box.dc, unique_name)
        time.sleep(0.5)
        assert after == (checkpoint[0] + 1, checkpoint[1] + 1)
        assert value(scrape(port), "gate_checkpoint_id", unique_name) == after[0]


def test_healthz_is_503_while_the_dc_is_read_locked_and_200_after(
        make_sandbox: Callable[..., Sandbox], unique_name: str) -> None:
    box = make_sandbox()
    port = free_port()
    dc = make_channel(box.dc, box.source, unique_name, defaults=ChannelDefaults(metrics_port=port,
                                                                               stuck_after_seconds=2.0))
    with running(dc, unique_name), box.source.connect() as src, src.cursor() as cur:
        wait_status(port, "/healthz", 200)
        cur.execute("CREATE DATABASE m")
        cur.execute("CREATE TABLE m.t (id INT PRIMARY KEY)")
        checkpoint = wait_caught_up(box.source, box.dc, unique_name)
        with box.dc.connect() as blocker, blocker.cursor() as lock:
            lock.execute("FLUSH TABLES WITH READ LOCK")
            cur.execute("INSERT INTO m.t VALUES (1), (2)")
            src.commit()
            assert wait_status(port, "/healthz", 503, timeout=20).startswith("stuck: ")
            assert value(scrape(port), "gate_checkpoint_id", unique_name) == checkpoint[0]
            lock.execute("UNLOCK TABLES")
        assert wait_status(port, "/healthz", 200).startswith("ok: checkpoint id=")
        after = wait_caught_up(box.source, box.dc, unique_name)
        assert after == (checkpoint[0] + 2, checkpoint[1] + 1)
        wait_until = time.monotonic() + 5
        while value(scrape(port), "gate_checkpoint_id", unique_name) != after[0]:
            assert time.monotonic() < wait_until, "gate_checkpoint_id did not reach the DC's checkpoint"
            time.sleep(0.1)


def test_readyz_is_503_while_the_source_is_down_and_healthz_stays_200(
        make_sandbox: Callable[..., Sandbox], unique_name: str) -> None:
    box = make_sandbox()
    port = free_port()
    dc = make_channel(box.dc, box.source, unique_name, defaults=ChannelDefaults(metrics_port=port,
                                                                               stuck_after_seconds=2.0))
    with running(dc, unique_name):
        wait_status(port, "/readyz", 200)
        box.source.stop()
        try:
            assert wait_status(port, "/readyz", 503) == "not connected to the source\n"
            down = scrape(port)
            assert value(down, "gate_source_connected", unique_name) == 0
            assert value(down, "gate_source_disconnects_total", unique_name) == 1
            time.sleep(3)  # longer than stuck_after_seconds: waiting for the source is not being stuck
            assert get(port, "/healthz") == (
                200, "the source is unreachable; gate reconnects (/readyz says 503 meanwhile)\n")
        finally:
            box.source.start()
        assert wait_status(port, "/readyz", 200, timeout=60).startswith("ready")
        up = scrape(port)
        assert value(up, "gate_source_connected", unique_name) == 1
        assert value(up, "gate_source_disconnects_total", unique_name) == 1


def test_a_port_in_use_is_refused_with_the_options_to_change() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortBusy) as refused:
            MetricsServer(RunMetrics("shop", lambda: 0), "127.0.0.1", port)
    assert str(refused.value) == (
        f"gate cannot serve its metrics on 127.0.0.1:{port} ([Errno 98] Address already in use). Choose a free "
        "port with --metrics-port (or the channel's metrics_port; 0 turns the endpoints off) and an address of "
        "this host with --metrics-address.")
    assert refused.value.exit_code == 2


def test_gate_run_metrics_options_override_the_channel_setting(
        make_sandbox: Callable[..., Sandbox], unique_name: str, tmp_path: Path) -> None:
    box = make_sandbox()
    port = free_port()
    make_channel(box.dc, box.source, unique_name)  # metrics_port 0: the option alone turns them on
    config = tmp_path / "config.yaml"
    config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {box.dc.port}\n  user: root\n  password: ''\n")
    with open(tmp_path / "gate.log", "wb") as log:
        gate = subprocess.Popen([GATE, "--config", str(config), "run", unique_name, "--no-check", "--metrics-port",
                                 str(port), "--metrics-address", "127.0.0.1"], stdout=log, stderr=log)
    STARTED.append(gate)
    assert wait_status(port, "/readyz", 200).startswith("ready: connected to the source and the DC, ")
    assert value(scrape(port), "gate_checkpoint_id", unique_name) == 0
    gate.send_signal(signal.SIGTERM)
    assert gate.wait(timeout=30) == 0
    assert f"channel {unique_name}: metrics on http://127.0.0.1:{port}/metrics" in (tmp_path / "gate.log").read_text()


def test_a_switch_to_the_standby_counts_one_failover_and_one_lost_stream(
        make_sandbox: Callable[..., Sandbox], unique_name: str) -> None:
    box = make_sandbox(with_standby=True)
    assert box.standby is not None
    port = free_port()
    dc = make_channel(box.dc, box.source, unique_name, standby=server_config(box.standby), defaults=ChannelDefaults(
        standby_sample_seconds=0.3, failover_after_seconds=2.0, failover_margin_seconds=1.0, metrics_port=port))
    with running(dc, unique_name):
        wait_sampled(box.dc, unique_name)
        time.sleep(2.5)  # a sample (whole seconds) older than the last transaction minus the 1 s margin
        with box.source.connect() as src, src.cursor() as cur:
            cur.execute("CREATE DATABASE m")
            cur.execute("CREATE TABLE m.t (id INT PRIMARY KEY)")
        box.wait_standby_caught_up()
        wait_caught_up(box.source, box.dc, unique_name)
        box.source.kill()
        deadline = time.monotonic() + 30
        while value(scrape(port), "gate_failovers_total", unique_name) != 1:
            assert time.monotonic() < deadline, "no failover counted within 30 s of the source's death"
            time.sleep(0.2)
        with box.standby.connect() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO m.t VALUES (1)")
        checkpoint = wait_caught_up(box.standby, box.dc, unique_name)
        wait_status(port, "/readyz", 200)
        deadline = time.monotonic() + 5
        while (figures := scrape(port)) and value(figures, "gate_checkpoint_id", unique_name) != checkpoint[0]:
            assert time.monotonic() < deadline, "gate_checkpoint_id did not reach the DC's checkpoint"
            time.sleep(0.1)
    assert value(figures, "gate_failovers_total", unique_name) == 1
    assert value(figures, "gate_source_disconnects_total", unique_name) == 1
    assert value(figures, "gate_source_connected", unique_name) == 1


def test_an_idle_channel_has_lag_0_in_the_gauge_status_and_channel_list(sandbox: Sandbox, unique_name: str,
                                                                       gate: Callable[..., Result]) -> None:
    """The README's lag: exactly 0 while gate stands at an idle source's end, wherever it is shown. Before, the
    gauge counted the time since the last heartbeat (0.05 to 0.9 s)."""
    db = f"{unique_name}_s"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
    port = free_port()
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      defaults=ChannelDefaults(metrics_port=port))
    with running(dc, unique_name):
        wait_status(port, "/readyz", 200)
        with sandbox.source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{db}`.t VALUES (1)")
            conn.commit()
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        gauge = []
        for _ in range(10):
            time.sleep(0.3)
            gauge.append(value(scrape(port), "gate_replication_lag_seconds", unique_name))
        status = gate("--json", "status", unique_name, "--sample", "0")
        listed = gate("--json", "channel", "list")
    assert gauge == [0.0] * 10
    assert json.loads(status.stdout)["lag_seconds"] == 0.0
    assert [c["lag_seconds"] for c in json.loads(listed.stdout) if c["channel"] == unique_name] == [0.0]
