"""Materialise: the current image of every captured table as Delta tables, kept up to date incrementally.

The image (see spark_readers.image for its layout and how readers find it) records its watermark,
the last row applied. An update applies only the rows after it, read from the increments
spark_readers.load wrote (:func:`materialise`), from the DC with format("gate")
(:func:`materialise_channel`), or a streaming query's micro-batches (:class:`ImageUpdater`), and gives
the image a rebuild from the whole history would give. The history is applied in id order, by
primary key:

- INSERT and UPDATE make the row's image their NEW image; DELETE removes the key; an UPDATE whose OLD
  key differs from its NEW key also removes the OLD key (a primary-key change moves the row);
- TRUNCATE clears the table; DROPTABLE removes it; RENAME carries it (rows, columns, key) to the new
  name; a CREATETABLE of a name in use replaces the table (CREATE OR REPLACE);
- ALTERTABLE: ADDCOLUMN, DROPCOLUMN and CHANGECOLUMN (renames) change the columns, ADDINDEX/DROPINDEX
  ``PRIMARY`` the key. The image has the columns of the table's latest definition: dropped columns
  are gone; a column added after a row's last change holds the column's DEFAULT for that row, taken
  from the ALTER statement when it is a literal (a number, a string or NULL; implicit defaults of NOT
  NULL integer, decimal and text columns too), else NULL, with a warning. ADD ... FIRST/AFTER
  positions are not in the payload: added columns come last. CHANGE/MODIFY retype the column
  (spark_readers.image_types: stored values kept when the change widens them exactly, else NULL with
  their text in ``_invalid``). Other statements (OTHERS) do not change the image.
- SNAPSHOTSTART empties the table and sets its columns and key (those of the snapshot; with no key the
  whole row is the identity); SNAPSHOT rows upsert like INSERT; SNAPSHOTEND(done) marks the table
  complete, SNAPSHOTEND(cancelled) leaves it incomplete (what was read and streamed).

The primary key of a table comes from its CREATETABLE row when the history has one, else from
``keys={"db.table": ["col", ...]}`` (by the table's latest name); tables with neither are skipped and
reported. The columns of a table without CREATETABLE in the history are those of its latest row image,
changed by the DDL after it.

Columns are typed (spark_readers.image_types, the typed stream's mapping) with the channel's
:class:`~spark_readers.typed_rows.Typing`, kept in the image: for each table whose column types the
history defines (CREATETABLE or SNAPSHOTSTART, then ALTERTABLE); the others, and every table of an
image without typing, have string columns, the DC's text.

Only the few DDL rows are brought to the driver, which works out each table's timeline, starting from
the stored image's tables; the new rows are matched to it with a broadcast join and reduced per key
in Spark. A table whose rows the update only changes (no DDL, no TRUNCATE or snapshot) gets one
Delta MERGE of its changed keys (a deleted key is deleted, a live one inserted or updated; made by the
driver with delta-rs for a small update of an image on the local file system: spark_readers.driver_commits);
any other table that changed is rewritten (a Delta overwrite: its stored rows whose key the new rows do not
touch, kept by an anti-join, and the new ones); a table no new row or DDL touched keeps its version.

Each VERIFY row the update applies is checked against the image it commits (spark_readers.image_verify); the
outcome is kept in the image's state, and ``materialise_job(..., heal=True)`` rebuilds an image that differs.
"""

from __future__ import annotations

import argparse
import functools
import logging
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType

from gate.common.columns import parse_keys
from gate.common.errors import GateError, MaterialiseError
from spark_readers import driver_commits, image_verify
from spark_readers.delta_jars import CRC_CHECK_ON_NON_UTC, require_delta, with_deletion_vectors
from spark_readers.image import STATE, Commit, Image, ImageStore, TableImage, committed, committing
from spark_readers.image_types import (
    ALIVE,
    IDENTITY,
    INVALID,
    KEY,
    column,
    converted,
    for_delta,
    identity,
    key_column,
    quoted,
    stored_columns,
)
from spark_readers.load import CURSOR_FILE, OutputDir, read_cursor, read_increments
from spark_readers.rows import ROW_OPTYPES
from spark_readers.session import SNAPSHOT_PARTITIONS, session_conf, spark_job
from spark_readers.source import Channel, settings
from spark_readers.timeline import TableLife, backward, forward, keyed, timeline
from spark_readers.typed import channel_typing
from spark_readers.typed_rows import TypedTable, Typing

log = logging.getLogger(__name__)

BROADCAST_KEYS = 1_000_000  # changed keys of a table up to which the stored rows are filtered by a broadcast join
SMALL_UPDATE = 1_000_000  # rows after the watermark per core up to which an update shuffles in _partitions() partitions
# Rows per partition, at most, of what an update caches (:func:`_partitions`): materialise_channel's read of the history
# (in more partitions than the source's ``partitions`` when needed) and each changed key's last change (one partition
# per core at least, whatever the session's shuffle settings). A rebuild of a 3,000,000-row history on local[2] ran
# out of the driver's default 1 GB heap with the history in 2 or 4 partitions, or the keys in 2; in 12 of each it
# took 43.4 s (scripts/bench/image.py, median of 3). Nor are the keys left in Spark's 200 shuffle partitions: the
# rebuild then writes 200 files (1,000,000 rows: 24.7 s against 15.8 s, median of 2). A rebuild of 1,000,000 rows
# with the history and the keys in 4 partitions each (4 files) took what it took with 2 (14.5 s against 14.4 s,
# median of 3).
PARTITION_ROWS = 250_000


@dataclass(frozen=True)
class Materialised:
    tables: dict[str, int]  # "db.table" -> rows written
    skipped: dict[str, str]  # "db.table" -> why it was not written
    verified: dict[str, dict[str, Any]] = field(default_factory=dict)  # the image's checks (spark_readers.image_verify)

    @property
    def differs(self) -> bool:
        return any(state["differing"] for state in self.verified.values())


_SEGMENTS = StructType([StructField("table", IntegerType()), StructField("epoch", IntegerType()),
                        StructField("seg_db", StringType()), StructField("seg_table", StringType()),
                        StructField("lo", LongType()), StructField("hi", LongType()),
                        StructField("pk", ArrayType(StringType()))])


def _identity(image: Column) -> Column:
    """A row's key values in ``pk`` order; with ``pk`` [] all its values, by column name."""
    columns = F.when(F.size("pk") > 0, F.col("pk")).otherwise(F.array_sort(F.map_keys(image)))
    return F.transform(columns, lambda c: F.element_at(image, c))


