"""Model one DDL statement of a binlog QueryEvent as the JSON payload of a ``transfer_data`` row.

sqlparse lexes the text (it is a non-validating lexer); a small hand-written
recursive-descent parser walks its tokens.  Table changes that are not modelled
end up in ``OTHERS``; every payload but TRUNCATE's carries the original text in ``SQL`` (a
multi-table DROP or RENAME, one row per table, the text for that table alone).  The module
also names the kind of any statement and the tables of statement-format DML.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import sqlparse
from sqlparse import tokens as T


@dataclass(frozen=True)
class DdlChange:
    """One ``transfer_data`` row: the kind of change, the table it is about and its payload."""

    optype: str  # CREATETABLE, ALTERTABLE, RENAME, TRUNCATE or DROPTABLE
    dbname: str
    tablename: str
    data: dict[str, Any]


SEQUENCE_COLUMNS = tuple(
    {"field_name": name, "nullable": "No", "primary_key": "No", "data_type": data_type}
    for name, data_type in [
        ("next_not_cached_value", "bigint(21)"), ("minimum_value", "bigint(21)"), ("maximum_value", "bigint(21)"),
        ("start_value", "bigint(21)"), ("increment", "bigint(21)"), ("cache_size", "bigint(21) unsigned"),
        ("cycle_option", "tinyint(1) unsigned"), ("cycle_count", "bigint(21)"),
    ]
)
"""The columns of the table behind every MariaDB sequence, as ``CREATE SEQUENCE`` makes it."""

ColumnDescriber = Callable[[str, str], list[dict[str, str]]]
"""(db, table) -> that table's CREATETABLE column dicts."""

# Token kinds: an unquoted word (keyword or name), a `backquoted` or "double-quoted" identifier,
# punctuation, anything else ('strings', numbers, operators).
_WORD, _QUOTED, _PUNCT, _OTHER = "word", "quoted", "punct", "other"

