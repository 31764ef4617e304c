"""Model one DDL statement of a binlog QueryEvent as the JSON payload of a ``transfer_data`` row.

The statement is lexed and walked with gate.capture.ddl_tokens; column definitions are read with
gate.capture.ddl_columns; this module holds the per-statement payloads.  Table changes that are not
modelled end up in ``OTHERS``; every payload but TRUNCATE's carries the original text in ``SQL`` (a
multi-table DROP or RENAME, one row per table, the text for that table alone). A statement that changes
rows without row events (partition truncates, drops, exchanges, ALTER SEQUENCE, ...) names the tables it
changed under ``ROWS_WITHOUT_EVENTS``. The module also names the kind of any statement and the tables of
statement-format DML.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gate.capture.ddl_columns import (
    SEQUENCE_COLUMNS,
    Column,
    column_definition,
    key_columns,
    read_definition,
    table_columns,
)
from gate.capture.ddl_tokens import (
    ColumnDescriber,
    Context,
    Cursor,
    NotModelled,
    Tok,
    lex,
    split_items,
    starts_query,
    word,
)
from gate.capture.redact import redact_secrets


@dataclass(frozen=True)
class DdlChange:
    """One ``transfer_data`` row: the kind of change, the table it is about and its payload."""

    optype: str  # CREATETABLE, ALTERTABLE, RENAME, TRUNCATE or DROPTABLE
    dbname: str
    tablename: str
    data: dict[str, Any]



_ALTER_KEYS = ("ADDCOLUMN", "ADDINDEX", "DROPCOLUMN", "CHANGECOLUMN", "DROPINDEX", "OTHERS", "RENAME")
_ALTER_VERBS = frozenset(
    "ADD DROP CHANGE MODIFY ALTER RENAME ORDER CONVERT ENABLE DISABLE DISCARD IMPORT FORCE ALGORITHM LOCK "
    "WITH WITHOUT TRUNCATE COALESCE REORGANIZE EXCHANGE ANALYZE CHECK OPTIMIZE REBUILD REPAIR REMOVE "
    "UPGRADE PARTITION".split()
)



def _table_ref(db: str, table: str) -> dict[str, str]:
    """The payload's reference to a table."""
    return {"dbname": db, "tablename": table}



def _has_query(c: Cursor) -> bool:
    """Whether the rest of a CREATE TABLE has a ``[AS] SELECT ...`` part."""
    while not c.done():
        if c.at_punct("("):
            if starts_query(c.group()):
                return True
        elif c.accept_any("SELECT", "AS"):
            return True
        else:
            c.next()
    return False


def _versioned(options: list[Tok]) -> bool:
    """Whether a CREATE TABLE's table options hold WITH SYSTEM VERSIONING."""
    words = [word(tok) for tok in options]
    return any(words[i:i + 3] == ["WITH", "SYSTEM", "VERSIONING"] for i in range(len(words)))


def _create_table(cur: Cursor) -> DdlChange:
    """``... [IF NOT EXISTS] t {LIKE s | (LIKE s) | (definitions) [options] [[AS] query] | [AS] query}``."""
    ctx = cur.ctx
    cur.accept("IF", "NOT", "EXISTS")
    db, table = cur.table()
    body_toks = cur.group() if cur.at_punct("(") else []
    body = cur.sub(body_toks)
    source = cur if cur.accept("LIKE") else body if body.accept("LIKE") else None
    if source is not None:
        like_db, like_table = source.table()
        new = ctx.describe(like_db, like_table) if ctx.describe else []
        like = {"NEW": new, "LIKE": _table_ref(like_db, like_table), "SQL": ctx.statement}
        return DdlChange("CREATETABLE", db, table, like)
    options = cur.rest()
    query = starts_query(body_toks) or _has_query(cur.sub(options))
    if not body_toks and not query:
        raise NotModelled  # a table needs columns
    columns, key = ([], []) if starts_query(body_toks) else table_columns(body, _versioned(options))
    data: dict[str, Any] = {"NEW": columns, "primary_key": key} if key else {"NEW": columns}
    data["SQL"] = ctx.statement
    if query:
        data["SELECT"] = True
    return DdlChange("CREATETABLE", db, table, data)



