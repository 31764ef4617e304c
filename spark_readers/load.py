"""Incremental load: append a channel's new rows to Parquet, exactly once, whenever it runs.

Layout of the output directory ``OUT`` (a local path or any Hadoop file system URL)::

    OUT/_gate_cursor.json                        {"channel": ..., "id": ..., "tid": ...}
    OUT/increment=1-5000/_SUCCESS                one directory per run (per --max-rows slice)
    OUT/increment=1-5000/dbname=D/tablename=T/date=YYYY-MM-DD/part-*.parquet
    OUT/increment=5001-7342/...

Each increment holds exactly the rows ``FIRST <= id <= LAST`` (parsed as in spark_readers.incremental).
A run: (1) repairs: every increment directory without ``_SUCCESS`` (a write that was killed) is
deleted, and every committed increment starting right after the cursor (a run killed after its write
committed, before it saved the cursor) is adopted, moving the cursor to its end; (2) reads the
checkpoint and writes ``(cursor, checkpoint]`` into ``increment=FIRST-LAST`` (Spark writes ``_SUCCESS``
only when the whole job has committed); (3) saves the cursor. A kill at any point leaves either no
committed directory for the range (redone) or a committed one (adopted): never a duplicate or a gap.
Readers use :func:`read_increments`, which reads only committed increments the cursor covers.

The cursor file is replaced by writing ``_gate_cursor.json.tmp`` and renaming it (where a rename
cannot replace a file, the old one is deleted first; a reader finding only the .tmp file promotes it).
On a checksummed file system (a local path) the cursor bypasses the ``.crc`` side files: renaming a file
and its checksum is two steps, and a kill between them would leave a cursor that never verifies again.
Run one load job per output directory at a time.

Entry point for spark-submit: ``spark-submit --jars <connector> .../spark_readers/load.py CHANNEL --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from py4j.java_gateway import is_instance_of
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType, StructField, StructType

from gate.common.config import load_config
from gate.common.errors import CursorExpiredError, GateError, LoadError
from gate.consume.client import Consumer, Cursor
from spark_readers.incremental import parse, read_increment
from spark_readers.session import ChannelSource, spark_job

log = logging.getLogger(__name__)

CURSOR_FILE = "_gate_cursor.json"
PARTITIONS = ("dbname", "tablename", "date")
_INCREMENT = re.compile(r"^increment=(\d+)-(\d+)$")


@dataclass(frozen=True)
class Increment:
    """One committed run: the rows ``first <= id <= last``; ``last_tid`` is the tid of row ``last``."""

    first: int
    last: int
    last_tid: int

    @property
    def name(self) -> str:
        return f"increment={self.first}-{self.last}"


class OutputDir:
    """The load's output directory through Hadoop's FileSystem API (file:, hdfs:, s3a:, ...)."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self._path = spark._jvm.org.apache.hadoop.fs.Path  # type: ignore[union-attr]
        self._io = spark._jvm.org.apache.commons.io.IOUtils  # type: ignore[union-attr]
        self.root = self._path(path)
        self.fs = self.root.getFileSystem(spark._jsc.hadoopConfiguration())
        self.url = str(self.fs.makeQualified(self.root).toString())
        checksummed = spark._jvm.org.apache.hadoop.fs.ChecksumFileSystem  # type: ignore[union-attr]
        # The cursor's small files without checksum side files (see write_json); JSON tells a torn one.
        self._plain = (self.fs.getRawFileSystem()
                       if is_instance_of(spark.sparkContext._gateway, self.fs, checksummed) else self.fs)

    def child(self, name: str) -> Any:
        return self._path(self.root, name)

    def exists(self, name: str) -> bool:
        return bool(self.fs.exists(self.child(name)))

    def delete(self, name: str) -> None:
        self.fs.delete(self.child(name), True)

    def increments(self) -> list[tuple[int, int, bool]]:
        """(first, last, committed) of every increment directory, by first id."""
        if not self.fs.exists(self.root):
            return []
        found = []
        for status in self.fs.listStatus(self.root):
            match = _INCREMENT.match(status.getPath().getName())
            if status.isDirectory() and match:
                found.append((int(match.group(1)), int(match.group(2)),
                              self.exists(f"{match.group(0)}/_SUCCESS")))
        return sorted(found)

    def _read(self, name: str) -> str:
        stream = self._plain.open(self.child(name))
        try:
            return bytes(self._io.toByteArray(stream)).decode("utf-8")
        finally:
            stream.close()

    def _exists_plain(self, name: str) -> bool:
        return bool(self._plain.exists(self.child(name)))

    def _drop_checksum(self, name: str) -> None:
        """Remove the ``.NAME.crc`` that Hadoop's checksummed file system keeps beside ``name``, if any:
        one left by an older gate (or a kill mid-rename) describes other content than the file has now."""
        if self._plain is not self.fs:
            crc = self.child(f".{name}.crc")
            if self._plain.exists(crc):
                self._plain.delete(crc, False)

    def read_json(self, name: str) -> dict[str, Any] | None:
        """A file written by :meth:`write_json`, or None; a leftover ``.tmp`` of an interrupted replace is
        promoted first. Read without Hadoop's checksum: a file is only ever put in place by a rename of
        a complete one, and a torn ``.tmp`` is not valid JSON (every strict prefix of a JSON object is not)."""
        tmp = f"{name}.tmp"
        if not self._exists_plain(name) and self._exists_plain(tmp):
            try:  # complete if the old file was deleted; torn only if the very first write was interrupted
                json.loads(self._read(tmp))
            except ValueError:
                self._plain.delete(self.child(tmp), False)
                self._drop_checksum(tmp)
                return None
            self._drop_checksum(name)
            self._plain.rename(self.child(tmp), self.child(name))
            self._drop_checksum(tmp)
        return json.loads(self._read(name)) if self._exists_plain(name) else None

    def write_json(self, name: str, data: dict[str, Any]) -> None:
        """Replace ``name`` with ``data``: write ``name.tmp``, then rename it over ``name``.

        On a checksummed file system the files go to its raw file system: a rename there is one step,
        where the checksummed one renames the file and then its ``.crc`` (a kill in between left a new
        cursor beside the old checksum, unreadable forever). Checksum files of earlier writes are removed."""
        tmp = self.child(f"{name}.tmp")
        self._drop_checksum(f"{name}.tmp")
        stream = self._plain.create(tmp, True)
        try:
            stream.write(bytearray(json.dumps(data).encode("utf-8")))
            stream.hsync()
        finally:
            stream.close()
        if not self._plain.rename(tmp, self.child(name)):  # file systems that refuse to replace a file
            self._plain.delete(self.child(name), False)
            self._plain.rename(tmp, self.child(name))
        self._drop_checksum(name)


