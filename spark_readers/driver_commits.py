"""An update's small commits made by the driver with delta-rs (``deltalake``), for images on the local file system.

An update of a few rows spends its time in Spark's fixed costs, not in its rows: Delta Lake's MERGE on Spark
runs some 14 small jobs and replays the table's log (about 2.5 s on local[2], whether 10 rows or 10,000), and
the state's overwrite some more. When the image is on the driver's local file system (``file:``), an update of
at most :data:`DRIVER_MERGE_ROWS` rows after the watermark brings each table's changed keys to the driver as
Arrow (they were reduced to one row per key in Spark) and MERGEs them with delta-rs into each table that
:func:`merge` takes; the commit of an existing state (an update's or a rebuild's) is the driver's too
(:func:`overwrite`). Everything else (a larger update, a table :func:`merge` leaves, an image on HDFS or an
object store, a table rewritten by DDL, a first build) goes through Spark, as does any commit delta-rs fails
to make: the error is logged and Spark's path makes the commit, or skips it if delta-rs made it before failing.

The commits are those Spark would make: the same idempotent-write application id and version (each Delta
``txn``), the same ``userMetadata``, the same rows. delta-rs does not skip a write its ``txn`` made already:
:func:`overwrite` checks it first, and :func:`merge` leaves a table that changed since the image's version
(a killed update's commit) to Spark's path, which skips a commit made as always. delta-rs writes no deletion
vectors: it copies each file that holds a changed key, without the changed rows (it honours the deletion
vectors Spark wrote), so a table's files are kept small
(:data:`DRIVER_MERGE_BYTES`): the copy must cost less than Spark's fixed costs, and the files it replaces
stay on disk for time travel until a VACUUM. A table is checkpointed every ``delta.checkpointInterval``
versions (10 by default), as Spark does (delta-rs's own hook would at 100).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction, write_deltalake
from pyspark.sql import DataFrame

from spark_readers.image_types import ALIVE, key_column

log = logging.getLogger(__name__)
T = TypeVar("T")

# New rows (after the watermark) up to which an update MERGEs on the driver: their changed keys, one Arrow row
# each, are held by the driver. 10,000 new rows of the benchmark's 6-column table are 7,000 keys, 1 MB.
DRIVER_MERGE_ROWS = 200_000
# A table's Parquet files up to which it is MERGEd on the driver. delta-rs copies every file holding a changed key
# (with keys spread over the table, all of them): on local[2], 1 % of 606,000 random keys into 9 MB of files took
# 0.17 s, 1 % of 2,000,000 (30 MB) 0.43 s, of 6,000,000 (90 MB) 1.4 s. The copies' old files stay until a VACUUM,
# so this also bounds what an update adds to the disk: 32 MiB, against some 2.5 s of fixed cost for Spark's MERGE.
DRIVER_MERGE_BYTES = 32 << 20
# delta-rs 1.6 writes a decimal's min and max into a file's statistics as a double: a value of more digits than a
# double holds exactly is rounded there (1234567890123456.78 as 1234567890123456.75), and Spark, skipping files by
# those statistics, would miss rows of a filter on it. Tables with wider decimals are Spark's to write.
EXACT_DIGITS = 15
# Operations whose commits change no row of a table (Spark's and delta-rs's names).
ROWS_KEPT = frozenset({"VACUUM START", "VACUUM END", "OPTIMIZE", "SET TBLPROPERTIES"})
# The table features of an image's tables, which delta-rs 1.6 writes. A table with any other (row tracking or
# domain metadata that a cluster's defaults turn on, say: delta-rs refuses to commit to those) is Spark's to write.
WRITER_FEATURES = frozenset({"appendOnly", "invariants", "deletionVectors", "timestampNtz"})


def _quoted(name: str) -> str:
    """``name`` as a delta-rs (DataFusion SQL) identifier, whatever its case and characters."""
    return '"' + name.replace('"', '""') + '"'


def _writable(table: DeltaTable) -> bool:
    """Whether the table's protocol asks nothing of a writer beyond :data:`WRITER_FEATURES`."""
    protocol = table.protocol()
    if protocol.min_writer_version < 7:  # before table features: 3 and up add constraints, CDF, column mapping...
        return protocol.min_writer_version <= 2
    return set(protocol.writer_features or ()) <= WRITER_FEATURES


def _exact_statistics(table: DeltaTable) -> bool:
    """Whether delta-rs writes the statistics of every column exactly: no decimal wider than :data:`EXACT_DIGITS`."""
    return not any(pa.types.is_decimal(f.type) and f.type.precision > EXACT_DIGITS
                   for f in pa.schema(table.schema().to_arrow()))


def _made(table: DeltaTable, app_id: str, version: int) -> bool:
    """Whether the table holds the idempotent write ``app_id`` at ``version`` (or a later one) already."""
    done = table.transaction_version(app_id)
    return done is not None and done >= version


def _attempt(what: str, path: str, step: Callable[[], T]) -> T | None:
    """``step()``, a delta-rs read or commit; None when delta-rs fails (logged): Spark's path then makes the commit,
    or skips it if delta-rs made it before failing."""
    try:
        return step()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # delta-rs's errors, and a panic of its Rust code (pyo3's PanicException)
        log.warning("delta-rs failed at %s in %s, so Spark's path commits it (or finds it made): %s: %s", what, path,
                    type(exc).__name__, exc)
        return None