def _continues(clause: list[Tok], item: list[Tok]) -> bool:
    """Whether item continues the column or partition list of an ``ORDER BY`` or ``... PARTITION`` clause."""
    head = [word(tok) for tok in clause[:2]]
    listing = head == ["ORDER", "BY"] or head[1:] == ["PARTITION"]
    return listing and word(item[0]) not in _ALTER_VERBS and not any(tok.text == "=" for tok in item)


UNLOGGED = "ROWS_WITHOUT_EVENTS"  # the payload key naming the tables a statement changed without row events


def _unlogged(c: Cursor, ref: dict[str, str], ignore: bool) -> list[dict[str, str]]:
    """The tables whose rows an ALTER TABLE clause changes without row events (MariaDB logs only the statement),
    each with the clause's kind under ``by``: rows a partition clause removes, moves in or out, a tablespace
    discarded or imported, duplicates that ``ALTER IGNORE`` drops for a new unique key, the period columns
    (and, dropped, the history rows) of ``ADD``/``DROP SYSTEM VERSIONING``."""
    words = [word(tok) for tok in c.toks]
    head = " ".join(words[:2])
    if head in ("TRUNCATE PARTITION", "DROP PARTITION"):
        return [ref | {"by": head}]
    if head in ("EXCHANGE PARTITION", "CONVERT PARTITION"):  # ... WITH TABLE x / ... TO TABLE x
        while not c.done() and not c.accept_any("WITH", "TO"):
            c.next()
        c.expect("TABLE")
        return [ref | {"by": head}, _table_ref(*c.table()) | {"by": head}]
    if head == "CONVERT TABLE":  # the table's rows move into a new partition; the table itself is gone
        return [ref | {"by": "CONVERT TABLE TO PARTITION"}]
    if words[:3] in (["ADD", "SYSTEM", "VERSIONING"], ["DROP", "SYSTEM", "VERSIONING"]):  # every row gains (loses)
        return [ref | {"by": f"{words[0]} SYSTEM VERSIONING"}]  # the period columns; DROP removes the history rows
    if words[0] in ("DISCARD", "IMPORT") and "TABLESPACE" in words:
        return [ref | {"by": f"{words[0]} TABLESPACE"}]
    if ignore and words[0] in ("ADD", "MODIFY", "CHANGE") and {"UNIQUE", "PRIMARY"} & set(words):
        return [ref | {"by": "ALTER IGNORE TABLE"}]
    return []


def _alter_table(cur: Cursor, ignore: bool = False) -> DdlChange:
    """``... [IF EXISTS] t [WAIT n | NOWAIT] clause, ...``; a lone RENAME clause makes a RENAME row. ``ignore``:
    the statement is an ``ALTER IGNORE TABLE``."""
    ctx = cur.ctx
    cur.accept("IF", "EXISTS")
    db, table = cur.table()
    cur.skip_wait()
    clauses: list[list[Tok]] = []
    for item in split_items(cur.rest()):
        if clauses and item and _continues(clauses[-1], item):
            clauses[-1] = clauses[-1] + item
        elif item:
            clauses.append(item)
    found: dict[str, list[Any]] = {key: [] for key in _ALTER_KEYS}
    unlogged: list[dict[str, str]] = []
    for clause in clauses:
        try:
            unlogged += _unlogged(cur.sub(clause), _table_ref(db, table), ignore)
        except NotModelled:
            unlogged.append(_table_ref(db, table) | {"by": ctx.text(clause)})  # a partition clause gate cannot read
        try:
            entries = _alter_spec(cur.sub(clause), db, table)
        except NotModelled:
            entries = [("OTHERS", ctx.text(clause))]
        for key, entry in entries:
            found[key].append(entry)
    data: dict[str, Any] = {key: values for key, values in found.items() if values}
    if unlogged:  # each table once, with the first clause that changed it
        firsts: dict[tuple[str, str], dict[str, str]] = {}
        for entry in unlogged:
            firsts.setdefault((entry["dbname"], entry["tablename"]), entry)
        data[UNLOGGED] = list(firsts.values())
    data["SQL"] = ctx.statement
    if set(data) == {"RENAME", "SQL"}:
        return DdlChange("RENAME", db, table, data)
    return DdlChange("ALTERTABLE", db, table, data)


