"""A table's columns and their types at a point of a channel, worked out from the DDL rows before it.

CREATETABLE and SNAPSHOTSTART set a table's columns (``NEW``: name and ``data_type`` in table order);
ALTERTABLE changes them (CHANGECOLUMN renames and retypes in place, DROPCOLUMN removes, ADDCOLUMN appends:
FIRST/AFTER positions are not in the payload, and neither are they in row images, which follow the
table's order, so a row image whose names differ from the schema's is refused by the reader); RENAME
moves them to the new name, DROPTABLE forgets them. Runs on the driver.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from gate.common.errors import TableSchemaUnknown
from spark_readers.types import column_type

Columns = tuple[tuple[str, str], ...]  # (name, data_type) in table order
DEFINING = ("CREATETABLE", "SNAPSHOTSTART", "ALTERTABLE")  # the optypes that set or change a table's columns
_SCHEMA_OPTYPES = (*DEFINING, "RENAME", "DROPTABLE")
ROW_OPTYPES = ("INSERT", "UPDATE", "DELETE", "SNAPSHOT")


@dataclass(frozen=True)
class Change:
    """A statement that changes a table's columns: its row id, optype and text."""

    id: int
    optype: str
    sql: str


def apply(columns: Columns | None, optype: str, ddl: dict[str, Any]) -> Columns | None:
    """The columns after one DDL row of the table (None: the table does not exist)."""
    if optype in ("CREATETABLE", "SNAPSHOTSTART"):
        new = ddl.get("NEW") or []
        return tuple((c["field_name"], c.get("data_type") or "") for c in new) if new else columns
    if optype == "DROPTABLE":
        return None
    if optype != "ALTERTABLE" or columns is None:
        return columns
    changed = {c["origin_field_name"].casefold(): (c["field_name"], c.get("data_type") or "")
               for c in ddl.get("CHANGECOLUMN") or []}
    dropped = {name.casefold() for name in ddl.get("DROPCOLUMN") or []}
    result = [changed.get(name.casefold(), (name, kind)) for name, kind in columns if name.casefold() not in dropped]
    present = {name.casefold() for name, _ in result}
    result += [(c["field_name"], c.get("data_type") or "") for c in ddl.get("ADDCOLUMN") or []
               if c["field_name"].casefold() not in present]
    return tuple(result)


def same(a: Columns | None, b: Columns | None) -> bool:
    """Same column names (case-insensitively) and types converting alike (spark_readers.types), in the
    same order: ``int(11)`` in a CREATE TABLE and ``int`` in a SNAPSHOTSTART are the same."""
    fold = lambda cols: None if cols is None else [(n.casefold(), column_type(t).identity) for n, t in cols]  # noqa: E731
    return fold(a) == fold(b)


def _rows(conn: pymysql.Connection, sql: str, *args: Any) -> Sequence[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def columns_at(conn: pymysql.Connection, channel: str, db: str, table: str, after: int, checkpoint: int) -> Columns:
    """The columns of ``db.table`` for its rows after id ``after``: every table's DDL up to ``after``
    replayed (following renames), then the table's own DDL rows after it up to its first row change.
    Raises TableSchemaUnknown when the kept rows define no such table."""
    tables: dict[tuple[str, str], Columns | None] = {}
    for optype, dbname, tablename, data in _rows(
            conn, f"SELECT optype, dbname, tablename, data FROM transfer_data WHERE id <= %s AND optype IN "
                  f"({', '.join(['%s'] * len(_SCHEMA_OPTYPES))}) ORDER BY id", after, *_SCHEMA_OPTYPES):
        ddl = json.loads(data) if data else {}
        renames = ddl.get("RENAME") or []
        if optype != "RENAME":
            tables[(dbname, tablename)] = apply(tables.get((dbname, tablename)), optype, ddl)
        for pair in renames:
            old = (pair["from"]["dbname"], pair["from"]["tablename"])
            tables[(pair["to"]["dbname"], pair["to"]["tablename"])] = tables.pop(old, None)
    columns = tables.get((db, table))
    for optype, data in _rows(conn, "SELECT optype, data FROM transfer_data WHERE dbname = %s AND tablename = %s "
                                    "AND id > %s AND id <= %s ORDER BY id LIMIT 1000", db, table, after, checkpoint):
        if optype in ROW_OPTYPES:
            break
        columns = apply(columns, optype, json.loads(data) if data else {})
    if not columns:
        raise TableSchemaUnknown(
            f"Channel '{channel}' has no definition of table {db}.{table} (a CREATETABLE or SNAPSHOTSTART row) at or "
            f"before row {after}, nor right after it: the table is not captured, or its definition was removed by "
            f"retention. Check the name, or take a snapshot of it (gate snapshot {channel} --table {db}.{table}) and "
            "read from its SNAPSHOTSTART row.")
    return columns


def first_change(conn: pymysql.Connection, db: str, table: str, columns: Columns, lo: int, hi: int) -> Change | None:
    """The first statement among rows ``lo < id <= hi`` after which ``db.table`` no longer has ``columns``."""
    current: Columns | None = columns
    for id_, optype, data in _rows(
            conn, "SELECT id, optype, data FROM transfer_data WHERE dbname = %s AND tablename = %s AND id > %s "
                  "AND id <= %s AND optype IN ('CREATETABLE', 'SNAPSHOTSTART', 'ALTERTABLE', 'DROPTABLE') ORDER BY id",
            db, table, lo, hi):
        ddl = json.loads(data) if data else {}
        current = apply(current, optype, ddl)
        if optype != "DROPTABLE" and not same(current, columns):
            return Change(int(id_), optype, str(ddl.get("SQL") or optype))
    return None
