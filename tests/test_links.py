"""Links between datacenters: a TCP proxy (tests.linkproxy) between gate and the source or the DC resets,
black-holes or slows the link under a running gate process; each test ends with every transaction once,
gap-free ids and the fold of the channel equal to the source."""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pymysql
import pytest
from click.testing import Result
from prometheus_client.parser import text_string_to_metric_families

from gate.capture.reader import current_position
from gate.common.config import ChannelDefaults, Secret, ServerConfig
from gate.common.dc import ChannelSettings, connect, create_channel, lock_holder, write_start_position
from gate.devtools.sandbox import Sandbox, free_port
from tests.linkproxy import LinkProxy
from tests.replay import (
    GATE,
    STARTED,
    dc_rows,
    fresh_target,
    make_channel,
    replay,
    running,
    server_config,
    start_gate,
    table_contents,
    wait_caught_up,
    wait_row,
    wait_running,
    wait_started,
)

Gate = Callable[..., Result]
ABOVE_CHECKPOINT = "SELECT COUNT(*) FROM transfer_data WHERE id > (SELECT id FROM transfer_checkpoint)"


@pytest.fixture
def proxies() -> Iterator[Callable[[int], LinkProxy]]:
    made: list[LinkProxy] = []

    def make(target: int) -> LinkProxy:
        made.append(LinkProxy(target))
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()


def _gate_via(tmp_path: Path, dc_port: int, channel: str) -> subprocess.Popen[bytes]:
    """``gate run CHANNEL`` whose DC is 127.0.0.1:``dc_port`` (a proxy), logging to tmp_path/CHANNEL.log."""
    config = tmp_path / "proxied.yaml"
    config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {dc_port}\n  user: root\n  password: ''\n")
    log = open(tmp_path / f"{channel}.log", "ab")
    gate = subprocess.Popen([GATE, "--config", str(config), "run", channel, "--no-check"], stdout=log, stderr=log)
    STARTED.append(gate)
    return gate


