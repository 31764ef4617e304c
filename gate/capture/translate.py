"""Translate: binlog items to contract rows (dbname, tablename, optype, data JSON), and filters.

Pure apart from the optional ``describe`` callback that CREATE TABLE ... LIKE uses to learn the
columns of the table it copies.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import tzinfo
from fnmatch import fnmatchcase
from functools import partial
from typing import Any

from gate.capture.ddl import ColumnDescriber, parse_ddl
from gate.capture.reader import Rows, Statement
from gate.capture.values import BinaryFormat, ImageRenderer

log = logging.getLogger(__name__)

Change = tuple[str, str, str, str]  # dbname, tablename, optype, data (JSON text)

dumps = partial(json.dumps, ensure_ascii=False, separators=(",", ":"))


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


class Translator:
    """Turns row events and DDL statements into :data:`Change` tuples, in binlog order."""

    def __init__(self, tz: tzinfo, binary_format: BinaryFormat, table_filter: TableFilter,
                 describe: ColumnDescriber | None = None) -> None:
        self.tz = tz
        self.binary_format = binary_format
        self.filter = table_filter
        self.describe = describe
        self._renderers: dict[int, tuple[Any, ImageRenderer]] = {}  # id(table) -> (table, its renderer)

    def _renderer(self, event: Any) -> ImageRenderer:
        """One renderer per TableMap (the library makes a new Table object for each). Kept here, not on
        the library's Table, which the reader's process pickles for the decoders (renderers do not pickle)."""
        table = event.table_map[event.table_id]
        known = self._renderers.get(id(table))
        if known is not None and known[0] is table:
            return known[1]
        if len(self._renderers) >= 64:
            self._renderers.clear()
        renderer = ImageRenderer(event.columns, self.tz, self.binary_format)
        self._renderers[id(table)] = (table, renderer)
        return renderer

    def rows(self, item: Rows) -> Sequence[Change]:
        event = item.event
        db, table = event.schema, event.table
        if not self.filter.passes(db, table):
            return ()
        image = self._renderer(event).image_json  # the text dumps({"NEW": ...}) would give, built directly
        optype = item.optype
        if optype == "INSERT":
            return [(db, table, optype, '{"NEW":' + image(r["values"], r["none_sources"]) + "}") for r in event.rows]
        if optype == "DELETE":
            return [(db, table, optype, '{"OLD":' + image(r["values"], r["none_sources"]) + "}") for r in event.rows]
        return [
            (db, table, optype, '{"NEW":' + image(r["after_values"], r["after_none_sources"])
             + ',"OLD":' + image(r["before_values"], r["before_none_sources"]) + "}")
            for r in event.rows
        ]

    def statement(self, item: Statement) -> Change | None:
        change = parse_ddl(item.sql, item.schema, self.describe)
        if change is None:
            log.info("not a table change, no row: %.200s", item.sql)
            return None
        if not self.filter.passes(change.dbname, change.tablename):
            return None
        return (change.dbname, change.tablename, change.optype, dumps(change.data))
