"""The tables of a change history: their names, columns, types and keys over id ranges, worked out on
the driver from the history's few DDL rows in id order, starting from a stored image's tables.

A table's life is a list of epochs, stretches of rows ``lo < id < hi`` with one name, one set of
columns and one key; the column changes (renames, drops, adds with their default) that open an epoch
map its row images' columns to the table's final columns (:func:`backward`). A table's column types
(``schema``) follow its CREATETABLE, SNAPSHOTSTART and ALTERTABLE rows by
:func:`spark_readers.table_schema.apply`, as for the typed stream; None when the history does not
define the table.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_readers.image import Image, TableImage
from spark_readers.rows import ROW_OPTYPES
from spark_readers.table_schema import Columns
from spark_readers.table_schema import apply as schema_after

log = logging.getLogger(__name__)

END = 2**63 - 1
Name = tuple[str, str]  # dbname, tablename
Op = tuple[str, str, "str | None"]  # ("rename", old, new) | ("drop", name, None) | ("add", name, default)




@dataclass
class Epoch:
    """A stretch of a table's life with one name, one set of columns and one key: rows ``lo < id < hi``."""

    lo: int
    name: Name
    pk: list[str] | None  # as this epoch's images spell the columns; None: not known from the history
    ops: list[Op] = field(default_factory=list)  # the column changes that opened this epoch
    hi: int = END


@dataclass
class TableLife:
    """One table from its creation (or the start of the history, or the stored image) to its drop (or now)."""

    key: int
    columns: list[str] | None  # current columns; None: not known from the history
    epochs: list[Epoch]
    floor: int = 0  # id of the last TRUNCATE or SNAPSHOTSTART: earlier rows are gone
    dropped: bool = False
    complete: bool = False  # created, truncated or snapshotted (done) within the history
    snapshot: dict[str, Any] | None = None  # the latest snapshot: {"id", "state"}
    stored: TableImage | None = None  # its image at the watermark, when the update started from one
    schema: Columns | None = None  # current columns and their data_type; None: not defined by the history

    @property
    def name(self) -> str:
        return ".".join(self.epochs[-1].name)


def _same(a: str, b: str) -> bool:
    return a.casefold() == b.casefold()  # column names are case-insensitive


def forward(columns: list[str], ops: list[Op], adds: bool = True) -> list[str]:
    """Columns after ``ops`` (with ``adds=False``, only renames and drops: for key columns)."""
    for kind, name, other in ops:
        if kind == "rename":
            columns = [str(other) if _same(c, name) else c for c in columns]
        elif kind == "drop":
            columns = [c for c in columns if not _same(c, name)]
        elif adds and not any(_same(c, name) for c in columns):
            columns = [*columns, name]
    return columns


def backward(table: TableLife, final: list[str]) -> tuple[list[dict[str, str]], dict[str, str | None]]:
    """For each epoch, final column -> its name in that epoch's images (missing: added later); and each
    final column's default from its latest ADD."""
    mapping = {c: c for c in final}
    defaults: dict[str, str | None] = {}
    names: list[dict[str, str]] = []
    for epoch in reversed(table.epochs):
        names.append(dict(mapping))
        for kind, name, other in reversed(epoch.ops):
            if kind == "rename":
                mapping = {c: name if _same(n, str(other)) else n for c, n in mapping.items()}
            elif kind == "add":
                for c in [c for c, n in mapping.items() if _same(n, name)]:
                    defaults.setdefault(c, other)
                    del mapping[c]
    return names[::-1], defaults


_INTEGER = re.compile(r"^(tiny|small|medium|big)?int(eger)?\b|^(bool|boolean|serial)\b")
_DECIMAL = re.compile(r"^(decimal|numeric|dec|fixed)(\(\d+(?:,(\d+))?\))?")
_TEXT = re.compile(r"^((var)?char|(tiny|medium|long)?text|enum|national|nchar|nvarchar|character)\b")
_LITERAL = re.compile(r"\bDEFAULT\s*(?:\(\s*)?('(?:[^'\\]|\\.|'')*'|[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|NULL\b)",
                      re.IGNORECASE)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "b": "\b", "Z": "\x1a"}


def _definition(sql: str, column: str) -> str | None:
    """The text of ``column``'s definition in an ALTER TABLE ... ADD statement, up to its end."""
    match = re.search(rf"(?:\bADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?\(?|,)\s*`?{re.escape(column)}`?\s+",
                      sql, re.IGNORECASE)
    if not match:
        return None
    depth, quote, end = 0, "", len(sql)
    for pos in range(match.end(), len(sql)):
        char = sql[pos]
        if quote:
            quote = "" if char == quote and sql[pos - 1] != "\\" else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        elif char in ",)" and not depth:
            end = pos
            break
    return sql[match.end():end]


