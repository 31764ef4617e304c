"""spark_readers on a real DC with Spark local[2]: increments equal the DC rows, loads survive crashes,
materialised images equal the source tables. One SparkSession serves the whole module."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from gate.common.columns import ColumnRule
from gate.common.config import ServerConfig
from gate.common.errors import CursorExpiredError, LoadError, MaterialiseError
from gate.devtools.sandbox import Sandbox
from gate.devtools.workload import TABLE_DDL, RandomWorkload
from spark_readers.image import read_image
from spark_readers.load import CURSOR_FILE, Increment, OutputDir, load, read_increments
from spark_readers.materialise import materialise
from spark_readers.measure import measure
from spark_readers.session import ChannelSource
from spark_readers.timeline import column_default
from tests.replay import make_channel, running, wait_caught_up
from tests.test_client import channel
from tests.test_retention import ids, move, ok, rows

Gate = Callable[..., Result]


@dataclass(frozen=True)
class History:
    source: ChannelSource
    db: str
    increments: Path  # loaded in two runs, the second after more changes


@pytest.fixture(scope="module")
def history(sandbox: Sandbox, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> History:
    """A randomised workload (updates, deletes, key changes, ADD/DROP COLUMN, RENAME, TRUNCATE) captured
    by a channel, loaded to Parquet once half-way and once at the end."""
    name, db = "spark_history", "src_spark_history"
    dc = make_channel(sandbox.dc, sandbox.source, name, allow=(f"{db}.*",))
    source = ChannelSource(dc, name)
    out = tmp_path_factory.mktemp("increments")
    with sandbox.source.connect() as conn, running(dc, name):
        work = RandomWorkload(conn, db, seed=11, ddl_every=9)
        work.setup()
        work.run(150)
        wait_caught_up(sandbox.source, sandbox.dc, name)
        assert len(load(spark, source, str(out))) == 1
        work.run(150)
        wait_caught_up(sandbox.source, sandbox.dc, name)
        assert len(load(spark, source, str(out))) == 1
    return History(source, db, out)


def dc_rows(source: ChannelSource) -> list[tuple[Any, ...]]:
    from gate.common.dc import connect

    with connect(source.dc, "DC", source.channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid, dbname, tablename, UNIX_TIMESTAMP(create_time), instance_name, optype, data "
                    "FROM transfer_data ORDER BY id")
        return [(*row[:7], json.loads(row[7])) for row in cur.fetchall()]


def as_dc_rows(frame: DataFrame) -> list[tuple[Any, ...]]:
    """Loaded rows in the DC's shape, the JSON rebuilt from the parsed columns."""
    out = []
    rows = frame.select("*", F.unix_timestamp("create_time").alias("ts"), F.to_date("create_time").alias("day"))
    for row in rows.orderBy("id").collect():
        assert row.date == row.day
        if row.ddl is None:
            data = {key: [{c: image[c]} for c in row.columns]
                    for key, image in (("NEW", row.new), ("OLD", row.old)) if image is not None}
        else:
            data = {k: v for k, v in row.ddl.asDict(recursive=True).items() if v is not None}
        out.append((row.id, row.tid, row.dbname, row.tablename, row.ts, row.instance_name, row.optype, data))
    return out


def test_loaded_increments_equal_the_dc_rows(spark: SparkSession, history: History) -> None:
    frame = read_increments(spark, str(history.increments), history.source.channel)
    expected = dc_rows(history.source)
    assert len(expected) > 1000
    dirs = {p.name.removeprefix("increment=") for p in history.increments.glob("increment=*")}
    assert len(dirs) == 2 and {r.increment for r in frame.select("increment").distinct().collect()} == dirs
    assert as_dc_rows(frame) == expected
    optypes = {r[6] for r in expected}
    assert optypes >= {"CREATETABLE", "INSERT", "UPDATE", "DELETE", "ALTERTABLE", "RENAME", "TRUNCATE"}
    assert json.loads((history.increments / CURSOR_FILE).read_text()) == {
        "channel": history.source.channel, "id": expected[-1][0], "tid": expected[-1][1]}


def test_two_increments_equal_one_big_one(spark: SparkSession, history: History, tmp_path: Path) -> None:
    assert len(list(history.increments.glob("increment=*"))) == 2
    [one] = load(spark, history.source, str(tmp_path))
    assert one.first == 1
    columns = [c for c in read_increments(spark, str(tmp_path)).columns if c != "increment"]
    big = read_increments(spark, str(tmp_path)).select(*columns)
    two = read_increments(spark, str(history.increments)).select(*columns)
    assert big.orderBy("id").collect() == two.orderBy("id").collect()
    assert big.count() == one.last
    assert load(spark, history.source, str(tmp_path)) == []  # nothing new


