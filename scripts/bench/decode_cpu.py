"""CPU per row of a decoder process: the library's path against gate's compiled decoders, same jobs, one process.

    .venv/bin/python scripts/bench/decode_cpu.py [--rows 20000] [--mixed-rows 10000] [--repeat 5] [--roles]

Loads workloads (a) and (b) of the benchmark into a private source, reads their row events once into
decoder jobs exactly as gate's reader process makes them (``Job.add``, jobs of ``JOB_BYTES``, pickled
as ``DecoderPool.submit`` pickles them), and then runs a decoder process's work on each job, unpickling
included: with ``Translator(compiled=False)`` (python-mysql-replication's per-value decoding and
ImageRenderer, gate before compiled decoders) and ``Translator(compiled=True)``. Also the library's
decoding alone, without rendering (what the bare reader pays for the values). Prints CPU µs per row
(process time, best of ``--repeat``) and checks both paths give identical text. One process, no I/O
while timed: the figures hardly depend on what else the machine runs. The zone is gate's default,
``ZoneInfo("UTC")``, as the decoder processes build it.

``--roles`` also times the rows' way through gate's processes on the same jobs: a decoder's (its work
above plus pickling the result, as its outbox does), the main process's (unpickling the results,
numbering the rows, pickling 1,000-row chunks for the writers) and a writer's (unpickling a chunk,
building its INSERTs as sent). Reading the binlog, the queues' pipes and the DC's side are not in it.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent
from workloads import A_DDL, WIDE_DDL, WIDE_TABLES, load_inserts, load_mixed

from gate.capture.decoder import Job, _decode
from gate.capture.libshim import Ctl, StreamFormat, fix_library_charsets, rebuild_rows_event
from gate.capture.ordering import JOB_BYTES
from gate.capture.reader import ROW_EVENTS, Rows
from gate.capture.sequencer import Sequencer
from gate.capture.translate import TableFilter, Translator
from gate.capture.writer import insert_statements
from gate.common.dc import round_trips
from gate.devtools.sandbox import Sandbox

CHUNK_ROWS = 1000  # gate's default batch_rows


def capture(box: Sandbox, ddl: list[str], db: str, load: Callable[..., int], rows: int) -> list[bytes]:
    """The workload's row events as pickled decoder jobs."""
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        for statement in ddl:
            cur.execute(statement)
        cur.execute("SHOW MASTER STATUS")
        start = cur.fetchone()[:2]
        load(conn, rows)
    stream = BinLogStreamReader(connection_settings=box.source.connection_settings(), server_id=77,
                                resume_stream=True, log_file=start[0], log_pos=start[1], blocking=False,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], only_schemas=[db])
    jobs: list[Job] = []
    try:
        for event in stream:
            if not jobs or jobs[-1].nbytes >= JOB_BYTES:
                jobs.append(Job(len(jobs), StreamFormat.of(stream)))
            jobs[-1].add(Rows(ROW_EVENTS[type(event)], event))
    finally:
        stream.close()
    return [pickle.dumps((job.no, job.fmt, job.events, job.tables, job.rules), pickle.HIGHEST_PROTOCOL) for job in jobs]


def timed(messages: list[bytes], work: Callable[[Any], Any], repeat: int) -> tuple[float, list[Any]]:
    best = float("inf")
    out: list[Any] = []
    for _ in range(repeat):
        t0 = time.process_time()
        out = [work(pickle.loads(message)) for message in messages]
        best = min(best, time.process_time() - t0)
    return best, out


def _values_only(job: Any) -> int:
    """The library's decoding of every value of the job's rows, nothing rendered."""
    _no, fmt, events, tables, _rules = job
    ctl = Ctl(fmt)
    n = 0
    for _optype, key, raw in events:
        for row in rebuild_rows_event(raw, tables[key], fmt, ctl).rows:
            n += 1
            for name, image in row.items():
                if "values" in name:
                    list(image.values())
    return n


