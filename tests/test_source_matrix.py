"""The source-configuration matrix: server settings and SQL features that change what the binlog holds, each on a
real server with a workload while gate runs, and settings changed while it runs. Every case is CAPTURED: the
fold of the channel's rows equals the source's tables (every column, generated, invisible and system-versioned
history included), the DC holds each row change the server's own decoding (mariadb-binlog -v) shows exactly
once, the ids have no gap and no row lies above the checkpoint. The table of docs/dba/sources.md cites these
tests. Three channels run at once on one DC: the session's source, its standby (a source that is itself a
replica, with log_slave_updates) and a private source with an encrypted binlog and gtid_strict_mode."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from click.testing import Result

from gate.admin.preflight import Problem, check_server
from gate.capture.libshim import fix_library_charsets
from gate.devtools.sandbox import REPL_PASSWORD, REPL_USER, SOURCE_ARGS, MariaDBServer, Sandbox, free_port
from gate.devtools.synthetic import ImageModel
from tests.replay import dc_rows, make_channel, running, wait_caught_up

Gate = Callable[..., Result]
DB = "matrix"  # the databases of the cases are matrix_CASE
Sql = Callable[..., list[tuple[Any, ...]]]  # sql(*statements): on a new connection to the case's database; the
# last statement's rows


@dataclass(frozen=True)
class Case:
    name: str
    server: str  # "source", "replica" (the session's standby: its upstream is "source") or "private"
    workload: Callable[[Sql], None]
    rolled_back: tuple[str, ...] = ()  # tables whose binlogged rows must not reach the DC (XA ROLLBACK)
    unlogged: tuple[str, ...] = ()  # tables whose changes the binlog never holds: the caveat, shown

    @property
    def db(self) -> str:
        return f"{DB}_{self.name}"


def dml(sql: Sql, table: str, base: int = 0, rows: int = 60) -> None:
    """Inserts in transactions of 20 rows, updates, deletes, an INSERT ... SELECT, REPLACE and an upsert."""
    for start in range(base + 1, base + rows + 1, 20):
        sql("BEGIN", f"INSERT INTO {table} (id, v, n) VALUES "
            + ", ".join(f"({i}, 'v{i}', {i})" for i in range(start, min(start + 20, base + rows + 1))), "COMMIT")
    sql(f"UPDATE {table} SET n = n + 1, v = CONCAT(v, 'u') WHERE id % 3 = 0 AND id > {base}",
        f"DELETE FROM {table} WHERE id % 7 = 0 AND id > {base}",
        f"INSERT INTO {table} (id, v, n) SELECT id + 100000, v, n FROM {table} WHERE id BETWEEN {base} AND {base + 10}",
        f"REPLACE INTO {table} (id, v, n) VALUES ({base + 1}, 'replaced', -1)",
        f"INSERT INTO {table} (id, v, n) VALUES ({base + 2}, 'x', 0) ON DUPLICATE KEY UPDATE n = n + 100")


TABLE = "(id INT PRIMARY KEY, v VARCHAR(40), n INT)"


def row_image_full(sql: Sql) -> None:
    """binlog_row_image FULL as the global default, set again while gate runs."""
    sql(f"CREATE TABLE t {TABLE}")
    dml(sql, "t")
    sql("SET GLOBAL binlog_row_image = 'FULL'")
    dml(sql, "t", base=1000)


def annotate_rows(sql: Sql) -> None:
    """binlog_annotate_row_events (ON by default: each row event follows the statement's text) switched off
    and on while gate runs, globally and for a session."""
    sql(f"CREATE TABLE t {TABLE}")
    try:
        dml(sql, "t")
        sql("SET GLOBAL binlog_annotate_row_events = OFF")
        dml(sql, "t", base=1000)
        sql("SET SESSION binlog_annotate_row_events = ON", "INSERT INTO t VALUES (5000, 'session on', 0)")
    finally:
        sql("SET GLOBAL binlog_annotate_row_events = ON")
    dml(sql, "t", base=2000)


def triggers(sql: Sql) -> None:
    """Rows a trigger writes (and a BEFORE trigger's changed values) are row events of their own; so are the
    rows of a stored procedure."""
    sql(f"CREATE TABLE t {TABLE}",
        "CREATE TABLE audit (seq INT AUTO_INCREMENT PRIMARY KEY, op CHAR(1), id INT, v VARCHAR(40))",
        "CREATE TRIGGER t_bi BEFORE INSERT ON t FOR EACH ROW SET NEW.v = UPPER(NEW.v)",
        "CREATE TRIGGER t_ai AFTER INSERT ON t FOR EACH ROW INSERT INTO audit (op, id, v) VALUES ('I', NEW.id, NEW.v)",
        "CREATE TRIGGER t_au AFTER UPDATE ON t FOR EACH ROW INSERT INTO audit (op, id, v) VALUES ('U', NEW.id, NEW.v)",
        "CREATE TRIGGER t_ad AFTER DELETE ON t FOR EACH ROW DELETE FROM audit WHERE id = OLD.id AND op = 'I'",
        "CREATE PROCEDURE double_n() UPDATE t SET n = n * 2 WHERE id < 30")
    dml(sql, "t")
    sql("CALL double_n()")


def system_versioning(sql: Sql) -> None:
    """A system-versioned table: an UPDATE is an update of the current row and an insert of the history row, a
    DELETE an update of row_end; DELETE HISTORY deletes history rows."""
    sql(f"CREATE TABLE t {TABLE} WITH SYSTEM VERSIONING",
        "CREATE TABLE p (id INT, v VARCHAR(40), n INT, s TIMESTAMP(6) GENERATED ALWAYS AS ROW START, "
        "e TIMESTAMP(6) GENERATED ALWAYS AS ROW END, PERIOD FOR SYSTEM_TIME(s, e), PRIMARY KEY (id)) "
        "WITH SYSTEM VERSIONING")
    dml(sql, "t")
    dml(sql, "p")
    sql("DELETE HISTORY FROM p")


def sequences(sql: Sql) -> None:
    """NEXTVAL writes the sequence's row when it takes a new cache of values, SETVAL when it moves it; a
    column's DEFAULT NEXTVAL(s) writes both."""
    sql("CREATE SEQUENCE s START WITH 10 INCREMENT BY 3 CACHE 5",
        "CREATE TABLE o (id INT PRIMARY KEY DEFAULT NEXTVAL(s), v VARCHAR(40), n INT)")
    sql(*["SELECT NEXTVAL(s)"] * 40)
    sql("INSERT INTO o (v, n) VALUES " + ", ".join(f"('o{i}', {i})" for i in range(50)))
    sql("SELECT SETVAL(s, 10000)", "INSERT INTO o (v, n) VALUES ('after setval', 0)")


def generated_and_invisible(sql: Sql) -> None:
    """VIRTUAL and STORED generated columns and an INVISIBLE one: the row events carry every column."""
    sql("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT, twice INT AS (n * 2) VIRTUAL, "
        "label VARCHAR(50) AS (CONCAT(v, '/', n)) STORED, hidden INT INVISIBLE DEFAULT 7, "
        "KEY (label))")
    dml(sql, "t")
    sql("UPDATE t SET hidden = id WHERE id < 20")


def xa(sql: Sql) -> None:
    """XA: a committed transaction's rows, never a rolled-back one's (the binlog holds both prepared)."""
    sql(f"CREATE TABLE t {TABLE}", f"CREATE TABLE r {TABLE}")
    for n in range(5):
        sql(f"XA START 'mx{n}'", f"INSERT INTO t VALUES ({n}, 'xa', {n}), ({n + 100}, 'xa', {n})",
            f"UPDATE t SET n = -1 WHERE id = {n}", f"XA END 'mx{n}'", f"XA PREPARE 'mx{n}'", f"XA COMMIT 'mx{n}'")
    sql("XA START 'mxr'", "INSERT INTO r VALUES (1, 'rolled back', 0)", "XA END 'mxr'", "XA PREPARE 'mxr'",
        "XA ROLLBACK 'mxr'")
    sql("XA START 'mx1p'", "INSERT INTO t VALUES (900, 'one phase', 0)", "XA END 'mx1p'", "XA COMMIT 'mx1p' ONE PHASE")


def non_transactional(sql: Sql) -> None:
    """MyISAM and Aria tables; a MyISAM change inside a rolled-back InnoDB transaction stays (and is logged)."""
    sql(f"CREATE TABLE m {TABLE} ENGINE=MyISAM", f"CREATE TABLE a {TABLE} ENGINE=Aria", f"CREATE TABLE i {TABLE}")
    dml(sql, "m")
    dml(sql, "a")
    sql("INSERT INTO i VALUES (1, 'committed', 0)")
    sql("BEGIN", "INSERT INTO i VALUES (2, 'rolled back', 0)", "INSERT INTO m VALUES (5000, 'kept', 0)",
        "UPDATE a SET n = 77 WHERE id = 1", "ROLLBACK")


def temporary_tables(sql: Sql) -> None:
    """A temporary table's changes are never in the row binlog; rows copied from it into a table are."""
    sql(f"CREATE TABLE t {TABLE}", f"CREATE TEMPORARY TABLE tmp {TABLE}",
        "INSERT INTO tmp VALUES " + ", ".join(f"({i}, 'tmp{i}', {i})" for i in range(1, 81)),
        "UPDATE tmp SET n = n * 10", "INSERT INTO t SELECT * FROM tmp WHERE id % 2 = 0",
        "DELETE FROM tmp", "DROP TEMPORARY TABLE tmp",
        f"CREATE TEMPORARY TABLE t2 {TABLE}", "INSERT INTO t2 VALUES (1, 'temp', 0)", "DROP TABLE t2")


def load_data(sql: Sql) -> None:
    """LOAD DATA INFILE, plain and REPLACE: row events."""
    data_file = f"{sql('SELECT @@tmpdir')[0][0]}/matrix_load.csv"
    sql(f"SELECT seq, CONCAT('l', seq), seq FROM seq_1_to_150 INTO OUTFILE '{data_file}' FIELDS TERMINATED BY ','")
    sql(f"CREATE TABLE t {TABLE}",
        f"LOAD DATA INFILE '{data_file}' INTO TABLE t FIELDS TERMINATED BY ','",
        f"LOAD DATA INFILE '{data_file}' REPLACE INTO TABLE t FIELDS TERMINATED BY ',' (id, v, @n) SET n = @n * 2")


def create_table_select(sql: Sql) -> None:
    """CREATE TABLE ... SELECT in row format: one transaction of a CREATE TABLE (the columns the server chose,
    no SELECT) and the rows; with a key and columns of its own too."""
    sql(f"CREATE TABLE src {TABLE}")
    dml(sql, "src")
    sql("CREATE TABLE c1 SELECT * FROM src",
        "CREATE TABLE c2 (id INT PRIMARY KEY, extra INT DEFAULT 5) SELECT id, v FROM src WHERE id < 40",
        "CREATE TABLE c3 ENGINE=MyISAM SELECT id, n FROM src WHERE id > 20")
    sql("UPDATE c1 SET n = 0 WHERE id < 10", "DELETE FROM c2 WHERE id > 30")


def skip_replication(sql: Sql) -> None:
    """@@skip_replication marks events that replicas may filter; gate asks for every event, so it gets them."""
    sql(f"CREATE TABLE t {TABLE}")
    sql("SET SESSION skip_replication = 1", "INSERT INTO t VALUES (1, 'marked', 0), (2, 'marked', 0)",
        "UPDATE t SET n = 5")
    dml(sql, "t", base=10)


def sql_log_bin_off(sql: Sql) -> None:
    """A session with sql_log_bin = 0 writes nothing to the binlog: its changes never reach gate (caveat)."""
    sql(f"CREATE TABLE t {TABLE}", f"CREATE TABLE u {TABLE}")
    dml(sql, "t")
    sql("SET SESSION sql_log_bin = 0", "INSERT INTO u VALUES (1, 'not in the binlog', 0), (2, 'nor this', 0)")


def ignored_database(sql: Sql) -> None:
    """binlog_ignore_db names this database: nothing done in it while it is the default is logged (caveat)."""
    sql(f"CREATE TABLE t {TABLE}")
    dml(sql, "t")


def gtid_domains(sql: Sql) -> None:
    """Sessions writing in other GTID domains (gtid_domain_id), and gtid_strict_mode switched while gate runs."""
    sql(f"CREATE TABLE t {TABLE}")
    try:
        dml(sql, "t")
        sql("SET GLOBAL gtid_strict_mode = OFF")
        sql("SET SESSION gtid_domain_id = 7", "INSERT INTO t VALUES (5000, 'domain 7', 0)",
            "SET SESSION gtid_domain_id = 8", "UPDATE t SET n = 8 WHERE id < 10")
        sql("SET GLOBAL gtid_strict_mode = ON")
        sql("FLUSH BINARY LOGS")
        dml(sql, "t", base=1000)
    finally:
        sql("SET GLOBAL gtid_strict_mode = ON")


def encrypted(sql: Sql) -> None:
    """encrypt_binlog (file_key_management): the server decrypts what it sends a replica; annotate events are
    off at start and switched on while gate runs; a binlog rotation starts a new encrypted file."""
    sql(f"CREATE TABLE t {TABLE}")
    dml(sql, "t")
    sql("SET GLOBAL binlog_annotate_row_events = ON", "FLUSH BINARY LOGS")
    dml(sql, "t", base=1000)


def upstream(sql: Sql) -> None:
    """Run on the upstream of the replica the channel reads: reaches gate through the replica's binlog."""
    sql(f"CREATE TABLE t {TABLE}", f"CREATE TABLE m {TABLE} ENGINE=MyISAM")
    dml(sql, "t")
    dml(sql, "m")


CASES = [
    Case("row_image_full", "source", row_image_full),
    Case("annotate", "source", annotate_rows),
    Case("triggers", "source", triggers),
    Case("versioned", "source", system_versioning),
    Case("sequences", "source", sequences),
    Case("generated", "source", generated_and_invisible),
    Case("xa", "source", xa, rolled_back=("r",)),
    Case("nontrans", "source", non_transactional),
    Case("temporary", "source", temporary_tables),
    Case("load_data", "source", load_data),
    Case("ctas", "source", create_table_select),
    Case("skip_repl", "source", skip_replication),
    Case("sql_log_bin", "source", sql_log_bin_off, unlogged=("u",)),
    Case("replica", "replica", upstream),
    Case("encrypted", "private", encrypted),
    Case("gtid", "private", gtid_domains),
    Case("ignored", "private", ignored_database, unlogged=("t",)),
]

# the private source: an encrypted binlog (a key file for file_key_management), gtid_strict_mode, annotate
# events off (the encrypted case switches them on), binlog_ignore_db, row events of at most 256 bytes (a
# statement's rows in many events) and binlog files of 4 KiB (rotations all along)
KEYS = "1;" + "a1" * 32 + "\n"


def private_args(key_file: Path) -> tuple[str, ...]:
    return (*SOURCE_ARGS, "--plugin-load-add=file_key_management",
            f"--file-key-management-filename={key_file}", "--encrypt-binlog=ON", "--gtid-strict-mode=ON",
            "--binlog-annotate-row-events=OFF", f"--binlog-ignore-db={DB}_ignored",
            "--binlog-row-event-max-size=256", "--max-binlog-size=4096")


def sql_on(server: MariaDBServer, db: str | None) -> Sql:
    def sql(*statements: str) -> list[tuple[Any, ...]]:
        with server.connect(db) as conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return list(cur.fetchall())
    return sql


def binlog_start(server: MariaDBServer) -> tuple[str, int]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    return file, int(pos)


def binlog_changes(server: MariaDBServer, start: tuple[str, int]) -> Counter[tuple[str, str, str]]:
    """(db, table, INSERT|UPDATE|DELETE) -> row changes, as the server's own decoding shows them from ``start``."""
    text = subprocess.run(
        ["mariadb-binlog", "--read-from-remote-server", "--host=127.0.0.1", f"--port={server.port}", "--user=root",
         "--to-last-log", f"--start-position={start[1]}", "--base64-output=decode-rows", "-v", start[0]],
        capture_output=True, text=True, check=True, timeout=60).stdout
    ops = {"INSERT INTO": "INSERT", "UPDATE": "UPDATE", "DELETE FROM": "DELETE"}
    return Counter((db, table, ops[op]) for op, db, table in
                   re.findall(r"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]+)`\.`([^`]+)`$", text, re.M))


def wait_replica_applied(source: MariaDBServer, replica: MariaDBServer, timeout: float = 60.0) -> None:
    with source.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        target = cur.fetchone()[0]
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (target, timeout))
        assert cur.fetchone()[0] == 0, f"the replica did not apply {target} within {timeout} s"


def source_tables(server: MariaDBServer, db: str) -> dict[str, list[tuple[tuple[str, str | None], ...]]]:
    """Every table of ``db`` as sorted rows of (column, text) pairs: every column (generated, invisible, a
    system-versioned table's period columns) and every row (a versioned table's history too)."""
    out = {}
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = %s", (db,))
        for table, kind in cur.fetchall():
            cur.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                        "AND table_name = %s ORDER BY ordinal_position", (db, table))
            columns = [c for (c,) in cur.fetchall()]
            versioned = kind == "SYSTEM VERSIONED"
            if versioned and "row_end" not in columns and not _has_period(cur, db, table):
                columns += ["row_start", "row_end"]  # the implicit period columns
            select = ", ".join(f"CAST(`{c}` AS CHAR)" for c in columns)
            cur.execute(f"SELECT {select} FROM `{table}`" + (" FOR SYSTEM_TIME ALL" if versioned else ""))
            out[table] = sorted(tuple(zip(columns, row)) for row in cur.fetchall())
    return out


