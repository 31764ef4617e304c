"""The changes of prepared XA transactions, kept in the DC until the source commits or rolls them back.

The binlog carries an XA transaction's rows when it is prepared (XA PREPARE) and its outcome later,
as a group of its own (XA COMMIT or XA ROLLBACK). The rows are stored in ``gate_xa_pending`` before
the checkpoint can pass the PREPARE, so neither a restart nor a failover loses them; the COMMIT reads
them back and numbers them as one transaction; the checkpoint that passes an outcome deletes them.
"""

from __future__ import annotations

import pymysql

import dc_schema
from gate.capture.translate import Change, Decoded
from gate.common.dc import q

TABLE = "gate_xa_pending"


def ensure_table(cur: pymysql.cursors.Cursor) -> None:
    """Channels created before XA support lack the table; the cursor's database is the channel's."""
    cur.execute(dc_schema.table_ddl(TABLE))


def store(conn: pymysql.Connection, channel: str, xid: str, first_seq: int,
          changes: list[tuple[Change | Decoded, int]]) -> None:
    """Store (change, source time) pairs as seq ``first_seq`` on; storing them again changes nothing. Data
    the decoders handed over as UTF-8 is stored as the text it is."""
    with conn.cursor() as cur:
        cur.executemany(
            f"REPLACE INTO {q(channel)}.{TABLE} (xid, seq, dbname, tablename, optype, data, created) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [(xid, first_seq + n, db, table, optype, data if isinstance(data, str) else data.decode(), created)
             for n, ((db, table, optype, data), created) in enumerate(changes)])


def read(conn: pymysql.Connection, channel: str, xid: str, after_seq: int, batch: int) -> list[tuple[int, Change]]:
    """The next (at most ``batch``) stored changes of ``xid`` after ``after_seq``, with their seq, in order."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT seq, dbname, tablename, optype, data FROM {q(channel)}.{TABLE} "
                    "WHERE xid = %s AND seq > %s ORDER BY seq LIMIT %s", (xid, after_seq, batch))
        return [(seq, (db, table, optype, data)) for seq, db, table, optype, data in cur.fetchall()]


def forget(cur: pymysql.cursors.Cursor, channel: str, xids: list[str]) -> None:
    """Delete the stored changes of these xids (the caller owns the transaction)."""
    cur.executemany(f"DELETE FROM {q(channel)}.{TABLE} WHERE xid = %s", [(xid,) for xid in xids])


def discard(conn: pymysql.Connection, channel: str, xid: str) -> None:
    """Delete whatever is stored under ``xid`` before a PREPARE of it is stored anew."""
    with conn.cursor() as cur:
        forget(cur, channel, [xid])