def measure(messages: list[bytes], repeat: int) -> dict[str, float]:
    library = Translator(ZoneInfo("UTC"), "base64", TableFilter())
    compiled = Translator(ZoneInfo("UTC"), "base64", TableFilter(), compiled=True)
    bare, counts = timed(messages, _values_only, repeat)
    n = sum(counts)
    lib, lib_out = timed(messages, lambda job: _decode(job, library), repeat)
    comp, comp_out = timed(messages, lambda job: _decode(job, compiled), repeat)
    assert lib_out == comp_out, "the two paths disagree"
    return {"rows": n, "bare_library_us": bare / n * 1e6, "library_path_us": lib / n * 1e6,
            "compiled_us": comp / n * 1e6}


def best_of(work: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        work()
        best = min(best, time.process_time() - t0)
    return best


def roles(messages: list[bytes], repeat: int) -> dict[str, float]:
    """CPU µs per row of each process's part of the rows' way (see the module's docstring)."""
    translator = Translator(ZoneInfo("UTC"), "base64", TableFilter(), compiled=True)

    def decoder() -> list[bytes]:
        return [pickle.dumps((no, _decode(pickle.loads(message), translator), None), pickle.HIGHEST_PROTOCOL)
                for no, message in enumerate(messages)]

    results = decoder()

    def main_process() -> list[bytes]:
        sequencer, rows, chunks = Sequencer(0, 0, "bench:1"), [], []
        for result in results:
            for changes in pickle.loads(result)[1]:
                rows.extend(sequencer.number(changes, 1_700_000_000))
                if len(rows) >= CHUNK_ROWS:
                    chunks.append(pickle.dumps((len(chunks), rows), pickle.HIGHEST_PROTOCOL))
                    rows = []
        return chunks

    chunks = main_process()

    def writer() -> None:
        for chunk in chunks:
            round_trips([*insert_statements(pickle.loads(chunk)[1]), b"COMMIT"], 1 << 26)

    n = sum(len(changes) for result in results for changes in pickle.loads(result)[1])
    return {name: best_of(work, repeat) / n * 1e6
            for name, work in (("decoder", decoder), ("main", main_process), ("writer", writer))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--mixed-rows", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--roles", action="store_true", help="also the rows' way through decoder, main process, writer")
    args = parser.parse_args()
    fix_library_charsets()
    box = Sandbox(Path(tempfile.mkdtemp(prefix="gate-decode-")) / "sandbox", with_standby=False,
                  tied_to_parent=True)
    box.up()
    try:
        loads = {"a": ([A_DDL], "bench_a", load_inserts, args.rows),
                 "b": ([WIDE_DDL.format(n=n) for n in range(WIDE_TABLES)], "bench_b", load_mixed, args.mixed_rows)}
        print("CPU µs per row of a decoder process's work (unpickle the job, rebuild each event, decode, render)")
        print("workload  rows    library values only  library path (gate before)  compiled  compiled/library path")
        captured = {key: capture(box, ddl, db, load, rows) for key, (ddl, db, load, rows) in loads.items()}
        for key, messages in captured.items():
            m = measure(messages, args.repeat)
            print(f"{key:<8}  {m['rows']:<6}  {m['bare_library_us']:>8.2f} us/row      "
                  f"{m['library_path_us']:>8.2f} us/row                {m['compiled_us']:>6.2f}    "
                  f"{m['compiled_us'] / m['library_path_us']:.2f}", flush=True)
        if args.roles:
            print("CPU µs per row of the rows' way: decoder (+ pickling its result) / main process (unpickle, "
                  "number, pickle chunks) / writer (unpickle, INSERTs as sent)")
            for key, messages in captured.items():
                r = roles(messages, args.repeat)
                print(f"{key:<8}  {r['decoder']:6.2f} / {r['main']:5.2f} / {r['writer']:5.2f}", flush=True)
    finally:
        box.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
