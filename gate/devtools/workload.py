"""A reproducible random workload for a source database: the demo, the tests and the benchmark use it.

Transactions mix inserts, updates (primary-key changes included) and deletes over a few tables,
some spanning several tables, with DDL now and then (ADD/DROP COLUMN, CREATE, RENAME, TRUNCATE).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pymysql

TABLE_DDL = (
    "CREATE TABLE {db}.{table} (id INT NOT NULL PRIMARY KEY, name VARCHAR(40) CHARACTER SET utf8mb4, "
    "amount DECIMAL(12,3), ratio DOUBLE, created DATETIME(3), flag TINYINT UNSIGNED, payload VARBINARY(64), "
    "note TEXT) ENGINE=InnoDB"
)
_WORDS = ("alpha", "beta", "gamma", "délta", "εψιλον", "数据", "🚀 rocket", "it's", 'say "hi"', "back\\slash", "")


@dataclass
class RandomWorkload:
    """Runs ``transactions`` random transactions on ``db`` (which it creates) with a fixed seed."""

    conn: pymysql.Connection
    db: str
    seed: int = 1
    tables: int = 3
    ddl_every: int = 0  # a DDL statement every N transactions; 0 for none
    rng: random.Random = field(init=False)
    _ids: dict[str, set[int]] = field(init=False, default_factory=dict)
    _next_id: int = field(init=False, default=1)
    _extra: dict[str, list[str]] = field(init=False, default_factory=dict)
    _serial: int = field(init=False, default=0)
    _count: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def setup(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {self.db}")
            for n in range(self.tables):
                cur.execute(TABLE_DDL.format(db=self.db, table=f"t{n}"))
                self._ids[f"t{n}"] = set()
                self._extra[f"t{n}"] = []

    def _row(self, row_id: int) -> tuple[object, ...]:
        r = self.rng
        return (
            row_id,
            r.choice(_WORDS) + str(r.randint(0, 999)) if r.random() > 0.1 else None,
            f"{r.randint(-10**8, 10**8)}.{r.randint(0, 999):03d}" if r.random() > 0.1 else None,
            r.choice((0.1, -2.5, 1e-7, 3.141592653589793, 1e20, r.random())),
            f"2024-0{r.randint(1, 9)}-1{r.randint(0, 9)} 0{r.randint(0, 9)}:1{r.randint(0, 9)}:00.{r.randint(0, 999):03d}",
            r.randint(0, 255),
            bytes(r.randint(0, 255) for _ in range(r.randint(0, 12))) if r.random() > 0.1 else None,
            "x" * r.randint(0, 300),
        )

    def _insert(self, cur: pymysql.cursors.Cursor, table: str) -> None:
        rows = []
        for _ in range(self.rng.randint(1, 20)):
            rows.append(self._row(self._next_id))
            self._ids[table].add(self._next_id)
            self._next_id += 1
        cur.executemany(
            f"INSERT INTO {self.db}.{table} (id, name, amount, ratio, created, flag, payload, note) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", rows)

    def _update(self, cur: pymysql.cursors.Cursor, table: str) -> None:
        ids = self._ids[table]
        if not ids:
            return self._insert(cur, table)
        victim = self.rng.choice(sorted(ids))
        if self.rng.random() < 0.2:  # primary-key change
            new_id = self._next_id
            self._next_id += 1
            cur.execute(f"UPDATE {self.db}.{table} SET id = %s WHERE id = %s", (new_id, victim))
            ids.discard(victim)
            ids.add(new_id)
        else:
            row = self._row(victim)
            cur.execute(
                f"UPDATE {self.db}.{table} SET name = %s, amount = %s, ratio = %s, created = %s, flag = %s, "
                "payload = %s, note = %s WHERE id = %s", row[1:] + (victim,))

    def _delete(self, cur: pymysql.cursors.Cursor, table: str) -> None:
        ids = self._ids[table]
        if not ids:
            return
        victims = self.rng.sample(sorted(ids), min(len(ids), self.rng.randint(1, 3)))
        cur.execute(f"DELETE FROM {self.db}.{table} WHERE id IN ({', '.join(map(str, victims))})")
        ids.difference_update(victims)

    def _ddl(self, cur: pymysql.cursors.Cursor) -> None:
        table = self.rng.choice(sorted(self._ids))
        extra = self._extra[table]
        self._serial += 1
        choice = self.rng.random()
        if extra and choice < 0.3:
            cur.execute(f"ALTER TABLE {self.db}.{table} DROP COLUMN {extra.pop()}")
        elif choice < 0.7:
            column = f"c{self._serial}"
            cur.execute(f"ALTER TABLE {self.db}.{table} ADD COLUMN {column} INT DEFAULT {self._serial}")
            extra.append(column)
        elif choice < 0.85:
            new = f"r{self._serial}"
            cur.execute(f"RENAME TABLE {self.db}.{table} TO {self.db}.{new}")
            self._ids[new] = self._ids.pop(table)
            self._extra[new] = self._extra.pop(table)
        else:
            cur.execute(f"TRUNCATE TABLE {self.db}.{table}")
            self._ids[table].clear()

    def transaction(self) -> None:
        """One random transaction (or DDL statement), committed."""
        self._count += 1
        with self.conn.cursor() as cur:
            if self.ddl_every and self._count % self.ddl_every == 0:
                self._ddl(cur)
                return
            self.conn.begin()
            for _ in range(self.rng.randint(1, 4)):
                table = self.rng.choice(sorted(self._ids))
                op = self.rng.random()
                (self._insert if op < 0.5 else self._update if op < 0.8 else self._delete)(cur, table)
            self.conn.commit()

    def run(self, transactions: int) -> None:
        for _ in range(transactions):
            self.transaction()
