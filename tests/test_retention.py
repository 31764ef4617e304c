"""Retention of transfer_data on real servers: the bound respects registered consumers, the checkpoint and
retain_days; readers before the oldest kept row get CursorExpiredError; gate run purges under load."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import Result

from gate.common.config import ChannelDefaults, Secret, ServerConfig
from gate.common.errors import CursorExpiredError
from gate.consume.client import Consumer, Cursor
from gate.devtools.sandbox import Sandbox, free_port
from tests.replay import make_channel, running, server_config, wait_caught_up
from tests.test_client import channel
from tests.test_metrics import scrape, value

Gate = Callable[..., Result]
OLD, NEW = "2020-01-01 00:00:00", "2037-01-01 00:00:00"


def rows(last: int, young_from: int) -> list[tuple[Any, ...]]:
    """Rows 1..last, two per transaction (tid = (id + 1) // 2); rows from ``young_from`` on are young."""
    return [(i, (i + 1) // 2, "shop", "t", OLD if i < young_from else NEW, "src:3306", "INSERT",
             {"NEW": [{"id": str(i)}]}) for i in range(1, last + 1)]


def ids(sandbox: Sandbox, name: str) -> list[int]:
    with sandbox.dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM transfer_data ORDER BY id")
        return [row[0] for row in cur.fetchall()]


def move(sandbox: Sandbox, name: str, consumer: str, cursor: tuple[int, int], moved: str | None = None) -> None:
    """Register (or move) a consumer's cursor as the client's commit() does; ``moved`` backdates its last move."""
    with sandbox.dc.connect(name, init_command="SET time_zone = '+00:00'") as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO gate_consumer (name, id, tid) VALUES (%s, %s, %s) "
                    "ON DUPLICATE KEY UPDATE id = VALUES(id), tid = VALUES(tid)", (consumer, *cursor))
        if moved is not None:
            cur.execute("UPDATE gate_consumer SET updated_at = %s WHERE name = %s", (moved, consumer))


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def test_a_lagging_consumer_keeps_its_rows_until_it_moves(sandbox: Sandbox, unique_name: str, gate: Gate) -> None:
    channel(sandbox, unique_name, rows(20, young_from=17), (20, 10))
    ok(gate("channel", "set", unique_name, "--retain-days", "7"))
    move(sandbox, unique_name, "billing", (5, 3))  # inside transaction 3 (rows 5 and 6): it keeps all of it
    assert ok(gate("channel", "purge", unique_name, "--dry-run")) == (
        f"channel {unique_name}: retain_days 7, checkpoint id 20, purged through id 0\n"
        "bound: id 4, pinned by consumer 'billing' (cursor id 5)\n"
        "would remove 4 rows (ids 1 to 4)\n")
    assert ids(sandbox, unique_name) == list(range(1, 21))  # a dry run removes nothing
    assert json.loads(ok(gate("--json", "channel", "purge", unique_name)))["removed_rows"] == 4
    assert ids(sandbox, unique_name) == list(range(5, 21))

    move(sandbox, unique_name, "billing", (12, 6))
    assert ok(gate("channel", "purge", unique_name)) == (
        f"channel {unique_name}: retain_days 7, checkpoint id 20, purged through id 4\n"
        "bound: id 12, pinned by consumer 'billing' (cursor id 12)\n"
        "removed 8 rows (ids 5 to 12)\n")
    assert ids(sandbox, unique_name) == list(range(13, 21))

    move(sandbox, unique_name, "billing", (20, 10))  # read everything: now only the age limit holds rows 17-20
    assert ok(gate("channel", "purge", unique_name)) == (
        f"channel {unique_name}: retain_days 7, checkpoint id 20, purged through id 12\n"
        "bound: id 16, pinned by retain_days 7 (row 17 is newer than 7 days)\n"
        "removed 4 rows (ids 13 to 16)\n")
    assert ids(sandbox, unique_name) == [17, 18, 19, 20]
    assert ok(gate("channel", "purge", unique_name, "--dry-run")).endswith("would remove 0 rows\n")
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT value FROM gate_meta WHERE name = 'purged_through'")
        assert cur.fetchone() == ("16",)
    with Consumer(server_config(sandbox.dc), unique_name, name="billing") as consumer:
        assert consumer.poll() == []  # caught up: nothing was lost to it