def column_default(sql: str, column: str, data_type: str) -> str | None:
    """The text an added column shows for existing rows, when the statement makes it a literal; else None."""
    definition = _definition(sql, column)
    literal = _LITERAL.search(definition or "")
    kind = data_type.lower()
    if literal:
        text = literal.group(1)
        if text.upper() == "NULL":
            return None
        if text.startswith("'"):
            text = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), text[1:-1].replace("''", "'"))
    elif definition is not None and "NOT NULL" in definition.upper():
        text = "" if _TEXT.match(kind) else "0"
    else:
        return None
    try:
        if _INTEGER.match(kind):
            return str(Decimal(text).to_integral_value(ROUND_HALF_UP))
        decimal = _DECIMAL.match(kind)
        if decimal:
            return format(Decimal(text).quantize(Decimal(1).scaleb(-int(decimal.group(3) or 0)), ROUND_HALF_UP), "f")
    except InvalidOperation:
        pass
    else:
        if _TEXT.match(kind):
            return text
    log.warning("the default of added column %s (%s) in %.200s is not known here; rows written before it was "
                "added show NULL for it in the image", column, data_type, sql)
    return None


class Timeline:
    """The tables of the history, worked out from its DDL rows in id order."""

    def __init__(self, image: Image | None = None) -> None:
        self.tables: list[TableLife] = []
        self.current: dict[Name, TableLife] = {}
        self.written: set[Name] = set()  # the names the history has row images of
        self.verifies: list[tuple[int, Name, dict[str, Any]]] = []  # the VERIFY rows: id, name, payload
        self.barriers: dict[Name, list[int]] = {}  # per name, the ids of its other non-row rows (DDL, snapshots...)
        for name, stored in (image.tables.items() if image else ()):
            db, table = name.split(".", 1)
            self.current[(db, table)] = TableLife(len(self.tables), list(stored.columns),
                                               [Epoch(image.watermark["id"] if image else 0, (db, table),
                                                       list(stored.key))],
                                               complete=stored.complete, snapshot=stored.snapshot, stored=stored,
                                               schema=tuple(zip(stored.columns, stored.types)) if stored.types else None)
            self.tables.append(self.current[(db, table)])

    def table(self, name: Name) -> TableLife:
        """The table now called ``name``; one that existed before the history began if it is new here."""
        if name not in self.current:
            self.current[name] = TableLife(len(self.tables), None, [Epoch(0, name, None)])
            self.tables.append(self.current[name])
        return self.current[name]

    def _drop(self, name: Name) -> None:
        self.table(name).dropped = True
        del self.current[name]

    @staticmethod
    def _next(table: TableLife, at: int, name: Name, pk: list[str] | None, ops: list[Op] | None = None) -> None:
        table.epochs[-1].hi = at
        table.epochs.append(Epoch(at, name, pk, ops or []))

    def apply(self, at: int, optype: str, name: Name, ddl: dict[str, Any]) -> None:
        if optype == "CREATETABLE":
            if name in self.current:
                self._drop(name)
            columns = ddl.get("NEW") or []
            pk = [c["field_name"] for c in columns if c["primary_key"] == "Yes"] or None
            self.current[name] = TableLife(len(self.tables), [c["field_name"] for c in columns] or None,
                                        [Epoch(at, name, pk)], complete=True,
                                        schema=schema_after(None, optype, ddl))
            self.tables.append(self.current[name])
        elif optype == "SNAPSHOTSTART":
            self._snapshot_start(at, name, ddl)
        elif optype == "SNAPSHOTEND":
            table = self.table(name)
            marker = ddl.get("SNAPSHOT") or {}
            if table.snapshot and table.snapshot["id"] == marker.get("id"):
                table.snapshot = {"id": marker.get("id"), "state": marker.get("state")}
                table.complete = marker.get("state") == "done"
        elif optype == "ALTERTABLE":
            self._alter(at, name, ddl)
        elif optype == "RENAME":
            self._rename(at, ddl["RENAME"])
        elif optype == "TRUNCATE":
            self.table(name).floor = at
            self.table(name).complete = True
        elif optype == "DROPTABLE":
            for ref in ddl.get("DROPTABLE") or [{"dbname": name[0], "tablename": name[1]}]:
                self._drop((ref["dbname"], ref["tablename"]))

    def _snapshot_start(self, at: int, name: Name, ddl: dict[str, Any]) -> None:
        """Forget the table's rows; its columns and key are the snapshot's (the key [] : whole rows)."""
        table = self.table(name)
        columns = ddl.get("NEW") or []
        marker = ddl.get("SNAPSHOT") or {}
        pk = [c["field_name"] for c in columns if c["primary_key"] == "Yes"] or list(marker.get("key") or [])
        table.columns = [c["field_name"] for c in columns] or table.columns
        table.schema = schema_after(table.schema, "SNAPSHOTSTART", ddl)
        table.floor = at
        table.complete = False
        table.snapshot = {"id": marker.get("id"), "state": "running"}
        self._next(table, at, name, pk)

    def _alter(self, at: int, name: Name, ddl: dict[str, Any]) -> None:
        table = self.table(name)
        ops: list[Op] = [("rename", c["origin_field_name"], c["field_name"]) for c in ddl.get("CHANGECOLUMN") or []
                         if c["origin_field_name"] != c["field_name"]]
        ops += [("drop", column, None) for column in ddl.get("DROPCOLUMN") or []]
        ops += [("add", c["field_name"], column_default(ddl.get("SQL") or "", c["field_name"], c["data_type"] or ""))
                for c in ddl.get("ADDCOLUMN") or []]
        pk = table.epochs[-1].pk
        pk = forward(pk, ops, adds=False) if pk else None
        if "PRIMARY" in (ddl.get("DROPINDEX") or []):
            pk = None
        for index in ddl.get("ADDINDEX") or []:
            if index["index_name"] == "PRIMARY":
                pk = list(index["column_name"])
        if table.columns is not None:
            table.columns = forward(table.columns, ops)
        table.schema = schema_after(table.schema, "ALTERTABLE", ddl)
        self._next(table, at, name, pk, ops)
        self._rename(at, ddl.get("RENAME") or [])

    def _rename(self, at: int, pairs: list[dict[str, dict[str, str]]]) -> None:
        for pair in pairs:
            old = (pair["from"]["dbname"], pair["from"]["tablename"])
            new = (pair["to"]["dbname"], pair["to"]["tablename"])
            table = self.table(old)
            del self.current[old]
            if new in self.current:
                self._drop(new)
            self.current[new] = table
            self._next(table, at, new, table.epochs[-1].pk)


