"""The consumer client and `gate tail` on a real DC: exactly once, in id order, never above the checkpoint."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pymysql
import pytest
import sqlalchemy
from click.testing import CliRunner

from gate.cli import main
from gate.common.config import ChannelDefaults, Secret, ServerConfig
from gate.common.dc import ChannelSettings, connect, create_channel
from gate.common.errors import ConnectionFailed, InvalidValue
from gate.consume.client import Change, Consumer, Cursor, SnapshotInfo
from gate.devtools.sandbox import Sandbox
from gate.devtools.workload import RandomWorkload
from tests.replay import make_channel, running, server_config, wait_caught_up

UTC = timezone.utc
ALTER = "ALTER TABLE shop.orders ADD COLUMN note TEXT"
ROWS: list[tuple[Any, ...]] = [  # id, tid, dbname, tablename, create_time (UTC), instance_name, optype, data
    (1, 1, "shop", "orders", "2024-05-01 10:00:00", "src:3306", "INSERT", {"NEW": [{"id": "1"}, {"v": "a b"}]}),
    (2, 1, "shop", "orders", "2024-05-01 10:00:00", "src:3306", "INSERT", {"NEW": [{"id": "2"}, {"v": None}]}),
    (3, 2, "shop", "users", "2024-05-01 10:00:05", "src:3306", "UPDATE",
     {"NEW": [{"uid": "7"}, {"name": "Zoë"}, {"age": "30"}], "OLD": [{"uid": "7"}, {"name": "Zoe"}, {"age": "30"}]}),
    (4, 3, "shop", "orders", "2024-05-01 10:01:00", "src:3306", "ALTERTABLE",
     {"ADDCOLUMN": [{"field_name": "note", "data_type": "text"}], "SQL": ALTER}),
    (5, 4, "shop", "orders", "2024-05-01 10:02:00", "src:3306", "DELETE",
     {"OLD": [{"id": "2"}, {"v": None}, {"note": None}]}),
    (6, 4, "crm", "orders", "2024-05-01 10:02:00", "src:3306", "TRUNCATE", {}),
]
HOLES = [  # above the checkpoint, with gaps (7, 10 and 11 are not written yet)
    (8, 5, "shop", "orders", "2024-05-01 10:03:00", "src:3306", "INSERT",
     {"NEW": [{"id": "8"}, {"v": "x"}, {"note": None}]}),
    (9, 5, "shop", "orders", "2024-05-01 10:03:00", "src:3306", "INSERT",
     {"NEW": [{"id": "9"}, {"v": "y"}, {"note": None}]}),
    (12, 7, "shop", "orders", "2024-05-01 10:04:00", "src:3306", "INSERT",
     {"NEW": [{"id": "12"}, {"v": "z"}, {"note": None}]}),
]
ROW7 = (7, 5, "shop", "orders", "2024-05-01 10:03:00", "src:3306", "INSERT",
        {"NEW": [{"id": "7"}, {"v": "w"}, {"note": None}]})


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


EXPECTED = [
    Change(1, 1, "shop", "orders", _time("2024-05-01 10:00:00"), "src:3306", "INSERT", new={"id": "1", "v": "a b"}),
    Change(2, 1, "shop", "orders", _time("2024-05-01 10:00:00"), "src:3306", "INSERT", new={"id": "2", "v": None}),
    Change(3, 2, "shop", "users", _time("2024-05-01 10:00:05"), "src:3306", "UPDATE",
           new={"uid": "7", "name": "Zoë", "age": "30"}, old={"uid": "7", "name": "Zoe", "age": "30"}),
    Change(4, 3, "shop", "orders", _time("2024-05-01 10:01:00"), "src:3306", "ALTERTABLE",
           ddl={"ADDCOLUMN": [{"field_name": "note", "data_type": "text"}], "SQL": ALTER}),
    Change(5, 4, "shop", "orders", _time("2024-05-01 10:02:00"), "src:3306", "DELETE",
           old={"id": "2", "v": None, "note": None}),
    Change(6, 4, "crm", "orders", _time("2024-05-01 10:02:00"), "src:3306", "TRUNCATE", ddl={}),
]


def channel(sandbox: Sandbox, name: str, rows: list[tuple[Any, ...]], checkpoint: tuple[int, int]) -> ServerConfig:
    """A channel whose transfer_data holds ``rows`` (written directly, no pipeline) and that checkpoint."""
    dc = server_config(sandbox.dc)
    with connect(dc, "DC") as conn:
        create_channel(conn, ChannelSettings(name, server_config(sandbox.source)))
    put(sandbox, name, rows, checkpoint)
    return dc


def put(sandbox: Sandbox, name: str, rows: list[tuple[Any, ...]], checkpoint: tuple[int, int]) -> None:
    with sandbox.dc.connect(name, init_command="SET time_zone = '+00:00'") as conn, conn.cursor() as cur:
        conn.begin()
        cur.executemany("INSERT INTO transfer_data VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                        [(*row[:7], json.dumps(row[7])) for row in rows])
        cur.execute("UPDATE transfer_checkpoint SET id = %s, tid = %s", checkpoint)
        conn.commit()


def test_poll_returns_each_row_once_in_order_and_never_above_the_checkpoint(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS + HOLES, (6, 4))
    with Consumer(dc, unique_name, batch=4) as consumer:
        assert consumer.poll() == EXPECTED[:4]
        assert consumer.cursor == Cursor(4, 3)
        assert consumer.poll() == EXPECTED[4:]
        assert consumer.cursor == Cursor(6, 4)
        assert consumer.poll() == [] and consumer.poll() == []  # 8, 9 and 12 exist but are above the checkpoint
        put(sandbox, unique_name, [ROW7], (9, 5))
        assert [(c.id, c.tid, c.new) for c in consumer.poll()] == [
            (7, 5, {"id": "7", "v": "w", "note": None}), (8, 5, {"id": "8", "v": "x", "note": None}),
            (9, 5, {"id": "9", "v": "y", "note": None})]
        assert consumer.cursor == Cursor(9, 5)
        assert consumer.poll() == []


def test_named_cursor_persists_and_resumes(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    with Consumer(dc, unique_name, name="billing", batch=2) as consumer:
        assert [c.id for c in consumer.poll()] == [1, 2]
        consumer.commit()
        assert [c.id for c in consumer.poll()] == [3, 4]  # processed, then a crash before commit()
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT name, id, tid FROM gate_consumer")
        assert cur.fetchall() == (("billing", 2, 1),)
    with Consumer(dc, unique_name, name="billing", batch=2) as consumer:
        assert consumer.cursor == Cursor(2, 1)
        assert [c.id for c in consumer.poll()] == [3, 4]  # at least once: the batch comes again
        consumer.commit()
    with Consumer(dc, unique_name, name="billing", batch=10) as consumer, \
            Consumer(dc, unique_name, name="audit", batch=10) as other:
        assert [c.id for c in consumer.poll()] == [5, 6]
        assert [c.id for c in other.poll()] == [1, 2, 3, 4, 5, 6]
    with Consumer(dc, unique_name, start=Cursor(5, 4)) as caller_kept:
        assert caller_kept.poll() == EXPECTED[5:]
        with pytest.raises(InvalidValue, match="Only a named consumer"):
            caller_kept.commit()


def test_filters_skip_rows_but_the_cursor_moves_past_them(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    with Consumer(dc, unique_name, batch=2, dbname="shop", tablename="orders", optypes=["DELETE", "ALTERTABLE"]) as c:
        assert c.poll() == [EXPECTED[3]]  # ids 1-2 match nothing: poll goes on to 3-4
        assert c.cursor == Cursor(4, 3)
        assert c.poll() == [EXPECTED[4]]
        assert c.poll() == [] and c.cursor == Cursor(6, 4)
    with Consumer(dc, unique_name, tablename="orders", optypes=["TRUNCATE"]) as c:
        assert c.poll() == [EXPECTED[5]]
    with pytest.raises(InvalidValue, match="Unknown optype"):
        Consumer(dc, unique_name, optypes=["UPSERT"])


def test_follow_sleeps_when_idle_and_commits_whole_batches(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS + HOLES, (6, 4))
    with Consumer(dc, unique_name, name="app", batch=4) as consumer:
        changes = consumer.follow(idle_seconds=0.05)
        assert [next(changes).id for _ in range(5)] == [1, 2, 3, 4, 5]
        with Consumer(dc, unique_name, name="app") as peek:
            assert peek.cursor == Cursor(4, 3)  # committed when the second batch was fetched
        timer = threading.Timer(0.3, put, (sandbox, unique_name, [ROW7], (9, 5)))
        timer.start()
        assert [next(changes).id for _ in range(4)] == [6, 7, 8, 9]
        timer.join()


def test_privileges_of_app_users(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    with sandbox.dc.connect() as conn, conn.cursor() as cur:
        for user in ("reader", "named"):
            cur.execute(f"CREATE USER '{unique_name}_{user}'@'127.0.0.1' IDENTIFIED BY 'pw'")
            for table in ("transfer_data", "transfer_checkpoint"):
                cur.execute(f"GRANT SELECT ON `{unique_name}`.`{table}` TO '{unique_name}_{user}'@'127.0.0.1'")
        cur.execute(f"GRANT SELECT, INSERT, UPDATE ON `{unique_name}`.gate_consumer TO '{unique_name}_named'@'127.0.0.1'")

    def login(user: str) -> ServerConfig:
        return ServerConfig(dc.host, dc.port, f"{unique_name}_{user}", Secret("pw"))

    with Consumer(login("reader"), unique_name) as consumer:
        assert consumer.poll() == EXPECTED
    with pytest.raises(pymysql.err.OperationalError, match="SELECT command denied"):
        Consumer(login("reader"), unique_name, name="x")
    for _ in range(2):  # the first commit inserts the cursor row, the second updates it
        with Consumer(login("named"), unique_name, name="x", batch=3) as consumer:
            consumer.poll()
            consumer.commit()
    with Consumer(login("named"), unique_name, name="x") as consumer:
        assert consumer.cursor == Cursor(6, 4)


def test_concurrent_pipeline_rows_exactly_once(sandbox: Sandbox, unique_name: str) -> None:
    """While gate writes with 3 writers in small batches (so rows above the checkpoint come with holes)."""
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      defaults=ChannelDefaults(batch_rows=5, writers=3))
    seen: list[Change] = []

    def take(batch: list[Change]) -> None:
        if batch:
            assert batch[-1].id <= consumer.checkpoint().id
        seen.extend(batch)

    with sandbox.source.connect() as conn, running(dc, unique_name), Consumer(dc, unique_name, batch=50) as consumer:
        work = RandomWorkload(conn, db, seed=5, ddl_every=12)

        def write() -> None:
            work.setup()
            work.run(150)

        worker = threading.Thread(target=write)
        worker.start()
        while worker.is_alive():
            batch = consumer.poll()
            take(batch)
            if not batch:
                time.sleep(0.005)
        worker.join()
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        while batch := consumer.poll():
            take(batch)
    with sandbox.dc.connect(unique_name, init_command="SET time_zone = '+00:00'") as dconn, dconn.cursor() as cur:
        cur.execute("SELECT id, tid, dbname, tablename, create_time, instance_name, optype, data "
                    "FROM transfer_data ORDER BY id")
        stored = [Change.from_row(row) for row in cur.fetchall()]
    assert len(stored) > 500
    assert seen == stored
    assert [c.id for c in seen] == list(range(1, len(stored) + 1))
    alters = [c.ddl for c in seen if c.optype == "ALTERTABLE"]
    assert alters and all(set(d) <= {"ADDCOLUMN", "DROPCOLUMN", "SQL"} and "SQL" in d for d in alters)
    created = next(c for c in seen if c.optype == "CREATETABLE")
    assert created.ddl is not None and created.ddl["NEW"][0] == {
        "field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int"}


def run_tail(gate_config: Path, *args: str) -> list[str]:
    result = CliRunner().invoke(main, ["--config", str(gate_config), "tail", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_tail(sandbox: Sandbox, unique_name: str, gate_config: Path) -> None:
    channel(sandbox, unique_name, ROWS + HOLES, (6, 4))
    lines = [
        '1 tid=1 2024-05-01 10:00:00Z shop.orders INSERT NEW{id=1, v="a b"}',
        "2 tid=1 2024-05-01 10:00:00Z shop.orders INSERT NEW{id=2, v=NULL}",
        "3 tid=2 2024-05-01 10:00:05Z shop.users UPDATE NEW{uid=7, name=Zoë, age=30} OLD{name=Zoe}",
        f"4 tid=3 2024-05-01 10:01:00Z shop.orders ALTERTABLE {ALTER}",
        "5 tid=4 2024-05-01 10:02:00Z shop.orders DELETE OLD{id=2, v=NULL, note=NULL}",
        "6 tid=4 2024-05-01 10:02:00Z crm.orders TRUNCATE",
    ]
    assert run_tail(gate_config, unique_name, "--no-follow", "--from", "1") == lines
    assert run_tail(gate_config, unique_name, "--no-follow") == lines  # the last 10 rows
    assert run_tail(gate_config, unique_name, "--no-follow", "-n", "2") == lines[4:]
    assert run_tail(gate_config, unique_name, "--no-follow", "--from", "3") == lines[2:]
    assert run_tail(gate_config, unique_name, "--no-follow", "--from", "2024-05-01T10:00:05") == lines[2:]
    assert run_tail(gate_config, unique_name, "--no-follow", "--from", "2024-05-01T12:01:00+02:00") == lines[3:]
    assert run_tail(gate_config, unique_name, "--no-follow", "--from", "2024-05-02") == []
    assert run_tail(gate_config, unique_name, "--no-follow", "--from", "1", "--db", "shop", "--table", "orders",
                    "--optype", "INSERT", "--optype", "DELETE") == [lines[0], lines[1], lines[4]]
    assert [json.loads(line) for line in run_tail(gate_config, unique_name, "--no-follow", "--from", "5", "--json")] == [
        {"id": 5, "tid": 4, "dbname": "shop", "tablename": "orders", "create_time": "2024-05-01T10:02:00Z",
         "instance_name": "src:3306", "optype": "DELETE", "new": None, "old": {"id": "2", "v": None, "note": None},
         "ddl": None},
        {"id": 6, "tid": 4, "dbname": "crm", "tablename": "orders", "create_time": "2024-05-01T10:02:00Z",
         "instance_name": "src:3306", "optype": "TRUNCATE", "new": None, "old": None, "ddl": {}}]
    result = CliRunner().invoke(main, ["--config", str(gate_config), "tail", unique_name, "--from", "9"])
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and "checkpoint" in result.stderr


def test_tail_follows_until_interrupted(sandbox: Sandbox, unique_name: str, gate_config: Path) -> None:
    channel(sandbox, unique_name, ROWS + HOLES, (6, 4))
    timer = threading.Timer(0.5, put, (sandbox, unique_name, [ROW7], (9, 5)))
    timer.start()
    output: list[str] = []

    def echo(message: str, **_: Any) -> None:
        output.append(message)
        if len(output) == 4:
            raise KeyboardInterrupt  # Ctrl-C

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("gate.cli.consume.click.echo", echo)
        result = CliRunner().invoke(main, ["--config", str(gate_config), "tail", unique_name, "--from", "6",
                                           "--interval", "0.05"], catch_exceptions=False)
    timer.join()
    assert result.exit_code == 0
    assert [line.split()[0] for line in output] == ["6", "7", "8", "9"]


def test_long_values_are_shortened_in_lines_only(sandbox: Sandbox, unique_name: str, gate_config: Path) -> None:
    long = "é" * 50
    channel(sandbox, unique_name, [(1, 1, "d", "t", "2024-05-01 10:00:00", "s:1", "INSERT",
                                    {"NEW": [{"a": long}, {"b": ""}, {"c": "NULL"}, {"d": 'q"'}]})], (1, 1))
    assert run_tail(gate_config, unique_name, "--no-follow") == [
        f'1 tid=1 2024-05-01 10:00:00Z d.t INSERT NEW{{a="{"é" * 40}…"(50), b="", c="NULL", d="q\\""}}']
    assert json.loads(run_tail(gate_config, unique_name, "--no-follow", "--json")[0])["new"]["a"] == long


def test_cursor_position_helpers(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS + HOLES, (6, 4))
    with Consumer(dc, unique_name) as consumer:
        assert [consumer.position(n) for n in (0, 3, 6)] == [Cursor(), Cursor(3, 2), Cursor(6, 4)]
        assert consumer.position_at_time(datetime(2024, 5, 1, 10, 0, 1)) == Cursor(2, 1)
        assert consumer.position_at_time(datetime(2024, 5, 1, 10, 0, tzinfo=UTC)) == Cursor()
        assert consumer.position_at_time(datetime(2030, 1, 1, tzinfo=UTC)) == Cursor(6, 4)
        with pytest.raises(InvalidValue):
            consumer.position(8)



@pytest.mark.parametrize("via", ["pymysql", "sqlalchemy"])
def test_a_lost_connection_is_reopened(sandbox: Sandbox, unique_name: str, via: str) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    engine = sqlalchemy.create_engine(_url(dc))
    with Consumer(dc if via == "pymysql" else engine, unique_name, name="app", batch=2) as consumer:
        assert [c.id for c in consumer.poll()] == [1, 2]
        with sandbox.dc.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM information_schema.processlist WHERE db = %s", (unique_name,))
            (thread,), = cur.fetchall()
            cur.execute(f"KILL {thread}")
        assert [c.id for c in consumer.poll()] == [3, 4]
        consumer.commit()
    with Consumer(dc, unique_name, name="app") as consumer:
        assert consumer.cursor == Cursor(4, 3)
    engine.dispose()


# --- snapshots -------------------------------------------------------------------------------------

COLUMNS = [{"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int"},
           {"field_name": "v", "nullable": "Yes", "primary_key": "No", "data_type": "varchar(10)"}]
SNAPSHOT_ROWS: list[tuple[Any, ...]] = [  # a snapshot of shop.orders with a change of the table in between
    (1, 1, "shop", "orders", "2024-05-01 10:00:00", "src:3306", "SNAPSHOTSTART",
     {"NEW": COLUMNS, "SNAPSHOT": {"id": 7, "reason": "gate snapshot", "key": ["id"]}}),
    (2, 2, "shop", "orders", "2024-05-01 10:00:01", "src:3306", "SNAPSHOT", {"NEW": [{"id": "1"}, {"v": "a"}]}),
    (3, 2, "shop", "orders", "2024-05-01 10:00:01", "src:3306", "SNAPSHOT", {"NEW": [{"id": "2"}, {"v": None}]}),
    (4, 3, "shop", "orders", "2024-05-01 10:00:02", "src:3306", "UPDATE",
     {"NEW": [{"id": "2"}, {"v": "b"}], "OLD": [{"id": "2"}, {"v": None}]}),
    (5, 4, "shop", "orders", "2024-05-01 10:00:03", "src:3306", "SNAPSHOT", {"NEW": [{"id": "3"}, {"v": "c"}]}),
    (6, 5, "shop", "orders", "2024-05-01 10:00:03", "src:3306", "SNAPSHOTEND",
     {"SNAPSHOT": {"id": 7, "rows": 3, "state": "done", "reason": None}}),
    (7, 6, "shop", "users", "2024-05-01 10:00:04", "src:3306", "SNAPSHOTSTART",
     {"NEW": COLUMNS[1:], "SNAPSHOT": {"id": 8, "reason": "channel filter", "key": []}}),
    (8, 7, "shop", "users", "2024-05-01 10:00:05", "src:3306", "SNAPSHOTEND",
     {"SNAPSHOT": {"id": 8, "rows": 0, "state": "cancelled", "reason": "cancelled by gate snapshot --cancel"}}),
]


def test_snapshot_rows_are_parsed(sandbox: Sandbox, unique_name: str, gate_config: Path) -> None:
    dc = channel(sandbox, unique_name, SNAPSHOT_ROWS, (8, 7))
    with Consumer(dc, unique_name) as consumer:
        changes = consumer.poll()
    start, first, second, update, third, end, other_start, cancelled = changes
    assert start.snapshot == SnapshotInfo(7, "gate snapshot", ("id",)) and start.columns == COLUMNS
    assert start.ddl == SNAPSHOT_ROWS[0][7] and (start.new, start.old) == (None, None)
    assert [(c.optype, c.new, c.old, c.ddl, c.snapshot, c.columns) for c in (first, second, third)] == [
        ("SNAPSHOT", {"id": "1", "v": "a"}, None, None, None, None),
        ("SNAPSHOT", {"id": "2", "v": None}, None, None, None, None),
        ("SNAPSHOT", {"id": "3", "v": "c"}, None, None, None, None)]
    assert update.snapshot is None and update.columns is None
    assert end.snapshot == SnapshotInfo(7, None, None, 3, "done") and end.columns is None
    assert other_start.snapshot == SnapshotInfo(8, "channel filter", ()) and other_start.columns == COLUMNS[1:]
    assert cancelled.snapshot == SnapshotInfo(8, "cancelled by gate snapshot --cancel", None, 0, "cancelled")

    # folded as the client's docs say, in id order: the table image of shop.orders at SNAPSHOTEND
    image: dict[str, dict[str, str | None]] = {}
    for change in changes[:6]:
        if change.optype == "SNAPSHOTSTART":
            image.clear()
        elif change.optype in ("SNAPSHOT", "INSERT", "UPDATE"):
            assert change.new is not None
            image[str(change.new["id"])] = change.new
    assert image == {"1": {"id": "1", "v": "a"}, "2": {"id": "2", "v": "b"}, "3": {"id": "3", "v": "c"}}

    with Consumer(dc, unique_name, optypes=["SNAPSHOTSTART", "SNAPSHOTEND"]) as only:
        assert only.poll() == [start, end, other_start, cancelled]
    assert run_tail(gate_config, unique_name, "--no-follow") == [
        "1 tid=1 2024-05-01 10:00:00Z shop.orders SNAPSHOTSTART snapshot 7 (gate snapshot) key (id)",
        "2 tid=2 2024-05-01 10:00:01Z shop.orders SNAPSHOT NEW{id=1, v=a}",
        "3 tid=2 2024-05-01 10:00:01Z shop.orders SNAPSHOT NEW{id=2, v=NULL}",
        "4 tid=3 2024-05-01 10:00:02Z shop.orders UPDATE NEW{id=2, v=b} OLD{v=NULL}",
        "5 tid=4 2024-05-01 10:00:03Z shop.orders SNAPSHOT NEW{id=3, v=c}",
        "6 tid=5 2024-05-01 10:00:03Z shop.orders SNAPSHOTEND snapshot 7 done, 3 rows",
        "7 tid=6 2024-05-01 10:00:04Z shop.users SNAPSHOTSTART snapshot 8 (channel filter) key (none)",
        "8 tid=7 2024-05-01 10:00:05Z shop.users SNAPSHOTEND snapshot 8 cancelled, 0 rows "
        "(cancelled by gate snapshot --cancel)"]


# --- SQLAlchemy ------------------------------------------------------------------------------------


def _url(dc: ServerConfig, user: str = "root", password: str = "") -> str:
    return f"mysql+pymysql://{user}:{password}@{dc.host}:{dc.port}/"


def test_a_sqlalchemy_url_or_engine_reads_what_pymysql_reads(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS + HOLES, (6, 4))
    engine = sqlalchemy.create_engine(_url(dc), pool_size=1, max_overflow=0)
    for source in (dc, _url(dc), engine):
        with Consumer(source, unique_name, batch=4) as consumer:
            assert consumer.poll() == EXPECTED[:4] and consumer.cursor == Cursor(4, 3)
            assert consumer.poll() == EXPECTED[4:] and consumer.cursor == Cursor(6, 4)
            assert consumer.poll() == []  # 8, 9 and 12 are above the checkpoint
            assert consumer.position_at_time(datetime(2024, 5, 1, 10, 0, 1)) == Cursor(2, 1)
    # the named cursor: committed through the engine, resumed through PyMySQL and the other way round
    with Consumer(engine, unique_name, name="app", batch=2) as consumer:
        assert [c.id for c in consumer.poll()] == [1, 2]
        consumer.commit()
        put(sandbox, unique_name, [ROW7], (9, 5))  # each poll sees the new checkpoint (no stale snapshot)
        assert [c.id for c in consumer.poll()] == [3, 4]
    with Consumer(dc, unique_name, name="app", batch=10) as consumer:
        assert consumer.cursor == Cursor(2, 1)
        assert [c.id for c in consumer.poll()] == [3, 4, 5, 6, 7, 8, 9]
        consumer.commit()
    with Consumer(_url(dc), unique_name, name="app") as consumer:
        assert consumer.cursor == Cursor(9, 5)
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT name, id, tid FROM gate_consumer")
        assert cur.fetchall() == (("app", 9, 5),)
    # the consumer's connection leaves the application's pool: the next one has the engine's own session
    with engine.connect() as conn:
        assert tuple(conn.exec_driver_sql("SELECT DATABASE(), @@session.time_zone").one()) == (None, "SYSTEM")
    engine.dispose()


def test_a_sqlalchemy_engine_of_another_charset_reads_the_same_text(sandbox: Sandbox, unique_name: str) -> None:
    text = "日本 😀 Zoë"
    dc = channel(sandbox, unique_name, [], (1, 1))
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:  # the JSON as gate writes it: UTF-8, unescaped
        cur.execute("INSERT INTO transfer_data VALUES (1, 1, 'd', 't', NOW(), 's:1', 'INSERT', %s)",
                    (json.dumps({"NEW": [{"v": text}]}, ensure_ascii=False),))
    for source in (dc, _url(dc) + "?charset=latin1"):
        with Consumer(source, unique_name) as consumer:
            assert [c.new for c in consumer.poll()] == [{"v": text}]


def test_a_sqlalchemy_consumer_reports_bad_logins_and_drivers(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    with pytest.raises(ConnectionFailed) as refused:
        Consumer(_url(dc, "nobody", "Secret-pw-1"), unique_name)
    assert str(refused.value).startswith(f"The DC server at {dc.host}:{dc.port} (SQLAlchemy engine) could not be used: "
                                         "(1045, \"Access denied for user 'nobody'@")
    assert "Secret-pw-1" not in str(refused.value)
    with pytest.raises(ConnectionFailed, match=f"^The DC server {dc.host}:{dc.port} has no database 'no_such_channel'"):
        Consumer(_url(dc), "no_such_channel")
    with pytest.raises(InvalidValue, match="not 'sqlite'"):
        Consumer("sqlite://", unique_name)
