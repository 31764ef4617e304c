"""gate as a Spark data source in Python: ``format("gate_python")``, and ``format("gate")`` where the JVM
source (spark_readers/jvm, the same reads in Java, typed ones included) is not on the classpath; its typed
reads (option table) come to spark_readers.typed (spark_readers.gate_format is the data source Spark sees,
and registers them).

Offsets are transfer_data ids (``{"id": N}``: every row up to N has been read). A batch or a micro-batch
reads ``(start, end]`` with ``end`` never above the channel's checkpoint and always the last row of a
source transaction, so no batch holds part of one. ``partitions`` id ranges of that interval are read by
the executors as primary-key range scans (``WHERE id > lo AND id <= hi``, in chunks), parsed into the
columns of :data:`spark_readers.rows.ROW_SCHEMA` in Python and handed to Spark as Arrow batches.

Exactly once: the rows of an id range below the checkpoint never change, so a micro-batch Spark
replays from its offset log holds the same rows; with a sink that commits per batch (Parquet with a
checkpointLocation, or foreachBatch writing idempotently) each id lands once.

Where it runs: :class:`GateDataSource`, its planning and the stream reader's offsets run in Python
processes on the driver; :meth:`_Ranges.read` on the executors, which need this package (see
spark_readers.package) and a Python with pyarrow (which Spark's Python data sources need).
The DC password is read on the driver (from the config file's ``${ENV}`` reference or the variable
``passwordEnv`` names) and reaches the executors inside the serialized reader, never in options,
plans or logs (its field is left out of every repr).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pymysql
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from gate.common.config import Secret, ServerConfig, check_identifier, load_config
from gate.common.connection import open_connection
from gate.common.dc import describe_retention, purged_through, require_at_most_checkpoint
from gate.common.errors import ConfigError, CursorExpiredError, InvalidValue, RowsMissing
from gate.common.tls import TlsSettings
from spark_readers.rows import to_batch

NAME = "gate"
PYTHON_NAME = "gate_python"  # this source's name where the JVM one has "gate" (see register)
JVM_PROVIDER = "gate.spark.GateProvider"  # spark_readers/jvm
CHUNK = 10_000  # rows per query of a range scan
_COLUMNS = "id, tid, dbname, tablename, UNIX_TIMESTAMP(create_time), instance_name, optype, data"


@dataclass(frozen=True)
class Login:
    """Where the channel database is; the password is resolved already and never shown."""

    host: str
    port: int
    user: str
    channel: str
    password: str = field(default="", repr=False)
    tls: TlsSettings = field(default_factory=TlsSettings)  # the DC's, from gate's config file

    def connect(self) -> pymysql.Connection:
        server = ServerConfig(self.host, self.port, self.user, Secret(self.password, literal=True), self.tls)
        return open_connection(server, "DC", database=self.channel, charset="utf8mb4", autocommit=True,
                               connect_timeout=10)


@dataclass(frozen=True)
class Settings:
    """The options of one ``format("gate")`` read, checked (see :func:`settings`)."""

    login: Login
    partitions: int = 4
    starting_id: int | None = None  # first id to read; None: the oldest kept row
    ending_id: int | None = None  # batch reads: last id to read; None: the checkpoint
    max_rows: int | None = None  # streaming: rows per micro-batch, at most (a larger transaction is kept whole)
    consumer: str | None = None  # streaming: the gate_consumer name the committed offset is registered under
    table: str | None = None  # "db.table": that table's changes, typed (spark_readers.typed)


def _option(options: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    return next((str(v) for k, v in options.items() if k.lower() == wanted), None)


def _number(options: Mapping[str, str], name: str, least: int) -> int | None:
    text = _option(options, name)
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < least:
        raise InvalidValue(f"Option {name}={text!r} of format(\"gate\") must be a whole number of at least {least}.")
    return int(text)


def settings(options: Mapping[str, str]) -> Settings:
    """Check the options: channel; the DC from gate's config file (``config``, default $GATE_CONFIG, else
    ./config.yaml) or ``host``/``port``/``user``, each of which overrides the file's; ``passwordEnv``, the
    name of the environment variable holding the password; startingId, endingId, maxRowsPerTrigger,
    partitions, consumer, table."""
    channel = _option(options, "channel")
    if channel is None:
        raise InvalidValue('format("gate") needs the option channel, e.g. .option("channel", "shop").')
    check_identifier(channel, "Channel name")
    if _option(options, "password") is not None:
        raise InvalidValue('format("gate") takes no password option: options show up in plans and logs. Put the '
                           'password in an environment variable and give its name: .option("passwordEnv", "DC_PW"), '
                           "or use gate's config file with a ${ENV} reference.")
    host = _option(options, "host")
    dc = load_config(_option(options, "config")).dc if host is None or _option(options, "config") else None
    password = dc.password.reveal() if dc is not None else ""
    variable = _option(options, "passwordEnv")
    if variable is not None:
        if variable not in os.environ:
            raise ConfigError(f'format("gate") option passwordEnv names the environment variable {variable}, which '
                              f"is not set. Export {variable}=... in the driver's environment.")
        password = os.environ[variable]
    login = Login(host or (dc.host if dc else "127.0.0.1"), _number(options, "port", 1) or (dc.port if dc else 3306),
                  _option(options, "user") or (dc.user if dc else "root"), channel, password,
                  dc.tls if dc else TlsSettings())
    consumer = _option(options, "consumer")
    if consumer is not None and not 0 < len(consumer) <= 64:
        raise InvalidValue(f"Consumer name {consumer!r} must have 1 to 64 characters.")
    return Settings(login, _number(options, "partitions", 1) or 4, _number(options, "startingId", 1),
                    _number(options, "endingId", 0), _number(options, "maxRowsPerTrigger", 1), consumer,
                    _option(options, "table"))


class Channel:
    """The driver's small queries on a channel database (one connection, closed on exit)."""

    def __init__(self, login: Login) -> None:
        self.login = login
        self._conn = login.connect()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.close()

    @property
    def conn(self) -> pymysql.Connection:
        return self._conn

    def _rows(self, sql: str, *args: Any) -> tuple[tuple[Any, ...], ...]:
        with self._conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def checkpoint(self) -> int:
        return int(self._rows("SELECT id FROM transfer_checkpoint")[0][0])

    def tid(self, id_: int) -> int:
        """The tid of row ``id_`` (0 for 0 or a row retention removed)."""
        rows = self._rows("SELECT tid FROM transfer_data WHERE id = %s", id_)
        return int(rows[0][0]) if rows else 0

    def check_cursor(self, after: int) -> None:
        """Refuse to read the rows after ``after`` if retention has removed some of them."""
        require_kept(self._conn, self.login.channel, after)

    def register(self, consumer: str, id_: int) -> None:
        """Store ``id_`` as the cursor of ``consumer`` in gate_consumer (retention keeps the rows after it)."""
        self._rows("INSERT INTO gate_consumer (name, id, tid) VALUES (%s, %s, %s) "
                   "ON DUPLICATE KEY UPDATE id = VALUES(id), tid = VALUES(tid)", consumer, id_, self.tid(id_))

    def start(self, starting_id: int | None) -> int:
        """The offset before the first row to read: ``starting_id - 1``, by default the last removed row."""
        after = purged_through(self._conn, self.login.channel) if starting_id is None else starting_id - 1
        checkpoint = self.checkpoint()
        require_at_most_checkpoint(self.login.channel, after, checkpoint, f"Option startingId={starting_id}",
                                   f"Give startingId {checkpoint + 1} or less ({checkpoint + 1}: only the rows still "
                                   "to come).")
        self.check_cursor(after)
        return after