def _alter_spec(c: Cursor, db: str, table: str) -> list[tuple[str, Any]]:
    """Model one ALTER TABLE clause as (payload key, entry) pairs; raise NotModelled for OTHERS."""
    if c.accept("ADD"):
        return _alter_add(c)
    if c.accept("DROP"):
        return _alter_drop(c)
    modify = c.accept("MODIFY")
    if modify or c.accept("CHANGE"):
        c.accept("COLUMN")
        c.accept("IF", "EXISTS")
        origin = None if modify else c.ident()
        column = column_definition(c)
        change = {"origin_field_name": origin or column.name, "field_name": column.name}
        return [("CHANGECOLUMN", change | {"data_type": column.data_type})]
    if c.accept("RENAME", "COLUMN"):
        origin = c.ident()
        c.expect("TO")
        name = c.ident()
        c.finish()
        return [("CHANGECOLUMN", {"origin_field_name": origin, "field_name": name, "data_type": None})]
    if c.accept("RENAME") and not c.at("INDEX", "KEY"):
        c.accept_any("TO", "AS")
        new_db, new_table = c.table()
        c.finish()
        return [("RENAME", {"from": _table_ref(db, table), "to": _table_ref(new_db, new_table)})]
    raise NotModelled


def _alter_add(c: Cursor) -> list[tuple[str, Any]]:
    """Model ``ADD [COLUMN] [IF NOT EXISTS] {definition | (definition, ...)}``."""
    c.accept("COLUMN")
    c.accept("IF", "NOT", "EXISTS")
    if c.at("PARTITION") or c.at_seq("SYSTEM", "VERSIONING"):
        raise NotModelled
    entries: list[tuple[str, Any]] = []
    for item in split_items(c.group()) if c.at_punct("(") else [c.rest()]:
        definition = read_definition(c.sub(item))
        if isinstance(definition, Column):
            entries.append(("ADDCOLUMN", {"field_name": definition.name, "data_type": definition.data_type}))
        elif definition:
            entries.append(("ADDINDEX", {"index_name": definition.name, "column_name": definition.columns}))
        else:
            raise NotModelled
    return entries


def _alter_drop(c: Cursor) -> list[tuple[str, Any]]:
    """Model ``DROP {PRIMARY KEY | INDEX i | [COLUMN] c}``."""
    if c.accept("PRIMARY", "KEY"):
        entry = ("DROPINDEX", "PRIMARY")
    elif c.accept_any("INDEX", "KEY"):
        c.accept("IF", "EXISTS")
        entry = ("DROPINDEX", c.ident())
    else:  # DROP FOREIGN KEY fk, DROP PARTITION p, ... leave tokens behind: finish() sends them to OTHERS
        c.accept("COLUMN")
        c.accept("IF", "EXISTS")
        entry = ("DROPCOLUMN", c.ident())
        c.accept_any("RESTRICT", "CASCADE")
    c.finish()
    return [entry]


def _create_index(cur: Cursor) -> DdlChange:
    """``... [IF NOT EXISTS] i [USING type] ON t (key_part, ...)`` as an ALTERTABLE ADDINDEX."""
    cur.accept("IF", "NOT", "EXISTS")
    name = cur.ident()
    if cur.accept("USING"):
        cur.next()
    cur.expect("ON")
    db, table = cur.table()
    columns = [part for part in key_columns(cur) if part]
    data = {"ADDINDEX": [{"index_name": name, "column_name": columns}], "SQL": cur.ctx.statement}
    return DdlChange("ALTERTABLE", db, table, data)


def _drop_index(cur: Cursor) -> DdlChange:
    """``... [ONLINE | OFFLINE] [IF EXISTS] i ON t`` as an ALTERTABLE DROPINDEX."""
    cur.accept_any("ONLINE", "OFFLINE")
    cur.accept("IF", "EXISTS")
    name = cur.ident()
    cur.expect("ON")
    db, table = cur.table()
    return DdlChange("ALTERTABLE", db, table, {"DROPINDEX": [name], "SQL": cur.ctx.statement})


def _rename_table(cur: Cursor) -> list[DdlChange]:
    """``... [IF EXISTS] a TO b, ...``: a RENAME row per pair."""
    cur.accept("IF", "EXISTS")
    rows = []
    for text, item in _per_table(cur):
        c = cur.sub(item)
        old = c.table()
        c.skip_wait()
        c.expect("TO")
        new = c.table()
        c.finish()
        rows.append(DdlChange("RENAME", *old, {"RENAME": [{"from": _table_ref(*old), "to": _table_ref(*new)}],
                                               "SQL": text}))
    return rows


