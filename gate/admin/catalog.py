"""What a channel's source catalog says about its captures: the tables and columns there, the column rules
that hit key columns or match nothing, and the tables a snapshot cannot page through.

Commands that add rules, widen the capture or request snapshots ask these before they change anything;
``gate channel check`` reports them, and the captured tables that foreign-key cascades change without row
events.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pymysql

from gate.admin.preflight import Problem
from gate.capture.snapshot_reader import Column, choose_key, quote, read_columns
from gate.capture.translate import TableFilter
from gate.common import dc
from gate.common.columns import NAME, ColumnRule, matching
from gate.common.config import ServerConfig
from gate.common.dc import ChannelSettings, one_row
from gate.common.errors import InvalidValue

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")  # never a source's data
_PATTERN = re.compile(rf"{NAME}\.{NAME}")

Table = tuple[str, str]  # (dbname, tablename)


def check_pattern(pattern: str) -> str:
    """A ``db.table`` filter pattern: exactly one dot, names of letters (of any alphabet), digits, _ and $,
    wildcards * and ?."""
    if not _PATTERN.fullmatch(pattern):
        raise InvalidValue(
            f"Filter pattern {pattern!r} is not valid. Write db.table with exactly one dot, using letters (of "
            "any alphabet), digits, _ and $, and the wildcards * (any run of characters) and ? (one character), "
            "e.g. shop.* or *.audit_log."
        )
    return pattern


def _not_system() -> tuple[str, tuple[str, ...]]:
    return f"table_schema NOT IN ({', '.join(['%s'] * len(SYSTEM_SCHEMAS))})", SYSTEM_SCHEMAS


def source_tables(source: ServerConfig) -> list[Table]:
    """Every base table (no views) on the source outside the system schemas, by name (binary order)."""
    where, args = _not_system()
    with dc.connect(source, "source") as conn, conn.cursor() as cur:
        cur.execute(f"SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                    f"AND {where}", args)
        return sorted((db, table) for db, table in cur.fetchall())


def captured(tables: Iterable[Table], allow: Sequence[str], deny: Sequence[str]) -> list[Table]:
    """The tables the lists capture, by the channel filter's own matching."""
    passing = TableFilter(tuple(allow), tuple(deny))
    return [t for t in tables if passing.passes(*t)]


def source_columns(settings: ChannelSettings) -> list[tuple[str, str, str, bool]]:
    """Every column of the tables the channel captures, from its source's information_schema:
    (db, table, column, in the primary key)."""
    captures = TableFilter(settings.allow, settings.deny)
    where, args = _not_system()
    with dc.connect(settings.source, "source") as conn, conn.cursor() as cur:
        cur.execute(f"SELECT table_schema, table_name, column_name, column_key = 'PRI' FROM information_schema.columns "
                    f"WHERE {where}", args)
        return [(db, table, column, bool(key)) for db, table, column, key in cur.fetchall()
                if captures.passes(db, table)]


def key_hits(columns: Iterable[tuple[str, str, str, bool]], rules: Sequence[ColumnRule]) -> list[str]:
    """Each primary-key column of ``columns`` a rule hits, as 'the column rule R hits db.t.c'."""
    found = []
    for db, table, column, key in columns:
        hits = matching(rules, db, table, column) if key else []
        if hits:
            found.append(f"the column rule {hits[0].describe()} hits {db}.{table}.{column}")
    return found


def rule_problems(settings: ChannelSettings) -> list[Problem]:
    """For 'gate channel check': rules hitting a primary-key column of a captured table (fatal: gate run
    stops at that table's first row event) and rules matching no column (a warning)."""
    if not settings.columns:
        return []
    columns = source_columns(settings)
    fix = (f"narrow the rules ('gate channel columns {settings.name} --clear', then the rules again) so that they "
           f"leave key columns out, or deny the table ('gate channel filter {settings.name} --deny db.table')")
    problems = [Problem(hit.removeprefix("the "), "a rule on a primary-key column on the source",
                        "key columns unchanged, so that row images stay identifiable", fix)
                for hit in key_hits(columns, settings.columns)]
    return problems + [
        Problem(f"column rule {rule.describe()}", "matching no column of a captured table on the source",
                "a rule that matches a column", "correct the pattern with 'gate channel columns "
                f"{settings.name} --clear' and the rules again (harmless if the column is still to come)", fatal=False)
        for rule in settings.columns if not any(matching([rule], *c[:3]) for c in columns)]