def read_cursor(out: OutputDir, channel: str | None) -> Cursor:
    """The stored cursor (the beginning if none); refuses a directory that belongs to another channel."""
    stored = out.read_json(CURSOR_FILE)
    if stored is None:
        return Cursor()
    if channel is not None and stored["channel"] != channel:
        raise LoadError(f"{out.url} holds increments of channel '{stored['channel']}', not '{channel}'. "
                        "Give each channel its own output directory.")
    return Cursor(int(stored["id"]), int(stored["tid"]))


def _repair(out: OutputDir, dc: Consumer, cursor: Cursor, channel: str) -> Cursor:
    """Delete uncommitted increments; adopt committed ones that continue the cursor."""
    for first, last, committed in out.increments():
        if not committed:
            log.info("removing increment=%d-%d of an interrupted run (no _SUCCESS)", first, last)
            out.delete(f"increment={first}-{last}")
        elif first == cursor.id + 1:
            log.info("adopting increment=%d-%d, committed by a run that stopped before saving its cursor", first, last)
            cursor = dc.position(last)
            out.write_json(CURSOR_FILE, {"channel": channel, "id": cursor.id, "tid": cursor.tid})
        elif last > cursor.id:
            raise LoadError(f"{out.url} has increment={first}-{last}, which does not continue the cursor (row "
                            f"{cursor.id}). Move it away or restore {CURSOR_FILE}.")
    return cursor


def _register(dc: Consumer, cursor: Cursor) -> None:
    """Store the load's cursor under its consumer name, if it has one, so that retention waits for it."""
    if dc.name is not None:
        dc.cursor = cursor
        dc.commit()


