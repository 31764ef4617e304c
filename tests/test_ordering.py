"""The ordering engine, the checkpointer and the sequencer without a server: binlog order in, numbered
chunks and checkpoint boundaries out, whatever order the decoders finish in."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gate.capture import checkpoint
from gate.capture.checkpoint import Checkpointer
from gate.capture.decoder import Job
from gate.capture.ordering import Ordering
from gate.capture.reader import Begin, Commit, Idle, Item, Position, Rows, Statement
from gate.capture.sequencer import DCRow, Sequencer
from gate.capture.snapshot import Note, SnapshotOp
from gate.capture.translate import Change
from gate.common.dc import ResumeState

TABLE = SimpleNamespace(table_id=7)  # stands for the library's Table; the ordering only carries it


def row_event(name: str, rows: int, timestamp: int = 1_700_000_000) -> Rows:
    """A row event whose raw bytes name it; :class:`FakeDecoders` turns it into ``rows`` changes."""
    raw = f"{name}:{rows}".encode()
    event = SimpleNamespace(table_id=7, table_map={7: TABLE}, packet=SimpleNamespace(packet=SimpleNamespace(_data=raw)),
                            timestamp=timestamp, schema="db", table="t")
    return Rows("INSERT", event)


def decode(raw: bytes) -> list[Change]:
    name, count = raw.decode().split(":")
    return [("db", "t", "INSERT", f'{{"NEW":["{name}.{n}"]}}') for n in range(int(count))]


@dataclass
class FakeDecoders:
    """Decodes submitted jobs when told to, newest first when ``reverse`` (out-of-order completion)."""

    reverse: bool = False
    hold: bool = False  # keep jobs undecoded until release()
    submitted: list[Job] = field(default_factory=list)
    pending: list[Job] = field(default_factory=list)

    def submit(self, job: Job) -> None:
        self.submitted.append(job)
        self.pending.append(job)

    def collect(self, timeout: float = 0.0) -> None:
        if self.hold and not timeout:
            return
        self.release()

    def release(self) -> None:
        for job in reversed(self.pending) if self.reverse else list(self.pending):
            job.result = [decode(raw) for _optype, _table, raw in job.events]
        self.pending.clear()


@dataclass
class Chunks:
    """What the ordering emitted: (chunk number, row ids, tids, row data, boundary id/tid/position)."""

    got: list[tuple[int, list[DCRow], ResumeState | None]] = field(default_factory=list)
    resolved: list[list[str]] = field(default_factory=list)
    full: list[tuple[int, list[DCRow], ResumeState | None, list[Note]]] = field(default_factory=list)

    def __call__(self, no: int, rows: list[DCRow], boundary: ResumeState | None, resolved: list[str],
                 notes: list[Note]) -> None:
        self.got.append((no, rows, boundary))
        self.resolved.append(resolved)
        self.full.append((no, rows, boundary, notes))

    @property
    def rows(self) -> list[tuple[int, int, str]]:
        return [(r[0], r[1], r[7]) for _no, rows, _b in self.got for r in rows]

    @property
    def boundaries(self) -> list[tuple[int, int, int | None]]:
        return [(b.id, b.tid, b.log_pos) for _no, _rows, b in self.got if b is not None]


def commit(pos: int, xa: tuple[str, str] | None = None, timestamp: int = 1_700_000_000) -> Commit:
    return Commit(Position("bin.000001", pos, None), timestamp, xa)


@dataclass
class Prepared:
    """An in-memory store of prepared XA changes."""

    stored: dict[str, dict[int, tuple[Change, int]]] = field(default_factory=dict)
    stores: int = 0

    def prepare(self, xid: str) -> None:
        self.stored.pop(xid, None)

    def store(self, xid: str, first_seq: int, changes: list[tuple[Change, int]]) -> None:
        self.stores += 1
        for n, pair in enumerate(changes):
            self.stored.setdefault(xid, {})[first_seq + n] = pair

    def read(self, xid: str, after_seq: int, limit: int) -> list[tuple[int, Change]]:
        seqs = sorted(seq for seq in self.stored.get(xid, {}) if seq > after_seq)[:limit]
        return [(seq, self.stored[xid][seq][0]) for seq in seqs]


def feed(ordering: Ordering, items: list[Item], stream: Any = "stream-1") -> None:
    """What the pipeline's loop does with each item."""
    for item in items:
        if type(item) is Rows:
            ordering.rows(item, stream)
        elif type(item) is Begin:
            ordering.begin(item.xid)
        elif type(item) is Commit:
            ordering.commit(item)
        elif type(item) is Statement:
            ordering.statement(("db", "t", "ALTERTABLE", f'{{"sql":"{item.sql}"}}'), item.timestamp)
        ordering.apply()