def expired_message(name: str, cursor: int, purged: int, retention: str) -> str:
    return (f"Channel '{name}' no longer holds the rows after cursor id {cursor}: retention has removed every row up "
            f"to id {purged}, so the oldest kept row is {purged + 1} ({retention}), and rows {cursor + 1} to {purged} "
            f"cannot be read again. Restart from the oldest kept row (Consumer.position({purged}), 'gate tail {name} "
            f"--from {purged + 1}') or rebuild from a new snapshot of the source tables; to keep it from happening "
            "again, register the reader as a named consumer (Consumer(..., name=...) with commit(), or the consumer "
            "name of the Spark loader or of format(\"gate\")), so that retention waits for it.")


def test_a_reader_before_the_oldest_kept_row_gets_cursor_expired(sandbox: Sandbox, unique_name: str,
                                                                gate: Gate) -> None:
    dc = channel(sandbox, unique_name, rows(10, young_from=9), (10, 5))
    ok(gate("channel", "set", unique_name, "--retain-days", "3"))
    with Consumer(dc, unique_name, batch=3) as early:
        assert [c.id for c in early.poll()] == [1, 2, 3]
        assert "removed 8 rows (ids 1 to 8)" in ok(gate("channel", "purge", unique_name))
        with pytest.raises(CursorExpiredError) as expired:
            early.poll()  # rows 4..8 are gone: an error, never a silent jump to row 9
        retention = "the channel keeps rows for 3 days, and longer until every registered consumer has read them"
        assert str(expired.value) == expired_message(unique_name, 3, 8, retention)
        assert early.cursor == Cursor(3, 2)
        early.cursor = early.position(early.purged_through())  # what the message says to do
        assert early.cursor == Cursor(8, 4)
        assert [c.id for c in early.poll()] == [9, 10]
    with sandbox.dc.connect() as conn, conn.cursor() as cur:  # an app user granted only the contract tables
        cur.execute("CREATE USER IF NOT EXISTS 'ret_app'@'%' IDENTIFIED BY 'pw'")
    ok(gate("channel", "grant", unique_name, "ret_app"))
    app = ServerConfig("127.0.0.1", sandbox.dc.port, "ret_app", Secret("pw"))
    with Consumer(app, unique_name) as fresh:
        with pytest.raises(CursorExpiredError) as expired:
            fresh.poll()
        assert str(expired.value) == expired_message(
            unique_name, 0, 8, f"'gate channel show {unique_name}' shows its retain_days")
    result = gate("tail", unique_name, "--from", "5", "--no-follow")
    assert result.exit_code == 1
    assert result.output == f"error: {expired_message(unique_name, 4, 8, retention)}\n"
    assert len(ok(gate("tail", unique_name, "--no-follow")).splitlines()) == 2  # the last 10: only 2 are kept
    result = gate("tail", unique_name, "--from", "2030-01-01T00:00:00", "--no-follow")  # before the oldest kept row
    assert (result.exit_code, result.output) == (1, f"error: {expired_message(unique_name, 0, 8, retention)}\n")
    assert len(ok(gate("tail", unique_name, "--from", "2037-01-01T00:00:00", "--no-follow")).splitlines()) == 2