def load(spark: SparkSession, source: ChannelSource, out_path: str, partitions: int = 4,
         max_rows: int | None = None, after_write: Callable[[Increment], None] | None = None,
         consumer: str | None = None) -> list[Increment]:
    """Append every row after the stored cursor up to the checkpoint; returns the increments written.

    ``max_rows`` splits the work into increments of at most that many rows. ``after_write`` is called
    between an increment's commit and the cursor's save (tests use it to simulate a crash there).
    ``consumer`` registers the cursor in the channel's gate_consumer under that name (at the start and
    after each increment), so that retention never removes rows the load has not read. Rows the cursor
    needs that retention has removed raise CursorExpiredError (an increment that met a removal while it
    was written is deleted first).
    """
    out = OutputDir(spark, out_path)
    written: list[Increment] = []
    cursor = read_cursor(out, source.channel)
    with Consumer(source.dc, source.channel, name=consumer) as dc:
        dc.verify(cursor, f"The cursor of {out.url}, {cursor!r},",
                  "Was the channel dropped and created again? Load it into a new output directory.")
        cursor = _repair(out, dc, cursor, source.channel)
        _register(dc, cursor)
        while True:
            checkpoint = dc.checkpoint()
            end = checkpoint.id if max_rows is None else min(checkpoint.id, cursor.id + max_rows)
            if end <= cursor.id:
                return written
            increment = Increment(cursor.id + 1, end, dc.position(end, checkpoint).tid)
            dc.require_kept(cursor.id)
            frame = read_increment(spark, source, cursor.id, end, partitions)
            (frame.withColumn("date", F.to_date("create_time"))
             .write.partitionBy(*PARTITIONS).parquet(out.child(increment.name).toString()))
            try:
                dc.require_kept(cursor.id)
            except CursorExpiredError:
                out.delete(increment.name)
                raise
            if after_write is not None:
                after_write(increment)
            cursor = Cursor(increment.last, increment.last_tid)
            out.write_json(CURSOR_FILE, {"channel": source.channel, "id": cursor.id, "tid": cursor.tid})
            _register(dc, cursor)
            log.info("wrote %s of channel %s", increment.name, source.channel)
            written.append(increment)


def increments_schema(spark: SparkSession) -> StructType:
    """The schema of the loaded Parquet: spark_readers.incremental's columns, then the partition columns
    ``increment``, ``dbname``, ``tablename`` (strings, never inferred) and ``date``."""
    empty = spark.createDataFrame([], "id decimal(20,0), tid decimal(20,0), dbname string, tablename string, "
                                      "create_ts bigint, instance_name string, optype string, data string")
    fields = [f for f in parse(empty).schema.fields if f.name not in PARTITIONS]
    return StructType(fields + [StructField("increment", StringType()), StructField("dbname", StringType()),
                                StructField("tablename", StringType()), StructField("date", DateType())])


def read_increments(spark: SparkSession, out_path: str, channel: str | None = None, after: int = 0) -> DataFrame:
    """Every row loaded into ``out_path`` so far: the committed increments the cursor covers, with an extra
    column ``increment`` (``FIRST-LAST``). With ``after``, only the increments holding rows after it."""
    out = OutputDir(spark, out_path)
    cursor = read_cursor(out, channel)
    paths = [out.child(f"increment={first}-{last}").toString()
             for first, last, committed in out.increments() if committed and after < last <= cursor.id]
    schema = increments_schema(spark)
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).option("basePath", out.url).parquet(*paths)


def main(argv: list[str] | None = None) -> None:
    """``python -m spark_readers.load CHANNEL --out DIR``: the DC server comes from gate's config.yaml."""
    parser = argparse.ArgumentParser(prog="spark_readers.load", description=main.__doc__)
    parser.add_argument("channel")
    parser.add_argument("--out", required=True, help="output directory (local path or Hadoop URL)")
    parser.add_argument("--config", help="gate's config.yaml [default: $GATE_CONFIG, else ./config.yaml]")
    parser.add_argument("--master", help="Spark master URL [default: spark-submit's, else local[2]]")
    parser.add_argument("--partitions", type=int, default=4, help="parallel JDBC reads [default: 4]")
    parser.add_argument("--max-rows", type=int, help="rows per increment at most")
    parser.add_argument("--jdbc-url", help="JDBC URL executors use [default: jdbc:mysql://DC/CHANNEL]")
    parser.add_argument("--consumer", help="register the cursor in gate_consumer under this name (retention waits)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    source = ChannelSource(load_config(args.config).dc, args.channel, args.jdbc_url)
    try:
        with spark_job(args.master) as spark:
            for increment in load(spark, source, args.out, args.partitions, args.max_rows, consumer=args.consumer):
                print(f"wrote {increment.name} (tid {increment.last_tid})")
    except GateError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
