"""Changes the binlog does not carry, on real servers: a partition truncated while gate runs is flagged in its
ALTERTABLE payload and answered with a snapshot of the table (or, with on_rows_without_events 'flag', only
flagged); ALTER SEQUENCE is flagged; the captured tables that foreign-key cascades change are named by
'gate channel create' and 'gate channel check'."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from click.testing import Result

from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import Sandbox
from tests.replay import dc_rows, fresh_target, make_channel, replay, running, wait_caught_up

SMALL = ChannelDefaults(snapshot_chunk_rows=7, snapshot_chunk_seconds=0.01, batch_rows=20)


def snapshots(sandbox: Sandbox, channel: str) -> list[tuple[Any, ...]]:
    with sandbox.dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT dbname, tablename, reason, state FROM gate_snapshot ORDER BY id")
        return list(cur.fetchall())


def wait_snapshot_done(sandbox: Sandbox, channel: str, timeout: float = 60.0) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + timeout
    while True:
        found = snapshots(sandbox, channel)
        if found and all(row[3] == "done" for row in found):
            return found
        assert time.monotonic() < deadline, f"snapshots {found} after {timeout} s"
        time.sleep(0.05)


def folded_rows(sandbox: Sandbox, channel: str, db: str, table: str) -> list[tuple[Any, ...]]:
    """The table's rows as a consumer folds them that applies row changes and snapshots but not the partition
    statements (as gate's table images do: OTHERS changes no image)."""
    rows = [r for r in dc_rows(sandbox.dc, channel) if r[3] == table and r[6] != "ALTERTABLE"]
    with fresh_target(sandbox.dc, db) as target, target.cursor() as cur:
        replay(rows, target)
        cur.execute(f"SELECT * FROM `{db}`.`{table}` ORDER BY id")
        return list(cur.fetchall())


def test_truncate_partition_is_flagged_and_snapshotted(sandbox: Sandbox, unique_name: str) -> None:
    db = f"src_{unique_name}"
    flag_channel = f"{unique_name}_f"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
    try:
        dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",), defaults=SMALL)
        make_channel(sandbox.dc, sandbox.source, flag_channel, allow=(f"{db}.*",),
                     defaults=replace(SMALL, on_rows_without_events="flag"), server_id=4243)
        with sandbox.source.connect(db) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE pt (id INT PRIMARY KEY, v VARCHAR(10)) PARTITION BY RANGE (id) (PARTITION p0 "
                        "VALUES LESS THAN (20), PARTITION p1 VALUES LESS THAN (40), PARTITION p2 VALUES LESS THAN "
                        "MAXVALUE)")
            cur.execute("INSERT INTO pt VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1, 61)))
            cur.execute("CREATE SEQUENCE sq")
            cur.execute("SELECT NEXTVAL(sq)")
            with running(dc, unique_name):
                wait_caught_up(sandbox.source, sandbox.dc, unique_name)
                # the flag's name in a statement's text is no flag (a KeyError stopped gate for good)
                cur.execute("CREATE TABLE named (id INT PRIMARY KEY) COMMENT 'ROWS_WITHOUT_EVENTS'")
                cur.execute("ALTER TABLE named ADD COLUMN ROWS_WITHOUT_EVENTS INT")
                cur.execute("ALTER TABLE pt TRUNCATE PARTITION p0")
                cur.execute("SHOW MASTER STATUS")
                at = "{}:{}".format(*cur.fetchone()[:2])
                cur.execute("INSERT INTO pt VALUES (65, 'after')")
                cur.execute("UPDATE pt SET v = 'changed' WHERE id = 30")
                cur.execute("ALTER SEQUENCE sq RESTART WITH 100")
                assert wait_snapshot_done(sandbox, unique_name) == [
                    (db, "pt", f"rows changed without row events: TRUNCATE PARTITION at {at}", "done")]
                cur.execute("INSERT INTO pt VALUES (66, 'later')")
                cur.execute("DELETE FROM pt WHERE id = 21")
                wait_caught_up(sandbox.source, sandbox.dc, unique_name)
            cur.execute("SELECT * FROM pt ORDER BY id")
            source_rows = list(cur.fetchall())
        rows = dc_rows(sandbox.dc, unique_name)
        flagged = {r[3]: json.loads(r[7]) for r in rows if r[6] == "ALTERTABLE"}
        assert flagged.pop("named") == {
            "ADDCOLUMN": [{"field_name": "ROWS_WITHOUT_EVENTS", "data_type": "int"}],
            "SQL": "ALTER TABLE named ADD COLUMN ROWS_WITHOUT_EVENTS INT"}
        assert flagged == {
            "pt": {"OTHERS": ["TRUNCATE PARTITION p0"],
                   "ROWS_WITHOUT_EVENTS": [{"dbname": db, "tablename": "pt", "by": "TRUNCATE PARTITION"}],
                   "SQL": "ALTER TABLE pt TRUNCATE PARTITION p0"},
            "sq": {"OTHERS": ["ALTER SEQUENCE sq RESTART WITH 100"],
                   "ROWS_WITHOUT_EVENTS": [{"dbname": db, "tablename": "sq", "by": "ALTER SEQUENCE"}],
                   "SQL": "ALTER SEQUENCE sq RESTART WITH 100"}}
        optypes = [r[6] for r in rows if r[3] == "pt"]
        assert optypes.index("ALTERTABLE") < optypes.index("SNAPSHOTSTART") < optypes.index("SNAPSHOTEND")
        assert optypes.count("SNAPSHOT") >= 41
        assert len(source_rows) == 42 and folded_rows(sandbox, unique_name, db, "pt") == source_rows

        with running(dc, flag_channel):  # the same binlog, only flagged
            wait_caught_up(sandbox.source, sandbox.dc, flag_channel)
        flag_rows = dc_rows(sandbox.dc, flag_channel)
        assert {r[3]: json.loads(r[7]) for r in flag_rows if r[6] == "ALTERTABLE" and r[3] != "named"} == flagged
        assert [r for r in flag_rows if r[6].startswith("SNAPSHOT")] == [] and snapshots(sandbox, flag_channel) == []
        stale = folded_rows(sandbox, flag_channel, db, "pt")  # the truncated partition's rows stay in the fold
        assert [row for row in stale if row not in source_rows] == [(i, f"v{i}") for i in range(1, 20)]
    finally:
        with sandbox.source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def test_cascading_foreign_keys_are_named(gate: Callable[..., Result], sandbox: Sandbox, unique_name: str) -> None:
    db = f"src_{unique_name}"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"USE `{db}`")
        cur.execute("CREATE TABLE p (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE ch (id INT PRIMARY KEY, pid INT, CONSTRAINT fk_ch FOREIGN KEY (pid) REFERENCES p (id) "
                    "ON DELETE CASCADE ON UPDATE CASCADE)")
        cur.execute("CREATE TABLE sn (id INT PRIMARY KEY, pid INT, CONSTRAINT fk_sn FOREIGN KEY (pid) REFERENCES p (id) "
                    "ON DELETE SET NULL)")
        cur.execute("CREATE TABLE kept (id INT PRIMARY KEY, pid INT, CONSTRAINT fk_kept FOREIGN KEY (pid) "
                    "REFERENCES p (id))")  # RESTRICT: nothing changes without row events
    try:
        def warning(child: str, key: str, actions: str) -> str:
            return (f"warning: the foreign key {key} of the captured table {db}.{child} (parent {db}.p) is {actions}; "
                    f"gate needs a row event for every change of a captured table. Fix: InnoDB logs no row event for "
                    f"the rows of {db}.{child} that a cascade changes or deletes, so {db}.{child} diverges from the "
                    f"source in the DC whenever rows of {db}.p are deleted or their key updated. Have the application "
                    f"change the rows of {db}.{child} itself before those of {db}.p (a foreign key ON DELETE RESTRICT "
                    f"ON UPDATE RESTRICT then guards the order), or snapshot {db}.{child} again after such changes "
                    f"('gate snapshot {unique_name} --table {db}.{child}').\n")

        expected = (warning("ch", "fk_ch", "ON DELETE CASCADE, ON UPDATE CASCADE")
                    + warning("sn", "fk_sn", "ON DELETE SET NULL"))
        created = gate("--json", "channel", "create", unique_name, "--source", sandbox.source.address,
                       "--allow", f"{db}.*")
        assert created.exit_code == 0, created.stderr
        assert created.stderr.startswith(expected)
        assert [w["setting"] for w in json.loads(created.stdout)["warnings"]] == [
            f"the foreign key fk_ch of the captured table {db}.ch (parent {db}.p)",
            f"the foreign key fk_sn of the captured table {db}.sn (parent {db}.p)"]
        checked = gate("channel", "check", unique_name)
        assert checked.exit_code == 0 and checked.stderr == expected
        report = json.loads(gate("--json", "channel", "check", unique_name).stdout)[0]
        assert report["cascading_foreign_keys"] == [
            {"child": f"{db}.ch", "parent": f"{db}.p", "constraint": "fk_ch", "on_delete": "CASCADE",
             "on_update": "CASCADE"},
            {"child": f"{db}.sn", "parent": f"{db}.p", "constraint": "fk_sn", "on_delete": "SET NULL",
             "on_update": "RESTRICT"}]
        assert [p["fatal"] for p in report["problems"]] == [False, False]
        gate("channel", "filter", unique_name, "--deny", f"{db}.ch", "--deny", f"{db}.sn")
        assert gate("channel", "check", unique_name).stderr == ""  # parents alone do not diverge
    finally:
        with sandbox.source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
