"""The DDL of a channel's DC database, versioned.

``contract.sql`` holds the two public tables; ``internal.sql`` holds gate's own state. A DC database
records its schema version in ``gate_meta``; gate opens databases whose version is in
``COMPATIBLE_VERSIONS`` and refuses others with a clear message. ``vN.sql`` holds the statements that
bring a database of version N-1 to version N (see :func:`gate.common.dc.migrate`).
"""

from __future__ import annotations

import re
from importlib import resources

SCHEMA_VERSION = 2
COMPATIBLE_VERSIONS = frozenset({1, 2})  # older ones are migrated to SCHEMA_VERSION
CONTRACT_TABLES = ("transfer_data", "transfer_checkpoint")


def _statements(filename: str) -> list[str]:
    text = resources.files(__name__).joinpath(filename).read_text(encoding="utf-8")
    text = re.sub(r"^\s*--.*$", "", text, flags=re.MULTILINE)
    return [s.strip() for s in re.split(r";\s*$", text, flags=re.MULTILINE) if s.strip()]


def table_ddl(table: str) -> str:
    """The CREATE TABLE IF NOT EXISTS of one table, e.g. to add it to a channel created before it existed."""
    return next(s for s in ddl_statements() if re.match(rf"CREATE TABLE IF NOT EXISTS {table} \(", s))


def migration(version: int) -> list[str]:
    """The statements that bring a channel database of ``version - 1`` to ``version``."""
    return _statements(f"v{version}.sql")


def ddl_statements() -> list[str]:
    """Every CREATE TABLE of a channel database, contract tables first."""
    return _statements("contract.sql") + _statements("internal.sql")