def timeline(history: DataFrame, image: Image | None) -> Timeline:
    """The tables: those of ``image``, changed by the history's DDL rows replayed in id order, plus tables
    only written to."""
    rows = F.col("optype").isin(*ROW_OPTYPES)
    ddl = F.collect_list(F.when(~rows, F.struct("id", "optype", "ddl")))
    timeline = Timeline(image)
    names = history.groupBy("dbname", "tablename").agg(ddl.alias("ddl"), F.max(rows).alias("written")).collect()
    for row, name in sorted(((row, (n.dbname, n.tablename)) for n in names for row in n.ddl), key=lambda r: r[0].id):
        payload = row.ddl.asDict(recursive=True) if row.ddl else {}
        if row.optype == "VERIFY":  # changes nothing; the image checks it (spark_readers.image_verify)
            timeline.verifies.append((row.id, name, payload.get("VERIFY") or {}))
            continue
        timeline.barriers.setdefault(name, []).append(row.id)
        timeline.apply(row.id, row.optype, name, payload)
    timeline.written = {(n.dbname, n.tablename) for n in names if n.written}
    for n in names:
        if n.written and not any(e.name == (n.dbname, n.tablename) for t in timeline.tables for e in t.epochs):
            timeline.table((n.dbname, n.tablename))
    return timeline


def keyed(timeline: Timeline, keys: dict[str, list[str]], skipped: dict[str, str]) -> list[TableLife]:
    """The tables to write: not dropped, with a key for every stretch of rows still in the image."""
    live = []
    for table in timeline.tables:
        if table.dropped:
            continue
        if any(e.pk is None for e in table.epochs if max(e.lo, table.floor) < e.hi):
            if table.name not in keys:
                skipped[table.name] = "no primary key known: give it as a key (--key DB.TABLE=COL,...)"
                continue
            names, _ = backward(table, keys[table.name])
            for epoch, mapping in zip(table.epochs, names):
                if epoch.pk is None:
                    epoch.pk = [mapping.get(c, c) for c in keys[table.name]]
        live.append(table)
    return live