class Crash(Exception):
    pass


def test_a_load_killed_at_any_point_and_rerun_leaves_no_duplicate(spark: SparkSession, history: History,
                                                                  tmp_path: Path) -> None:
    out = str(tmp_path)
    chunk = 400

    def crash_after(first: int) -> Any:
        def hook(increment: Increment) -> None:
            if increment.first >= first:
                raise Crash

        return hook

    def parts(increment: str) -> set[str]:
        return {p.name for p in (tmp_path / f"increment={increment}").rglob("*.parquet")}

    # killed after the second increment committed, before its cursor was saved
    with pytest.raises(Crash):
        load(spark, history.source, out, max_rows=chunk, after_write=crash_after(chunk + 1))
    assert json.loads((tmp_path / CURSOR_FILE).read_text())["id"] == chunk
    second = parts(f"{chunk + 1}-{2 * chunk}")
    assert second
    # the rerun adopts it (same files), writes the third, and is killed again; this time the third
    # has no _SUCCESS, as if killed while Spark was committing it
    with pytest.raises(Crash):
        load(spark, history.source, out, max_rows=chunk, after_write=crash_after(2 * chunk + 1))
    assert parts(f"{chunk + 1}-{2 * chunk}") == second
    third = parts(f"{2 * chunk + 1}-{3 * chunk}")
    (tmp_path / f"increment={2 * chunk + 1}-{3 * chunk}" / "_SUCCESS").unlink()
    assert json.loads((tmp_path / CURSOR_FILE).read_text())["id"] == 2 * chunk
    assert read_increments(spark, out).count() == 2 * chunk  # readers never see uncommitted increments
    written = load(spark, history.source, out, max_rows=chunk)
    assert written[0] == Increment(2 * chunk + 1, 3 * chunk, written[0].last_tid)
    assert parts(f"{2 * chunk + 1}-{3 * chunk}").isdisjoint(third)  # rewritten
    assert as_dc_rows(read_increments(spark, out)) == dc_rows(history.source)


def test_a_torn_cursor_replace_and_a_foreign_directory(spark: SparkSession, history: History, tmp_path: Path) -> None:
    [increment] = load(spark, history.source, str(tmp_path))
    cursor = tmp_path / CURSOR_FILE
    cursor.rename(tmp_path / f"{CURSOR_FILE}.tmp")  # killed between deleting the old file and the rename
    assert load(spark, history.source, str(tmp_path)) == []
    assert json.loads(cursor.read_text())["id"] == increment.last
    cursor.unlink()
    (tmp_path / f"{CURSOR_FILE}.tmp").write_text('{"chan')  # the very first cursor write, torn
    assert load(spark, history.source, str(tmp_path)) == []  # the committed increment is adopted again
    assert json.loads(cursor.read_text())["id"] == increment.last
    with pytest.raises(LoadError, match="holds increments of channel 'spark_history', not 'other'"):
        load(spark, ChannelSource(history.source.dc, "other"), str(tmp_path))


def test_a_cursor_renamed_without_its_checksum_file_still_loads(spark: SparkSession, history: History,
                                                                tmp_path: Path) -> None:
    """Killed between renaming the new cursor into place and renaming its .crc: the old checksum is left
    beside the new cursor. Loads and readers go on, and the next cursor save removes the stale checksum."""
    out = str(tmp_path)

    def stop_after_300(increment: Increment) -> None:
        if increment.first > 300:
            raise Crash

    with pytest.raises(Crash):  # the cursor at 300, increment=301-600 committed without its cursor
        load(spark, history.source, out, max_rows=300, after_write=stop_after_300)
    fs = OutputDir(spark, out).fs  # Hadoop's checksummed local file system writes the old cursor and its .crc
    stream = fs.create(OutputDir(spark, out).child("old.json"), True)
    stream.write(bytearray(json.dumps({"channel": history.source.channel, "id": 0, "tid": 0}).encode()))
    stream.close()
    assert (tmp_path / ".old.json.crc").exists()
    (tmp_path / ".old.json.crc").rename(tmp_path / f".{CURSOR_FILE}.crc")
    (tmp_path / "old.json").unlink()
    assert json.loads((tmp_path / CURSOR_FILE).read_text())["id"] == 300
    assert read_increments(spark, out).count() == 300
    rest = load(spark, history.source, out)  # adopts 301-600 (a cursor save), then writes the rest
    assert [(i.first, i.last) for i in rest] == [(601, len(dc_rows(history.source)))]
    assert not (tmp_path / f".{CURSOR_FILE}.crc").exists()
    assert json.loads((tmp_path / CURSOR_FILE).read_text()) == {
        "channel": history.source.channel, "id": rest[0].last, "tid": rest[0].last_tid}
    assert as_dc_rows(read_increments(spark, out)) == dc_rows(history.source)


