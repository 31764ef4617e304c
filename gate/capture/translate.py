"""Translate: binlog items to contract rows (dbname, tablename, optype, data JSON), and filters.

Pure apart from the optional ``describe`` callback that CREATE TABLE ... LIKE uses to learn the
columns of the table it copies.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from fnmatch import fnmatchcase
from functools import partial
from typing import Any, NoReturn, TypeVar

from gate.capture.compiled import TableDecoder, build, columns_shape
from gate.capture.ddl import DdlChange, dml_tables, parse_ddl, statement_kind, unlogged_tables
from gate.capture.ddl_tokens import ColumnDescriber
from gate.capture.libshim import row_data
from gate.capture.reader import Rows, Statement
from gate.capture.values import BinaryFormat, ImageRenderer
from gate.common.columns import ColumnRule, Transform, chain, matching, rule_keys
from gate.common.errors import ColumnRuleRefused, PartialRowImage, RowMetadataMissing, StatementFormatChange

log = logging.getLogger(__name__)

Change = tuple[str, str, str, str]  # dbname, tablename, optype, data (JSON text)
Decoded = tuple[str, str, str, bytes]  # a Change as the decoder processes hand it over: data in UTF-8

dumps = partial(json.dumps, ensure_ascii=False, separators=(",", ":"))


_full_bitmaps: dict[int, bytes] = {}


def _full_bitmap(columns: int) -> bytes:
    """The columns-present bitmap of a row image that has all ``columns`` columns."""
    bitmap = _full_bitmaps.get(columns)
    if bitmap is None:
        bitmap = _full_bitmaps[columns] = ((1 << columns) - 1).to_bytes((columns + 7) // 8, "little")
    return bitmap


@dataclass(frozen=True)
class TableFilter:
    """Whitelist and blacklist of ``db.table`` patterns (``*`` and ``?`` wildcards).

    A table passes when the allow list is empty or one allow pattern matches, and no deny pattern
    matches. Matching is case-sensitive, as table names are on Linux servers.
    """

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_cache", {})

    def passes(self, dbname: str, tablename: str) -> bool:
        cache: dict[tuple[str, str], bool] = self._cache  # type: ignore[attr-defined]
        key = (dbname, tablename)
        verdict = cache.get(key)
        if verdict is None:
            name = f"{dbname}.{tablename}"
            verdict = (not self.allow or any(fnmatchcase(name, p) for p in self.allow)) and not any(
                fnmatchcase(name, p) for p in self.deny
            )
            cache[key] = verdict
        return verdict


T = TypeVar("T")


def _per_table_map(cache: dict[int, tuple[Any, T]], event: Any, build: Callable[[], T]) -> T:
    """``build()`` once per TableMap of ``event`` (the library makes a new Table object for each, so its
    identity tells a new one; at most 64 are kept)."""
    table = event.table_map[event.table_id]
    known = cache.get(id(table))
    if known is not None and known[0] is table:
        return known[1]
    if len(cache) >= 64:
        cache.clear()
    value = build()
    cache[id(table)] = (table, value)
    return value

class Translator:
    """Turns row events and DDL statements into :data:`Change` tuples, in binlog order.

    With ``compiled``, row events are decoded by :mod:`gate.capture.compiled` (the decoder processes'
    way); tables and events it does not cover, and every row event without it, are decoded by the
    library and rendered by :class:`ImageRenderer`. Both give the same text."""

    def __init__(self, tz: tzinfo, binary_format: BinaryFormat, table_filter: TableFilter,
                 describe: ColumnDescriber | None = None, position: Callable[[], str] = lambda: "unknown",
                 rules: Sequence[ColumnRule] = (), compiled: bool = False, channel: str = "CHANNEL") -> None:
        """``channel``: the channel's name, for the fixes messages give."""
        self.tz = tz
        self.channel = channel
        self.binary_format = binary_format
        self.filter = table_filter
        self.describe = describe
        self.position = position  # the binlog position of the event being translated, for error messages
        self._renderers: dict[int, tuple[Any, ImageRenderer]] = {}  # id(table) -> (table, its renderer)
        self._checked: dict[int, tuple[Any, object]] = {}  # the table maps the rules were checked against
        self.compiled = compiled
        self._decoders: dict[int, tuple[Any, TableDecoder | None]] = {}  # id(table) -> (table, its compiled decoder)
        self._shapes: dict[tuple[str, str, bytes], TableDecoder | None] = {}  # what a table map says -> its decoder
        self.rules: tuple[ColumnRule, ...] = ()
        self._keys: dict[str, bytes] = {}
        self.set_rules(rules)

    def set_rules(self, rules: Sequence[ColumnRule]) -> None:
        """Apply these column rules from the next row event on (their keys are read from the environment)."""
        rules = tuple(rules)
        if rules != self.rules:
            self._keys = rule_keys(rules)
            self.rules = rules
            self._renderers.clear()
            self._checked.clear()
            self._decoders.clear()
            self._shapes.clear()

    def _treatments(self, event: Any) -> list[tuple[bool, Transform | None]]:
        """Per column of a row event's table map: (excluded, value transform); a rule on a key column is refused."""
        treatments: list[tuple[bool, Transform | None]] = []
        for column in event.columns:
            hits = matching(self.rules, event.schema, event.table, column.name)
            if hits and column.is_primary:
                self._refuse_key_rule(event.schema, event.table, column.name, hits[0])
            excluded = any(rule.kind == "exclude" for rule in hits)
            treatments.append((excluded, None if excluded else chain(hits, self._keys)))
        return treatments

    def _refuse_key_rule(self, db: str, table: str, column: str, rule: ColumnRule) -> NoReturn:
        raise ColumnRuleRefused(
            f"The column rule {rule.describe()} hits {db}.{table}.{column}, a primary-key column (seen at binlog "
            f"position {self.position()}): row images must keep their key to stay identifiable, so gate stops "
            "rather than write them. Narrow or remove the rule ('gate channel columns NAME --clear', then add the "
            "rules back without this column) and start gate again.")

    def _renderer(self, event: Any) -> ImageRenderer:
        """One renderer per TableMap (the library makes a new Table object for each). Kept here, not on
        the library's Table, which the reader's process pickles for the decoders (renderers do not pickle)."""
        return _per_table_map(self._renderers, event, lambda: ImageRenderer(
            event.columns, self.tz, self.binary_format, self._treatments(event) if self.rules else ()))

    def _decoder(self, event: Any) -> TableDecoder | None:
        """The compiled decoder of the event's table map (None: a column type it does not cover). A
        decoder process gets new Table objects with every job; one that describes the same table the
        same way as an earlier one gets that one's decoder instead of compiling it again."""
        return _per_table_map(self._decoders, event, lambda: self._decoder_of_shape(event))

    def _decoder_of_shape(self, event: Any) -> TableDecoder | None:
        shape = (event.schema, event.table, columns_shape(event.columns))
        if shape not in self._shapes:
            if len(self._shapes) >= 256:
                self._shapes.clear()
            self._shapes[shape] = build(event.columns, self.tz, self.binary_format,
                                        self._treatments(event) if self.rules else (), f"{event.schema}.{event.table}")
        return self._shapes[shape]

    def check_metadata(self, item: Rows) -> None:
        """Refuse a row event (of a captured table) whose table map lacks the column names: logged with
        binlog_row_metadata below FULL, it also lacks the ENUM and SET labels and the primary key, and the
        library would name the columns UNKNOWN_COL0... (its check, the library's column_name_flag, is set
        only when it applied the table map's own names, charsets, signedness and labels)."""
        event = item.event
        if event.table_map[event.table_id].column_name_flag:
            return
        raise RowMetadataMissing(
            f"The binlog holds a table map of {event.schema}.{event.table} without column names (its row event "
            f"ends at binlog position {self.position()}): the source logged it with binlog_row_metadata below "
            "FULL (MINIMAL or NO_LOG), which leaves out the column names, ENUM and SET labels and primary key "
            "that gate needs to write the rows. Run SET GLOBAL binlog_row_metadata = 'FULL' (and "
            "binlog_row_metadata = FULL under [mysqld] in my.cnf). The transactions logged before that cannot "
            "be decoded, and gate stops at each of them: skip them one by one ('gate channel skip', once gate "
            "stops with the checkpoint at the transaction's start), or all at once by "
            f"moving the channel with 'gate channel set-position {self.channel} --file FILE --pos POS' (the first "
            "transaction logged after the change back, see SHOW BINLOG EVENTS), then snapshot the tables they "
            f"changed ('gate snapshot {self.channel} --table {event.schema}.{event.table}', and so on) so that the "
            "consumers' copy converges.", [(event.schema, event.table)])

    def check_image(self, item: Rows) -> None:
        """Refuse a row event (of a captured table) whose images lack columns: gate never fills them in."""
        event = item.event
        full = _full_bitmap(event.number_of_columns)
        if event.columns_present_bitmap == full and (
                item.optype != "UPDATE" or event.columns_present_bitmap2 == full):
            return
        raise PartialRowImage(
            f"A row event of {event.schema}.{event.table} ending at binlog position {self.position()} has a partial "
            "row image: some columns are missing, and gate would have to write them as NULL. A session set "
            "binlog_row_image to MINIMAL or NOBLOB (the global value may be FULL). Run SET GLOBAL "
            "binlog_row_image = 'FULL' (and binlog_row_image = FULL under [mysqld] in my.cnf) and keep "
            "applications from setting it per session.", [(event.schema, event.table)])

    def check_rules(self, item: Rows) -> None:
        """Refuse a row event whose table map shows a column rule hitting a primary-key column (checked
        once per table map, in the reader's process, before any of its rows is written)."""
        if self.rules:
            _per_table_map(self._checked, item.event, lambda: self._treatments(item.event))

    def rows(self, item: Rows) -> Sequence[Change]:
        event = item.event
        db, table = event.schema, event.table
        if not self.filter.passes(db, table):
            return ()
        optype = item.optype
        if self.compiled:
            decoder = self._decoder(event)
            texts = decoder.changes(event, *row_data(event)) if decoder is not None else None
            if texts is not None:
                return [(db, table, optype, text) for text in texts]
        image = self._renderer(event).image_json  # the text dumps({"NEW": ...}) would give, built directly
        if optype == "INSERT":
            return [(db, table, optype, '{"NEW":' + image(r["values"], r["none_sources"]) + "}") for r in event.rows]
        if optype == "DELETE":
            return [(db, table, optype, '{"OLD":' + image(r["values"], r["none_sources"]) + "}") for r in event.rows]
        return [
            (db, table, optype, '{"NEW":' + image(r["after_values"], r["after_none_sources"])
             + ',"OLD":' + image(r["before_values"], r["before_none_sources"]) + "}")
            for r in event.rows
        ]

    def statement(self, item: Statement) -> list[Change]:
        """The rows of a statement's captured tables. The statement text is never logged: it may hold a password."""
        changes = parse_ddl(item.sql, item.schema, self.describe)
        if not changes:
            tables = dml_tables(item.sql, item.schema)
            if tables is None:
                log.info("no row for a statement of kind %s", statement_kind(item.sql))
            else:  # DML on tables the filters exclude passes silently, as their row events do
                captured = [table for table in tables if self.filter.passes(*table)]
                if captured or not tables:
                    self._refuse_statement_dml(statement_kind(item.sql), captured)
        captured_changes = [change for change in changes if self._captured(change)]
        for change in captured_changes:
            if change.data.get("SELECT"):  # in row format the binlog has a plain CREATE TABLE and the rows
                self._refuse_statement_dml("CREATE TABLE ... SELECT", [(change.dbname, change.tablename)])
        return [(c.dbname, c.tablename, c.optype, dumps(self._ruled(c) if self.rules else c.data))
                for c in captured_changes]

    def _ruled(self, change: DdlChange) -> dict[str, Any]:
        """A CREATETABLE or ALTERTABLE payload without the columns the rules exclude (others pass as they are)."""
        if change.optype not in ("CREATETABLE", "ALTERTABLE"):
            return change.data
        db, table = change.dbname, change.tablename

        def excluded(name: str) -> bool:
            return any(rule.kind == "exclude" for rule in matching(self.rules, db, table, name))

        data = dict(change.data)
        if "NEW" in data:
            for column in data["NEW"]:
                hits = matching(self.rules, db, table, column["field_name"])
                if hits and column.get("primary_key") == "Yes":
                    self._refuse_key_rule(db, table, column["field_name"], hits[0])
            data["NEW"] = [column for column in data["NEW"] if not excluded(column["field_name"])]
        added = [c for c in data.get("ADDCOLUMN", ()) if not excluded(c["field_name"])]
        dropped = [name for name in data.get("DROPCOLUMN", ()) if not excluded(name)]
        changed = []
        for c in data.get("CHANGECOLUMN", ()):  # a rename across a rule's pattern adds or drops the column
            old, new = excluded(c["origin_field_name"]), excluded(c["field_name"])
            if old and not new:
                added.append({"field_name": c["field_name"], "data_type": c["data_type"]})
            elif new and not old:
                dropped.append(c["origin_field_name"])
            elif not old:
                changed.append(c)
        for key, entries in (("ADDCOLUMN", added), ("DROPCOLUMN", dropped), ("CHANGECOLUMN", changed)):
            if entries:
                data[key] = entries
            else:
                data.pop(key, None)
        if "SQL" in data:  # last, as in every statement payload
            data["SQL"] = data.pop("SQL")
        return data

    def _captured(self, change: DdlChange) -> bool:
        """Whether the change is about a captured table; a rename also when it gives a captured name, a
        statement that changes rows without row events also when it changes a captured table's."""
        if self.filter.passes(change.dbname, change.tablename):
            return True
        if any(self.filter.passes(*table) for table in unlogged_tables(change.data)):
            return True
        new = change.data["RENAME"][0]["to"] if change.optype == "RENAME" else None
        return new is not None and self.filter.passes(new["dbname"], new["tablename"])

    def _refuse_statement_dml(self, kind: str, tables: list[tuple[str, str]]) -> NoReturn:
        names = ", ".join(f"{db}.{table}" for db, table in dict.fromkeys(tables)) or "a table gate cannot name"
        raise StatementFormatChange(
            f"{names} changed by a statement ({kind}) logged as text at binlog position {self.position()} (the end "
            "of its event): gate needs the rows and cannot rebuild them from a statement. A session set "
            "binlog_format to STATEMENT or MIXED (the global value may be ROW). Run SET GLOBAL binlog_format = "
            "'ROW' (and binlog_format = ROW under [mysqld] in my.cnf) and keep applications from setting it per "
            "session.", list(dict.fromkeys(tables)))