def test_retention_is_off_for_an_existing_channel(sandbox: Sandbox, unique_name: str, gate: Gate) -> None:
    channel(sandbox, unique_name, rows(6, young_from=7), (6, 3))  # every row old and read by no one
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:  # as a channel made before retention
        cur.execute("DELETE FROM gate_settings WHERE name IN ('retain_days', 'consumer_max_idle_days', "
                    "'retention_interval_seconds')")
    shown = json.loads(ok(gate("--json", "channel", "show", unique_name)))["defaults"]
    assert (shown["retain_days"], shown["consumer_max_idle_days"]) == (0, 7.0)
    assert ok(gate("channel", "purge", unique_name)) == (
        f"channel {unique_name}: retain_days none, checkpoint id 6, purged through id 0\n"
        "bound: id 0, pinned by retention off (retain_days 0)\n"
        "removed 0 rows\n")
    assert ids(sandbox, unique_name) == [1, 2, 3, 4, 5, 6]
    ok(gate("channel", "set", unique_name, "--retain-days", "5"))
    ok(gate("channel", "set", unique_name, "--retain-days", "none"))
    assert json.loads(ok(gate("--json", "channel", "set", unique_name)))["retain_days"] == 0
    result = gate("channel", "set", unique_name, "--retain-days", "-3")
    assert (result.exit_code, result.output) == (
        2, "error: --retain-days must be a whole number of days or 'none' (keep every row), not '-3'.\n")
    result = gate("channel", "set", unique_name, "--consumer-max-idle-days", "0")
    assert (result.exit_code, result.output) == (
        2, "error: --consumer-max-idle-days must be between 0.001 and 3650, not 0.0.\n")


def test_consumer_list_and_drop(sandbox: Sandbox, unique_name: str, gate: Gate) -> None:
    channel(sandbox, unique_name, rows(10, young_from=11), (10, 5))
    assert ok(gate("consumer", "list", unique_name)) == f"channel {unique_name}: no registered consumers\n"
    move(sandbox, unique_name, "billing", (4, 2), moved="2024-01-02 03:04:05")
    move(sandbox, unique_name, "spark:audit", (10, 5), moved="2024-01-02 03:04:05")  # caught up: never stale
    assert ok(gate("consumer", "list", unique_name)) == (
        "name         cursor_id  cursor_tid  last_move_utc        rows_behind  stale\n"
        "billing      4          2           2024-01-02 03:04:05  6            yes\n"
        "spark:audit  10         5           2024-01-02 03:04:05  0            no\n")
    result = gate("consumer", "drop", unique_name, "biling", "--yes")
    assert (result.exit_code, result.output) == (1, (
        f"error: Channel '{unique_name}' has no consumer named 'biling' (registered: 'billing', 'spark:audit'). "
        f"'gate consumer list {unique_name}' shows them.\n"))
    result = gate("consumer", "drop", unique_name, "billing")
    assert result.exit_code == 1 and "confirmation is needed" in result.output
    assert ok(gate("consumer", "drop", unique_name, "billing", "--yes")) == (
        f"dropped consumer 'billing' of channel {unique_name} (its cursor was id 4)\n")
    assert json.loads(ok(gate("--json", "consumer", "list", unique_name))) == [
        {"name": "spark:audit", "cursor_id": 10, "cursor_tid": 5, "last_move_utc": "2024-01-02 03:04:05",
         "rows_behind": 0, "stale": False}]