def require_kept(conn: pymysql.Connection, channel: str, after: int) -> None:
    """Raise CursorExpiredError if retention has removed rows after ``after`` (see :func:`gate.common.dc.purged_through`)."""
    purged = purged_through(conn, channel)
    if after < purged:
        raise CursorExpiredError(channel, after, purged, describe_retention(conn, channel),
                                 restart=f"option startingId={purged + 1}, or a new checkpointLocation")


def transaction_end(start: int, want: int, checkpoint: int, tid_of: Callable[[int], int]) -> int:
    """The end of a batch after ``start`` holding at most ``want - start`` rows where it can: the last row
    of a transaction, at most ``want`` (the last row of the first transaction after ``start`` when that one
    is longer); the checkpoint when ``want`` reaches it. tids grow with ids and a transaction's rows are
    consecutive, so both ends are found by bisection with point lookups of ``tid_of``."""
    if want >= checkpoint:
        return checkpoint
    tid = tid_of(want + 1)
    if tid_of(want) != tid:
        return want
    lo, hi = start + 1, want  # the first row of transaction ``tid``
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if tid_of(mid) >= tid else (mid + 1, hi)
    if lo - 1 > start:
        return lo - 1
    lo, hi = want + 1, checkpoint  # its last row (the checkpoint ends a transaction)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if tid_of(mid) == tid else (lo, mid - 1)
    return lo