def _per_table(cur: Cursor) -> list[tuple[str, list[Tok]]]:
    """The comma-separated items of a multi-table statement, each with the statement's text for it alone:
    the original text when there is one item, else the leading keywords and the item's own text."""
    items = split_items(cur.rest())
    if len(items) == 1:
        return [(cur.ctx.statement, items[0])]
    head = cur.ctx.code[: items[0][0].start] if items[0] else ""
    return [(head + cur.ctx.text(item) if item else "", item) for item in items]


def _truncate(cur: Cursor) -> DdlChange:
    """``... t``: TRUNCATE rows carry no payload."""
    db, table = cur.table()
    cur.skip_wait()
    cur.finish()
    return DdlChange("TRUNCATE", db, table, {})


def _drop_table(cur: Cursor) -> list[DdlChange]:
    """``... [IF EXISTS] a, b [RESTRICT | CASCADE]``: a DROPTABLE row per table."""
    cur.accept("IF", "EXISTS")
    rows = []
    for text, item in _per_table(cur):
        c = cur.sub(item)
        db, table = c.table()
        c.skip_wait()
        c.accept_any("RESTRICT", "CASCADE")
        c.finish()
        rows.append(DdlChange("DROPTABLE", db, table, {"DROPTABLE": [_table_ref(db, table)], "SQL": text}))
    return rows


def _create_sequence(cur: Cursor) -> DdlChange:
    """``... [IF NOT EXISTS] s [options]`` as the CREATETABLE of the sequence's one-row table."""
    cur.accept("IF", "NOT", "EXISTS")
    db, table = cur.table()
    return DdlChange("CREATETABLE", db, table, {"NEW": [dict(column) for column in SEQUENCE_COLUMNS],
                                                "SQL": cur.ctx.statement})


def _alter_sequence(cur: Cursor) -> DdlChange:
    """``... [IF EXISTS] s options``: a change of the sequence's values, not of its columns (OTHERS), and of
    its one row without a row event."""
    cur.accept("IF", "EXISTS")
    db, table = cur.table()
    statement = cur.ctx.statement
    return DdlChange("ALTERTABLE", db, table, {"OTHERS": [statement], UNLOGGED: [
        _table_ref(db, table) | {"by": "ALTER SEQUENCE"}], "SQL": statement})


Parser = Callable[[Cursor], DdlChange | list[DdlChange]]