def make(decoders: FakeDecoders, batch_rows: int = 1000, job_bytes: int = 1 << 20,
         last_id: int = 0, last_tid: int = 0, prepared: Prepared | None = None) -> tuple[Ordering, Chunks]:
    chunks = Chunks()
    ordering = Ordering(Sequencer(last_id, last_tid, "src:3306"), "src:3306", decoders, chunks, batch_rows,
                        prepared or Prepared(), job_format=lambda stream: stream, flush_after=3600.0,
                        job_bytes=job_bytes, snapshots=lambda timeout: None)
    return ordering, chunks


BEGIN = Begin(1_700_000_000, 1, None)
# three transactions: two row events, a DDL statement, one row event
WORKLOAD: list[Item] = [
    BEGIN, row_event("a", 2), row_event("b", 1), commit(100),
    BEGIN, Statement("db", "ALTER TABLE t ADD c INT", 1_700_000_000), commit(200),
    BEGIN, row_event("c", 3), commit(300),
]
EXPECTED_ROWS = [
    (1, 1, '{"NEW":["a.0"]}'), (2, 1, '{"NEW":["a.1"]}'), (3, 1, '{"NEW":["b.0"]}'),
    (4, 2, '{"sql":"ALTER TABLE t ADD c INT"}'),
    (5, 3, '{"NEW":["c.0"]}'), (6, 3, '{"NEW":["c.1"]}'), (7, 3, '{"NEW":["c.2"]}'),
]


def test_in_order_decoding_numbers_rows_in_binlog_order_with_one_boundary_per_transaction() -> None:
    ordering, chunks = make(FakeDecoders())
    feed(ordering, WORKLOAD)
    ordering.drain()
    assert chunks.rows == EXPECTED_ROWS
    assert chunks.boundaries == [(7, 3, 300)]  # one chunk: the newest boundary in it
    assert [no for no, _r, _b in chunks.got] == [1]


@pytest.mark.parametrize("job_bytes", [1, 8, 1 << 20])
def test_out_of_order_decoding_gives_the_same_rows_as_in_order(job_bytes: int) -> None:
    """Jobs finish newest first and only when the ordering waits: ids, tids and data do not change."""
    decoders = FakeDecoders(reverse=True, hold=True)
    ordering, chunks = make(decoders, job_bytes=job_bytes)
    feed(ordering, WORKLOAD)
    assert chunks.rows == []  # nothing decoded yet: nothing numbered, not even the statement behind the rows
    ordering.drain()
    assert chunks.rows == EXPECTED_ROWS
    assert chunks.boundaries[-1] == (7, 3, 300)
    if job_bytes == 1:
        assert len(decoders.submitted) == 3  # one job per row event


def test_a_statement_behind_undecoded_rows_waits_for_them() -> None:
    decoders = FakeDecoders(hold=True)
    ordering, chunks = make(decoders)
    feed(ordering, WORKLOAD[:7])  # transaction 1 (rows) and transaction 2 (statement)
    assert ordering.waiting == 6 and chunks.got == []  # all but the first BEGIN wait
    ordering.drain()
    assert chunks.rows == EXPECTED_ROWS[:4]
    assert chunks.boundaries == [(4, 2, 200)]