def test_gate_run_purges_under_load_and_reports_a_stale_consumer(sandbox: Sandbox, unique_name: str,
                                                                 gate: Gate) -> None:
    port = free_port()
    db = unique_name
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=ChannelDefaults(
        batch_rows=50, metrics_port=port, retention_interval_seconds=0.3))
    with sandbox.source.connect() as src, src.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (k INT PRIMARY KEY, v INT)")
        for n in range(30):  # transactions of 20 rows
            cur.execute(f"INSERT INTO {db}.t VALUES " + ",".join(f"({n * 20 + i}, {n})" for i in range(20)))
            src.commit()
    with running(dc, unique_name):
        checkpoint = wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        assert checkpoint == (601, 31)  # CREATE TABLE, then 600 rows
        with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
            cur.execute("UPDATE transfer_data SET create_time = NOW() - INTERVAL 3 DAY")  # all of it is old now
        move(sandbox, unique_name, "slow", (300, 16), moved="2024-01-02 03:04:05")  # in the transaction of 282-301
        backdated = time.time()
        deadline = time.monotonic() + 10
        while value(figures := scrape(port), "gate_retention_last_run_timestamp_seconds", unique_name) <= backdated:
            assert time.monotonic() < deadline, "no retention pass after the rows became old"
            time.sleep(0.1)
        assert value(figures, "gate_retention_purged_through_id", unique_name) == 0  # off by default: all stay
        assert ids(sandbox, unique_name) == list(range(1, 602))
        ok(gate("channel", "set", unique_name, "--retain-days", "1"))
        stop = threading.Event()

        def load() -> None:  # the channel keeps writing while retention removes
            with sandbox.source.connect() as src, src.cursor() as cur:
                n = 30
                while not stop.is_set():
                    cur.execute(f"INSERT INTO {db}.t VALUES " + ",".join(f"({n * 20 + i}, {n})" for i in range(20)))
                    src.commit()
                    n += 1
                    time.sleep(0.02)

        writer = threading.Thread(target=load)
        writer.start()
        try:
            deadline = time.monotonic() + 20
            while value(figures := scrape(port), "gate_retention_purged_through_id", unique_name) != 281:
                assert time.monotonic() < deadline, "retention did not reach the stale consumer's transaction"
                time.sleep(0.1)
            assert value(figures, "gate_retention_oldest_kept_id", unique_name) == 282
            assert value(figures, "gate_retention_rows_removed_total", unique_name) == 281
            assert value(figures, "gate_retention_errors_total", unique_name) == 0
            assert value(figures, "gate_consumer_stale", unique_name, consumer="slow") == 1
            assert value(figures, "gate_consumer_cursor_id", unique_name, consumer="slow") == 300
            assert value(figures, "gate_consumer_last_move_timestamp_seconds", unique_name, consumer="slow") == (
                1704164645.0)
            assert value(figures, "gate_consumer_lag_rows", unique_name, consumer="slow") >= 301
            status = json.loads(ok(gate("--json", "status", unique_name, "--sample", "0")))
            assert status["retention"]["purged_through"] == 281
            assert status["retention"]["pinned_by"] == "consumer 'slow' (cursor id 300)"
            assert [(c["name"], c["cursor_id"], c["stale"]) for c in status["stale_consumers"]] == [("slow", 300, True)]
            text = ok(gate("status", unique_name, "--sample", "0"))
            assert "stale consumers (behind the checkpoint, not moved for longer than consumer_max_idle_days):\n" \
                   "name  cursor_id  last_move_utc        rows_behind\nslow  300        2024-01-02 03:04:05" in text
            move(sandbox, unique_name, "slow", (601, 31))  # it catches up with the old rows: they all go
            while value(figures := scrape(port), "gate_retention_purged_through_id", unique_name) != 601:
                assert time.monotonic() < deadline + 10, "retention did not follow the consumer"
                time.sleep(0.1)
            assert value(figures, "gate_consumer_stale", unique_name, consumer="slow") == 0
        finally:
            stop.set()
            writer.join()
        final = wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    kept = ids(sandbox, unique_name)
    assert kept == list(range(602, final[0] + 1))  # contiguous from the oldest kept row to the checkpoint
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT data FROM transfer_data ORDER BY id")
        replayed = [int(json.loads(data)["NEW"][0]["k"]) for (data,) in cur.fetchall()]
    with sandbox.source.connect() as src, src.cursor() as cur:
        cur.execute(f"SELECT k FROM {db}.t WHERE k >= 600 ORDER BY k")
        assert replayed == [k for (k,) in cur.fetchall()]  # the kept window holds every later insert, once

    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:  # every row old and read: all go
        cur.execute("UPDATE transfer_data SET create_time = NOW() - INTERVAL 3 DAY")
    ok(gate("consumer", "drop", unique_name, "slow", "--yes"))
    assert f"removed {final[0] - 601} rows" in ok(gate("channel", "purge", unique_name))
    assert ids(sandbox, unique_name) == []
    with running(dc, unique_name), sandbox.source.connect() as src, src.cursor() as cur:
        cur.execute(f"INSERT INTO {db}.t VALUES (-1, -1)")
        src.commit()
        assert wait_caught_up(sandbox.source, sandbox.dc, unique_name) == (final[0] + 1, final[1] + 1)
    assert ids(sandbox, unique_name) == [final[0] + 1]  # ids go on from the checkpoint, not from the empty table