def _lag(port: int, channel: str) -> float:
    """The running gate's gate_replication_lag_seconds."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return next(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                if sample.name == "gate_replication_lag_seconds" and sample.labels["channel"] == channel)


def _wait_log(path: Path, pattern: str, timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while True:
        found = re.search(pattern, path.read_text())
        if found:
            return found
        assert time.monotonic() < deadline, f"no line matching {pattern!r} in the log after {timeout} s"
        time.sleep(0.1)


def _scalar(box: Sandbox, channel: str, sql: str) -> int:
    with box.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return int(cur.fetchone()[0])


def _insert(cur: pymysql.cursors.Cursor, db: str, ids: range) -> None:
    for i in ids:
        cur.execute(f"INSERT INTO {db}.t VALUES (%s, %s)", (i, f"value {i}"))


def _assert_exact(box: Sandbox, channel: str, db: str, inserts: int) -> None:
    """Each transaction once: ids gap-free, one INSERT row per row inserted on the source, fold == source."""
    rows = dc_rows(box.dc, channel)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    assert [r[6] for r in rows].count("INSERT") == inserts
    with box.source.connect() as source, fresh_target(box.dc, db) as target:
        replay(rows, target)
        assert table_contents(target, db) == table_contents(source, db)


def test_timeouts_of_every_connection_come_from_one_place() -> None:
    """PyMySQL's arguments of every server (the binlog stream overrides the read timeout alone), Spark's JDBC
    options and the JVM format("gate")'s Login.java carry gate.common.config's figures."""
    from gate.common.config import READ_TIMEOUT, WRITE_TIMEOUT
    from spark_readers.session import jdbc_timeouts

    args = ServerConfig("db", 3306, "u", Secret("")).connect_args()
    assert (args["connect_timeout"], args["read_timeout"], args["write_timeout"]) == (5, READ_TIMEOUT, WRITE_TIMEOUT)
    assert jdbc_timeouts() == {"connectTimeout": "5000", "socketTimeout": str(READ_TIMEOUT * 1000)}
    login = (Path(__file__).parents[1] / "spark_readers/jvm/src/main/java/gate/spark/Login.java").read_text()
    assert f'properties.setProperty("socketTimeout", "{READ_TIMEOUT * 1000}");' in login


def test_a_stop_then_a_source_reset_inside_a_transaction_leaves_nothing_above_the_checkpoint(
        sandbox: Sandbox, unique_name: str, tmp_path: Path, proxies: Callable[[int], LinkProxy]) -> None:
    """SIGTERM while gate reads a 2,000-row transaction (420 kB) through a slow source link, then the link is reset:
    gate exits 0 with nothing above the checkpoint; the next run reads the transaction whole."""
    proxy = proxies(sandbox.source.port)
    source = ServerConfig("127.0.0.1", proxy.port, "root", Secret(""))
    db = f"src_{unique_name}"
    with connect(server_config(sandbox.dc), "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, source, server_id=4343,
                                             defaults=ChannelDefaults(batch_rows=50, writers=2)))
        pos = current_position(source)
        with conn.cursor() as cur:
            write_start_position(cur, unique_name, pos.log_file, pos.log_pos, pos.gtid_pos, source.address)
    gate = start_gate(tmp_path, sandbox.dc, unique_name)
    wait_running(sandbox.dc, unique_name, gate)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(200))")
        _insert(cur, db, range(20))
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        proxy.bytes_per_second = 100_000  # 4 s for the transaction; its first decoder job (256 KiB) is written early
        conn.begin()
        cur.executemany(f"INSERT INTO {db}.t VALUES (%s, %s)", [(i, f"{i:0200}") for i in range(20, 2020)])
        conn.commit()
    wait_row(sandbox.dc, unique_name, ABOVE_CHECKPOINT.replace("COUNT(*)", "1"))  # chunks of it are written
    gate.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proxy.reset()
    assert gate.wait(timeout=30) == 0
    assert _scalar(sandbox, unique_name, ABOVE_CHECKPOINT) == 0
    log = (tmp_path / f"{unique_name}.log").read_text()
    assert re.search(r"removed the \d+ rows above the checkpoint \(id \d+\) of the transaction it stopped in", log)
    proxy.bytes_per_second = 0
    gate = start_gate(tmp_path, sandbox.dc, unique_name)
    wait_running(sandbox.dc, unique_name, gate)
    wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    gate.send_signal(signal.SIGTERM)
    assert gate.wait(timeout=30) == 0
    _assert_exact(sandbox, unique_name, db, 2020)


def test_a_black_holed_dc_is_warned_of_and_a_second_signal_ends_gate_at_once(
        sandbox: Sandbox, gate: Gate, unique_name: str, tmp_path: Path, proxies: Callable[[int], LinkProxy]) -> None:
    """The DC link black-holed: a WARNING names the DC and what waits after 5 s, 'gate status' shows the stall,
    an INFO says when the DC moves again. Black-holed again: a second SIGTERM ends gate within seconds, and the
    next run rewrites what was in flight."""
    proxy = proxies(sandbox.dc.port)
    db = f"src_{unique_name}"
    make_channel(sandbox.dc, sandbox.source, unique_name,
                 defaults=ChannelDefaults(batch_rows=50, writers=2, metrics_port=free_port()))
    log = tmp_path / f"{unique_name}.log"
    run = _gate_via(tmp_path, proxy.port, unique_name)
    wait_running(sandbox.dc, unique_name, run)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(200))")
        _insert(cur, db, range(30))
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        proxy.black_hole()
        _insert(cur, db, range(30, 80))
        warned = _wait_log(log, rf"WARNING gate\.capture\.stall: DC 127\.0\.0\.1:{proxy.port} has made no progress for "
                           r"5 s; waiting for it: (\d+ chunk\(s\) for the writers|the checkpoint at id \d+)( and |\s)",
                           timeout=15)
        status = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)
        assert status["state"] == "running" and status["dc_stalled_seconds"] >= 5, status
        assert "the DC has made no progress for" in gate("status", unique_name, "--sample", "0").stdout
        proxy.heal()
        _wait_log(log, rf"INFO gate\.capture\.stall: DC 127\.0\.0\.1:{proxy.port} moves again after \d+ s without "
                  "progress", timeout=15)
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        assert log.read_text().count("has made no progress") == 1, warned
        proxy.black_hole()
        _insert(cur, db, range(80, 100))
    time.sleep(1.0)
    run.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert run.poll() is None, "gate stopped without draining after one SIGTERM"
    run.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert run.wait(timeout=10) == 1
    assert time.monotonic() - signalled < 5
    proxy.heal()
    with sandbox.dc.connect() as conn:  # the DC closes the dead gate's connections once the link carries the close
        deadline = time.monotonic() + 10
        while lock_holder(conn, unique_name) is not None:
            assert time.monotonic() < deadline, "the stopped gate's lock is still held"
            time.sleep(0.05)
    run = start_gate(tmp_path, sandbox.dc, unique_name)
    wait_running(sandbox.dc, unique_name, run)
    wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    _assert_exact(sandbox, unique_name, db, 100)


def test_a_clean_stop_lets_the_channel_go_before_the_run_ends(
        sandbox: Sandbox, unique_name: str, proxies: Callable[[int], LinkProxy]) -> None:
    """The DC link takes 50 ms each way: a clean stop lets the channel's lock go before the run returns, so
    the lock is free the moment it has (the server frees a closed connection's locks only once the close
    reaches it, 50 ms later here) and a gate started right after takes the channel."""
    proxy = proxies(sandbox.dc.port)
    proxy.delay = 0.05
    make_channel(sandbox.dc, sandbox.source, unique_name)
    far = dataclasses.replace(server_config(sandbox.dc), port=proxy.port)
    holders = []
    with connect(server_config(sandbox.dc), "DC") as watcher:  # the direct link
        for _ in range(2):
            with running(far, unique_name) as pipeline:
                wait_started(pipeline)
                holders.append(lock_holder(watcher, unique_name))
            assert lock_holder(watcher, unique_name) is None
    assert None not in holders and holders[0] != holders[1]


def test_lag_is_the_age_of_the_oldest_transaction_not_checkpointed(
        sandbox: Sandbox, gate: Gate, unique_name: str, tmp_path: Path) -> None:
    """A channel stopped after a quiet while, then one transaction: status and list say its age, not the age of
    the last checkpointed one. Restarted while its checkpoint waits for a row lock in the DC: the gauge says the
    same, and the stall is warned of; once the lock goes, everything reads 0."""
    db = f"src_{unique_name}"
    port = free_port()
    make_channel(sandbox.dc, sandbox.source, unique_name, defaults=ChannelDefaults(metrics_port=port))
    run = start_gate(tmp_path, sandbox.dc, unique_name)
    wait_running(sandbox.dc, unique_name, run)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(200))")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=30) == 0
        time.sleep(3.0)  # quiet: the last checkpointed transaction ages
        _insert(cur, db, range(1))
        cur.execute("SELECT UNIX_TIMESTAMP()")
        inserted = cur.fetchone()[0]
        stopped = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)
        cur.execute("SELECT UNIX_TIMESTAMP()")
        asked = cur.fetchone()[0]
        listed = json.loads(gate("--json", "channel", "list").stdout)
        cur.execute("SELECT UNIX_TIMESTAMP()")
        listed_at = cur.fetchone()[0]
    # the age of the INSERT, not of the CREATE TABLE checkpointed 3 s before it
    assert stopped["state"] == "stopped" and 0 <= stopped["lag_seconds"] <= asked - inserted + 1, stopped
    assert 0 <= [c["lag_seconds"] for c in listed if c["channel"] == unique_name][0] <= listed_at - inserted + 1
    with sandbox.dc.connect(unique_name) as lock, lock.cursor() as held:
        held.execute("BEGIN")
        held.execute("SELECT * FROM gate_resume FOR UPDATE")  # the checkpoint's UPDATE waits for it
        run = start_gate(tmp_path, sandbox.dc, unique_name)
        wait_running(sandbox.dc, unique_name, run)
        wait_row(sandbox.dc, unique_name, ABOVE_CHECKPOINT.replace("COUNT(*)", "1"))  # read and written, not checkpointed
        lag, now = _lag(port, unique_name), time.time()
        assert now - inserted - 1 <= lag <= now - inserted + 1, (lag, now - inserted)
        _wait_log(tmp_path / f"{unique_name}.log", r"WARNING gate\.capture\.stall: DC 127\.0\.0\.1:\d+ has made no "
                  r"progress for 5 s; waiting for it: (\d+ chunk\(s\) for the writers and )?the checkpoint at id \d+ \(",
                  timeout=15)
        held.execute("ROLLBACK")
    wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    _wait_log(tmp_path / f"{unique_name}.log", r"INFO gate\.capture\.stall: DC .* moves again", timeout=10)
    deadline = time.monotonic() + 5
    while _lag(port, unique_name) != 0.0:
        assert time.monotonic() < deadline, "the gauge does not read 0 at the source's end"
        time.sleep(0.1)
    assert json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)["lag_seconds"] == 0.0
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    _assert_exact(sandbox, unique_name, db, 1)


def _burst(cur: pymysql.cursors.Cursor, db: str, first: int, transactions: int, rows: int) -> None:
    """``transactions`` transactions of ``rows`` inserts each, ids from ``first`` on."""
    for t in range(transactions):
        cur.execute("BEGIN")
        cur.executemany(f"INSERT INTO {db}.t VALUES (%s, %s)",
                        [(i, f"value {i}") for i in range(first + t * rows, first + (t + 1) * rows)])
        cur.execute("COMMIT")


def test_throughput_does_not_wait_for_the_round_trip_to_the_dc(
        sandbox: Sandbox, unique_name: str, tmp_path: Path, proxies: Callable[[int], LinkProxy]) -> None:
    """200 ms added to each round trip to the DC: a burst of 2,000 rows in 200 transactions is checkpointed about as
    fast as through the proxy without latency: within 1.5 times that plus 2 s (before: 5 round trips per
    checkpoint on the reading thread, one connection per writer, 2 round trips per chunk; the same burst took
    13.3 s against 0.95 s; now 1.07 s against 1.06 s). Each transaction once, fold == source."""
    proxy = proxies(sandbox.dc.port)
    db = f"src_{unique_name}"
    make_channel(sandbox.dc, sandbox.source, unique_name, defaults=ChannelDefaults(batch_rows=100, writers=2))
    proxy.delay = 0.1  # before gate starts: the writers size their connections to the link
    run = _gate_via(tmp_path, proxy.port, unique_name)
    wait_running(sandbox.dc, unique_name, run)
    seconds = []
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(200))")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        for n, delay in enumerate((0.0, 0.1)):
            proxy.delay = delay
            time.sleep(1.0)  # the checkpoint settles through the link as it is now
            started = time.monotonic()
            _burst(cur, db, 1 + n * 2000, 200, 10)
            wait_caught_up(sandbox.source, sandbox.dc, unique_name, timeout=120)
            seconds.append(time.monotonic() - started)
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    _assert_exact(sandbox, unique_name, db, 4000)
    assert seconds[1] < 1.5 * seconds[0] + 2.0, f"0 ms: {seconds[0]:.1f} s, 200 ms: {seconds[1]:.1f} s"