_EXECUTABLE_COMMENT = re.compile(r"/\*M?!(?:\d{5,6})?(.*)\*/", re.DOTALL)
_INDEX_WORDS = ("CONSTRAINT", "PRIMARY", "UNIQUE", "INDEX", "KEY", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK")
_TYPE_WORDS = ("PRECISION", "VARYING", "CHAR", "CHARACTER", "VARCHAR", "VARBINARY")  # DOUBLE PRECISION, ...
_TYPE_FLAGS = ("UNSIGNED", "SIGNED", "ZEROFILL")
_ALTER_KEYS = ("ADDCOLUMN", "ADDINDEX", "DROPCOLUMN", "CHANGECOLUMN", "DROPINDEX", "OTHERS", "RENAME")
_ALTER_VERBS = frozenset(
    "ADD DROP CHANGE MODIFY ALTER RENAME ORDER CONVERT ENABLE DISABLE DISCARD IMPORT FORCE ALGORITHM LOCK "
    "WITH WITHOUT TRUNCATE COALESCE REORGANIZE EXCHANGE ANALYZE CHECK OPTIMIZE REBUILD REPAIR REMOVE "
    "UPGRADE PARTITION".split()
)


class _NotModelled(Exception):
    """The tokens leave the grammar modelled here."""


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str  # as written
    value: str  # the identifier's name for QUOTED, else text
    start: int  # offsets in the normalised statement text (_Context.code)
    end: int


@dataclass(frozen=True)
class _Column:
    name: str
    data_type: str
    not_null: bool
    primary: bool


@dataclass(frozen=True)
class _Index:
    name: str
    columns: list[str]


@dataclass
class _Context:
    statement: str
    code: str  # the statement's tokens, comments removed, single spaces between
    default_db: str
    describe: ColumnDescriber | None
    tables: list[tuple[str, str]] = field(default_factory=list)  # table names read so far

    def text(self, toks: list[_Tok]) -> str:
        """The normalised source text spanned by toks."""
        return self.code[toks[0].start : toks[-1].end]


def _kind(ttype: Any, text: str) -> str:
    """Token kind of text, which sqlparse lexed as ttype."""
    if ttype in T.Punctuation:
        return _PUNCT
    if text[0] in '`"':
        return _QUOTED
    if ttype in T.Number or not (text[0].isalnum() or text[0] == "_"):
        return _OTHER
    return _WORD


def _code_tokens(sql: str) -> Iterator[tuple[str, str, bool]]:
    """Yield (kind, text, preceded_by_space) for sql's code, executable comments included, other comments not."""
    spaced = False
    while sql:
        rest, pos, comment_end = "", 0, -1
        for ttype, value in sqlparse.lexer.tokenize(sql):
            start, pos = pos, pos + len(value)
            if start < comment_end:  # inside a '#' comment
                if pos > comment_end:  # a token (say 'string) runs past the comment's end: lex again from there
                    rest = sql[comment_end:]
                    break
                continue
            if ttype in T.Comment or ttype in T.Whitespace:
                executable = _EXECUTABLE_COMMENT.fullmatch(value) if ttype in T.Comment else None
                if executable:
                    yield from _code_tokens(f" {executable.group(1)} ")
                spaced = True
                continue
            hash_at = -1 if value.startswith(("`", "'", '"')) else value.find("#")
            if hash_at >= 0:  # MySQL '#' comment to the end of the line; sqlparse only knows "# "
                newline = sql.find("\n", start + hash_at)
                comment_end, value = (newline if newline >= 0 else len(sql)), value[:hash_at]
            if value:
                parts = value.split() if _kind(ttype, value) == _WORD else [value]  # sqlparse joins "NOT NULL"
                for n, part in enumerate(parts):
                    yield _kind(ttype, part), part, spaced or n > 0
                spaced = False
        sql = rest


def _lex(sql: str) -> tuple[list[_Tok], str]:
    """Tokens of the first statement in sql and the normalised text their offsets refer to."""
    toks: list[_Tok] = []
    pieces: list[str] = []
    size = 0
    for kind, text, spaced in _code_tokens(sql):
        if kind == _PUNCT and text == ";":
            if toks:
                break
            continue
        if spaced and toks:
            pieces.append(" ")
            size += 1
        value = text[1:-1].replace(text[0] * 2, text[0]) if kind == _QUOTED else text
        toks.append(_Tok(kind, text, value, size, size + len(text)))
        pieces.append(text)
        size += len(text)
    return toks, "".join(pieces)


def _split(toks: list[_Tok]) -> list[list[_Tok]]:
    """Split toks at commas outside parentheses."""
    items: list[list[_Tok]] = [[]]
    depth = 0
    for tok in toks:
        if tok.kind == _PUNCT:
            if tok.text == "(":
                depth += 1
            elif tok.text == ")":
                depth = max(depth - 1, 0)
            elif tok.text == "," and depth == 0:
                items.append([])
                continue
        items[-1].append(tok)
    return items


def _word(tok: _Tok) -> str:
    """The upper-cased text of an unquoted word, else ""."""
    return tok.text.upper() if tok.kind == _WORD else ""


class _Cursor:
    """A position in a token list with the look-ahead and consume steps the grammar needs."""

    def __init__(self, toks: list[_Tok], ctx: _Context) -> None:
        self.toks = toks
        self.ctx = ctx
        self.i = 0

    def sub(self, toks: list[_Tok]) -> _Cursor:
        return _Cursor(toks, self.ctx)

    def done(self) -> bool:
        return self.i >= len(self.toks)

    def finish(self) -> None:
        if not self.done():
            raise _NotModelled

    def at(self, *words: str, k: int = 0) -> bool:
        """Whether the token k ahead is an unquoted word among words (case-insensitive)."""
        j = self.i + k
        return j < len(self.toks) and _word(self.toks[j]) in words

    def at_seq(self, *words: str) -> bool:
        return all(self.at(word, k=n) for n, word in enumerate(words))

    def at_punct(self, char: str) -> bool:
        return not self.done() and self.toks[self.i].kind == _PUNCT and self.toks[self.i].text == char

    def accept(self, *words: str) -> bool:
        """Consume words if they come next, in this order."""
        if self.at_seq(*words):
            self.i += len(words)
            return True
        return False

    def accept_any(self, *words: str) -> bool:
        """Consume the next token if it is one of words."""
        if self.at(*words):
            self.i += 1
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            raise _NotModelled

    def next(self) -> _Tok:
        if self.done():
            raise _NotModelled
        self.i += 1
        return self.toks[self.i - 1]

    def ident(self) -> str:
        tok = self.next()
        if tok.kind not in (_WORD, _QUOTED):
            raise _NotModelled
        return tok.value

    def table(self) -> tuple[str, str]:
        """Read ``[db.]table``; an unqualified name is in the session's database."""
        name = self.ident()
        if self.at_punct("."):
            self.i += 1
            qualified = (name, self.ident())
        else:
            qualified = (self.ctx.default_db, name)
        self.ctx.tables.append(qualified)
        return qualified

    def group(self) -> list[_Tok]:
        """Consume a parenthesised group and return the tokens inside it."""
        if not self.at_punct("("):
            raise _NotModelled
        depth = 0
        for j in range(self.i, len(self.toks)):
            tok = self.toks[j]
            if tok.kind == _PUNCT and tok.text in ("(", ")"):
                depth += 1 if tok.text == "(" else -1
                if depth == 0:
                    inner, self.i = self.toks[self.i + 1 : j], j + 1
                    return inner
        raise _NotModelled

    def rest(self) -> list[_Tok]:
        toks, self.i = self.toks[self.i :], len(self.toks)
        return toks

    def skip_wait(self) -> None:
        """Skip MariaDB's ``WAIT n | NOWAIT``."""
        if not self.accept("NOWAIT") and self.accept("WAIT"):
            self.next()


def _table_ref(db: str, table: str) -> dict[str, str]:
    """The payload's reference to a table."""
    return {"dbname": db, "tablename": table}


def _data_type(c: _Cursor) -> str:
    """Read a column type, lower-cased, without spaces in its parentheses or charset/collation."""
    first = c.next()
    if first.kind != _WORD:
        raise _NotModelled
    words = [first.text.lower()]
    while c.at(*_TYPE_WORDS) and not c.at("SET", k=1):
        words.append(c.next().text.lower())
    text = " ".join(words)
    if c.at_punct("("):
        text += "(" + "".join(t.text.lower() if t.kind == _WORD else t.text for t in c.group()) + ")"
    while c.at(*_TYPE_FLAGS):
        text += " " + c.next().text.lower()
    return text


def _column(c: _Cursor) -> _Column:
    """Read ``name type [attributes]``."""
    name = c.ident()
    data_type = _data_type(c)
    words: list[str] = []  # the attributes' top-level words, "" for anything else
    while not c.done():
        if c.at_punct("("):
            c.group()
        else:
            words.append(_word(c.next()))
    attributes = f" {' '.join(words)} "
    not_null = " NOT NULL " in attributes or " SERIAL DEFAULT VALUE " in attributes or data_type == "serial"
    primary = any(word == "KEY" and before != "UNIQUE" for before, word in zip([""] + words, words))
    return _Column(name, data_type, not_null, primary)


def _key_columns(c: _Cursor) -> list[str | None]:
    """Read ``(key_part, ...)``: each part's column, None for a functional part."""
    parts = [c.sub(item) for item in _split(c.group())]
    return [None if part.at_punct("(") else part.ident() for part in parts]


def _index(c: _Cursor) -> _Index | None:
    """Read an index definition; None for other constraints (foreign key, check, period)."""
    symbol = None
    if c.accept("CONSTRAINT") and not c.at("PRIMARY", "UNIQUE", "FOREIGN", "CHECK"):
        symbol = c.ident()
    if c.accept("PRIMARY", "KEY"):
        name: str | None = "PRIMARY"
    elif c.accept_any("UNIQUE", "FULLTEXT", "SPATIAL", "INDEX", "KEY"):
        c.accept_any("INDEX", "KEY")
        c.accept("IF", "NOT", "EXISTS")
        name = symbol if c.at_punct("(") or c.at("USING") else c.ident()
    else:
        return None
    if c.accept("USING"):
        c.next()
    parts = _key_columns(c)
    # MySQL names an unnamed index after its first column
    return _Index(name or parts[0] or "functional_index", [part for part in parts if part])


def _definition(c: _Cursor) -> _Column | _Index | None:
    """Read one item of a CREATE TABLE body or of ALTER TABLE ADD."""
    if c.at(*_INDEX_WORDS) or c.at_seq("PERIOD", "FOR"):
        return _index(c)
    return _column(c)


def _starts_query(toks: list[_Tok]) -> bool:
    """Whether a parenthesised group holds a query rather than column definitions."""
    return bool(toks) and (_word(toks[0]) in ("SELECT", "WITH") or toks[0].text == "(")


def _has_query(c: _Cursor) -> bool:
    """Whether the rest of a CREATE TABLE has a ``[AS] SELECT ...`` part."""
    while not c.done():
        if c.at_punct("("):
            if _starts_query(c.group()):
                return True
        elif c.accept_any("SELECT", "AS"):
            return True
        else:
            c.next()
    return False


def _create_table(cur: _Cursor) -> DdlChange:
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
    query = _starts_query(body_toks) or _has_query(cur)
    if not body_toks and not query:
        raise _NotModelled  # a table needs columns
    columns, key = ([], []) if _starts_query(body_toks) else _columns(body)
    data: dict[str, Any] = {"NEW": columns, "primary_key": key} if key else {"NEW": columns}
    data["SQL"] = ctx.statement
    if query:
        data["SELECT"] = True
    return DdlChange("CREATETABLE", db, table, data)


def _columns(body: _Cursor) -> tuple[list[dict[str, str]], list[str]]:
    """The CREATETABLE column dicts of a CREATE TABLE body and its primary key's columns in key order."""
    columns: list[_Column] = []
    key: list[str] = []
    for item in _split(body.rest()):
        definition = _definition(body.sub(item)) if item else None
        if isinstance(definition, _Column):
            columns.append(definition)
            if definition.primary:
                key = [definition.name]
        elif isinstance(definition, _Index) and definition.name == "PRIMARY":
            key = definition.columns
    names = {column.name.casefold(): column.name for column in columns}
    key = [names.get(name.casefold(), name) for name in key]  # as the column definition spells it
    primary = {name.casefold() for name in key}
    result = []
    for column in columns:
        in_key = column.name.casefold() in primary
        result.append({
            "field_name": column.name,
            "nullable": "No" if column.not_null or in_key else "Yes",
            "primary_key": "Yes" if in_key else "No",
            "data_type": column.data_type,
        })
    return result, key


def _continues(clause: list[_Tok], item: list[_Tok]) -> bool:
    """Whether item continues the column or partition list of an ``ORDER BY`` or ``... PARTITION`` clause."""
    head = [_word(tok) for tok in clause[:2]]
    listing = head == ["ORDER", "BY"] or head[1:] == ["PARTITION"]
    return listing and _word(item[0]) not in _ALTER_VERBS and not any(tok.text == "=" for tok in item)


def _alter_table(cur: _Cursor) -> DdlChange:
    """``... [IF EXISTS] t [WAIT n | NOWAIT] clause, ...``; a lone RENAME clause makes a RENAME row."""
    ctx = cur.ctx
    cur.accept("IF", "EXISTS")
    db, table = cur.table()
    cur.skip_wait()
    clauses: list[list[_Tok]] = []
    for item in _split(cur.rest()):
        if clauses and item and _continues(clauses[-1], item):
            clauses[-1] = clauses[-1] + item
        elif item:
            clauses.append(item)
    found: dict[str, list[Any]] = {key: [] for key in _ALTER_KEYS}
    for clause in clauses:
        try:
            entries = _alter_spec(cur.sub(clause), db, table)
        except _NotModelled:
            entries = [("OTHERS", ctx.text(clause))]
        for key, entry in entries:
            found[key].append(entry)
    data: dict[str, Any] = {key: values for key, values in found.items() if values}
    data["SQL"] = ctx.statement
    if set(data) == {"RENAME", "SQL"}:
        return DdlChange("RENAME", db, table, data)
    return DdlChange("ALTERTABLE", db, table, data)


def _alter_spec(c: _Cursor, db: str, table: str) -> list[tuple[str, Any]]:
    """Model one ALTER TABLE clause as (payload key, entry) pairs; raise _NotModelled for OTHERS."""
    if c.accept("ADD"):
        return _alter_add(c)
    if c.accept("DROP"):
        return _alter_drop(c)
    modify = c.accept("MODIFY")
    if modify or c.accept("CHANGE"):
        c.accept("COLUMN")
        c.accept("IF", "EXISTS")
        origin = None if modify else c.ident()
        column = _column(c)
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
    raise _NotModelled


def _alter_add(c: _Cursor) -> list[tuple[str, Any]]:
    """Model ``ADD [COLUMN] [IF NOT EXISTS] {definition | (definition, ...)}``."""
    c.accept("COLUMN")
    c.accept("IF", "NOT", "EXISTS")
    if c.at("PARTITION") or c.at_seq("SYSTEM", "VERSIONING"):
        raise _NotModelled
    entries: list[tuple[str, Any]] = []
    for item in _split(c.group()) if c.at_punct("(") else [c.rest()]:
        definition = _definition(c.sub(item))
        if isinstance(definition, _Column):
            entries.append(("ADDCOLUMN", {"field_name": definition.name, "data_type": definition.data_type}))
        elif definition:
            entries.append(("ADDINDEX", {"index_name": definition.name, "column_name": definition.columns}))
        else:
            raise _NotModelled
    return entries


def _alter_drop(c: _Cursor) -> list[tuple[str, Any]]:
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


def _create_index(cur: _Cursor) -> DdlChange:
    """``... [IF NOT EXISTS] i [USING type] ON t (key_part, ...)`` as an ALTERTABLE ADDINDEX."""
    cur.accept("IF", "NOT", "EXISTS")
    name = cur.ident()
    if cur.accept("USING"):
        cur.next()
    cur.expect("ON")
    db, table = cur.table()
    columns = [part for part in _key_columns(cur) if part]
    data = {"ADDINDEX": [{"index_name": name, "column_name": columns}], "SQL": cur.ctx.statement}
    return DdlChange("ALTERTABLE", db, table, data)


def _drop_index(cur: _Cursor) -> DdlChange:
    """``... [ONLINE | OFFLINE] [IF EXISTS] i ON t`` as an ALTERTABLE DROPINDEX."""
    cur.accept_any("ONLINE", "OFFLINE")
    cur.accept("IF", "EXISTS")
    name = cur.ident()
    cur.expect("ON")
    db, table = cur.table()
    return DdlChange("ALTERTABLE", db, table, {"DROPINDEX": [name], "SQL": cur.ctx.statement})


def _rename_table(cur: _Cursor) -> list[DdlChange]:
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


def _per_table(cur: _Cursor) -> list[tuple[str, list[_Tok]]]:
    """The comma-separated items of a multi-table statement, each with the statement's text for it alone:
    the original text when there is one item, else the leading keywords and the item's own text."""
    items = _split(cur.rest())
    if len(items) == 1:
        return [(cur.ctx.statement, items[0])]
    head = cur.ctx.code[: items[0][0].start] if items[0] else ""
    return [(head + cur.ctx.text(item) if item else "", item) for item in items]


def _truncate(cur: _Cursor) -> DdlChange:
    """``... t``: TRUNCATE rows carry no payload."""
    db, table = cur.table()
    cur.skip_wait()
    cur.finish()
    return DdlChange("TRUNCATE", db, table, {})


def _drop_table(cur: _Cursor) -> list[DdlChange]:
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


def _create_sequence(cur: _Cursor) -> DdlChange:
    """``... [IF NOT EXISTS] s [options]`` as the CREATETABLE of the sequence's one-row table."""
    cur.accept("IF", "NOT", "EXISTS")
    db, table = cur.table()
    return DdlChange("CREATETABLE", db, table, {"NEW": [dict(column) for column in SEQUENCE_COLUMNS],
                                                "SQL": cur.ctx.statement})


def _alter_sequence(cur: _Cursor) -> DdlChange:
    """``... [IF EXISTS] s options``: a change of the sequence's values, not of its columns (OTHERS)."""
    cur.accept("IF", "EXISTS")
    cur.table()
    raise _NotModelled


Parser = Callable[[_Cursor], DdlChange | list[DdlChange]]


def _handler(cur: _Cursor) -> Parser | None:
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
        cur.accept("IGNORE")
        if cur.accept("SEQUENCE"):
            return _alter_sequence
        return _alter_table if cur.accept("TABLE") else None
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
    A table statement that cannot be modelled becomes ``ALTERTABLE {"OTHERS": [statement]}``.
    """
    toks, code = _lex(statement)
    ctx = _Context(statement, code, default_db, describe)
    cur = _Cursor(toks, ctx)
    handler = _handler(cur)
    if handler is None:
        return []
    try:
        changes = handler(cur)
    except _NotModelled:
        db, table = ctx.tables[0] if ctx.tables else (default_db, "")
        return [DdlChange("ALTERTABLE", db, table, {"OTHERS": [statement], "SQL": statement})]
    return changes if isinstance(changes, list) else [changes]


def statement_kind(statement: str) -> str:
    """The statement's first keyword, with the next one after CREATE, SET and the like (``CREATE USER``):
    what can be logged of a statement whose text may hold a password. Never a quoted name or a literal."""
    toks = _lex(statement)[0]
    words = [_word(tok) for tok in toks[:2]]
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
    toks, code = _lex(statement)
    cur = _Cursor(toks, _Context(statement, code, default_db, None))
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
    except _NotModelled:
        pass
    return cur.ctx.tables


def _table_refs(cur: _Cursor) -> None:
    """Read the table names of a table reference list (joins, ``USING`` too) up to the clause that ends it."""
    expecting = True
    while not cur.done() and not cur.at(*_DML_STOP):
        if expecting and cur.at_punct("("):
            inner = cur.group()
            if not _starts_query(inner):
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