def unlogged_tables(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The tables a payload names under ``ROWS_WITHOUT_EVENTS``."""
    return [(entry["dbname"], entry["tablename"]) for entry in data.get(UNLOGGED, ())]


def snapshot_tables(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The tables of :func:`unlogged_tables` whose snapshot gives their rows again: all but a sequence (a
    snapshot pages on a key, which a sequence's one-row table lacks; its next NEXTVAL that takes a new cache
    of values, or SETVAL, logs its row again)."""
    return [(entry["dbname"], entry["tablename"]) for entry in data.get(UNLOGGED, ())
            if entry["by"] != "ALTER SEQUENCE"]


def _handler(cur: Cursor) -> Parser | None:
    """Consume the statement's leading keywords; the parser for the rest, or None if not about a table."""
    if cur.accept("CREATE"):
        cur.accept("OR", "REPLACE")
        if cur.accept("TABLE"):  # CREATE TEMPORARY TABLE is not replicated
            return _create_table
        if cur.accept("SEQUENCE"):  # so is CREATE TEMPORARY SEQUENCE
            return _create_sequence
        cur.accept_any("ONLINE", "OFFLINE")
        cur.accept_any("UNIQUE", "FULLTEXT", "SPATIAL")
        return _create_index if cur.accept("INDEX") else None
    if cur.accept("ALTER"):
        cur.accept_any("ONLINE", "OFFLINE")
        ignore = cur.accept("IGNORE")
        if cur.accept("SEQUENCE"):
            return _alter_sequence
        if not cur.accept("TABLE"):
            return None
        return (lambda c: _alter_table(c, ignore=True)) if ignore else _alter_table
    if cur.accept("RENAME"):
        return _rename_table if cur.accept_any("TABLE", "TABLES") else None
    if cur.accept("TRUNCATE"):
        cur.accept("TABLE")
        return _truncate
    if cur.accept("DROP"):  # DROP TEMPORARY TABLE is not replicated
        if cur.accept_any("TABLE", "TABLES", "SEQUENCE"):
            return _drop_table
        return _drop_index if cur.accept("INDEX") else None
    return None


def parse_ddl(statement: str, default_db: str, describe: ColumnDescriber | None = None) -> list[DdlChange]:
    """Model statement as ``transfer_data`` rows: none if it is not about a (non-temporary) table, one per
    table for a multi-table DROP TABLE or RENAME TABLE, else one.

    default_db is the session's database, used for unqualified names; describe, if given,
    supplies the columns of ``CREATE TABLE ... LIKE``. (``CREATE TABLE ... SELECT`` reaches the binlog as
    such only in statement format, which gate refuses: it is modelled with the columns it lists, if any.)
    A table statement that cannot be modelled becomes ``ALTERTABLE {"OTHERS": [statement]}``. The
    statement's passwords are masked first (:func:`gate.capture.redact.redact_secrets`): no payload holds one.
    """
    statement = redact_secrets(statement)
    toks, code = lex(statement)
    ctx = Context(statement, code, default_db, describe)
    cur = Cursor(toks, ctx)
    handler = _handler(cur)
    if handler is None:
        return []
    try:
        changes = handler(cur)
    except NotModelled:
        db, table = ctx.tables[0] if ctx.tables else (default_db, "")
        return [DdlChange("ALTERTABLE", db, table, {"OTHERS": [statement], "SQL": statement})]
    return changes if isinstance(changes, list) else [changes]


def statement_kind(statement: str) -> str:
    """The statement's first keyword, with the next one after CREATE, SET and the like (``CREATE USER``):
    what can be logged of a statement whose text may hold a password. Never a quoted name or a literal."""
    toks = lex(statement)[0]
    words = [word(tok) for tok in toks[:2]]
    if words[1:] and words[0] in _TWO_WORD_KINDS and words[1]:
        return f"{words[0]} {words[1]}"
    return words[0] if words and words[0] else "unnamed"


_TWO_WORD_KINDS = frozenset(
    "CREATE ALTER DROP RENAME SET CHANGE SHOW FLUSH LOAD INSTALL UNINSTALL START STOP RESET PURGE".split())
_DML_STOP = ("WHERE", "SET", "ORDER", "LIMIT", "RETURNING")


def dml_tables(statement: str, default_db: str) -> list[tuple[str, str]] | None:
    """The tables an INSERT, REPLACE, UPDATE, DELETE or LOAD DATA/XML statement names as its targets (for
    UPDATE and DELETE every table of their table references, the read ones too); None for other statements.
    An unqualified name is in default_db; the list is empty when the names cannot be read."""
    toks, code = lex(statement)
    cur = Cursor(toks, Context(statement, code, default_db, None))
    try:
        if cur.accept_any("INSERT", "REPLACE"):
            cur.accept_any("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY")
            cur.accept("IGNORE")
            cur.accept("INTO")
            cur.table()
        elif cur.accept("LOAD"):
            if not cur.accept_any("DATA", "XML"):
                return None
            cur.accept_any("LOW_PRIORITY", "CONCURRENT")
            cur.accept("LOCAL")
            cur.expect("INFILE")
            cur.next()
            cur.accept_any("REPLACE", "IGNORE")
            cur.expect("INTO", "TABLE")
            cur.table()
        elif cur.accept("UPDATE"):
            _table_refs(cur)
        elif cur.accept("DELETE"):
            while cur.accept_any("LOW_PRIORITY", "QUICK", "IGNORE"):
                pass
            while not cur.done() and not cur.at("FROM"):  # DELETE t1, t2 FROM ...: targets named again after FROM
                cur.next()
            cur.expect("FROM")
            _table_refs(cur)
        else:
            return None
    except NotModelled:
        pass
    return cur.ctx.tables


def _table_refs(cur: Cursor) -> None:
    """Read the table names of a table reference list (joins, ``USING`` too) up to the clause that ends it."""
    expecting = True
    while not cur.done() and not cur.at(*_DML_STOP):
        if expecting and cur.at_punct("("):
            inner = cur.group()
            if not starts_query(inner):
                _table_refs(cur.sub(inner))  # a parenthesised join
            expecting = False
        elif expecting:
            cur.table()
            expecting = False
        elif cur.at_punct(",") or cur.at("JOIN", "STRAIGHT_JOIN", "FROM"):
            cur.next()
            expecting = True
        elif cur.accept("USING"):  # DELETE ... USING t, or a join's USING (columns)
            if cur.at_punct("("):
                cur.group()
            else:
                expecting = True
        elif cur.at_punct("("):
            cur.group()
        else:
            cur.next()