def _checkpoint(table: DeltaTable) -> None:
    """A checkpoint of the table at every ``delta.checkpointInterval``-th version (10 unless the table sets it), as
    Spark writes them (delta-rs's own hook, off in :func:`_hooks`, keeps to 100). A checkpoint that fails is logged:
    the commit is made, and readers replay the log's commits instead."""
    try:
        if table.version() % int(table.metadata().configuration.get("delta.checkpointInterval") or 10) == 0:
            table.create_checkpoint()
    except Exception as exc:
        log.warning("delta-rs failed to checkpoint %s at version %s: %s", table.table_uri, table.version(), exc)


def _hooks() -> PostCommitHookProperties:
    return PostCommitHookProperties(create_checkpoint=False)


def rows_kept(operations: Iterable[str]) -> bool:
    """Whether commits of these operations leave a table's rows as they were (VACUUM, OPTIMIZE, a table property):
    a row count from before them holds after them."""
    return set(operations) <= ROWS_KEPT


def _properties(app_id: str, version: int, metadata: str) -> CommitProperties:
    return CommitProperties(custom_metadata={"userMetadata": metadata},
                            app_transactions=[Transaction(app_id, version)])


def _arrow(changes: DataFrame) -> pa.Table:
    """The changes as Arrow, timestamps in UTC (Spark gives them in the session's zone: the same instants)."""
    table = changes.toArrow()
    fields = [f.with_type(pa.timestamp(f.type.unit, "UTC")) if pa.types.is_timestamp(f.type) and f.type.tz else f
              for f in table.schema]
    return table.cast(pa.schema(fields))


def _mergeable(path: str, stored_version: int) -> DeltaTable | None:
    """The table in ``path`` if the driver MERGEs into it: its rows are those of ``stored_version`` (later commits
    only VACUUM, OPTIMIZE or set properties; one of a killed update changed them: Spark's path counts them), its
    features delta-rs writes, its decimals at most :data:`EXACT_DIGITS` wide, its files at most
    :data:`DRIVER_MERGE_BYTES`."""
    table = DeltaTable(path)
    later = table.version() - stored_version
    if later < 0 or (later and not rows_kept(h["operation"] for h in table.history(later))):
        return None
    if not _writable(table) or not _exact_statistics(table):
        return None
    size = pc.sum(pa.table(table.get_add_actions())["size_bytes"]).as_py() or 0
    return table if size <= DRIVER_MERGE_BYTES else None


def merge(path: str, key: list[str], changes: DataFrame, app_id: str, version: int, metadata: str,
          stored: tuple[int, int]) -> tuple[int, int] | None:
    """MERGE ``changes`` (the table's columns, the ``key`` columns' values as :func:`key_column` columns, and
    :data:`ALIVE`) into the Delta table in the local folder ``path``, whose ``stored`` (version, rows) the
    image holds: a deleted key is deleted, a live one updated or inserted; one commit, the idempotent write
    ``app_id`` at ``version`` with ``metadata`` as its userMetadata. The table's new version and rows; None when
    :func:`_mergeable` refuses the table (nothing committed) or delta-rs fails (Spark's path then commits, or
    finds the commit made). Spark's errors (computing ``changes``) are raised."""
    table = _attempt("reading the table", path, lambda: _mergeable(path, stored[0]))
    if table is None:
        return None
    rows = _arrow(changes)
    source = [key_column(i) for i in range(len(key))]
    matched = " AND ".join(f"(t.{_quoted(c)} IS NOT DISTINCT FROM s.{_quoted(k)})" for c, k in zip(key, source))
    alive = f"s.{_quoted(ALIVE)}"
    # each column by name (delta-rs's update_all and insert_all quote names with backticks, and fail on one)
    values = {_quoted(c): f"s.{_quoted(c)}" for c in rows.column_names if c not in (*source, ALIVE)}
    metrics = _attempt("a MERGE", path, lambda: (
        table.merge(rows, matched, source_alias="s", target_alias="t", streamed_exec=False,
                    commit_properties=_properties(app_id, version, metadata), post_commithook_properties=_hooks())
        .when_matched_delete(f"NOT {alive}").when_matched_update(values, alive)
        .when_not_matched_insert(values, alive).execute()))
    if metrics is None:
        return None
    _checkpoint(table)
    return table.version(), stored[1] + metrics["num_target_rows_inserted"] - metrics["num_target_rows_deleted"]


def overwrite(path: str, rows: pa.Table, app_id: str, version: int, metadata: str) -> bool:
    """Replace the rows of the Delta table in the local folder ``path`` with ``rows``: one commit, the idempotent
    write ``app_id`` at ``version``, skipped when the table holds that write already. False when the table has
    features beyond :data:`WRITER_FEATURES` (nothing committed) or delta-rs fails (Spark's path then commits,
    or finds the commit made)."""
    def commit() -> DeltaTable | None:
        table = DeltaTable(path)
        if not _writable(table):
            return None
        if not _made(table, app_id, version):
            write_deltalake(table, rows, mode="overwrite", commit_properties=_properties(app_id, version, metadata),
                            post_commithook_properties=_hooks())
        return table

    table = _attempt("the state", path, commit)  # write_deltalake brings the table object to its new version
    if table is None:
        return False
    _checkpoint(table)
    return True
