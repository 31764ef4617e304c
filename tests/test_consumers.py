"""Registered consumers on a real DC: names are exact (case, accents and trailing spaces make different
consumers, also in a channel created with schema version 1, which gate migrates), and dropping a channel
names the consumers whose cursors go with it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from gate.common.errors import SchemaVersionError
from gate.consume.client import Consumer, Cursor
from gate.devtools.sandbox import Sandbox
from tests.replay import make_channel, running, wait_row
from tests.test_channel_cli import drop_at_terminal
from tests.test_client import ROWS, channel

Gate = Callable[..., Result]
NAMES = ["billing", "Billing", "BILLING", "bílling", "billing   ", "e" * 64, "E" * 64, "é" * 64, "e" * 63 + "é"]


def on_dc(sandbox: Sandbox, name: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sandbox.dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def stored(sandbox: Sandbox, name: str) -> list[tuple[Any, ...]]:
    return on_dc(sandbox, name, "SELECT name, id, tid FROM gate_consumer ORDER BY name")


def schema(sandbox: Sandbox, name: str) -> tuple[Any, ...]:
    """The recorded schema version and the collation of gate_consumer.name."""
    return (on_dc(sandbox, name, "SELECT value FROM gate_meta WHERE name = 'schema_version'")[0][0],
            on_dc(sandbox, name, "SELECT collation_name FROM information_schema.columns WHERE table_schema = %s "
                                 "AND table_name = 'gate_consumer' AND column_name = 'name'", name)[0][0])


def as_version_1(sandbox: Sandbox, name: str) -> None:
    """Make ``name`` what gate's schema version 1 created: names compared by utf8mb4_general_ci."""
    on_dc(sandbox, name, "ALTER TABLE gate_consumer MODIFY name VARCHAR(64) CHARACTER SET utf8mb4 "
                         "COLLATE utf8mb4_general_ci NOT NULL")
    on_dc(sandbox, name, "UPDATE gate_meta SET value = '1' WHERE name = 'schema_version'")


def test_names_differing_in_case_accents_or_trailing_spaces_are_different_consumers(
        sandbox: Sandbox, unique_name: str, gate: Gate) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    cursors = [Cursor(), Cursor(1, 1), Cursor(2, 1), Cursor(3, 2), Cursor(4, 3), Cursor(6, 4)]
    expected = {name: cursors[n % len(cursors)] for n, name in enumerate(NAMES)}
    for name, cursor in expected.items():
        with Consumer(dc, unique_name, name=name, start=cursor) as consumer:
            consumer.commit()
    assert stored(sandbox, unique_name) == sorted((name, c.id, c.tid) for name, c in expected.items())
    for name, cursor in expected.items():
        with Consumer(dc, unique_name, name=name) as consumer:
            assert consumer.cursor == cursor
    listed = json.loads(gate("--json", "consumer", "list", unique_name).stdout)
    assert [(row["name"], row["cursor_id"]) for row in listed] == sorted((name, c.id) for name, c in expected.items())
    dropped = gate("--json", "consumer", "drop", unique_name, "BILLING", "--yes")
    assert json.loads(dropped.stdout) == {"channel": unique_name, "dropped": "BILLING", "cursor_id": 2,
                                          "cursor_tid": 1}
    again = gate("consumer", "drop", unique_name, "BILLING", "--yes")
    registered = ", ".join(f"'{name}'" for name in sorted(set(NAMES) - {"BILLING"}))
    assert (again.exit_code, again.stderr) == (1, f"error: Channel '{unique_name}' has no consumer named 'BILLING' "
                                                  f"(registered: {registered}). 'gate consumer list {unique_name}' "
                                                  "shows them.\n")
    assert stored(sandbox, unique_name) == sorted((name, c.id, c.tid) for name, c in expected.items()
                                                  if name != "BILLING")


def test_dropping_another_case_of_a_name_leaves_the_consumer_alone(sandbox: Sandbox, unique_name: str,
                                                                   gate: Gate) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    with Consumer(dc, unique_name, name="billing", start=Cursor(4, 3)) as consumer:
        consumer.commit()
    for other in ("BILLING", "Billing", "bílling", "billing   "):
        result = gate("consumer", "drop", unique_name, other, "--yes")
        assert (result.exit_code, result.stderr) == (
            1, f"error: Channel '{unique_name}' has no consumer named '{other}' (registered: 'billing'). "
               f"'gate consumer list {unique_name}' shows them.\n")
    assert stored(sandbox, unique_name) == [("billing", 4, 3)]


