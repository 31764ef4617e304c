"""A small consumer of a channel: poll ``transfer_data`` up to the checkpoint and keep a cursor.

Usage::

    with Consumer(dc, "shop", name="billing") as consumer:
        for change in consumer.follow():
            apply(change)          # follow() commits after each fully consumed batch

or, with explicit batches::

    while batch := consumer.poll():
        apply_all(batch)
        consumer.commit()

**At least once.** :meth:`Consumer.poll` moves ``consumer.cursor`` past the batch it returns; :meth:`commit`
stores that cursor in the channel's ``gate_consumer`` table. A consumer that crashes after processing a
batch and before ``commit()`` gets the same batch again when it restarts. To make it **exactly once**,
either store ``consumer.cursor`` in the same transaction as your own writes (and pass it back as
``start=`` when you restart; a named consumer is then unnecessary), or make the apply idempotent by
``id`` (e.g. an upsert keyed by the change's id, or "skip ids <= the highest id applied").

Only rows with ``last < id <= checkpoint.id`` are read: the checkpoint is read first, then the rows,
so a row above it (possibly part of an unfinished transaction) is never returned. Batches may end
inside a source transaction; ``Change.tid`` tells which rows belong together.

**Retention.** A channel with ``retain_days`` removes its oldest rows once every *named* consumer (a row
of ``gate_consumer``) has committed a cursor past them. A reader whose cursor falls before the oldest
kept row (an unnamed one that lagged, or a named one that was dropped) gets CursorExpiredError, never a
silent skip of the removed rows.

**Snapshots.** A snapshot of a source table arrives as a SNAPSHOTSTART row (``Change.columns`` has the
table's columns as CREATETABLE gives them; ``Change.snapshot`` its id, reason and key), one SNAPSHOT
row per source row (``Change.new``, like an INSERT) and a SNAPSHOTEND row (``Change.snapshot`` with
``rows`` and ``state``), interleaved with the table's changes. Folded in id order into a table image:
SNAPSHOTSTART forgets every row held for the table; SNAPSHOT upserts its row by the table's primary key
(the whole row for a table without one), as INSERT and UPDATE do; DELETE removes. At SNAPSHOTEND with
state ``done`` the image is the source table as of that point; with ``cancelled`` it is incomplete.

**Verifications.** A VERIFY row (``Change.verify``, written by ``gate verify``) is a checksum of one chunk of
a source table at exactly its place in the stream: the rows with keys after ``after`` up to ``upto``, their
count and checksum (:mod:`gate.common.checksum`). A consumer that folds the table checks its own copy with
``change.verify.check(rows)`` (its rows of the table when it reaches that id; those outside the range are
left out); a consumer that does not, skips it: it changes no row.

**Skipped transactions.** A SKIPPED row (``Change.ddl["SKIPPED"]``: the transaction, its binlog range, the
tables and the error) says that ``gate channel skip`` moved the channel past a source transaction gate
refused: its changes to that table are not in the channel, so an image of the table may differ from the
source until a snapshot of it.

The DC connection is gate's own PyMySQL connection for a :class:`ServerConfig`, or one borrowed from
the pool of a SQLAlchemy engine (or URL) ``mysql+pymysql://user:password@host:port/`` (see
:mod:`gate.consume.link`); rows and cursors are the same either way.

Privileges: an unnamed consumer needs SELECT on ``transfer_data`` and ``transfer_checkpoint``; a
named one also SELECT, INSERT and UPDATE on ``gate_consumer`` (see docs/consumers/index.md, "Privileges").
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import pymysql

from gate.common import checksum
from gate.common.config import check_identifier
from gate.common.dc import describe_retention, purged_through, require_at_most_checkpoint
from gate.common.errors import CursorExpiredError, InvalidValue, SchemaVersionError
from gate.common.retry import UNREACHABLE, error_code

if TYPE_CHECKING:
    from gate.consume.link import DCServer

DML_OPTYPES = frozenset({"INSERT", "UPDATE", "DELETE"})
SNAPSHOT_OPTYPES = frozenset({"SNAPSHOTSTART", "SNAPSHOT", "SNAPSHOTEND"})
OPTYPES = DML_OPTYPES | SNAPSHOT_OPTYPES | {"TRUNCATE", "ALTERTABLE", "RENAME", "CREATETABLE", "DROPTABLE",
                                           "SKIPPED", "VERIFY"}

Image = dict[str, "str | None"]
MAKE_CURSOR = ("Make one with consumer.position(ID), the cursor right after row ID (consumer.checkpoint() is the "
               "newest), or start without one.")
T = TypeVar("T")


@dataclass(frozen=True)
class Cursor:
    """The last row a consumer has seen: every row with a higher id is still to come."""

    id: int = 0
    tid: int = 0


@dataclass(frozen=True)
class SnapshotInfo:
    """The ``SNAPSHOT`` object of a SNAPSHOTSTART or SNAPSHOTEND payload."""

    id: int  # the snapshot's id: its SNAPSHOTSTART and SNAPSHOTEND carry the same
    reason: str | None = None  # SNAPSHOTSTART: who asked for it; SNAPSHOTEND: why it was cancelled, else None
    key: tuple[str, ...] | None = None  # SNAPSHOTSTART: the columns it pages on, () when the table has no key
    rows: int | None = None  # SNAPSHOTEND: how many SNAPSHOT rows it wrote
    state: str | None = None  # SNAPSHOTEND: done or cancelled

    @classmethod
    def from_payload(cls, info: dict[str, Any]) -> SnapshotInfo:
        key = info.get("key")
        return cls(int(info["id"]), info.get("reason"), None if key is None else tuple(key),
                   None if info.get("rows") is None else int(info["rows"]), info.get("state"))


@dataclass(frozen=True)
class VerifyInfo:
    """The ``VERIFY`` object of a VERIFY row: one chunk of a verification of the source table, at this id."""

    id: int  # the verification's id (gate_verify); its chunks carry the same
    chunk: int  # 1, 2, ... in key order
    key: tuple[str, ...]  # the key columns the chunks page on
    after: tuple[str | None, ...] | None  # the chunk's keys are after this one (None: from the start) ...
    upto: tuple[str | None, ...] | None  # ... up to this one, included (None: to the table's end)
    rows: int  # source rows in the chunk
    checksum: str  # 64 hex digits: the XOR of the SHA-256 of each row's canonical text
    last: bool  # the verification's last chunk

    @classmethod
    def from_payload(cls, info: dict[str, Any]) -> VerifyInfo:
        def key(values: list[str | None] | None) -> tuple[str | None, ...] | None:
            return None if values is None else tuple(values)

        return cls(int(info["id"]), int(info["chunk"]), tuple(info["key"]), key(info.get("after")),
                   key(info.get("upto")), int(info["rows"]), info["checksum"], bool(info.get("last")))

    def covers(self, row: Image) -> bool:
        """Whether the chunk's range holds this row (an image with the key's columns)."""
        return checksum.in_range(checksum.sort_key([row.get(k) for k in self.key]),
                                 None if self.after is None else checksum.sort_key(self.after),
                                 None if self.upto is None else checksum.sort_key(self.upto))

    def check(self, rows: Iterable[Image]) -> bool:
        """Whether ``rows`` (a consumer's rows of the table at this id; those outside the range left out) are
        the source's rows of the chunk: the same count and checksum."""
        mine = [row for row in rows if self.covers(row)]
        return (len(mine), checksum.checksum(mine)) == (self.rows, self.checksum)


@dataclass(frozen=True)
class Change:
    """One ``transfer_data`` row, parsed.

    ``new``/``old`` are the row images of INSERT/UPDATE/DELETE as column -> text (None for NULL), in the
    table's column order, and ``new`` the row of a SNAPSHOT; ``ddl`` is the payload of any other optype
    (``{}`` for TRUNCATE); ``snapshot`` the parsed ``SNAPSHOT`` object of SNAPSHOTSTART and SNAPSHOTEND;
    ``verify`` the parsed ``VERIFY`` object of a VERIFY row.
    """

    id: int
    tid: int
    dbname: str
    tablename: str
    create_time: datetime  # aware, UTC
    instance_name: str
    optype: str
    new: Image | None = None
    old: Image | None = None
    ddl: dict[str, Any] | None = None
    snapshot: SnapshotInfo | None = None
    verify: VerifyInfo | None = None

    @property
    def columns(self) -> list[dict[str, str]] | None:
        """CREATETABLE and SNAPSHOTSTART: the table's columns in order (field_name, nullable, primary_key,
        data_type); None for other optypes."""
        return self.ddl.get("NEW") if self.ddl is not None and self.optype in _WITH_COLUMNS else None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Change:
        """From ``id, tid, dbname, tablename, create_time (naive UTC), instance_name, optype, data``."""
        id_, tid, dbname, tablename, create_time, instance_name, optype, data = row
        payload = json.loads(data) if data else {}
        common = (int(id_), int(tid), dbname, tablename, create_time.replace(tzinfo=timezone.utc), instance_name,
                  optype)
        if optype in DML_OPTYPES or optype == "SNAPSHOT":
            return cls(*common, new=_image(payload.get("NEW")), old=_image(payload.get("OLD")))
        if optype == "VERIFY":
            return cls(*common, ddl=payload, verify=VerifyInfo.from_payload(payload["VERIFY"]))
        info = payload.get("SNAPSHOT") if optype in SNAPSHOT_OPTYPES else None
        return cls(*common, ddl=payload, snapshot=None if info is None else SnapshotInfo.from_payload(info))

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (create_time as ISO 8601 text with ``Z``)."""
        return {"id": self.id, "tid": self.tid, "dbname": self.dbname, "tablename": self.tablename,
                "create_time": self.create_time.strftime("%Y-%m-%dT%H:%M:%SZ"), "instance_name": self.instance_name,
                "optype": self.optype, "new": self.new, "old": self.old, "ddl": self.ddl}


def _image(cells: list[dict[str, str | None]] | None) -> Image | None:
    """``[{"c1": "v"}, {"c2": null}]`` as ``{"c1": "v", "c2": None}``, order kept."""
    return None if cells is None else {name: value for cell in cells for name, value in cell.items()}


_WITH_COLUMNS = frozenset({"CREATETABLE", "SNAPSHOTSTART"})
_COLUMNS = "id, tid, dbname, tablename, create_time, instance_name, optype, data"


class Consumer:
    """Reads a channel's changes in id order, exactly the rows the checkpoint covers.

    ``name`` makes the cursor persistent (table ``gate_consumer``): a new Consumer with the same name
    resumes after the last :meth:`commit`. ``start`` overrides where to begin (default: the stored
    cursor of ``name``, else the beginning); a cursor the channel does not have is refused (:meth:`verify`).
    ``dbname``, ``tablename`` and ``optypes`` filter what :meth:`poll` returns; the cursor still
    advances past the rows they leave out. ``dc`` is the DC
    server's :class:`ServerConfig`, or a SQLAlchemy engine or URL (``mysql+pymysql://...``) whose pool
    lends the consumer its connection.
    """

    def __init__(self, dc: DCServer, channel: str, name: str | None = None, batch: int = 1000,
                 dbname: str | None = None, tablename: str | None = None, optypes: Iterable[str] | None = None,
                 start: Cursor | None = None) -> None:
        self.channel = check_identifier(channel, "Channel name")
        if name is not None and not 0 < len(name) <= 64:
            raise InvalidValue(f"Consumer name {name!r} must have 1 to 64 characters.")
        if batch < 1:
            raise InvalidValue(f"The batch size must be at least 1, not {batch}.")
        self.optypes = frozenset(optypes) if optypes else None
        unknown = sorted((self.optypes or set()) - OPTYPES)
        if unknown:
            raise InvalidValue(f"Unknown optype(s) {', '.join(unknown)}; the optypes are {', '.join(sorted(OPTYPES))}.")
        self.name = name
        self.batch = batch
        self._where = ""
        self._args: list[Any] = []
        for column, value in (("dbname", dbname), ("tablename", tablename)):
            if value is not None:
                self._where += f" AND {column} = %s"
                self._args.append(value)
        if self.optypes:
            self._where += f" AND optype IN ({', '.join(['%s'] * len(self.optypes))})"
            self._args.extend(sorted(self.optypes))
        from gate.consume.link import open_link  # SQLAlchemy (10 MiB) loads here, not with the gate command

        self._link = open_link(dc, self.channel)
        try:
            self._committed = self._stored_cursor()
            self.cursor = self._first_cursor(start)
        except BaseException:
            self._link.close()
            raise
        self._verified = self.cursor  # poll() and commit() check a cursor the caller set (consumer.cursor = ...)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._link.close()

    def _query(self, sql: str, args: Iterable[Any] = ()) -> tuple[tuple[Any, ...], ...]:
        """Run one statement; a lost connection is reopened once (every statement here is safe to repeat)."""
        return self._reopening(lambda: self._run(sql, tuple(args)))

    def _reopening(self, work: Callable[[], T]) -> T:
        try:
            return work()
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as exc:
            if isinstance(exc, pymysql.err.OperationalError) and error_code(exc) not in UNREACHABLE:
                raise
            self._link.reopen()
            return work()

    def _run(self, sql: str, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], ...]:
        return self._link.run(sql, args)

    def _stored_cursor(self) -> Cursor:
        """The cursor last committed under this consumer's name (the beginning for a new or unnamed one)."""
        if self.name is None:
            return Cursor()
        rows = self._query("SELECT name, id, tid FROM gate_consumer WHERE name = %s", (self.name,))
        if rows and rows[0][0] != self.name:
            raise SchemaVersionError(
                f"Consumer name {self.name!r} matches the registered consumer {rows[0][0]!r} of channel "
                f"'{self.channel}' only because the channel's DC schema (version 1) compares names regardless of "
                f"case, accents and trailing spaces. Upgrade it, which makes names exact: 'gate consumer list "
                f"{self.channel}' (or the next 'gate run {self.channel}') does it.")
        return Cursor(int(rows[0][1]), int(rows[0][2])) if rows else Cursor()

    def _first_cursor(self, start: Cursor | None) -> Cursor:
        if start is not None:
            return self.verify(start, f"start={start!r}")
        return self.verify(self._committed, f"The stored cursor of consumer '{self.name}', {self._committed!r},",
                           f"Forget it with 'gate consumer drop {self.channel} {shlex.quote(self.name or '')} --yes' "
                           "and start the consumer again from a cursor at or below the checkpoint.")

    def verify(self, cursor: Cursor, what: str, fix: str = MAKE_CURSOR) -> Cursor:
        """``cursor``, if it is one of this channel's: not negative, at most the checkpoint, and carrying the
        tid of its row (a row retention removed is left to poll(), which tells whether rows after it are gone).
        ``what`` names the cursor in the error, ``fix`` says what to do instead."""
        if cursor == Cursor():
            return cursor
        if cursor.id < 0 or cursor.tid < 0:
            raise InvalidValue(f"{what} is not a cursor: ids and tids are 0 or more (Cursor() is the beginning). {fix}")
        checkpoint = self.checkpoint()
        require_at_most_checkpoint(self.channel, cursor.id, checkpoint.id, what, fix)
        if cursor.id in (0, checkpoint.id):
            tid = checkpoint.tid if cursor.id else 0
        else:
            rows = self._query("SELECT tid FROM transfer_data WHERE id = %s", (cursor.id,))
            if not rows:
                return cursor
            tid = int(rows[0][0])
        if tid != cursor.tid:
            raise InvalidValue(f"{what} does not fit channel '{self.channel}': its row {cursor.id} has tid {tid}, "
                               f"not {cursor.tid}, so the cursor comes from another channel (or from one dropped "
                               f"and created again). {fix}")
        return cursor

    def _checked_cursor(self) -> Cursor:
        """The cursor, checked once after the caller set it."""
        if self.cursor != self._verified:
            self._verified = self.verify(self.cursor, f"consumer.cursor = {self.cursor!r}")
        return self.cursor

    def checkpoint(self) -> Cursor:
        """The channel's checkpoint: every row up to it is present and complete."""
        (id_, tid), = self._query("SELECT id, tid FROM transfer_checkpoint")
        return Cursor(int(id_), int(tid))

    def purged_through(self) -> int:
        """The highest id retention has removed (0: none): rows after it up to the checkpoint are all there."""
        return self._reopening(lambda: purged_through(self._link.connection, self.channel))

    def require_kept(self, cursor_id: int) -> None:
        """Raise CursorExpiredError when rows right after ``cursor_id`` have been removed by retention. Called
        after reading them: retention moves purged_through before (or with) removing, so this sees any
        removal that the read may have met."""
        purged = self.purged_through()
        if cursor_id < purged:
            retention = self._reopening(lambda: describe_retention(self._link.connection, self.channel))
            raise CursorExpiredError(self.channel, cursor_id, purged, retention)

    def position(self, after_id: int, checkpoint: Cursor | None = None) -> Cursor:
        """The cursor right after row ``after_id`` (0: the beginning), which must be at or below the checkpoint
        and not before the rows retention has removed (``position(consumer.purged_through())`` is the cursor
        before the oldest kept row)."""
        checkpoint = checkpoint or self.checkpoint()
        if after_id < 0:
            raise InvalidValue(f"Row {after_id} is not a row id: ids are 0 or more (0: before the first row).")
        require_at_most_checkpoint(self.channel, after_id, checkpoint.id, f"Row {after_id}",
                                   "Give a row at or below the checkpoint (consumer.checkpoint() is the newest).")
        if after_id in (0, checkpoint.id):
            if after_id == 0:
                self.require_kept(0)
            return checkpoint if after_id else Cursor()
        rows = self._query("SELECT id, tid FROM transfer_data WHERE id IN (%s, %s) ORDER BY id", (after_id, after_id + 1))
        if rows and rows[0][0] == after_id:
            return Cursor(after_id, int(rows[0][1]))
        self.require_kept(after_id)
        # after_id is the last removed row: retention removes whole transactions, so the next row starts one
        return Cursor(after_id, int(rows[0][1]) - 1)

    def position_at_time(self, when: datetime) -> Cursor:
        """The cursor before the first row (up to the checkpoint) executed at ``when`` or later; the checkpoint
        if there is none. A naive ``when`` is UTC. (create_time follows id order only roughly: a transaction
        is stamped when it starts and logged when it commits.)"""
        checkpoint = self.checkpoint()
        utc = when.astimezone(timezone.utc).replace(tzinfo=None) if when.tzinfo else when
        (first,), = self._query("SELECT MIN(id) FROM transfer_data WHERE create_time >= %s AND id <= %s",
                                (utc, checkpoint.id))
        if first is None:
            return checkpoint
        purged = self.purged_through()
        if purged and int(first) == purged + 1:
            (oldest,), = self._query("SELECT create_time FROM transfer_data WHERE id = %s", (first,))
            if oldest > utc:  # rows executed from ``when`` to the oldest kept row's time may have been removed
                self.require_kept(0)
        return self.position(int(first) - 1, checkpoint)

    def poll(self) -> list[Change]:
        """The next changes after the cursor, at most ``batch``, never above the checkpoint; ``[]`` when
        caught up. Moves ``cursor`` past the rows returned (and past rows the filters left out)."""
        self._checked_cursor()
        checkpoint = self.checkpoint()
        while self.cursor.id < checkpoint.id:
            end = min(checkpoint.id, self.cursor.id + self.batch)
            rows = self._query(
                f"SELECT {_COLUMNS} FROM transfer_data WHERE id > %s AND id <= %s{self._where} ORDER BY id",
                (self.cursor.id, end, *self._args))
            self.require_kept(self.cursor.id)
            self.cursor = self._verified = self.position(end, checkpoint)
            if rows:
                return [Change.from_row(row) for row in rows]
        return []

    def commit(self) -> None:
        """Store the cursor for this consumer's name; the next Consumer of that name resumes after it."""
        if self.name is None:
            raise InvalidValue("Only a named consumer stores its cursor: give Consumer(..., name=...), or keep "
                               "consumer.cursor yourself and pass it back as start=.")
        self._checked_cursor()
        self._query("INSERT INTO gate_consumer (name, id, tid) VALUES (%s, %s, %s) "
                    "ON DUPLICATE KEY UPDATE id = VALUES(id), tid = VALUES(tid)",
                    (self.name, self.cursor.id, self.cursor.tid))
        self._committed = self.cursor

    def follow(self, idle_seconds: float = 0.5) -> Iterator[Change]:
        """Every change from the cursor on, forever, sleeping ``idle_seconds`` whenever caught up.

        A named consumer commits before it fetches the next batch, that is after the caller has
        processed every change of the previous one (and when filters skipped rows).
        """
        while True:
            batch = self.poll()
            yield from batch
            if self.name is not None and self.cursor != self._committed:
                self.commit()
            if not batch:
                time.sleep(idle_seconds)