def _has_period(cur: pymysql.cursors.Cursor, db: str, table: str) -> bool:
    cur.execute(f"SHOW CREATE TABLE `{db}`.`{table}`")
    return "PERIOD FOR SYSTEM_TIME" in cur.fetchone()[1]


def fold(rows: list[tuple[Any, ...]], db: str) -> dict[str, list[tuple[tuple[str, str | None], ...]]]:
    """The channel's rows of ``db`` folded as full images: an INSERT adds its NEW image (a sequence's replaces
    its one row), an UPDATE replaces exactly one row equal to its OLD image, a DELETE removes one; so a change
    applied twice, or to a row that is not there, fails here."""
    tables: dict[str, list[tuple[tuple[str, str | None], ...]]] = {}
    sequences: set[str] = set()
    for _id, _tid, dbname, table, _ct, _inst, optype, data in rows:
        if dbname != db:
            continue
        payload = json.loads(data) if data else {}
        held = tables.setdefault(table, [])
        if optype == "CREATETABLE":
            tables[table] = []
            if payload["SQL"].upper().startswith("CREATE SEQUENCE"):
                sequences.add(table)
        elif optype == "INSERT":
            if table in sequences:
                held.clear()
            held.append(_image(payload, "NEW"))
        elif optype in ("UPDATE", "DELETE"):
            old = _image(payload, "OLD")
            assert old in held, f"{optype} of {db}.{table} finds no row {old}"
            held.remove(old)
            if optype == "UPDATE":
                held.append(_image(payload, "NEW"))
        elif optype == "TRUNCATE":
            held.clear()
        elif optype == "DROPTABLE":
            del tables[table]
    return {table: sorted(images) for table, images in tables.items()}