def test_a_channel_of_schema_version_1_is_migrated(sandbox: Sandbox, unique_name: str, gate: Gate) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    as_version_1(sandbox, unique_name)
    on_dc(sandbox, unique_name, "INSERT INTO gate_consumer (name, id, tid) VALUES ('billing', 4, 3)")
    with pytest.raises(SchemaVersionError) as refused:  # a client before the migration: never billing's cursor
        Consumer(dc, unique_name, name="Billing")
    assert str(refused.value) == (
        f"Consumer name 'Billing' matches the registered consumer 'billing' of channel '{unique_name}' only because "
        "the channel's DC schema (version 1) compares names regardless of case, accents and trailing spaces. "
        f"Upgrade it, which makes names exact: 'gate consumer list {unique_name}' (or the next 'gate run "
        f"{unique_name}') does it.")
    assert schema(sandbox, unique_name) == ("1", "utf8mb4_general_ci")
    listed = gate("--json", "consumer", "list", unique_name)
    assert [(row["name"], row["cursor_id"]) for row in json.loads(listed.stdout)] == [("billing", 4)]
    assert schema(sandbox, unique_name) == ("2", "utf8mb4_nopad_bin")
    with Consumer(dc, unique_name, name="Billing") as consumer:
        assert consumer.cursor == Cursor()
        consumer.poll()
        consumer.commit()
    assert stored(sandbox, unique_name) == [("Billing", 6, 4), ("billing", 4, 3)]
    assert json.loads(gate("--json", "channel", "show", unique_name).stdout)["schema_version"] == 2


def test_gate_run_migrates_and_a_dc_user_without_alter_is_told_the_grant(sandbox: Sandbox, unique_name: str,
                                                                          gate: Gate, tmp_path: Path) -> None:
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    as_version_1(sandbox, unique_name)
    user = f"{unique_name[:20]}_dc"
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'")
        cur.execute(f"GRANT CREATE, DROP, SELECT, INSERT, UPDATE, DELETE ON `{unique_name}`.* TO '{user}'@'127.0.0.1'")
    config = tmp_path / "config.yaml"
    config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {sandbox.dc.port}\n  user: {user}\n  password: pw\n")
    for command in (["consumer", "list", unique_name], ["consumer", "drop", unique_name, "billing", "--yes"]):
        result = gate("--config", str(config), *command)
        assert (result.exit_code, result.stderr) == (
            1, f"error: Channel '{unique_name}' has DC schema version 1, and this gate (0.1.0) upgrades it to version "
               f"2 before using it, which needs ALTER on the database '{unique_name}'; the DC user {user}@127.0.0.1 "
               f"lacks it, so nothing was changed. Grant it on the DC server, e.g. GRANT ALTER ON `{unique_name}`.* TO "
               f"'{user}'@'127.0.0.1', and run the command again.\n")
    assert schema(sandbox, unique_name) == ("1", "utf8mb4_general_ci")
    with running(dc, unique_name):
        wait_row(sandbox.dc, unique_name, "SELECT 1 FROM gate_meta WHERE name = 'schema_version' AND value = '2'")
    assert schema(sandbox, unique_name) == ("2", "utf8mb4_nopad_bin")


def test_channel_drop_names_the_consumers_it_discards(sandbox: Sandbox, unique_name: str, gate: Gate,
                                                     gate_config: Path) -> None:
    def registered(name: str) -> str:
        dc = channel(sandbox, name, ROWS, (6, 4))
        on_dc(sandbox, name, "UPDATE gate_resume SET id = 6, tid = 4")  # as gate run moves it with the checkpoint
        for consumer, cursor in (("billing", Cursor(4, 3)), ("audit", Cursor(6, 4))):
            with Consumer(dc, name, name=consumer, start=cursor) as reader:
                reader.commit()
        return (f"Dropping channel '{name}' deletes its DC database with 6 checkpointed rows and the cursors of its "
                "registered consumers: 'audit' at row 6 (at the checkpoint), 'billing' at row 4 (2 rows behind the "
                "checkpoint)")

    prompt = registered(unique_name)
    refused = gate("channel", "drop", unique_name)
    assert (refused.exit_code, refused.stderr) == (
        1, f"error: Channel '{unique_name}' was not dropped: confirmation is needed and this session has no terminal "
           f"to ask on. {prompt}. Add --yes to drop it with all its data.\n")
    wrong = drop_at_terminal(gate_config, unique_name, "something_else")
    assert (wrong.returncode, wrong.stdout.decode()) == (1, f"{prompt}. Type the channel name to confirm: ")
    assert stored(sandbox, unique_name) == [("audit", 6, 4), ("billing", 4, 3)]
    right = drop_at_terminal(gate_config, unique_name, unique_name)
    assert (right.returncode, right.stdout.decode()) == (
        0, f"{prompt}. Type the channel name to confirm: dropped channel {unique_name} and the cursors of its "
           "registered consumers: 'audit' at row 6 (at the checkpoint), 'billing' at row 4 (2 rows behind the "
           "checkpoint)\n")
    other = f"{unique_name}_2"
    registered(other)
    dropped = gate("--json", "channel", "drop", other, "--yes")
    assert json.loads(dropped.stdout) == {"dropped": other, "consumers": [
        {"name": "audit", "cursor_id": 6, "cursor_tid": 4, "rows_behind": 0},
        {"name": "billing", "cursor_id": 4, "cursor_tid": 3, "rows_behind": 2}]}
    damaged = f"{unique_name}_3"
    registered(damaged)
    on_dc(sandbox, damaged, "DROP TABLE gate_consumer")  # by hand: the channel can still be dropped
    assert json.loads(gate("--json", "channel", "drop", damaged, "--yes").stdout) == {"dropped": damaged}