def source_tables(sandbox: Sandbox, db: str) -> dict[str, tuple[list[str], dict[tuple[str, ...], dict[str, Any]]]]:
    """Each table's columns and rows by primary key, values as the text the server sends for SELECT (binary
    strings base64, as the DC has them)."""
    tables = {}
    with sandbox.source.connect(db, conv={}) as conn, conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (db,))
        for (table,) in cur.fetchall():
            cur.execute("SELECT column_name, column_key FROM information_schema.columns "
                        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (db, table))
            described = cur.fetchall()
            names = [name for name, _ in described]
            key = [names.index(name) for name, kind in described if kind == "PRI"]
            cur.execute(f"SELECT * FROM `{table}`")
            rows = [[base64.b64encode(v).decode() if isinstance(v, bytes) else v for v in row] for row in cur.fetchall()]
            tables[table] = (names, {tuple(row[i] for i in key): dict(zip(names, row)) for row in rows})
    return tables


def image_tables(spark: SparkSession, out: Path, db: str, keys: dict[str, list[str]],
                 typed: bool = False) -> dict[str, Any]:
    """The image's tables of ``db``: string columns (materialise without typing), or typed ones (the CLI's,
    with the channel's typing: ``id`` int, then ``_invalid``)."""
    tables = {}
    for name, frame in sorted(read_image(spark, str(out)).items()):
        if not name.startswith(f"{db}."):
            continue
        table = name.split(".", 1)[1]
        kinds = dict(frame.dtypes)
        assert (kinds["id"], frame.columns[-1]) == ("int", "_invalid") if typed else set(kinds.values()) == {"string"}
        rows = [row.asDict() for row in frame.collect()]
        key = keys.get(table, ["id"])
        tables[table] = (frame.columns, {tuple(row[c] for c in key): row for row in rows})
    return tables


def test_materialised_images_equal_the_source_tables(spark: SparkSession, history: History, sandbox: Sandbox,
                                                      tmp_path: Path) -> None:
    changes = dc_rows(history.source)
    assert any(r[6] == "UPDATE" and r[7]["NEW"][0] != r[7]["OLD"][0] for r in changes)  # primary-key changes
    assert {key for r in changes if r[6] == "ALTERTABLE" for key in r[7]} >= {"ADDCOLUMN", "DROPCOLUMN"}
    result = materialise(spark, str(history.increments), str(tmp_path), channel=history.source.channel)
    expected = source_tables(sandbox, history.db)
    assert all(rows for _, rows in expected.values())
    assert result.skipped == {}
    assert result.tables == {f"{history.db}.{t}": len(rows) for t, (_, rows) in expected.items()}
    assert image_tables(spark, tmp_path, history.db, {}) == expected
    added = [c for columns, _ in expected.values() for c in columns if c.startswith("c")]
    assert added, "the workload added columns that are still there"
    with pytest.raises(MaterialiseError, match="not empty"):
        materialise(spark, str(history.increments), str(history.increments))