def images(rows: list[tuple[Any, ...]], db: str) -> dict[str, list[tuple[tuple[str, str | None], ...]]]:
    """The table images of ``db`` as a consumer holds them (upserts by the CREATETABLE's key, in its columns),
    but for sequences: a sequence's rows have no key, its image holds every row NEXTVAL wrote (see fold)."""
    model = ImageModel()
    sequences = set()
    for _id, _tid, dbname, table, _ct, _inst, optype, data in rows:
        if dbname == db:
            payload = json.loads(data) if data else {}
            model.apply(dbname, table, optype, payload)
            if optype == "CREATETABLE" and payload["SQL"].upper().startswith("CREATE SEQUENCE"):
                sequences.add(f"{db}.{table}")
    return {name.split(".", 1)[1]: sorted(tuple((c, row[c]) for c in table.columns) for row in table.rows.values())
            for name, table in model.tables.items() if name not in sequences}


def _image(payload: dict[str, Any], part: str) -> tuple[tuple[str, str | None], ...]:
    return tuple(next(iter(cell.items())) for cell in payload[part])


@dataclass
class Channel:
    name: str
    source: MariaDBServer  # whose binlog the channel reads
    start: tuple[str, int]  # its binlog position when the channel was created


@dataclass
class Matrix:
    channels: dict[str, Channel]  # by Case.server
    rows: dict[str, list[tuple[Any, ...]]]  # channel name -> its DC rows
    checkpoints: dict[str, tuple[int, int]]
    truth: dict[str, Counter[tuple[str, str, str]]]  # channel name -> binlog row changes
    servers: dict[str, MariaDBServer]  # Case.server -> where the case's tables are read back