def snapshot_refusals(source: ServerConfig, channel: str, tables: Sequence[Table], rules: Sequence[ColumnRule],
                      ways: Mapping[Table, list[str]], whole_rows: int) -> list[tuple[Table, str]]:
    """Each of ``tables`` whose snapshot 'gate run' would refuse, with why and the fix (none for those it can
    read): no primary key nor unique key on NOT NULL columns to page on, a column rule on that key; for a
    table given a way in ``ways`` (the key the user chose for it, [] to read it whole), a chosen key that is
    not NOT NULL and unique on the source now, or more than ``whole_rows`` rows to read whole."""
    refusals: list[tuple[Table, str]] = []
    if not tables:
        return refusals
    with dc.connect(source, "source") as conn, conn.cursor() as cur:
        for db, table in tables:
            name, columns = f"{db}.{table}", read_columns(cur, db, table)
            again = f"'gate snapshot {channel} --table {name}'"
            key = ways.get((db, table), choose_key(cur, db, table, columns))
            if key is None:
                refusals.append(((db, table), (
                    f"{name} has neither a primary key nor a unique key on NOT NULL columns: add one (ALTER TABLE "
                    f"{name} ADD PRIMARY KEY (...)) and request it with {again}, or request it read whole in one "
                    f"read view ('gate snapshot {channel} --whole-table {name}', up to {whole_rows} rows) or paged "
                    f"on columns you know are unique ('gate snapshot {channel} --key {name}=COL,...')")))
            elif not key:
                cur.execute(f"SELECT COUNT(*) FROM (SELECT 1 FROM {quote(db)}.{quote(table)} LIMIT {whole_rows + 1}) r")
                if int(one_row(cur)[0]) > whole_rows:
                    refusals.append(((db, table), (
                        f"{name} has more than {whole_rows} rows, the most a whole-table snapshot reads (the "
                        f"channel's snapshot_whole_table_rows): raise it ('gate channel set {channel} "
                        f"--snapshot-whole-table-rows N') or page it on a key (a primary key, or --key {name}=COL,...)"
                        f", then request it again")))
            else:
                problem = key_problem(cur, db, table, columns, key) if (db, table) in ways else None
                hits = [(column, matching(rules, db, table, column)) for column in key]
                refusals += [((db, table), f"{problem}; then request it again")] if problem else []
                refusals += [((db, table), f"the column rule {rules_[0].describe()} hits {name}.{column}, a column of "
                              f"the key the snapshot pages on (narrow the rule); then request it with {again}")
                             for column, rules_ in hits if rules_]
    return refusals


_CASCADING = ("CASCADE", "SET NULL", "SET DEFAULT")


def cascade_query() -> tuple[str, tuple[str, ...]]:
    """The source's foreign keys that change their child table on their own (ON DELETE / ON UPDATE CASCADE, SET
    NULL or SET DEFAULT, from information_schema.REFERENTIAL_CONSTRAINTS), outside the system schemas."""
    rules = ", ".join(["%s"] * len(_CASCADING))
    return ("SELECT constraint_schema, table_name, constraint_name, unique_constraint_schema, referenced_table_name, "
            "delete_rule, update_rule FROM information_schema.referential_constraints "
            f"WHERE (delete_rule IN ({rules}) OR update_rule IN ({rules})) AND constraint_schema NOT IN "
            f"({', '.join(['%s'] * len(SYSTEM_SCHEMAS))})", (*_CASCADING, *_CASCADING, *SYSTEM_SCHEMAS))


def cascading_foreign_keys(settings: ChannelSettings, found: Sequence[tuple[Any, ...]] | None = None
                           ) -> list[dict[str, str]]:
    """The source's foreign keys whose child table the channel captures and that change it on their own
    (:func:`cascade_query`, asked now unless ``found`` holds its rows): InnoDB writes no row events for the
    child rows a cascade changes or deletes. By child, then name."""
    if found is None:
        with dc.connect(settings.source, "source") as conn, conn.cursor() as cur:
            cur.execute(*cascade_query())
            found = list(cur.fetchall())
    captures = TableFilter(settings.allow, settings.deny)
    return [{"child": f"{db}.{table}", "parent": f"{parent_db}.{parent}", "constraint": name,
             "on_delete": on_delete, "on_update": on_update}
            for db, table, name, parent_db, parent, on_delete, on_update in sorted(found)
            if captures.passes(db, table)]


def cascade_problems(settings: ChannelSettings, found: Sequence[tuple[Any, ...]] | None = None
                     ) -> tuple[list[dict[str, str]], list[Problem]]:
    """:func:`cascading_foreign_keys`, and a warning for each: the child table will diverge in the DC."""
    keys = cascading_foreign_keys(settings, found)
    problems = []
    for key in keys:
        child, parent = key["child"], key["parent"]
        actions = [f"ON {verb.upper()} {key['on_' + verb]}" for verb in ("delete", "update")
                   if key["on_" + verb] in _CASCADING]
        problems.append(Problem(
            f"the foreign key {key['constraint']} of the captured table {child} (parent {parent})",
            ", ".join(actions), "a row event for every change of a captured table",
            f"InnoDB logs no row event for the rows of {child} that a cascade changes or deletes, so {child} "
            f"diverges from the source in the DC whenever rows of {parent} are deleted or their key updated. Have "
            f"the application change the rows of {child} itself before those of {parent} (a foreign key ON "
            f"DELETE RESTRICT ON UPDATE RESTRICT then guards the order), or snapshot {child} again after such "
            f"changes ('gate snapshot {settings.name} --table {child}').", fatal=False))
    return keys, problems


def key_problem(cur: pymysql.cursors.Cursor, db: str, table: str, columns: list[Column], key: list[str]) -> str | None:
    """What keeps ``key``, columns a user chose, from being a key of the table on the source now (from its
    catalog and a count of its rows: the whole table is read), or None."""
    name, nullable = f"{db}.{table}", {c.name: c.nullable == "YES" for c in columns}
    missing = [c for c in key if c not in nullable]
    if missing:
        return f"{name} has no column {', '.join(missing)} for the key you chose (its columns: {', '.join(nullable)})"
    null = [c for c in key if nullable[c]]
    if null:
        return (f"the key you chose for {name} has NULL-able columns ({', '.join(null)}): a row whose key is NULL "
                "would never be read; choose NOT NULL columns")
    listed = ", ".join(quote(c) for c in key)
    cur.execute(f"SELECT COUNT(*) - COUNT(DISTINCT {listed}) FROM {quote(db)}.{quote(table)}")
    repeated = int(one_row(cur)[0])
    if repeated:
        return (f"the key you chose for {name} ({', '.join(key)}) is not unique: {repeated} of its rows repeat the "
                "key of another; choose other columns, or --whole-table")
    return None
