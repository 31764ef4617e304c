"""The benchmark's workloads: table definitions and the loads that fill the source's binlog."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pymysql

# --- workloads -------------------------------------------------------------------------------

A_DDL = ("CREATE TABLE bench_a.t (id INT NOT NULL PRIMARY KEY, name VARCHAR(40) CHARACTER SET utf8mb4, "
         "amount DECIMAL(12,3), ratio DOUBLE, created DATETIME(3), flag TINYINT UNSIGNED, "
         "payload VARBINARY(64), note TEXT) ENGINE=InnoDB")
A_SELECT = ("SELECT seq, CONCAT('row ', seq, ' délta 数据'), (seq % 100000) * 1.125, seq / 7, "
            "TIMESTAMPADD(MICROSECOND, seq * 1001000, '2024-01-01 00:00:00'), seq % 256, "
            "UNHEX(SHA1(seq)), REPEAT('lorem ipsum ', 1 + seq % 8) FROM bench_a.seq_{lo}_to_{hi}")


def load_inserts(conn: pymysql.Connection, rows: int, per_txn: int = 100) -> int:
    """(a) ``rows`` single-table inserts, ``per_txn`` rows per (autocommitted) statement."""
    with conn.cursor() as cur:
        for lo in range(1, rows + 1, per_txn):
            hi = min(rows, lo + per_txn - 1)
            cur.execute("INSERT INTO bench_a.t " + A_SELECT.format(lo=lo, hi=hi))
    return rows


WIDE_TABLES = 10
WIDE_DDL = """CREATE TABLE bench_b.w{n} (
  id INT UNSIGNED NOT NULL PRIMARY KEY,
  c_tiny TINYINT, c_small SMALLINT UNSIGNED, c_int INT, c_big BIGINT UNSIGNED,
  c_dec DECIMAL(14,4), c_double DOUBLE, c_float FLOAT,
  c_vc VARCHAR(64) CHARACTER SET utf8mb4, c_char CHAR(8),
  c_dt DATETIME(6), c_ts TIMESTAMP(3) NULL DEFAULT NULL, c_date DATE, c_time TIME, c_year YEAR,
  c_text TEXT CHARACTER SET utf8mb4, c_blob BLOB, c_enum ENUM('new','paid','shipped','void'),
  c_set SET('a','b','c'), c_json JSON
) ENGINE=InnoDB"""
WIDE_SELECT = """SELECT {base} + seq, (seq % 200) - 100, seq % 65536, ({base} + seq) * 7 - 1000000,
  18446744073709551615 - ({base} + seq), ({base} + seq) * 3.1416, ({base} + seq) / 3, ({base} + seq) / 7,
  CONCAT('wide ', {base} + seq, ' ünïcödé 数据 🚀'), LPAD(seq, 8, 'x'),
  TIMESTAMPADD(MICROSECOND, ({base} + seq) * 1234567, '2020-01-01 00:00:00'),
  IF(seq % 10 = 0, NULL, TIMESTAMPADD(SECOND, {base} + seq, '2023-06-01 12:00:00')),
  DATE_ADD('2000-01-01', INTERVAL seq DAY), SEC_TO_TIME((seq * 37) % 86400), 1990 + seq % 60,
  REPEAT(CONCAT('text ', seq, ' '), 10), UNHEX(SHA2(seq, 256)), ELT(1 + seq % 4, 'new','paid','shipped','void'),
  ELT(1 + seq % 4, '', 'a', 'a,b', 'a,c'), JSON_OBJECT('id', {base} + seq, 'tags', JSON_ARRAY('x', seq % 10), 'ok', true)
FROM (SELECT CAST(seq AS SIGNED) AS seq FROM bench_b.seq_1_to_{n}) s"""


def load_mixed(conn: pymysql.Connection, rows: int, seed: int = 6) -> int:
    """(b) transactions over 2 of 10 wide tables: per table 20 inserts, 10 updates, 4 deletes.
    Returns the number of changed rows (one DC row each), which reaches at least ``rows``."""
    rng = random.Random(seed)
    lo = [1] * WIDE_TABLES  # oldest live id per table
    nxt = [1] * WIDE_TABLES  # next id to insert
    changed = 0
    txn = 0
    with conn.cursor() as cur:
        while changed < rows:
            txn += 1
            conn.begin()
            for t in rng.sample(range(WIDE_TABLES), 2):
                changed += cur.execute(f"INSERT INTO bench_b.w{t} " + WIDE_SELECT.format(base=nxt[t] - 1, n=20))
                nxt[t] += 20
                start = rng.randrange(lo[t], nxt[t] - 10)
                changed += cur.execute(
                    f"UPDATE bench_b.w{t} SET c_int = c_int + 1, c_vc = CONCAT('upd ', %s, ' ✓'), "
                    "c_dt = TIMESTAMPADD(SECOND, %s, c_dt), c_dec = c_dec * 2, "
                    "c_json = JSON_SET(c_json, '$.v', %s) WHERE id BETWEEN %s AND %s",
                    (txn, txn, txn, start, start + 9))
                if nxt[t] - lo[t] > 100:
                    changed += cur.execute(f"DELETE FROM bench_b.w{t} WHERE id BETWEEN %s AND %s", (lo[t], lo[t] + 3))
                    lo[t] += 4
            conn.commit()
    return changed


C_DDL = ("CREATE TABLE bench_c.t (id INT NOT NULL PRIMARY KEY, name VARCHAR(40), amount DECIMAL(12,3), "
         "created DATETIME(3), note VARCHAR(64)) ENGINE=InnoDB")


def load_big(conn: pymysql.Connection, rows: int) -> int:
    """(c) one transaction of ``rows`` inserts."""
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO bench_c.t SELECT seq, CONCAT('big ', seq), seq * 0.25, "
            "TIMESTAMPADD(MICROSECOND, seq * 1000, '2024-01-01'), REPEAT('x', 20 + seq % 40) "
            f"FROM bench_c.seq_1_to_{rows}")
    return rows


LAG_DDL = ("CREATE TABLE bench_lag.t (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, txn INT NOT NULL, "
           "seq INT NOT NULL, name VARCHAR(40), amount DECIMAL(12,3), created DATETIME(3), "
           "note VARCHAR(100)) ENGINE=InnoDB")


def lag_load(port: int, seconds: float, txn_per_s: int, rows_per_txn: int, out: str, db: str = "bench_lag") -> None:
    """Paced load in its own process: ``txn_per_s`` transactions of ``rows_per_txn`` rows each second into
    ``db``.t (a table of LAG_DDL). Writes [(txn, commit wall time)] as JSON to ``out``."""
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True, charset="utf8mb4")
    sql = (f"INSERT INTO {db}.t (txn, seq, name, amount, created, note) SELECT %s, seq, CONCAT('lag ', seq), "
           f"seq * 1.5, NOW(3), REPEAT('n', 40) FROM {db}.seq_1_to_{rows_per_txn}")
    commits: list[tuple[int, float]] = []
    interval = 1.0 / txn_per_s
    total = int(seconds * txn_per_s)
    start = time.time() + 0.05
    with conn.cursor() as cur:
        for k in range(1, total + 1):
            due = start + (k - 1) * interval
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            cur.execute(sql, (k,))  # autocommit: one transaction, COMMIT returned with the OK packet
            commits.append((k, time.time()))
    conn.close()
    Path(out).write_text(json.dumps(commits))