_server_ids = itertools.count(7300)


@pytest.fixture(scope="module")
def matrix(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    """Every case's workload while its channel runs, then each channel caught up and stopped."""
    fix_library_charsets()
    tmp = tmp_path_factory.mktemp("matrix")
    key_file = tmp / "keys.txt"
    key_file.write_text(KEYS)
    private = MariaDBServer("private", tmp / "private", free_port(), 41, private_args(key_file), tied_to_parent=True)
    private.start()
    assert sandbox.standby is not None
    upstream_of = {"source": sandbox.source, "replica": sandbox.source, "private": private}
    read_from = {"source": sandbox.source, "replica": sandbox.standby, "private": private}
    try:
        channels: dict[str, Channel] = {}
        for server, binlog in read_from.items():
            name = f"{DB}_ch_{server}"
            dbs = tuple(f"{case.db}.*" for case in CASES if case.server == server)
            start = binlog_start(binlog)
            make_channel(sandbox.dc, binlog, name, allow=dbs, server_id=next(_server_ids))
            channels[server] = Channel(name, binlog, start)
        with ExitStack() as stack:
            for channel in channels.values():
                stack.enter_context(running(sandbox.dc.config(), channel.name))
            for case in CASES:
                sql_on(upstream_of[case.server], None)(f"CREATE DATABASE {case.db}")
                case.workload(sql_on(upstream_of[case.server], case.db))
            wait_replica_applied(sandbox.source, sandbox.standby)
            checkpoints = {c.name: wait_caught_up(c.source, sandbox.dc, c.name) for c in channels.values()}
        yield Matrix(channels, {c.name: dc_rows(sandbox.dc, c.name) for c in channels.values()}, checkpoints,
                     {c.name: binlog_changes(c.source, c.start) for c in channels.values()}, read_from)
    finally:
        for case in CASES:
            sql_on(upstream_of[case.server], None)(f"DROP DATABASE IF EXISTS {case.db}")
        private.stop()


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_captured(case: Case, matrix: Matrix) -> None:
    """The fold equals the source's tables, and the DC holds each binlogged row change once; a table whose
    changes the binlog never holds (the case's caveat) has rows on the source and none in the DC."""
    channel = matrix.channels[case.server]
    rows = matrix.rows[channel.name]
    truth = source_tables(matrix.servers[case.server], case.db)
    assert truth and all(held for table, held in truth.items() if table not in case.rolled_back), truth
    folded = fold(rows, case.db)
    assert {table: held for table, held in folded.items() if held or table not in case.unlogged} == {
        table: held for table, held in truth.items() if table not in case.unlogged}
    logged = {table: held for table, held in truth.items() if table not in case.unlogged}
    imaged = {table: held for table, held in images(rows, case.db).items() if table not in case.unlogged}
    assert imaged == {table: held for table, held in logged.items() if table in imaged}
    changes = Counter((db, table, optype) for _i, _t, db, table, _c, _n, optype, _d in rows
                      if db == case.db and optype in ("INSERT", "UPDATE", "DELETE"))
    binlogged = Counter({key: n for key, n in matrix.truth[channel.name].items()
                         if key[0] == case.db and key[1] not in case.rolled_back})
    assert changes == binlogged
    assert not [row for row in rows if row[2] == case.db and row[3] in case.rolled_back + case.unlogged
                and row[6] != "CREATETABLE"]


@pytest.mark.parametrize("server", ["source", "replica", "private"])
def test_ids_are_gap_free_and_none_lies_above_the_checkpoint(server: str, matrix: Matrix) -> None:
    channel = matrix.channels[server]
    rows = matrix.rows[channel.name]
    ids = [row[0] for row in rows]
    tids = [row[1] for row in rows]
    assert ids == list(range(1, len(ids) + 1)) and len(ids) > 100
    assert tids == sorted(tids)
    assert matrix.checkpoints[channel.name] == (ids[-1], tids[-1])
    if server == "private":  # binlog files of 4 KiB: the channel read across rotations
        assert len(sql_on(channel.source, None)("SHOW BINARY LOGS")) >= 5  # 2 of them by FLUSH BINARY LOGS



def test_create_table_select_is_one_transaction(matrix: Matrix) -> None:
    """The binlog holds CREATE TABLE ... SELECT as one transaction (a GTID, the CREATE TABLE, the rows, the commit):
    one tid in the DC, and no boundary between the table and its rows where a checkpoint, whose GTID position
    would call the transaction complete, could stop."""
    rows = matrix.rows[matrix.channels["source"].name]
    tids = {table: {tid for _i, tid, db, name, _c, _n, optype, _d in rows
                    if (db, name) == ("matrix_ctas", table) and optype in ("CREATETABLE", "INSERT")}
            for table in ("c1", "c2", "c3")}
    assert {table: len(found) for table, found in tids.items()} == {"c1": 1, "c2": 1, "c3": 1}


def test_a_replica_source_without_log_slave_updates_is_refused(sandbox: Sandbox, tmp_path: Path, gate: Gate) -> None:
    """A source that replicates from another server without log_slave_updates binlogs none of what it replicates:
    gate would never see those changes, so the checks refuse it, naming the upstream (and the fix)."""
    replica = MariaDBServer("replica", tmp_path / "replica", free_port(), 42,
                            (*SOURCE_ARGS, "--skip-log-slave-updates"), tied_to_parent=True)
    replica.start()
    try:
        sql_on(replica, None)(f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={sandbox.source.port}, "
                              f"MASTER_USER='{REPL_USER}', MASTER_PASSWORD='{REPL_PASSWORD}', MASTER_USE_GTID=slave_pos")
        upstream = sandbox.source.address
        assert check_server(replica.config(), 4242) == [Problem(
            "log_slave_updates", f"OFF on a source that replicates from {upstream}",
            "ON (without it, the changes it replicates are not in its binlog and would never reach gate)",
            "add 'log_slave_updates = ON' under [mysqld] in my.cnf and restart the server, or capture its "
            "upstream instead.")]
        created = gate("channel", "create", "matrix_refused", "--source", replica.address, "--server-id", "7399")
        assert created.exit_code == 1
        assert f"log_slave_updates is OFF on a source that replicates from {upstream}" in created.stderr
        sql_on(replica, None)("RESET SLAVE ALL")
        assert check_server(replica.config(), 4242) == []  # not a replica: what it binlogs is all it changes
    finally:
        replica.stop()


def test_binlog_filters_are_named_by_the_checks(matrix: Matrix) -> None:
    """binlog_ignore_db (the private source's) is a warning of the checks: what it filters out never reaches gate."""
    assert check_server(matrix.servers["private"].config(), None) == [Problem(
        "binlog_ignore_db", f"{DB}_ignored", "empty (every database in the binlog)",
        "the changes it filters out are not in the binlog, so gate never sees them. Remove binlog_ignore_db from "
        "my.cnf and restart the server, unless no table the channel captures is ever changed there.", fatal=False)]