def _partitions(rows: int, least: int) -> int:
    """Partitions for ``rows`` rows: one per :data:`PARTITION_ROWS`, ``least`` at least."""
    return max(least, -(-rows // PARTITION_ROWS))


def _latest_per_key(rows: DataFrame, segments: DataFrame, partitions: int) -> DataFrame:
    """Per (table, key), in ``partitions`` partitions: the last event (id, epoch, alive, image, columns) for each key
    a row touched."""
    matched = rows.join(F.broadcast(segments), (rows.dbname == segments.seg_db) & (rows.tablename == segments.seg_table)
                        & (rows.id > segments.lo) & (rows.id < segments.hi))
    image = F.when(F.col("optype") == "DELETE", F.col("old")).otherwise(F.col("new"))
    key = _identity(image)
    old_key = _identity(F.col("old"))
    event = F.struct(key.alias("key"), (F.col("optype") != "DELETE").alias("alive"), image.alias("image"))
    gone = F.struct(old_key.alias("key"), F.lit(False).alias("alive"), F.lit(None).cast("map<string,string>").alias("image"))
    moved = (F.col("optype") == "UPDATE") & (old_key != key)
    events = matched.select("table", "epoch", "id", "columns",
                            F.explode(F.when(moved, F.array(event, gone)).otherwise(F.array(event))).alias("e"))
    events = events.select("table", "epoch", "id", "columns", "e.*").repartition(partitions, "table", "key")
    last = F.max_by(F.struct("id", "epoch", "alive", "image", "columns"), "id")
    return events.groupBy("table", "key").agg(last.alias("last")).select("table", "key", "last.*")


def _column(names: list[dict[str, str]], defaults: dict[str, str | None], column: str) -> Column:
    """A final column's value: by the epoch of the row's last image, the column's name then, or its default
    if it was added later."""
    value: Column = F.lit(None).cast("string")
    for epoch, mapping in enumerate(names):
        source = F.element_at("image", F.lit(mapping[column])) if column in mapping else F.lit(defaults.get(column))
        value = F.when(F.col("epoch") == epoch, source).otherwise(value)
    return value.cast("string").alias(column)


def _typed(table: TableLife, final: list[str], typing: Typing | None, carried: TableImage | None) -> TypedTable | None:
    """The table's typed form: when the image is typed, the history defines the table's column types and
    its stored rows, if kept, are typed too; else None (string columns)."""
    schema = table.schema
    if typing is None or schema is None or (carried is not None and carried.types is None):
        return None
    folded = [c.casefold() for c in final]
    if [c.casefold() for c, _ in schema] != folded or INVALID in folded:
        return None
    return for_delta(typing.table(table.name, tuple(zip(final, (kind for _, kind in schema)))))


def _stored_typed(table: TableLife, typed: TypedTable) -> tuple[TypedTable, list[str]]:
    """The stored image of a typed table as a TypedTable, and the columns of its rows' identity."""
    stored = table.stored
    assert stored is not None and stored.types is not None
    return replace(typed, columns=tuple(zip(stored.columns, stored.types))), stored.key or sorted(stored.columns)


def _stored_rows(spark: SparkSession, store: ImageStore, table: TableLife, final: list[str], names: dict[str, str],
                 defaults: dict[str, str | None], changed: DataFrame, typed: TypedTable | None) -> DataFrame:
    """The rows of the table's stored image that the history after it leaves alone, in ``final`` columns
    (typed as ``typed``, then ``_invalid``, when the table is typed)."""
    assert table.stored is not None
    stored = table.stored
    rows = spark.read.format("delta").option("versionAsOf", stored.version).load(store.url(stored.path))
    if typed is None:
        identity = F.array(*[column(c) for c in (stored.key or sorted(stored.columns))])
        columns = [(column(names[c]) if c in names else F.lit(defaults.get(c)).cast("string")).alias(c)
                   for c in final]
    else:
        identity = F.struct(*[column(c).alias(key_column(i)) for i, c in enumerate(_stored_typed(table, typed)[1])])
        columns = stored_columns(rows.schema, typed, names, defaults)
    return rows.withColumn(IDENTITY, identity).join(changed, IDENTITY, "left_anti").select(*columns)


def _changed_keys(latest: DataFrame, table: TableLife, typed: TypedTable | None) -> DataFrame:
    """The keys the update's rows touch (:data:`IDENTITY`), comparable with :func:`_stored_rows`' identities."""
    keys = latest.filter(F.col("table") == table.key).select(F.col("key").alias(KEY))
    if typed is None:
        return keys.select(column(KEY).alias(IDENTITY))
    stored, columns = _stored_typed(table, typed)
    return converted(keys, None, identity(stored, columns)).select(
        F.struct(*[column(key_column(i)) for i in range(len(columns))]).alias(IDENTITY))


def _changes(latest: DataFrame, table: TableLife, names: list[dict[str, str]], defaults: dict[str, str | None],
             final: list[str], typed: TypedTable | None, key: list[str]) -> DataFrame:
    """The changed keys' rows for MERGE: the columns, the values of ``key`` (:func:`key_column` columns) and
    :data:`ALIVE`."""
    text = latest.filter(F.col("table") == table.key).select(*[_column(names, defaults, c) for c in final],
                                                              F.col("key").alias(KEY), F.col("alive").alias(ALIVE))
    if typed is None:
        return text.select(*[column(c) for c in final], *[column(KEY)[i].alias(key_column(i))
                                                          for i in range(len(key))], column(ALIVE))
    frame = converted(text, typed, identity(typed, key), [ALIVE])
    return frame.select(*[column(c) for c in final], INVALID, *[column(key_column(i)) for i in range(len(key))],
                        column(ALIVE))


def update_image(spark: SparkSession, out_path: str, rows_after: Callable[[int], DataFrame], through: tuple[int, int],
                 channel: str | None = None, keys: dict[str, list[str]] | None = None, full: bool = False,
                 rebuild: bool = True, typing: Typing | None = None) -> Materialised:
    """Bring the image in ``out_path`` to row ``through`` = (id, tid): apply ``rows_after(watermark)`` (the
    parsed rows after the stored image's watermark, up to ``through``) to it. Tables are typed with
    ``typing`` (the channel's settings), else with the image's; with neither, their columns are strings.
    With no image, with ``full``, or when ``keys`` or ``typing`` differ from the image's, the image is
    rebuilt from ``rows_after(0)`` (refused when ``rebuild`` is False: the caller has only the newest rows)."""
    keys = keys or {}
    store = ImageStore(spark, out_path)
    before = store.current(channel)
    stored_typing = (Typing(before.typing["timezone"], before.typing["binary_format"], tuple(before.typing["as_text"]))
                     if before is not None and before.typing else None)
    typing = typing or stored_typing
    start = before if before is not None and not full and before.keys == keys and stored_typing == typing else None
    if before is not None and start is None and not full:
        change = (f"other keys ({before.keys}) than {keys}" if before.keys != keys else
                  f"other column types ({stored_typing or 'strings'}) than {typing}")
        if not rebuild:
            raise MaterialiseError(f"{out_path} was built with {change}: rebuild it from the whole history "
                                   "(gate spark-materialise --full).")
        log.info("rebuilding the image in %s from the whole history: it was built with %s", out_path, change)
    watermark = start.watermark["id"] if start else 0
    if start is not None and through[0] <= watermark:
        return Materialised({name: t.rows for name, t in start.tables.items()}, dict(start.skipped), start.verified)
    generation = before.generation + (start is None) if before is not None else 0
    commit = Commit(f"gate-image:{generation}", through, channel)
    # An image's Delta logs are small: each replay (at a MERGE, an overwrite, a commit) is faster in one task than in
    # one per core (an update of the 200,000-row benchmark image on local[2]: 3.45 s against 4.21 s, median of 4).
    # An update of few rows (SMALL_UPDATE per core) shuffles them in one partition per core, not 200 (a MERGE took
    # 14.6 s against 47.9 s; reducing the 1,000,000-row benchmark's 10,000 new rows to their keys 0.3 s against
    # 0.9 s), without adaptive execution, which then has nothing to coalesce and only adds a job per query stage
    # (4.16 s against 4.75 s, median of 5); past PARTITION_ROWS per core, in one partition per PARTITION_ROWS. A
    # rebuild or a larger update keeps the session's shuffle settings.
    # Outside UTC, commits check their checksum's file list at checkpoints only, as in UTC
    # (spark_readers.delta_jars.CRC_CHECK_ON_NON_UTC).
    conf, cores, new = {SNAPSHOT_PARTITIONS: "1"}, spark.sparkContext.defaultParallelism, through[0] - watermark
    if spark.conf.get(CRC_CHECK_ON_NON_UTC, None) is None:
        conf[CRC_CHECK_ON_NON_UTC] = "false"
    if start is not None and new <= SMALL_UPDATE * cores:
        conf.update({"spark.sql.shuffle.partitions": str(_partitions(new, cores)),
                     "spark.sql.adaptive.enabled": "false"})
    with session_conf(spark, conf):
        with store.warmed():  # the state's snapshot is read while the tables are written
            rows = rows_after(watermark)
            cached = rows.is_cached  # ImageUpdater's micro-batch is: the rows are not cached twice
            history = rows.filter(F.col("id") > watermark)
            history = history if cached else history.persist()
            try:
                # An update's rows follow its watermark; a build's may start well after id 0 (a stream's first
                # micro-batch), so they are counted (the count fills the cache the build reads next).
                count = new if start is not None else history.count()
                image = _apply(spark, store, commit, history, start, keys, typing, _partitions(count, cores),
                               start is not None and new <= driver_commits.DRIVER_MERGE_ROWS)
            finally:
                if not cached:
                    history.unpersist()
        image.generation = generation
        store.publish(image, commit)
    return Materialised({name: t.rows for name, t in image.tables.items()}, dict(image.skipped), image.verified)


def _merge(spark: SparkSession, url: str, stored: TableImage, changes: DataFrame, commit: Commit) -> None:
    """MERGE the changed keys (their values in :func:`key_column` columns; :data:`ALIVE` False: deleted) into the
    Delta table at ``url``, matched column by column (an equi-join, whatever the key columns' types)."""
    matched = functools.reduce(Column.__and__, [
        F.col(f"t.{quoted(c)}").eqNullSafe(F.col(f"s.{quoted(key_column(i))}"))
        for i, c in enumerate(stored.key or sorted(stored.columns))])
    values: dict[str, str | Column] = {quoted(c): F.col(f"s.{quoted(c)}") for c in stored.columns}
    alive = F.col(f"s.{quoted(ALIVE)}")
    with committing(spark, commit):
        (DeltaTable.forPath(spark, url).alias("t").merge(changes.alias("s"), matched)
         .whenMatchedDelete(condition=~alive).whenMatchedUpdate(condition=alive, set=values)
         .whenNotMatchedInsert(condition=alive, values=values).execute())


def _home(table: TableLife) -> str:
    """The folder a table's latest name gives: DB/TABLE, and DB~2/TABLE for a database named like the image's
    state (:data:`STATE`), whose tables would be inside the state's Delta table (a VACUUM of the state would
    delete their files)."""
    db, name = table.epochs[-1].name
    return f"{db}~2/{name}" if db == STATE else f"{db}/{name}"


def _folder(table: TableLife, taken: set[str]) -> str:
    """The folder of a table written anew: its stored one when that is :func:`_home` or _home~N (a table that
    found its home taken keeps the folder it got), else :func:`_home`, or that with ~N when another table of
    the image has it."""
    base = _home(table)
    own = table.stored.path if table.stored else None
    if own is not None and re.fullmatch(rf"{re.escape(base)}(~[0-9]+)?", own):
        return own
    path, serial = base, 1
    while path in taken:
        serial += 1
        path = f"{base}~{serial}"
    return path


def _apply(spark: SparkSession, store: ImageStore, commit: Commit, history: DataFrame, start: Image | None,
           keys: dict[str, list[str]], typing: Typing | None, partitions: int, driver: bool) -> Image:
    """Commit the tables the history changes, each as one Delta commit of ``commit``; the image that names
    them. The keys' last changes are cached in ``partitions`` partitions. With ``driver``, a MERGE into a table
    on the local file system is made by the driver (spark_readers.driver_commits) when the table is small enough."""
    skipped: dict[str, str] = {}
    tables_of = timeline(history, start)
    live = keyed(tables_of, keys, skipped)
    segments = spark.createDataFrame(
        [(t.key, i, *e.name, max(e.lo, t.floor), e.hi, e.pk) for t in live for i, e in enumerate(t.epochs)
         if max(e.lo, t.floor) < e.hi], _SEGMENTS)
    rows = history.filter(F.col("optype").isin(*ROW_OPTYPES))
    latest = _latest_per_key(rows, segments, partitions).persist()
    @functools.cache
    def stats() -> dict[int, Row]:
        """Per table touched: its changed keys (``touched``) and its last row's epoch and columns (``last``);
        one Spark job, run only for a table that needs them (a MERGE needs neither)."""
        return {r.table: r for r in latest.groupBy("table").agg(
            F.count("*").alias("touched"), F.max_by(F.struct("epoch", "columns"), "id").alias("last")).collect()}

    tables: dict[str, TableImage] = {}
    taken = {t.stored.path for t in live if t.stored}
    for table in live:
        final = table.columns
        if final is None and table.key in stats():
            epoch, columns = stats()[table.key].last
            final = list(columns)
            for later in table.epochs[epoch + 1:]:
                final = forward(final, later.ops)
        if final is None:
            skipped[table.name] = "its columns are unknown: no CREATE TABLE and no row in the history"
            continue
        names, defaults = backward(table, final)
        carried = table.stored if table.floor == 0 else None
        pk = list(table.epochs[-1].pk or [])
        typed = _typed(table, final, typing, carried)
        types = [kind for _, kind in typed.columns] if typed else None
        same = (carried is not None and names[0] == {c: c for c in carried.columns} == {c: c for c in final}
                and carried.types == types)
        # A table of one epoch is touched when the history has rows of its name (its epoch is the whole history)
        touched = (table.epochs[0].name in tables_of.written if len(table.epochs) == 1 else table.key in stats())
        if carried and same and not touched:
            tables[table.name] = TableImage(carried.path, final, pk, carried.rows, table.complete, table.snapshot,
                                            carried.version, types)
            continue  # no row and no column changed (perhaps renamed): the stored version stays the image
        key = pk or sorted(final)
        if carried and same and len(table.epochs) == 1:  # only rows changed: MERGE them
            url, local = store.url(carried.path), store.local_path(carried.path) if driver else None
            changes = _changes(latest, table, names, defaults, final, typed, key)
            stored = (carried.version, carried.rows)
            made = (driver_commits.merge(local, key, changes, commit.app_id, commit.watermark[0], commit.metadata,
                                         stored) if local is not None else None)
            if made is None:
                with_deletion_vectors(spark, url)
                _merge(spark, url, replace(carried, columns=[*final, INVALID], key=key) if typed else carried,
                       changes, commit)
                made = committed(spark, url, commit, stored)
            version, count = made
            tables[table.name] = TableImage(carried.path, final, pk, count, table.complete, table.snapshot, version,
                                            types)
            continue
        frame = latest.filter(F.col("alive") & (F.col("table") == table.key)).select(
            *[_column(names, defaults, c) for c in final])
        frame = converted(frame, typed) if typed else frame
        if carried:
            changed = _changed_keys(latest, table, typed)
            if table.key not in stats() or stats()[table.key].touched <= BROADCAST_KEYS:  # no shuffle of the stored rows
                changed = F.broadcast(changed)
            frame = _stored_rows(spark, store, table, final, names[0], defaults, changed, typed).unionByName(frame)
        path = _folder(table, taken)
        taken.add(path)
        url = store.url(path)
        with_deletion_vectors(spark, url)
        (frame.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
         .options(**commit.writer_options()).save(url))
        version, count = committed(spark, url, commit)
        tables[table.name] = TableImage(path, final, pk, count, table.complete, table.snapshot, version, types)
    checks = image_verify.check(
        spark, store.url, tables, [image_verify.Verify(i, ".".join(name), info) for i, name, info in tables_of.verifies],
        {".".join(name): ids for name, ids in tables_of.barriers.items()},
        image_verify.later_keys(latest, {t.name: t.key for t in live}), asdict(typing) if typing else None)
    latest.unpersist()
    # A table skipped before stays reported until an update images it: here, one the history does not name
    named = {epoch.name for table in tables_of.tables for epoch in table.epochs}
    skipped = {**{name: why for name, why in (start.skipped if start else {}).items()
                  if tuple(name.split(".", 1)) not in named}, **skipped}
    return Image(commit.channel, {"id": commit.watermark[0], "tid": commit.watermark[1]}, keys, tables, skipped,
                 typing=asdict(typing) if typing else None,
                 verified=image_verify.merged(start.verified if start else {}, checks))


def read_typing(options: dict[str, str]) -> Typing:
    """The typing of the channel that ``options`` (of ``format("gate")``) name, from its settings in the DC."""
    login = settings(options).login
    with Channel(login) as dc:
        return channel_typing(dc.conn, login)


def materialise(spark: SparkSession, increments: str, out_path: str, channel: str | None = None,
                keys: dict[str, list[str]] | None = None, full: bool = False,
                typing: Typing | None = None) -> Materialised:
    """Bring the image in ``out_path`` up to the rows loaded into ``increments`` (by spark_readers.load);
    ``channel``: the increments' (their cursor names it) unless given; ``typing``: the channel's
    (:func:`read_typing`), else the image's, else string columns."""
    out = OutputDir(spark, increments)
    cursor = read_cursor(out, channel)
    channel = channel or (out.read_json(CURSOR_FILE) or {}).get("channel")
    return update_image(spark, out_path, lambda after: read_increments(spark, increments, channel, after),
                        (cursor.id, cursor.tid), channel, keys, full, typing=typing)


def materialise_channel(spark: SparkSession, options: dict[str, str], out_path: str,
                        keys: dict[str, list[str]] | None = None, full: bool = False) -> Materialised:
    """Bring the image in ``out_path`` up to the channel's checkpoint, reading the rows after its watermark
    from the DC with ``format("gate")`` (``options``: the source's options; the read has their ``partitions`` at
    least, more when the rows need them: at most :data:`PARTITION_ROWS` rows per partition)."""
    given = settings(options)
    with Channel(given.login) as dc:
        end = dc.checkpoint()
        through = (end, dc.tid(end))
        typing = channel_typing(dc.conn, given.login)
    source = {k: v for k, v in options.items() if k.lower() not in ("startingid", "endingid", "partitions")}

    def rows_after(after: int) -> DataFrame:
        partitions = _partitions(end - after, given.partitions)
        return (spark.read.format("gate").options(**source).option("startingId", after + 1)
                .option("endingId", end).option("partitions", partitions).load())

    return update_image(spark, out_path, rows_after, through, given.login.channel, keys, full, typing=typing)


def materialise_job(spark: SparkSession, source: dict[str, str], out_path: str, increments: str | None = None,
                    keys: dict[str, list[str]] | None = None, full: bool = False, heal: bool = False) -> Materialised:
    """The image job of ``gate spark-materialise`` and ``python -m spark_readers.materialise`` (also under
    spark-submit): the image in ``out_path`` of the channel ``source`` names (the options of ``format("gate")``),
    typed with the channel's settings, brought up to its checkpoint from the DC, or with ``increments`` up to
    the rows spark_readers.load loaded there. With ``heal``, an image whose VERIFY checks found a chunk that
    differs (this update's or an earlier one's) is rebuilt from the whole history, which checks the history's
    VERIFY rows again."""
    require_delta(spark)

    def run(rebuild: bool) -> Materialised:
        if increments is None:
            return materialise_channel(spark, source, out_path, keys, rebuild)
        return materialise(spark, increments, out_path, settings(source).login.channel, keys, rebuild,
                           typing=read_typing(source))

    result = run(full)
    if heal and result.differs and not full:
        log.warning("healing the image in %s: it differs from the source in %s; rebuilding it from the whole history",
                    out_path, ", ".join(sorted(n for n, v in result.verified.items() if v["differing"])))
        result = run(True)
    return result


class ImageUpdater:
    """A ``foreachBatch`` function that applies each micro-batch of a ``format("gate")`` stream to the image
    in ``out_path``::

        stream.writeStream.foreachBatch(ImageUpdater("/data/shop_now", "shop", source=options)) \
            .option("checkpointLocation", "/data/shop_now.checkpoint").start()

    ``source`` (the stream's options) lets it read the channel's typing (:func:`read_typing`) once; without
    it, the image's typing is used, else columns are strings. Exactly once: a batch Spark replays after a
    crash holds rows at or below the image's watermark and changes nothing. The stream must continue the
    image: start it at the row after the watermark (``startingId``); a batch that leaves a gap after the
    watermark is refused. A session without Delta Lake is refused when the updater is made in it, or at its
    first micro-batch (spark_readers.delta_jars.require_delta).
    """

    def __init__(self, out_path: str, channel: str | None = None, keys: dict[str, list[str]] | None = None,
                 source: dict[str, str] | None = None) -> None:
        if (active := SparkSession.getActiveSession()) is not None:
            require_delta(active)
        self.out_path = out_path
        self.channel = channel
        self.keys = keys or {}
        self.source = source
        self.typing: Typing | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            bounds = batch.agg(F.min("id"), F.max("id"), F.max_by("tid", "id")).first()
            if bounds is None or bounds[0] is None:
                return
            first, last, tid = bounds
            spark = batch.sparkSession
            before = ImageStore(spark, self.out_path).current(self.channel)
            if before is not None and first - 1 > before.watermark["id"]:
                raise MaterialiseError(
                    f"Micro-batch {batch_id} starts at row {first}, but the image in {self.out_path} holds rows up "
                    f"to {before.watermark['id']} only: start the stream at startingId={before.watermark['id'] + 1} "
                    "(with a new checkpointLocation), or rebuild the image with gate spark-materialise --full.")
            if self.source is not None and self.typing is None:
                self.typing = read_typing(self.source)
            update_image(spark, self.out_path, lambda after: batch, (int(last), int(tid)), self.channel, self.keys,
                         rebuild=before is None, typing=self.typing)
        finally:
            batch.unpersist()


def main(argv: list[str] | None = None) -> None:
    """``python -m spark_readers.materialise CHANNEL --out DIR [--increments DIR]``: the image job of ``gate
    spark-materialise`` (:func:`materialise_job`); the DC server comes from gate's config.yaml."""
    parser = argparse.ArgumentParser(prog="spark_readers.materialise", description=main.__doc__)
    parser.add_argument("channel")
    parser.add_argument("--out", required=True, help="the image directory (created or updated)")
    parser.add_argument("--increments", help="the output directory of spark_readers.load [default: read the "
                        "channel in the DC]")
    parser.add_argument("--key", action="append", default=[], help="DB.TABLE=COL[,COL...] (repeatable)")
    parser.add_argument("--full", action="store_true", help="rebuild from the whole history")
    parser.add_argument("--heal", action="store_true", help="rebuild from the whole history when a VERIFY row "
                        "shows the image differs from the source")
    parser.add_argument("--config", help="gate's config.yaml [default: $GATE_CONFIG, else ./config.yaml]")
    parser.add_argument("--master", help="Spark master URL [default: spark-submit's, else local[2]]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    source = {"channel": args.channel, **({"config": args.config} if args.config else {})}
    try:
        with spark_job(args.master) as spark:
            result = materialise_job(spark, source, args.out, args.increments, parse_keys(args.key), args.full,
                                     args.heal)
    except GateError as exc:
        sys.exit(f"error: {exc}")
    for table, count in sorted(result.tables.items()):
        print(f"{table}: {count} rows")
    for table, reason in sorted(result.skipped.items()):
        print(f"skipped {table}: {reason}", file=sys.stderr)
    for line in image_verify.describe(result.verified, f"python -m spark_readers.materialise {args.channel} "
                                                            f"--out {args.out} --heal"):
        print(line, file=sys.stderr)
    if result.differs:
        sys.exit(image_verify.DIFFERENT)


if __name__ == "__main__":
    main()