def test_materialise_with_keys_given_and_every_kind_of_ddl(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                         tmp_path: Path) -> None:
    """Tables created before the channel started (their keys given), column renames, added columns with
    defaults, primary-key changes, a dropped and a truncated table, a table without key."""
    db = f"src_{unique_name}"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(TABLE_DDL.format(db=db, table="pre"))
        cur.execute(f"CREATE TABLE {db}.nokey (a INT, b TEXT)")
        dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",))
        with running(dc, unique_name):
            cur.executemany(f"INSERT INTO {db}.pre (id, name, amount) VALUES (%s, %s, %s)",
                            [(i, f"n{i}", f"{i}.5") for i in range(1, 8)])
            cur.execute(f"INSERT INTO {db}.nokey VALUES (1, 'x')")
            cur.execute(f"ALTER TABLE {db}.pre ADD COLUMN d1 DECIMAL(6,2) NOT NULL DEFAULT 2.5, "
                        "ADD COLUMN d2 VARCHAR(10) DEFAULT 'it''s', ADD COLUMN d3 INT NOT NULL, "
                        "ADD COLUMN d4 DATETIME DEFAULT CURRENT_TIMESTAMP")
            cur.execute(f"UPDATE {db}.pre SET id = 100, d2 = NULL WHERE id = 1")
            cur.execute(f"ALTER TABLE {db}.pre CHANGE name label VARCHAR(40), DROP COLUMN note, DROP COLUMN d4")
            cur.execute(f"UPDATE {db}.pre SET label = 'renamed' WHERE id = 2")
            cur.execute(f"DELETE FROM {db}.pre WHERE id = 3")
            cur.execute(f"CREATE TABLE {db}.gone (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO {db}.gone VALUES (1)")
            cur.execute(f"DROP TABLE {db}.gone")
            cur.execute(f"CREATE TABLE {db}.cleared (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO {db}.cleared VALUES (1, 1), (2, 2)")
            cur.execute(f"TRUNCATE TABLE {db}.cleared")
            cur.execute(f"INSERT INTO {db}.cleared VALUES (3, 3)")
            cur.execute(f"RENAME TABLE {db}.cleared TO {db}.kept")
            cur.execute(f"UPDATE {db}.kept SET id = 4 WHERE id = 3")
            wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    increments = tmp_path / "increments"
    load(spark, ChannelSource(dc, unique_name), str(increments))
    out = tmp_path / "images"
    result = materialise(spark, str(increments), str(out), keys={f"{db}.pre": ["id"]})
    assert result.skipped == {f"{db}.nokey": "no primary key known: give it as a key (--key DB.TABLE=COL,...)"}
    expected = source_tables(sandbox, db)
    del expected["nokey"]
    assert result.tables == {f"{db}.pre": 6, f"{db}.kept": 1}
    images = image_tables(spark, out, db, {})
    assert images == expected
    assert images["pre"][1][("4",)]["d1"] == "2.50" and images["pre"][1][("4",)]["d2"] == "it's"


def test_materialise_images_without_the_excluded_columns(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                          tmp_path: Path) -> None:
    """Column rules: excluded columns are absent from images and DDL alike, so the image has the others."""
    db = f"src_{unique_name}"
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                      columns=(ColumnRule("exclude", f"{db}.t.secret*"), ColumnRule("mask", f"{db}.t.v")))
    with sandbox.source.connect() as conn, conn.cursor() as cur, running(dc, unique_name):
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, secret VARCHAR(10), v VARCHAR(10))")
        cur.execute(f"INSERT INTO {db}.t VALUES (1, 's1', 'a'), (2, 's2', NULL), (3, 's3', 'c')")
        cur.execute(f"ALTER TABLE {db}.t ADD COLUMN secret2 INT, ADD COLUMN w INT DEFAULT 5")
        cur.execute(f"UPDATE {db}.t SET id = 10, secret2 = 1, w = 6 WHERE id = 1")
        cur.execute(f"DELETE FROM {db}.t WHERE id = 3")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
    increments = tmp_path / "increments"
    load(spark, ChannelSource(dc, unique_name), str(increments))
    out = tmp_path / "images"
    assert materialise(spark, str(increments), str(out)).tables == {f"{db}.t": 2}
    assert image_tables(spark, out, db, {}) == {"t": (["id", "v", "w"], {
        ("10",): {"id": "10", "v": "***", "w": "6"}, ("2",): {"id": "2", "v": None, "w": "5"}})}


@pytest.mark.parametrize(("sql", "column", "data_type", "expected"), [
    ("ALTER TABLE t ADD COLUMN c INT DEFAULT 7", "c", "int", "7"),
    ("ALTER TABLE t ADD c BIGINT UNSIGNED NOT NULL DEFAULT '12', ADD d INT", "c", "bigint unsigned", "12"),
    ("ALTER TABLE t ADD COLUMN (a INT, `b` DECIMAL(5,3) DEFAULT -1.5)", "b", "decimal(5,3)", "-1.500"),
    ("ALTER TABLE t ADD COLUMN c TEXT NOT NULL", "c", "text", ""),
    ("ALTER TABLE t ADD COLUMN c CHAR(3) DEFAULT 'a\\'b''c'", "c", "char(3)", "a'b'c"),
    ("ALTER TABLE t ADD COLUMN c INT DEFAULT NULL", "c", "int", None),
    ("ALTER TABLE t ADD COLUMN c INT", "c", "int", None),
    ("ALTER TABLE t ADD COLUMN c DOUBLE DEFAULT 1.5", "c", "double", None),  # not rendered here: NULL
])
def test_column_default(sql: str, column: str, data_type: str, expected: str | None) -> None:
    assert column_default(sql, column, data_type) == expected


