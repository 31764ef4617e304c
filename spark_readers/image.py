"""Table images on disk: one Delta Lake table per source table, and the image's state, a Delta table too.

Layout of an image directory ``OUT`` (a local path or any Hadoop file system URL)::

    OUT/_gate/        Delta table of one row, ``image``: the image's JSON (below); one commit per update
    OUT/DB/TABLE/     Delta table of one source table (a folder ``DB/TABLE~2`` when that name is taken, and
                      ``_gate~2/TABLE`` for a source database named ``_gate``)

The image's JSON is ``{"format": 3, "channel": C, "watermark": {"id": I, "tid": T}, "keys": {...},
"generation": G, "typing": {"timezone": Z, "binary_format": B, "as_text": [...]} | null, "tables":
{"db.table": {"path": "db/table", "version": V, "columns": [...], "types": [...] | null, "key": [...],
"rows": N, "complete": true|false, "snapshot": {"id": S, "state": "running"|"done"|"cancelled"} |
null}}, "skipped": {"db.table": "why"}, "verified": {"db.table": {"matched": M, "unchecked": U, "differing":
[...], "reasons": [...]}}}`` (``verified``: spark_readers.image_verify): every table as of the watermark is
the Delta ``version`` V of the table in ``path``. An update commits each table it changes (a MERGE of the changed keys, or an
overwrite), then the state: a reader of the state sees the old image or the new one, never a
half-written one (:func:`read_image`), and :func:`as_of` reads the image as of an earlier channel id.

Every commit of an update is an idempotent write of Delta: application id ``gate-image:G`` and
version I (the watermark's id), and the watermark as the commit's ``userMetadata`` (the state's commit
also carries the image's JSON there: an update reads it from the log without a Spark job). An update killed
at any point (kill -9) leaves the previous state current; the next one computes the same commits, and
Delta skips those that were made already. A rebuild (``generation`` G+1) has its own application id. On
the local file system, a small update's MERGEs and the state's commits are made by the driver with delta-rs
(spark_readers.driver_commits): the same commits, and a write made already is skipped there too.

Folders of tables that were dropped or renamed stay (older versions of the image read them), until
the image is rebuilt into a new directory. An image of an older gate (Parquet behind
``_gate_image.json``) is removed and rebuilt.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import deltalake
import pyarrow as pa
from delta.tables import DeltaTable
from pyspark import InheritableThread
from pyspark.sql import DataFrame, SparkSession

from gate.common.config import check_identifier
from gate.common.errors import MaterialiseError
from spark_readers import driver_commits
from spark_readers.delta_jars import image_table_options, require_delta
from spark_readers.load import OutputDir
from spark_readers.session import session_conf

log = logging.getLogger(__name__)

STATE = "_gate"
LEGACY = ("_gate_image.json", "_gate_materialised")  # the pointer or marker of an older gate's image
FORMAT = 3
_TXN = ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion",
        "spark.databricks.delta.commitInfo.userMetadata")


@dataclass
class TableImage:
    path: str
    columns: list[str]
    key: list[str]  # [] when the whole row is the identity (a snapshot of a table without key)
    rows: int
    complete: bool  # the image holds the whole table: created, truncated or snapshotted within the history
    snapshot: dict[str, Any] | None = None  # the latest snapshot: {"id", "state"}
    version: int = 0  # the Delta version of the table in ``path`` that is this image's
    types: list[str] | None = None  # each column's data_type when the table is typed, else None (all strings)


@dataclass
class Image:
    channel: str | None
    watermark: dict[str, int]  # {"id", "tid"}: every row up to it is applied
    keys: dict[str, list[str]]
    tables: dict[str, TableImage]
    skipped: dict[str, str] = field(default_factory=dict)
    generation: int = 0  # 0 for the first build, one more for each rebuild into the same directory
    typing: dict[str, Any] | None = None  # the Typing (spark_readers.typed_rows) of typed tables; None: strings
    verified: dict[str, dict[str, Any]] = field(default_factory=dict)  # per table: its VERIFY rows' checks

    def as_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Image:
        return cls(data["channel"], data["watermark"], data["keys"],
                   {name: TableImage(**table) for name, table in data["tables"].items()},
                   data.get("skipped", {}), data.get("generation", 0), data.get("typing"), data.get("verified", {}))


@dataclass(frozen=True)
class Commit:
    """What every Delta commit of one update carries: the idempotent-write id and version, the watermark."""

    app_id: str
    watermark: tuple[int, int]
    channel: str | None

    @property
    def metadata(self) -> str:
        return json.dumps({"channel": self.channel, "watermark": {"id": self.watermark[0], "tid": self.watermark[1]}})

    def writer_options(self, deletion_vectors: bool = True) -> dict[str, str]:
        """Options of a DataFrame write of this commit (spark_readers.delta_jars.image_table_options's properties)."""
        return {"txnAppId": self.app_id, "txnVersion": str(self.watermark[0]), "userMetadata": self.metadata,
                **image_table_options(deletion_vectors)}


def committing(spark: SparkSession, commit: Commit) -> AbstractContextManager[None]:
    """Delta DML (MERGE) in the block is an idempotent write of ``commit``."""
    return session_conf(spark, dict(zip(_TXN, (commit.app_id, str(commit.watermark[0]), commit.metadata))))


def committed(spark: SparkSession, url: str, commit: Commit, before: tuple[int, int] | None = None
              ) -> tuple[int, int]:
    """The latest version of the Delta table at ``url``, just written by ``commit``, and its rows: from that
    commit's metrics (an overwrite's output rows; a MERGE's inserted and deleted rows, by Spark's names or
    delta-rs's, added to ``before``, the (version, rows) it started from, when the commits between kept the rows:
    spark_readers.driver_commits.rows_kept), else counted (a write that made no commit; a MERGE after a killed
    update's)."""
    table = DeltaTable.forPath(spark, url)
    last = table.history(1).collect()[0]
    version, metrics = int(last["version"]), last["operationMetrics"] or {}
    if last["userMetadata"] == commit.metadata:
        inserted = metrics.get("numTargetRowsInserted", metrics.get("num_target_rows_inserted"))
        deleted = metrics.get("numTargetRowsDeleted", metrics.get("num_target_rows_deleted"))
        if (last["operation"] == "MERGE" and before is not None and inserted is not None and deleted is not None
                and (version == before[0] + 1 or version > before[0] and driver_commits.rows_kept(
                    row["operation"] for row in table.history(version - before[0]).collect()[1:]))):
            return version, before[1] + int(inserted) - int(deleted)
        if last["operation"] == "WRITE" and "numOutputRows" in metrics:
            return version, int(metrics["numOutputRows"])
    return version, spark.read.format("delta").option("versionAsOf", version).load(url).count()


class ImageStore:
    """One image directory: its current image, its tables' folders and the state's commits; refused in a session
    without Delta Lake (spark_readers.delta_jars.require_delta)."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        require_delta(spark)
        self.spark = spark
        self.out = OutputDir(spark, path)

    def url(self, relative: str) -> str:
        return str(self.out.child(relative).toString())

    def local_path(self, relative: str) -> str | None:
        """The folder ``relative`` as a path of the driver's file system for delta-rs; None when the image is not
        on it, or the path has a ``%`` (Spark's path then)."""
        if self.out.fs.getUri().getScheme() != "file":
            return None
        path = str(self.out.fs.makeQualified(self.out.child(relative)).toUri().getPath())
        return None if "%" in path else path  # delta-rs 1.6 decodes %XX in a path when it reads the log

    def _has_state(self) -> bool:
        return self.out.exists(f"{STATE}/_delta_log")

    def current(self, channel: str | None) -> Image | None:
        """The current image (None for a new or empty directory, or one of an older gate, which is cleared)."""
        if not self._has_state():
            self._clear()
            return None
        image = self._latest()
        if channel is not None and image.channel not in (None, channel):
            raise MaterialiseError(f"{self.out.url} holds images of channel '{image.channel}', not '{channel}'. "
                                   "Give each channel its own image directory.")
        return image

    def _latest(self) -> Image:
        """The state's image, from its last commit's ``userMetadata`` (no Spark job: the table's log is not
        replayed; on the local file system, read by delta-rs in the driver) when the commit carries it, else
        from its row."""
        local = self.local_path(STATE)
        if local is not None:
            metadata = deltalake.DeltaTable(local).history(1)[0].get("userMetadata")
        else:
            metadata = DeltaTable.forPath(self.spark, self.url(STATE)).history(1).collect()[0]["userMetadata"]
        carried = json.loads(metadata or "{}").get("image")
        return Image.from_json(carried) if carried else self.read(self.spark.read.format("delta").load(self.url(STATE)))

    @staticmethod
    def read(state: DataFrame) -> Image:
        return Image.from_json(json.loads(state.first()["image"]))  # type: ignore[index]

    def _clear(self) -> None:
        """Make a directory without state fit for a first update: remove an older gate's image (its pointer
        or marker last, so a clear that was killed is done again); keep the Delta tables of a first update
        that was killed (its commits are made again or skipped); refuse a directory holding anything else."""
        names = [s.getPath().getName() for s in self.out.fs.listStatus(self.out.root)] \
            if self.out.fs.exists(self.out.root) else []
        legacy = [n for n in LEGACY if n in names]
        if legacy:
            log.info("removing the image of an older gate from %s: it is rebuilt as Delta tables", self.out.url)
            for name in [n for n in names if n not in legacy] + legacy:
                self.out.delete(name)
            return
        for name in names:
            status = [s for s in self.out.fs.listStatus(self.out.child(name))] if self.out.fs.isDirectory(
                self.out.child(name)) else []
            if not status or not all(self.out.exists(f"{name}/{s.getPath().getName()}/_delta_log") for s in status):
                raise MaterialiseError(f"{self.out.url} is not empty and holds no image (no {STATE}): give a new "
                                       "or empty directory for the table images.")

    @contextmanager
    def warmed(self) -> Iterator[None]:
        """The block runs while a thread of its own reads the state table's Delta snapshot (its files, which
        :meth:`publish`'s overwrite needs), on the core an update's Spark jobs leave idle between them; the
        thread is joined at the end. The thread's jobs have the caller's job group and tags (cancelling the
        group, as a stopped stream does, cancels those running). Nothing is started for a directory without
        state. Measured in one session on the 1,000,000-row benchmark image (local[2], 1 % new rows, 5
        interleaved pairs): publish took 0.20-0.45 s against 0.56-0.72 s, the update 3.24 s against 3.51 s
        (median). Nor for a state on the local file system, which the driver commits (:meth:`publish`)."""
        if not self._has_state() or self.local_path(STATE) is not None:
            yield
            return
        thread = InheritableThread(target=self._read_snapshot, session=self.spark, name="gate-image-state",
                                   daemon=True)
        thread.start()
        try:
            yield
        finally:
            thread.join()

    def _read_snapshot(self) -> None:
        try:
            DeltaTable.forPath(self.spark, self.url(STATE)).detail().collect()
        except Exception as exc:  # only a head start: publish reads the snapshot again and reports what fails
            log.debug("reading the snapshot of %s ahead of its commit failed: %s", self.url(STATE), exc)

    def publish(self, image: Image, commit: Commit) -> None:
        """Make ``image`` current: one commit of the state (skipped when made already), whose ``userMetadata``
        carries the image too (for :meth:`current`); made by the driver (spark_readers.driver_commits) when
        the state exists on the local file system and delta-rs writes its table features."""
        row = json.dumps(image.as_json())
        metadata = json.dumps({**json.loads(commit.metadata), "image": image.as_json()})
        local = self.local_path(STATE) if self._has_state() else None
        if local is not None and driver_commits.overwrite(local, pa.table({"image": [row]}), commit.app_id,
                                                          commit.watermark[0], metadata):
            return
        options = {**commit.writer_options(deletion_vectors=False), "userMetadata": metadata}
        self.spark.createDataFrame([(row,)], "image string").write.format("delta").mode("overwrite").options(
            **options).save(self.url(STATE))


def _tables(spark: SparkSession, store: ImageStore, image: Image) -> dict[str, DataFrame]:
    return {name: spark.read.format("delta").option("versionAsOf", table.version).load(store.url(table.path))
            for name, table in image.tables.items()}


def read_image(spark: SparkSession, path: str) -> dict[str, DataFrame]:
    """Every table of the current image in ``path``: ``{"db.table": DataFrame}``, each at the image's version."""
    store = ImageStore(spark, path)
    if not store._has_state():
        raise MaterialiseError(f"{path} holds no table image ({STATE} is missing).")
    return _tables(spark, store, store.read(spark.read.format("delta").load(store.url(STATE))))


def as_of(spark: SparkSession, path: str, channel_id: int) -> dict[str, DataFrame]:
    """The tables of the image in ``path`` as they were with every row up to ``channel_id`` applied: the
    newest update whose watermark is at or below it (Delta time travel of the state and of each table)."""
    store = ImageStore(spark, path)
    if not store._has_state():
        raise MaterialiseError(f"{path} holds no table image ({STATE} is missing).")
    versions = [(json.loads(row["userMetadata"])["watermark"]["id"], row["version"])
                for row in DeltaTable.forPath(spark, store.url(STATE)).history().select("version", "userMetadata")
                .collect() if row["userMetadata"]]
    older = [version for watermark, version in versions if watermark <= channel_id]
    if not older:
        first = min(watermark for watermark, _ in versions)
        raise MaterialiseError(f"The image in {path} starts at channel id {first}: there is no image as of "
                               f"{channel_id}. Give an id at or after {first}.")
    state = spark.read.format("delta").option("versionAsOf", max(older)).load(store.url(STATE))
    return _tables(spark, store, store.read(state))


def register_tables(spark: SparkSession, path: str, database: str) -> list[str]:
    """Register the current image's tables in Spark's catalog as ``database.DB_TABLE`` (external Delta
    tables at their folders; a table registered already is pointed at its current folder); their names."""
    check_identifier(database, "Database name")
    store = ImageStore(spark, path)
    image = store.current(None)
    if image is None:
        raise MaterialiseError(f"{path} holds no table image ({STATE} is missing).")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    names = []
    for name, table in sorted(image.tables.items()):
        qualified = f"`{database}`.`{name.replace('.', '_')}`"
        spark.sql(f"DROP TABLE IF EXISTS {qualified}")  # external: only the catalog entry goes
        spark.sql(f"CREATE TABLE {qualified} USING DELTA LOCATION '{store.url(table.path)}'")
        names.append(f"{database}.{name.replace('.', '_')}")
    return names