def test_a_transaction_larger_than_a_chunk_has_its_boundary_only_in_its_last_chunk() -> None:
    ordering, chunks = make(FakeDecoders(), batch_rows=2)
    big = [row_event(f"big{n}", 1) for n in range(5)]
    feed(ordering, [BEGIN, *big, commit(100), BEGIN, row_event("next", 1), commit(200)])
    ordering.drain()
    # the second transaction's row fills chunk 3, which carries the first one's boundary; its own
    # boundary comes in a chunk without rows
    assert [[r[0] for r in rows] for _no, rows, _b in chunks.got] == [[1, 2], [3, 4], [5, 6], []]
    assert [b and (b.id, b.tid) for _no, _rows, b in chunks.got] == [None, None, (5, 1), (6, 2)]


def test_a_chunk_full_before_the_commit_is_emitted_without_that_transactions_boundary() -> None:
    ordering, chunks = make(FakeDecoders(), batch_rows=3)
    feed(ordering, [BEGIN, row_event("a", 1), commit(100), BEGIN, row_event("b", 2), row_event("c", 1), commit(200)])
    ordering.drain()
    # chunk 1 holds a.0 and b.0, b.1 (full): it carries transaction 1's boundary only
    assert [(no, [r[0] for r in rows], b and b.id) for no, rows, b in chunks.got] == [(1, [1, 2, 3], 1), (2, [4], 4)]


@pytest.mark.parametrize("hold", [False, True])
def test_a_stop_leaves_out_the_transaction_read_without_its_end(hold: bool) -> None:
    """gate stops with a transaction's start and rows read but not its end: its rows are not emitted, the
    last chunk ends at the previous boundary (``hold``: the open transaction's rows are not decoded yet)."""
    ordering, chunks = make(FakeDecoders(hold=hold))
    feed(ordering, [BEGIN, row_event("a", 2), commit(100), BEGIN, row_event("b", 3), row_event("c", 1)])
    ordering.drain(whole_transactions=True)
    assert chunks.rows == [(1, 1, '{"NEW":["a.0"]}'), (2, 1, '{"NEW":["a.1"]}')]
    assert chunks.boundaries == [(2, 1, 100)]


def test_a_stop_after_a_chunk_of_the_open_transaction_went_out_leaves_out_the_rest() -> None:
    """Rows of the open transaction already emitted (a full chunk) stay emitted, above the boundary, as
    after a kill; the rest is not emitted."""
    ordering, chunks = make(FakeDecoders(), batch_rows=2, job_bytes=1)
    feed(ordering, [BEGIN, row_event("a", 1), commit(100), BEGIN, row_event("b", 1), row_event("c", 1)])
    assert ordering.waiting == 0  # c.0 numbered, not emitted yet
    ordering.drain(whole_transactions=True)
    assert [(no, [r[0] for r in rows], b and b.id) for no, rows, b in chunks.got] == [(1, [1, 2], 1)]


def test_a_transaction_with_no_captured_change_takes_no_tid_but_moves_the_boundary() -> None:
    ordering, chunks = make(FakeDecoders(), last_id=10, last_tid=4)
    feed(ordering, [BEGIN, commit(100), BEGIN, row_event("a", 1), commit(200), BEGIN, commit(300)])
    ordering.drain()
    assert chunks.rows == [(11, 5, '{"NEW":["a.0"]}')]
    assert chunks.boundaries == [(11, 5, 300)]


def test_a_reconnect_starts_a_new_job_for_the_new_stream() -> None:
    """Events of a new stream are rebuilt with that stream's format: never mixed into one job."""
    decoders = FakeDecoders()
    ordering, chunks = make(decoders)
    feed(ordering, [BEGIN, row_event("a", 1)], stream="stream-1")
    feed(ordering, [row_event("b", 1), commit(100)], stream="stream-2")
    ordering.drain()
    assert [job.fmt for job in decoders.submitted] == ["stream-1", "stream-2"]
    assert chunks.rows == [(1, 1, '{"NEW":["a.0"]}'), (2, 1, '{"NEW":["b.0"]}')]


