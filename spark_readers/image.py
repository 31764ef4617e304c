"""Table images on disk: immutable versions and the pointer that names the current one.

Layout of an image directory ``OUT`` (a local path or any Hadoop file system URL)::

    OUT/_gate_image.json                     the pointer (below); replaced by a rename, never edited
    OUT/v-00000000000000001234/DB/TABLE/     Parquet of one table as of row 1234 (one string column per column)
    OUT/v-.../...

The pointer is JSON: ``{"format": 1, "channel": C, "watermark": {"id": I, "tid": T}, "keys": {...},
"tables": {"db.table": {"path": "v-.../db/table", "columns": [...], "key": [...], "rows": N,
"complete": true|false, "snapshot": {"id": S, "state": "running"|"done"|"cancelled"} | null}},
"skipped": {"db.table": "why"}, "previous": ["v-.../..."]}``. The image holds every row up to the
watermark. An update writes the tables it changes into a new version directory and then replaces the
pointer, so a reader sees the old image or the new one, never a half-written one; a table it does not
change keeps its earlier path. Readers read the pointer, then each table's ``path`` (relative to OUT):
:func:`read_image` does that. Version directories that neither the pointer nor its predecessor (the
``previous`` paths) use are deleted by the next update: a reader that has read the pointer can finish
while one more update happens.

An update killed at any point (kill -9) leaves the previous image current and is redone by the next
one: a later update's new version is deleted and written again, and so are the version directories of
a first update, which has no pointer yet (a directory without pointer that holds anything else is
refused). A pointer replace that was killed is finished or undone by :meth:`OutputDir.read_json`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from gate.common.errors import MaterialiseError
from spark_readers.load import OutputDir

log = logging.getLogger(__name__)

POINTER = "_gate_image.json"
LEGACY_MARKER = "_gate_materialised"  # images of older gates: OUT/DB/TABLE, replaced as a whole
FORMAT = 1


@dataclass
class TableImage:
    path: str
    columns: list[str]
    key: list[str]  # [] when the whole row is the identity (a snapshot of a table without key)
    rows: int
    complete: bool  # the image holds the whole table: created, truncated or snapshotted within the history
    snapshot: dict[str, Any] | None = None  # the latest snapshot: {"id", "state"}


@dataclass
class Image:
    channel: str | None
    watermark: dict[str, int]  # {"id", "tid"}: every row up to it is applied
    keys: dict[str, list[str]]
    tables: dict[str, TableImage]
    skipped: dict[str, str] = field(default_factory=dict)
    previous: list[str] = field(default_factory=list)

    def versions(self) -> set[str]:
        """The version directories its tables and its predecessor's (``previous``) are in."""
        return {path.split("/")[0] for path in [*(t.path for t in self.tables.values()), *self.previous]}

    def as_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Image:
        return cls(data["channel"], data["watermark"], data["keys"],
                   {name: TableImage(**table) for name, table in data["tables"].items()},
                   data.get("skipped", {}), data.get("previous", []))


def version(watermark: int) -> str:
    return f"v-{watermark:020d}"


class ImageStore:
    """One image directory: its current image, new versions, the pointer swap and the clean-up."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.out = OutputDir(spark, path)

    def current(self, channel: str | None) -> Image | None:
        """The current image (None for a new or empty directory, or one of an older gate, which is cleared)."""
        stored = self.out.read_json(POINTER)
        if stored is None:
            self._clear()
            return None
        image = Image.from_json(stored)
        if channel is not None and image.channel not in (None, channel):
            raise MaterialiseError(f"{self.out.url} holds images of channel '{image.channel}', not '{channel}'. "
                                   "Give each channel its own image directory.")
        return image

    def _clear(self) -> None:
        """Make a directory without pointer empty: remove an image of an older gate (its marker last, so a
        clear that was killed is done again), or the version directories of a first update that was killed
        before it wrote the pointer; refuse a directory holding anything else."""
        names = [s.getPath().getName() for s in self.out.fs.listStatus(self.out.root)] \
            if self.out.fs.exists(self.out.root) else []
        if LEGACY_MARKER in names:
            names.remove(LEGACY_MARKER)
            names.append(LEGACY_MARKER)
        elif any(not name.startswith("v-") for name in names):
            raise MaterialiseError(f"{self.out.url} is not empty and holds no image (no {POINTER}): give a new "
                                   "or empty directory for the table images.")
        if names:
            log.info("removing %s from %s (no %s: an older gate's image, or a first update that was killed)",
                     ", ".join(names), self.out.url, POINTER)
        for name in names:
            self.out.delete(name)

    def new_version(self, watermark: int, current: Image | None) -> str:
        """A fresh directory for the tables of the image at ``watermark``: one the current image does not use
        (a rebuild at the same watermark gets a suffix); a leftover of a killed update is removed."""
        used = current.versions() if current else set()
        name = version(watermark)
        serial = 0
        while name in used:
            serial += 1
            name = f"{version(watermark)}.{serial}"
        if self.out.exists(name):
            self.out.delete(name)
        return name

    def path(self, relative: str) -> str:
        return str(self.out.child(relative).toString())

    def publish(self, image: Image, before: Image | None) -> None:
        """Make ``image`` current (one rename), then delete the versions neither it nor ``before`` uses."""
        used = {t.path for t in image.tables.values()}
        image.previous = sorted({t.path for t in before.tables.values()} - used) if before else []
        self.out.write_json(POINTER, image.as_json())
        self.clean(image)

    def clean(self, image: Image) -> None:
        """Delete the version directories neither ``image`` (the current one) nor its predecessor uses."""
        keep = image.versions()
        for status in self.out.fs.listStatus(self.out.root):
            name = status.getPath().getName()
            if name.startswith("v-") and name not in keep:
                self.out.delete(name)


def read_image(spark: SparkSession, path: str) -> dict[str, DataFrame]:
    """Every table of the current image in ``path``: ``{"db.table": DataFrame}``."""
    stored = OutputDir(spark, path).read_json(POINTER)
    if stored is None:
        raise MaterialiseError(f"{path} holds no table image ({POINTER} is missing).")
    image = Image.from_json(stored)
    store = ImageStore(spark, path)
    return {name: spark.read.parquet(store.path(table.path)) for name, table in image.tables.items()}
