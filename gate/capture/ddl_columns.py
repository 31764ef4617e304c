"""Column models of DDL statements: column definitions, indexes and the CREATETABLE column dicts."""
from __future__ import annotations

from dataclasses import dataclass

from gate.capture.ddl_tokens import WORD, Cursor, NotModelled, split_items, word

SEQUENCE_COLUMNS = tuple(
    {"field_name": name, "nullable": "No", "primary_key": "No", "data_type": data_type}
    for name, data_type in [
        ("next_not_cached_value", "bigint(21)"), ("minimum_value", "bigint(21)"), ("maximum_value", "bigint(21)"),
        ("start_value", "bigint(21)"), ("increment", "bigint(21)"), ("cache_size", "bigint(21) unsigned"),
        ("cycle_option", "tinyint(1) unsigned"), ("cycle_count", "bigint(21)"),
    ]
)
"""The columns of the table behind every MariaDB sequence, as ``CREATE SEQUENCE`` makes it."""

_INDEX_WORDS = ("CONSTRAINT", "PRIMARY", "UNIQUE", "INDEX", "KEY", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK")
_TYPE_WORDS = ("PRECISION", "VARYING", "CHAR", "CHARACTER", "VARCHAR", "VARBINARY")  # DOUBLE PRECISION, ...
_TYPE_FLAGS = ("UNSIGNED", "SIGNED", "ZEROFILL")


@dataclass(frozen=True)
class Column:
    """A column definition: its name, its type as written (lower-cased) and the attributes the payload uses."""

    name: str
    data_type: str
    not_null: bool
    primary: bool
    period: str = ""  # "START" or "END" for a system-versioned table's GENERATED ALWAYS AS ROW START/END column
    versioned: bool = False  # WITH SYSTEM VERSIONING as a column attribute: the table is versioned


@dataclass(frozen=True)
class Index:
    """An index definition: its name and the columns of its key parts (functional parts left out)."""

    name: str
    columns: list[str]


def _data_type(c: Cursor) -> str:
    """Read a column type, lower-cased, without spaces in its parentheses or charset/collation."""
    first = c.next()
    if first.kind != WORD:
        raise NotModelled
    words = [first.text.lower()]
    while c.at(*_TYPE_WORDS) and not c.at("SET", k=1):
        words.append(c.next().text.lower())
    text = " ".join(words)
    if c.at_punct("("):
        text += "(" + "".join(t.text.lower() if t.kind == WORD else t.text for t in c.group()) + ")"
    while c.at(*_TYPE_FLAGS):
        text += " " + c.next().text.lower()
    return text


def column_definition(c: Cursor) -> Column:
    """Read ``name type [attributes]``."""
    name = c.ident()
    data_type = _data_type(c)
    words: list[str] = []  # the attributes' top-level words, "" for anything else
    while not c.done():
        if c.at_punct("("):
            c.group()
        else:
            words.append(word(c.next()))
    attributes = f" {' '.join(words)} "
    not_null = " NOT NULL " in attributes or " SERIAL DEFAULT VALUE " in attributes or data_type == "serial"
    primary = any(word == "KEY" and before != "UNIQUE" for before, word in zip([""] + words, words))
    period = "START" if " AS ROW START " in attributes else "END" if " AS ROW END " in attributes else ""
    return Column(name, data_type, not_null or bool(period), primary, period,
                  " WITH SYSTEM VERSIONING " in attributes)


def key_columns(c: Cursor) -> list[str | None]:
    """Read ``(key_part, ...)``: each part's column, None for a functional part."""
    parts = [c.sub(item) for item in split_items(c.group())]
    return [None if part.at_punct("(") else part.ident() for part in parts]


def _index(c: Cursor) -> Index | None:
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
    parts = key_columns(c)
    # MySQL names an unnamed index after its first column
    return Index(name or parts[0] or "functional_index", [part for part in parts if part])


def read_definition(c: Cursor) -> Column | Index | None:
    """Read one item of a CREATE TABLE body or of ALTER TABLE ADD."""
    if c.at(*_INDEX_WORDS) or c.at_seq("PERIOD", "FOR"):
        return _index(c)
    return column_definition(c)



_IMPLICIT_PERIOD = (Column("row_start", "timestamp(6)", True, False, "START"),
                    Column("row_end", "timestamp(6)", True, False, "END"))
"""The period columns MariaDB adds to a system-versioned table that does not name its own."""


def table_columns(body: Cursor, versioned: bool = False) -> tuple[list[dict[str, str]], list[str]]:
    """The CREATETABLE column dicts of a CREATE TABLE body and its primary key's columns in key order.

    A system-versioned table (``versioned``: WITH SYSTEM VERSIONING among the table options; or a column's)
    has its period columns (MariaDB's implicit ``row_start`` and ``row_end`` when it names none), every one
    in the row images, and its key ends with the ROW END column: a row's history rows share its other key
    columns, so without it the key would not name one row."""
    columns: list[Column] = []
    key: list[str] = []
    for item in split_items(body.rest()):
        definition = read_definition(body.sub(item)) if item else None
        if isinstance(definition, Column):
            columns.append(definition)
            if definition.primary:
                key = [definition.name]
        elif isinstance(definition, Index) and definition.name == "PRIMARY":
            key = definition.columns
    if versioned or any(column.versioned for column in columns):
        if not any(column.period for column in columns):
            columns += _IMPLICIT_PERIOD
        end = next(column.name for column in columns if column.period == "END")
        if key and end.casefold() not in {name.casefold() for name in key}:
            key = [*key, end]
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