def test_idle_without_anything_read_emits_nothing() -> None:
    ordering, chunks = make(FakeDecoders())
    feed(ordering, [Idle()])
    ordering.drain()
    assert chunks.got == []


def test_an_xa_transaction_is_numbered_at_its_commit_as_one_transaction() -> None:
    """PREPARE stores the rows (none numbered), another transaction commits in between, COMMIT numbers
    them with one tid and the commit's time; the chunk holding the outcome lists the xid."""
    prepared = Prepared()
    ordering, chunks = make(FakeDecoders(), batch_rows=2, prepared=prepared)
    xa_events = [row_event(f"xa{n}", 1) for n in range(3)]
    feed(ordering, [Begin(0, 1, None, "X'78',X'',1"), *xa_events, commit(100, ("PREPARE", "X'78',X'',1")),
                    BEGIN, row_event("plain", 1), commit(200),
                    Begin(0, 1, None, None), commit(300, ("COMMIT", "X'78',X'',1"), timestamp=86_400)])
    ordering.drain()
    assert prepared.stores == 2  # batch_rows bounds what waits in memory: 2 + 1
    assert chunks.rows == [(1, 1, '{"NEW":["plain.0"]}'), (2, 2, '{"NEW":["xa0.0"]}'),
                           (3, 2, '{"NEW":["xa1.0"]}'), (4, 2, '{"NEW":["xa2.0"]}')]
    assert {r[4] for _no, rows, _b in chunks.got for r in rows[1:]} == {"1970-01-02 00:00:00"}
    assert chunks.boundaries[-1] == (4, 2, 300)
    assert [xids for xids in chunks.resolved if xids] == [["X'78',X'',1"]]


def test_a_rolled_back_xa_transaction_gives_no_row_and_is_resolved() -> None:
    ordering, chunks = make(FakeDecoders())
    feed(ordering, [Begin(0, 1, None, "x1"), row_event("xa", 2), commit(100, ("PREPARE", "x1")),
                    Begin(0, 1, None, None), commit(200, ("ROLLBACK", "x1"))])
    ordering.drain()
    assert chunks.rows == [] and chunks.boundaries == [(0, 0, 200)]
    assert chunks.resolved == [["x1"]]


def test_an_xid_used_again_emits_the_chunk_resolving_its_earlier_use_first() -> None:
    ordering, chunks = make(FakeDecoders())
    feed(ordering, [Begin(0, 1, None, "x1"), row_event("a", 1), commit(100, ("PREPARE", "x1")),
                    Begin(0, 1, None, None), commit(200, ("COMMIT", "x1")),
                    Begin(0, 1, None, "x1"), row_event("b", 1), commit(300, ("PREPARE", "x1")),
                    Begin(0, 1, None, None), commit(400, ("COMMIT", "x1"))])
    ordering.drain()
    assert chunks.rows == [(1, 1, '{"NEW":["a.0"]}'), (2, 2, '{"NEW":["b.0"]}')]
    assert chunks.resolved == [["x1"], ["x1"]]  # two chunks: the second use waited for the first's


# --- checkpointer -------------------------------------------------------------------------------

def state(id_: int) -> ResumeState:
    return ResumeState(id_, id_, "bin.000001", id_ * 10, None, "src:3306", 0)


def test_checkpointer_reaches_only_the_contiguous_prefix_of_committed_chunks() -> None:
    cp = Checkpointer("ch", state(0), interval=0.0)
    cp.add(1, state(1), has_rows=True)
    cp.add(2, None, has_rows=True)
    cp.add(3, state(3), has_rows=True)
    cp.committed([3])
    assert cp.target is None and not cp.due()  # chunk 1 is not committed: nothing is reachable
    cp.committed([1])
    assert cp.target == state(1)  # chunk 2 (no boundary) still holds back chunk 3's
    cp.committed([2])
    assert cp.target == state(3) and cp.pending == 0