def test_cli_spark_commands(spark: SparkSession, history: History, sandbox: Sandbox, gate: Gate,
                            tmp_path: Path) -> None:
    loaded = gate("spark-load", history.source.channel, "--out", str(tmp_path / "inc"), "--partitions", "3")
    assert loaded.exit_code == 0
    checkpoint = dc_rows(history.source)[-1]
    assert loaded.output == f"wrote increment=1-{checkpoint[0]} (tid {checkpoint[1]})\n"
    stale = tmp_path / "img" / history.db / "dropped_long_ago"
    stale.mkdir(parents=True)
    (tmp_path / "img" / "_gate_materialised").write_text("{}")  # an earlier image: replaced as a whole
    made = gate("spark-materialise", history.source.channel, "--increments", str(tmp_path / "inc"),
                "--out", str(tmp_path / "img"))
    assert made.exit_code == 0
    assert not stale.exists()
    assert sorted(made.output.splitlines()) == sorted(
        f"{history.db}.{t}: {len(rows)} rows" for t, (_, rows) in source_tables(sandbox, history.db).items())
    direct = gate("spark-materialise", history.source.channel, "--out", str(tmp_path / "direct"))  # from the DC
    assert direct.exit_code == 0 and direct.output == made.output
    assert image_tables(spark, tmp_path / "direct", history.db, {}, typed=True) == image_tables(
        spark, tmp_path / "img", history.db, {}, typed=True)
    again = gate("--json", "spark-materialise", history.source.channel, "--out", str(tmp_path / "direct"))
    assert json.loads(again.output)["tables"] == {line.split(": ")[0]: int(line.split(": ")[1].split()[0])
                                                  for line in made.output.splitlines()}  # nothing new: unchanged
    assert spark.sparkContext._jsc is not None  # the module's session is still running


def test_a_load_with_a_consumer_name_holds_retention_back(spark: SparkSession, sandbox: Sandbox, gate: Gate,
                                                         unique_name: str, tmp_path: Path) -> None:
    source = ChannelSource(channel(sandbox, unique_name, rows(6, young_from=7), (6, 3)), unique_name)
    ok(gate("channel", "set", unique_name, "--retain-days", "1"))
    move(sandbox, unique_name, "spark:t", (0, 0))  # registered before its first run: nothing may go
    assert ok(gate("channel", "purge", unique_name)).endswith("removed 0 rows\n")
    [first] = load(spark, source, str(tmp_path / "kept"), consumer="spark:t")
    assert (first.first, first.last, first.last_tid) == (1, 6, 3)
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT name, id, tid FROM gate_consumer")
        assert cur.fetchall() == (("spark:t", 6, 3),)
    assert "removed 6 rows (ids 1 to 6)" in ok(gate("channel", "purge", unique_name))
    assert ids(sandbox, unique_name) == []
    with pytest.raises(CursorExpiredError, match=f"^Channel '{unique_name}' no longer holds the rows after cursor "
                                                 "id 0: retention has removed every row up to id 6"):
        load(spark, source, str(tmp_path / "late"))  # a new output directory would start at row 1
    assert not list((tmp_path / "late").glob("increment=*"))


@pytest.mark.measure
def test_measure_incremental_load_against_a_plain_jdbc_scan(spark: SparkSession, sandbox: Sandbox,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    name, db = "spark_measure", "src_spark_measure"
    dc: ServerConfig = make_channel(sandbox.dc, sandbox.source, name, allow=(f"{db}.*",))
    with sandbox.source.connect() as conn, conn.cursor() as cur, running(dc, name):
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(TABLE_DDL.format(db=db, table="bulk"))
        for start in range(0, 100_000, 2000):
            cur.execute(f"INSERT INTO {db}.bulk SELECT seq, CONCAT('name ', seq), seq * 1.25, seq / 7, "
                        "NOW(3) - INTERVAL seq SECOND, seq % 256, UNHEX(SHA1(seq)), REPEAT('x', seq % 300) "
                        f"FROM mysql.seq_{start + 1}_to_{start + 2000}")
        wait_caught_up(sandbox.source, sandbox.dc, name, timeout=120)
    figures = measure(spark, ChannelSource(dc, name), partitions=4)
    with capsys.disabled():
        print("\nspark_readers throughput (rows/s): " + "  ".join(f"{k}={v:.0f}" for k, v in figures.items()))
    assert figures["rows"] == 100_001
    assert all(v > 0 for v in figures.values())
