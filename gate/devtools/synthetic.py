"""Contract rows written straight into a channel's transfer_data, with the table images a consumer
applying them holds: for tests and benchmarks of readers (Spark) without capturing a source.

:class:`SyntheticChannel` hands out ids and tids like gate (gap-free, one tid per transaction,
consecutive ids) and moves transfer_checkpoint to the end of each transaction it writes.
:class:`ImageModel` applies rows the way docs/consumers/spark.md's image rules say (INSERT, UPDATE, SNAPSHOT
upsert by key, a key change moves the row, DELETE removes, TRUNCATE and SNAPSHOTSTART empty the table,
RENAME moves it, DROPTABLE removes it, ADD COLUMN gives existing rows the column's default, DROP
COLUMN removes it). :class:`RandomHistory` writes random transactions of every optype (snapshots
included) through both.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pymysql

from gate.common.dc import q

Payload = dict[str, Any]
Change = tuple[str, str, str, Payload]  # dbname, tablename, optype, data
Row = dict[str, "str | None"]


def cells(row: Row) -> list[dict[str, str | None]]:
    return [{name: value} for name, value in row.items()]


@dataclass
class SyntheticChannel:
    """Writes transactions of contract rows into channel ``channel`` (created already, empty)."""

    conn: pymysql.Connection
    channel: str
    instance: str = "127.0.0.1:3306"
    id: int = 0
    tid: int = 0
    clock: int = 1_700_000_000

    def write(self, transactions: Sequence[Sequence[Change]], batch: int = 2000) -> None:
        """Write whole transactions and move the checkpoint to the last one."""
        rows: list[tuple[Any, ...]] = []
        with self.conn.cursor() as cur:
            for changes in transactions:
                if not changes:
                    continue
                self.tid += 1
                self.clock += 1
                created = datetime.fromtimestamp(self.clock, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
                for dbname, tablename, optype, data in changes:
                    self.id += 1
                    rows.append((self.id, self.tid, dbname, tablename, created, self.instance, optype,
                                 json.dumps(data, ensure_ascii=False)))
                if len(rows) >= batch:
                    self._insert(cur, rows)
                    rows = []
            self._insert(cur, rows)
            cur.execute(f"UPDATE {q(self.channel)}.transfer_checkpoint SET id = %s, tid = %s", (self.id, self.tid))

    def _insert(self, cur: pymysql.cursors.Cursor, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            cur.executemany(f"INSERT INTO {q(self.channel)}.transfer_data (id, tid, dbname, tablename, create_time, "
                            "instance_name, optype, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", rows)


@dataclass
class Table:
    columns: list[str]
    key: list[str]  # [] for a table without one: the whole row is its identity
    rows: dict[tuple[str | None, ...], Row] = field(default_factory=dict)

    def key_of(self, row: Row) -> tuple[str | None, ...]:
        return tuple(row[c] for c in self.key) if self.key else tuple(row[c] for c in sorted(row))


class ImageModel:
    """Table images (``"db.table"`` -> :class:`Table`) after applying contract rows in id order."""

    def __init__(self) -> None:
        self.tables: dict[str, Table] = {}

    def apply(self, dbname: str, tablename: str, optype: str, data: Payload) -> None:
        name = f"{dbname}.{tablename}"
        if optype in ("CREATETABLE", "SNAPSHOTSTART"):
            new = data["NEW"]
            key = [c["field_name"] for c in new if c["primary_key"] == "Yes"]
            self.tables[name] = Table([c["field_name"] for c in new], key)
            return
        table = self.tables[name]
        if optype in ("INSERT", "UPDATE", "SNAPSHOT", "DELETE"):
            if "OLD" in data:
                table.rows.pop(table.key_of(_row(data["OLD"])), None)
            if "NEW" in data:
                row = _row(data["NEW"])
                table.rows[table.key_of(row)] = row
        elif optype == "TRUNCATE":
            table.rows.clear()
        elif optype == "DROPTABLE":
            del self.tables[name]
        elif optype == "RENAME":
            for pair in data["RENAME"]:
                self.tables[f"{pair['to']['dbname']}.{pair['to']['tablename']}"] = self.tables.pop(
                    f"{pair['from']['dbname']}.{pair['from']['tablename']}")
        elif optype == "ALTERTABLE":
            for column in data.get("DROPCOLUMN", []):
                table.columns.remove(column)
                for row in table.rows.values():
                    del row[column]
            for added in data.get("ADDCOLUMN", []):
                table.columns.append(added["field_name"])
                for row in table.rows.values():
                    row[added["field_name"]] = added["default"]


def _row(image: list[dict[str, str | None]]) -> Row:
    return {name: value for cell in image for name, value in cell.items()}


def _column(name: str, key: bool) -> dict[str, str]:
    return {"field_name": name, "nullable": "No" if key else "Yes", "primary_key": "Yes" if key else "No",
            "data_type": "int" if key else "varchar(20)"}


@dataclass
class RandomHistory:
    """Random transactions over a few tables of database ``db``, written to ``channel`` and applied to
    ``model``. Each step is one transaction; DDL and snapshot markers are transactions of their own."""

    channel: SyntheticChannel
    db: str
    seed: int = 1
    ddl_rate: float = 0.08  # share of steps that are a DDL statement
    snapshot_rate: float = 0.04  # share of steps that are a table snapshot
    model: ImageModel = field(default_factory=ImageModel)
    rng: random.Random = field(init=False)
    _serial: int = 0
    _snapshot: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _next(self) -> str:
        self._serial += 1
        return str(self._serial)

    def _write(self, changes: list[Change]) -> None:
        for change in changes:
            self.model.apply(*change)
        self.channel.write([changes])

    def create(self, table: str) -> None:
        new = [_column("id", True), _column("v", False), _column("w", False)]
        self._write([(self.db, table, "CREATETABLE", {"NEW": new, "primary_key": ["id"],
                                                      "SQL": f"CREATE TABLE {table} (id INT PRIMARY KEY, ...)"})])

    def _tables(self) -> list[str]:
        return [name.split(".", 1)[1] for name in self.model.tables if name.startswith(f"{self.db}.")]

    def _value(self) -> str | None:
        return self.rng.choice([None, f"v{self.rng.randrange(1000)}", "it's", "数据"])

    def dml(self, table: str, count: int) -> list[Change]:
        """``count`` random inserts, updates (some moving the key) and deletes of ``table``'s rows."""
        model = self.model.tables[f"{self.db}.{table}"]
        live = {key: dict(row) for key, row in model.rows.items()}
        changes: list[Change] = []
        for _ in range(count):
            kind = self.rng.random()
            if not live or kind < 0.5:
                row = {c: (self._next() if c in model.key else self._value()) for c in model.columns}
                changes.append((self.db, table, "INSERT", {"NEW": cells(row)}))
            else:
                old = live.pop(self.rng.choice(sorted(live, key=str)))
                if kind < 0.85:
                    row = {c: (self._next() if c in model.key and self.rng.random() < 0.3 else
                               old[c] if c in model.key else self._value()) for c in model.columns}
                    changes.append((self.db, table, "UPDATE", {"NEW": cells(row), "OLD": cells(old)}))
                else:
                    changes.append((self.db, table, "DELETE", {"OLD": cells(old)}))
                    continue
            live[model.key_of(row)] = row
        return changes

    def snapshot(self, table: str, chunk: int = 5, state: str = "done", stream_between: int = 2) -> None:
        """SNAPSHOTSTART, the table's rows as SNAPSHOT chunks with stream changes of rows read already in
        between, SNAPSHOTEND; a cancelled one stops after the first chunk. First comes a row the source does
        not have: the image must forget it."""
        model = self.model.tables[f"{self.db}.{table}"]
        ghost: Row = {c: self._next() for c in model.columns}
        self._write([(self.db, table, "INSERT", {"NEW": cells(ghost)})])
        source = {k: dict(r) for k, r in model.rows.items() if k != model.key_of(ghost)}
        self._snapshot += 1
        marker = {"id": self._snapshot, "reason": "test", "key": list(model.key)}
        new = [_column(c, c in model.key) for c in model.columns]
        self._write([(self.db, table, "SNAPSHOTSTART", {"NEW": new, "SNAPSHOT": marker})])
        pending = sorted(source, key=str)
        written = 0
        while pending and not (state == "cancelled" and written):
            part, pending = pending[:chunk], pending[chunk:]
            self._write([(self.db, table, "SNAPSHOT", {"NEW": cells(source[k])}) for k in part])
            written += len(part)
            for _ in range(stream_between):
                changes = self.dml(table, 1)
                self._write(changes)
                for _, _, _, data in changes:
                    if "OLD" in data:
                        source.pop(model.key_of(_row(data["OLD"])), None)
                    if "NEW" in data:
                        source[model.key_of(_row(data["NEW"]))] = _row(data["NEW"])
        end: Payload = {"id": self._snapshot, "rows": written, "state": state}
        if state == "cancelled":
            end["reason"] = "cancelled by the test"
        self._write([(self.db, table, "SNAPSHOTEND", {"SNAPSHOT": end})])

    def ddl(self, table: str) -> None:
        """One of ADD COLUMN (with a default), DROP COLUMN, TRUNCATE, RENAME, DROP TABLE (and CREATE again)."""
        model = self.model.tables[f"{self.db}.{table}"]
        kind = self.rng.choice(["add", "add", "drop", "drop", "truncate", "rename", "rename", "droptable"])
        others = [c for c in model.columns if c not in model.key]
        if kind == "add" or (kind == "drop" and not others):
            column = f"c{self._next()}"
            default = self.rng.choice([None, "7", "it's"])
            sql = f"ALTER TABLE {table} ADD COLUMN {column} VARCHAR(20) DEFAULT " + (
                "NULL" if default is None else "'" + default.replace("'", "''") + "'")
            self._write([(self.db, table, "ALTERTABLE", {"ADDCOLUMN": [{"field_name": column, "data_type": "varchar(20)",
                                                                        "default": default}], "SQL": sql})])
        elif kind == "drop":
            column = self.rng.choice(others)
            self._write([(self.db, table, "ALTERTABLE", {"DROPCOLUMN": [column],
                                                         "SQL": f"ALTER TABLE {table} DROP COLUMN {column}"})])
        elif kind == "truncate":
            self._write([(self.db, table, "TRUNCATE", {})])
        elif kind == "rename":
            target = f"r{self._next()}"
            self._write([(self.db, table, "RENAME", {"RENAME": [{"from": {"dbname": self.db, "tablename": table},
                                                                 "to": {"dbname": self.db, "tablename": target}}],
                                                     "SQL": f"RENAME TABLE {table} TO {target}"})])
        else:
            self._write([(self.db, table, "DROPTABLE", {"DROPTABLE": [{"dbname": self.db, "tablename": table}],
                                                        "SQL": f"DROP TABLE {table}"})])
            self.create(table)

    def run(self, steps: int) -> None:
        """``steps`` random steps: mostly DML transactions, DDL and snapshots now and then."""
        for _ in range(steps):
            tables = self._tables()
            if len(tables) < 3 and self.rng.random() < 0.3:
                self.create(f"t{self._next()}")
                continue
            if not tables:
                continue
            table = self.rng.choice(tables)
            roll = self.rng.random()
            if roll < self.ddl_rate:
                self.ddl(table)
            elif roll < self.ddl_rate + self.snapshot_rate:
                self.snapshot(table, state=self.rng.choice(["done", "done", "cancelled"]))
            else:
                self._write(self.dml(table, self.rng.randint(1, 6)))