def test_checkpointer_counts_a_chunk_without_rows_as_committed() -> None:
    cp = Checkpointer("ch", state(0), interval=0.0)
    cp.add(1, state(1), has_rows=True)
    cp.add(2, state(2), has_rows=False)  # a boundary alone (a filtered transaction)
    assert cp.target is None
    cp.committed([1])
    assert cp.target == state(2) and cp.due()


def test_checkpointer_is_due_as_soon_as_a_boundary_is_reachable_and_after_a_slow_write_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint thread waits for a reachable boundary, not for its next poll, and a write that took
    longer than the interval (a long round trip to the DC) is followed at once by the next: at 300 ms a
    chunk's boundary used to wait a poll (up to the interval) after each write, on top of the round trips."""
    cp = Checkpointer("ch", state(0), interval=0.2)
    stop = threading.Event()
    threading.Timer(0.05, lambda: (cp.add(1, state(1), has_rows=True), cp.committed([1]))).start()
    started = time.monotonic()
    assert cp.wait_due(stop)
    assert 0.04 <= time.monotonic() - started < 0.15  # woken by the boundary, not at the next 0.2 s poll
    monkeypatch.setattr(checkpoint, "in_one_round_trip", lambda conn, fill, first=None: (time.sleep(0.3), fill(Sink())))
    cp.add(2, state(2), has_rows=True)
    assert cp.write(None)  # type: ignore[arg-type]  # the DC's 0.3 s round trip, faked above
    assert cp.state == state(1)
    cp.committed([2])  # reached while the write was under way
    started = time.monotonic()
    assert cp.wait_due(stop)
    assert time.monotonic() - started < 0.05  # the write began more than an interval ago: at once
    stop.set()
    assert not cp.wait_due(stop)


class Sink:
    """A cursor that takes statements and sends nothing (what in_one_round_trip's ``fill`` is given)."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    def execute(self, query: str, args: Any = None) -> int:
        self.statements.append((query, args))
        return 0

    def executemany(self, query: str, args: Any) -> int:
        self.statements.extend((query, a) for a in args)
        return 0


# --- sequencer ----------------------------------------------------------------------------------

def test_sequencer_gives_gap_free_ids_and_one_tid_per_transaction_with_changes() -> None:
    seq = Sequencer(100, 7, "src:3306")
    change = ("db", "t", "INSERT", "{}")
    seq.begin()
    first = seq.number([change, change], 0)
    seq.begin()  # a transaction without changes
    seq.begin()
    second = seq.number([change], 86_400)
    assert [(r[0], r[1], r[4], r[5]) for r in first + second] == [
        (101, 8, "1970-01-01 00:00:00", "src:3306"), (102, 8, "1970-01-01 00:00:00", "src:3306"),
        (103, 9, "1970-01-02 00:00:00", "src:3306")]


def test_a_snapshot_slot_holds_the_numbering_until_its_rows_come_then_numbers_them_as_own_transactions() -> None:
    """A slot after the first transaction's end, placed while the next transaction's rows still wait for the
    decoders: it goes in before them; its START and rows take their own tids and the next transaction is
    numbered after it; the notes reach the checkpointer with a boundary at or after the slot's rows."""
    decoders = FakeDecoders(hold=True)
    ordering, chunks = make(decoders)
    feed(ordering, [BEGIN, row_event("a", 1), commit(100), BEGIN, row_event("b", 1)])
    slot = SnapshotOp()
    assert ordering.snapshot(slot, after=lambda position: position.log_pos == 100)
    feed(ordering, [commit(200)])
    assert [type(op).__name__ for op in ordering._ops][-4:] == ["SnapshotOp", "BeginOp", "RowsOp", "CommitOp"]
    start, chunk = Note(9, "start", key=["id"]), Note(9, "chunk", last='["2"]', rows=2)
    slot.txns = [([("db", "t", "SNAPSHOTSTART", "{}")], start),
                 ([("db", "t", "SNAPSHOT", "r1"), ("db", "t", "SNAPSHOT", "r2")], chunk)]
    ordering.drain()
    assert chunks.rows == [(1, 1, '{"NEW":["a.0"]}'), (2, 2, "{}"), (3, 3, "r1"), (4, 3, "r2"),
                           (5, 4, '{"NEW":["b.0"]}')]
    assert chunks.boundaries[-1] == (5, 4, 200)
    got = [(b.id, b.tid, b.log_pos, notes) for _no, _rows, b, notes in chunks.full if b is not None]
    assert got == [(5, 4, 200, [start, chunk])]  # the notes go with a boundary at or after the slot's rows