class IdRange(InputPartition):
    """Rows ``lo < id <= hi``."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo = lo
        self.hi = hi


def split(lo: int, hi: int, parts: int) -> list[IdRange]:
    """``(lo, hi]`` in at most ``parts`` ranges of nearly equal size."""
    count = min(parts, hi - lo)
    return [IdRange(lo + (hi - lo) * i // count, lo + (hi - lo) * (i + 1) // count) for i in range(max(count, 0))]


def first_gap(first: int, last: int, ids: list[int]) -> str:
    """The first ids missing from ``ids`` (ascending, read for ``first < id <= last``), as the JVM source names
    them: "row 7 is" or "rows 7 to 8 are"."""
    expected = first + 1
    for found in ids:
        if found != expected:
            break
        expected += 1
    else:
        found = last + 1
    return f"row {expected} is" if found == expected + 1 else f"rows {expected} to {found - 1} are"


def read_range(login: Login, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    """The parsed rows ``lo < id <= hi``, in id order, read by primary-key range queries of :data:`CHUNK` rows
    (an Arrow batch each).
    Ids are gap-free below the checkpoint: a missing row means retention removed it meanwhile."""
    conn = login.connect()
    try:
        with conn.cursor() as cur:
            for first in range(lo, hi, CHUNK):
                last = min(first + CHUNK, hi)
                cur.execute(f"SELECT {_COLUMNS} FROM transfer_data WHERE id > %s AND id <= %s ORDER BY id",
                            (first, last))
                rows = cur.fetchall()
                if len(rows) != last - first:  # retention removed some while this query read them
                    require_kept(conn, login.channel, first)
                    raise RowsMissing(
                        f"Channel '{login.channel}': {first_gap(first, last, [r[0] for r in rows])} not there, yet "
                        "retention has removed none of them: rows of transfer_data below the checkpoint were deleted "
                        "by other means. Rebuild from a new snapshot of the source tables.")
                yield to_batch(rows)
    finally:
        conn.close()


class _Ranges:
    settings: Settings

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, IdRange)
        return read_range(self.settings.login, partition.lo, partition.hi)


class GateBatchReader(_Ranges, DataSourceReader):
    """``spark.read.format("gate")``: rows from startingId (default: the oldest kept) to endingId (default:
    the checkpoint when the query is planned)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def partitions(self) -> Sequence[InputPartition]:
        with Channel(self.settings.login) as dc:
            start = dc.start(self.settings.starting_id)
            checkpoint = dc.checkpoint()
        end = checkpoint if self.settings.ending_id is None else self.settings.ending_id
        if end > checkpoint:
            raise InvalidValue(f"endingId={end} is above the checkpoint of channel '{self.settings.login.channel}', "
                               f"{checkpoint}: rows above it may be incomplete.")
        return split(start, end, self.settings.partitions)


class GateStreamReader(_Ranges, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("gate")``: micro-batches of whole transactions up to the checkpoint."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.target: int | None = None  # Trigger.AvailableNow: the checkpoint when the query started

    def initialOffset(self) -> dict[str, int]:
        with Channel(self.settings.login) as dc:
            start = dc.start(self.settings.starting_id)
            if self.settings.consumer:
                dc.register(self.settings.consumer, start)
        return {"id": start}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.settings.max_rows) if self.settings.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with Channel(self.settings.login) as dc:
            self.target = dc.checkpoint()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        after = int(start["id"])
        with Channel(self.settings.login) as dc:
            checkpoint = dc.checkpoint()
            require_at_most_checkpoint(self.settings.login.channel, after, checkpoint, f"The query's offset, row {after},",
                                       "Was the channel dropped and created again? Start the query with a new "
                                       "checkpointLocation.")
            dc.check_cursor(after)
            ceiling = checkpoint if self.target is None else min(checkpoint, max(self.target, after))
            want = after + limit.max_rows if isinstance(limit, ReadMaxRows) else ceiling
            return {"id": transaction_end(after, want, ceiling, dc.tid)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return split(int(start["id"]), int(end["id"]), self.settings.partitions)

    def commit(self, end: dict[str, int]) -> None:
        if self.settings.consumer:
            with Channel(self.settings.login) as dc:
                dc.register(self.settings.consumer, int(end["id"]))


def jvm_source(spark: SparkSession) -> bool:
    """Whether Spark finds the JVM ``format("gate")`` (spark_readers/jvm) on the session's classpath: its
    ServiceLoader provider takes the name before any Python data source (DataSource.lookupDataSource)."""
    jvm = spark._jvm
    assert jvm is not None
    try:
        found = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            NAME, spark._jsparkSession.sessionState().conf())
    except Py4JJavaError:  # no provider of that name yet
        return False
    return bool(found.getName() == JVM_PROVIDER)