def test_slots_placed_at_the_same_transaction_end_are_numbered_in_the_order_they_were_placed() -> None:
    """A table's next chunk whose read view shows the same position as its previous one (no transaction in
    between) goes after that chunk's slot, not before it: SNAPSHOTSTART, the rows and SNAPSHOTEND keep
    their order."""
    ordering, chunks = make(FakeDecoders(hold=True))
    feed(ordering, [BEGIN, row_event("a", 1), commit(100), BEGIN, row_event("b", 1)])
    first, second = SnapshotOp(), SnapshotOp()
    assert ordering.snapshot(first, after=lambda position: position.log_pos == 100)
    assert ordering.snapshot(second, after=lambda position: position.log_pos == 100)
    first.txns = [([("db", "t", "SNAPSHOTSTART", "{}")], Note(9, "start", key=["id"])),
                  ([("db", "t", "SNAPSHOT", "r1")], Note(9, "chunk", last='["1"]', rows=1))]
    second.txns = [([("db", "t", "SNAPSHOT", "r2")], Note(9, "chunk", last='["2"]', rows=1)),
                   ([("db", "t", "SNAPSHOTEND", "{}")], Note(9, "end", state="done"))]
    feed(ordering, [commit(200)])
    ordering.drain()
    assert chunks.rows == [(1, 1, '{"NEW":["a.0"]}'), (2, 2, "{}"), (3, 3, "r1"), (4, 4, "r2"), (5, 5, "{}"),
                           (6, 6, '{"NEW":["b.0"]}')]


def test_a_snapshot_chunk_goes_to_the_writers_in_batches_of_up_to_ten_times_batch_rows_bounded_by_bytes() -> None:
    """Fewer, larger writer batches for a snapshot chunk's rows: up to SNAPSHOT_BATCH_FACTOR x batch_rows,
    fewer when its rows are large (about SNAPSHOT_BATCH_BYTES a batch); one transaction all the same."""
    for data, sizes in (("r", [20, 20, 5]), ("x" * (1 << 20), [7, 7, 1])):  # 8 MB of 1 MB rows: 7 a batch
        ordering, chunks = make(FakeDecoders(), batch_rows=2)
        rows = sum(sizes)
        slot = SnapshotOp([([("db", "t", "SNAPSHOT", data)] * rows, Note(9, "chunk", last='["1"]', rows=rows))],
                          1_700_000_000)
        ordering.snapshot(slot)
        ordering.drain()
        assert [len(batch) for _no, batch, _b in chunks.got if batch] == sizes
        assert {r[1] for r in chunks.rows} == {1} and [r[0] for r in chunks.rows] == list(range(1, rows + 1))


def test_a_slot_whose_boundary_is_numbered_already_is_refused() -> None:
    ordering, chunks = make(FakeDecoders())
    feed(ordering, [BEGIN, row_event("a", 1), commit(100), BEGIN, row_event("b", 1)])
    ordering.apply(wait=True)  # the open transaction's row is numbered
    assert not ordering.snapshot(SnapshotOp(), after=lambda position: position.log_pos == 100)  # numbered: gone
    assert chunks.got == []
