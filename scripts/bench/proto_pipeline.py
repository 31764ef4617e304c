"""Prototype (scratch, issue 6): decode rows in worker processes, write with cheap SQL.

    .venv/bin/python scripts/bench/proto_pipeline.py [--rows 200000] [--workload a|b] [--decoders 1,2] [--writers 1]
                                             [--write values|loaddata|executemany|none]

The main process reads the binlog with BinLogStreamReader but never decodes a row: it forwards the
raw packets of TableMap and row events (plain bytes) in jobs of about --job-rows rows to decoder
processes. A decoder replays the table maps, decodes the rows with python-mysql-replication, renders
and JSON-encodes them with gate's Translator and returns the changes per event. The main process
puts results back in binlog order, numbers them with gate's Sequencer and hands chunks of
--batch rows to writer processes, which insert them (hand-built multi-row INSERT by default).

What it measures: end-to-end rows/s from opening the stream to the last chunk committed, the same
range's bare-reader baseline, and the CPU of each role. It checks that the DC rows are the same
as gate's own translation of the same binlog (ids, tids and JSON) on a sample.

Not a design for production as is: no checkpoints, no filters, no DDL (statements would go
through the main process in order), no reconnects.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psutil
import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import XidEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark as bm  # noqa: E402
import stages  # noqa: E402

from gate.config import ChannelDefaults  # noqa: E402
from gate.reader import Rows  # noqa: E402
from gate.sequencer import Sequencer  # noqa: E402
from gate.translate import TableFilter, Translator  # noqa: E402
from gate.values import fix_library_charsets  # noqa: E402

OPTYPE = {WriteRowsEvent: "INSERT", UpdateRowsEvent: "UPDATE", DeleteRowsEvent: "DELETE"}
ALLOWED = frozenset({TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent})


class _Ctl:
    """What an event asks of the library's control connection while it is built."""

    charset = "utf8mb4"

    def __init__(self, dbms: str) -> None:
        self.dbms = dbms

    def _get_dbms(self) -> str:
        return self.dbms


def decoder_main(inbox: Any, outbox: Any, mysql_version: Any, use_checksum: bool, dbms: str,
                 post_header_lengths: Any, optional_meta_data: bool) -> None:
    fix_library_charsets()
    tables: dict[int, Any] = {}
    translator = Translator(ZoneInfo("UTC"), "base64", TableFilter(), None)
    ctl = _Ctl(dbms)
    while True:
        job = inbox.get()
        if job is None:
            break
        seq, packets = job
        out = []
        for optype, raw in packets:
            wrapper = BinLogPacketWrapper(MysqlPacket(raw, None), tables, ctl, mysql_version, use_checksum, ALLOWED,
                                          None, None, None, None, False, False, False, optional_meta_data,
                                          False, False, post_header_lengths)
            event = wrapper.event
            if optype is None:  # a table map
                tables[event.table_id] = event.get_table()
            else:
                out.append(translator.rows(Rows(optype, event)))
        outbox.put((seq, out))


def writer_main(port: int, db: str, method: str, inbox: Any, outbox: Any) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=db,
                           charset="utf8mb4", autocommit=False, local_infile=(method == "loaddata"))
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    conn.commit()
    path = f"/dev/shm/gate-proto-{os.getpid()}.tsv"
    with conn.cursor() as cur:
        while True:
            job = inbox.get()
            if job is None:
                break
            seq, rows = job
            if method == "executemany":
                cur.executemany(stages.INSERT_PREFIX + "(%s, %s, %s, %s, %s, %s, %s, %s)", rows)
            elif method == "values":
                cur.execute(stages.sql_values(rows))
            elif method == "loaddata":
                with open(path, "wb") as f:
                    f.write(stages.tsv(rows))
                cur.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE transfer_data CHARACTER SET utf8mb4 "
                            "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
                            "(id, tid, dbname, tablename, create_time, instance_name, optype, data)")
            conn.commit()
            outbox.put(seq)
    conn.close()
    if os.path.exists(path):
        os.unlink(path)


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def run(box: Any, start: bm.Position, end: bm.Position, decoders: int, writers: int, method: str,
        job_rows: int, batch: int, db: str) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    if method != "none":
        bm.new_channel(box.dc, box.source, db, None, ChannelDefaults(), ())
    # a probe stream, to learn mysql_version and checksum before starting the decoders
    dec_in = [ctx.Queue(maxsize=8) for _ in range(decoders)]
    dec_out = ctx.Queue()
    wr_in = ctx.Queue(maxsize=4 * max(1, writers))
    wr_out = ctx.Queue()
    t0 = time.perf_counter()
    c0 = time.process_time()
    stream = BinLogStreamReader(
        connection_settings=box.source.connection_settings(), server_id=98, resume_stream=True,
        log_file=start[0], log_pos=start[1], blocking=False,
        only_events=[TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent])
    procs: list[Any] = []
    started = False
    maps: dict[int, bytes] = {}
    job: list[tuple[str | None, bytes]] = []
    job_meta: list[int] = []  # event timestamps, in order
    job_has: set[int] = set()
    job_rows_est = 0
    seq = 0
    next_seq = 0
    pending: dict[int, Any] = {}
    metas: dict[int, list[Any]] = {}  # seq -> [(timestamp, txn_begin_flag)]
    sequencer = Sequencer(0, 0, "127.0.0.1:1")
    chunk: list[Any] = []
    chunk_no = 0
    acked = 0
    submitted = 0
    rows_total = 0
    # transaction boundaries: a job entry of kind 'X' marks a commit; the sequencer's begin() follows it
    boundaries: dict[int, list[int]] = {}  # seq -> indexes of events after which a transaction ended

    def start_procs(version: Any, checksum: bool, dbms: str, post_header_lengths: Any, meta: bool) -> None:
        for k in range(decoders):
            p = ctx.Process(target=decoder_main, args=(dec_in[k], dec_out, version, checksum, dbms,
                                                       post_header_lengths, meta), daemon=True)
            p.start()
            procs.append(("decoder", p))
        if method != "none":
            for _ in range(writers):
                p = ctx.Process(target=writer_main, args=(box.dc.port, db, method, wr_in, wr_out), daemon=True)
                p.start()
                procs.append(("writer", p))

    ends: list[int] = []  # indexes into job_meta where a transaction ended

    def send_job() -> None:
        nonlocal job, job_meta, job_has, job_rows_est, seq, ends
        if not job:
            return
        while True:
            try:
                dec_in[seq % decoders].put((seq, job), timeout=1.0)
                break
            except queue.Full:
                alive()
        metas[seq] = job_meta
        boundaries[seq] = ends
        seq += 1
        job, job_meta, job_has, job_rows_est, ends = [], [], set(), 0, []
        drain(block=False)

    def alive() -> None:
        dead = [f"{role} {p.pid}" for role, p in procs if not p.is_alive()]
        if dead:
            raise RuntimeError(f"prototype process(es) died: {dead}")

    def flush_chunk(final: bool = False) -> None:
        nonlocal chunk, chunk_no, submitted
        if chunk and (final or len(chunk) >= batch):
            chunk_no += 1
            submitted += 1
            if method != "none":
                wr_in.put((chunk_no, chunk))
            chunk = []

    def drain(block: bool) -> None:
        """Take decoder results (one, waiting up to 1 s, when ``block``; else all that are there),
        number them in binlog order and pass full chunks to the writers."""
        nonlocal next_seq, rows_total, acked
        while True:
            try:
                s, out = dec_out.get(timeout=1.0) if block else dec_out.get_nowait()
                pending[s] = out
                got = True
            except queue.Empty:
                got = False
                if block:
                    alive()
            while next_seq in pending:
                out = pending.pop(next_seq)
                stamps = metas.pop(next_seq)
                txn_ends = set(boundaries.pop(next_seq))
                if -1 in txn_ends:
                    sequencer.begin()
                    flush_chunk()
                for i, (changes, ts) in enumerate(zip(out, stamps)):
                    numbered = sequencer.number(changes, ts)
                    chunk.extend(numbered)
                    rows_total += len(numbered)
                    if i in txn_ends:
                        sequencer.begin()
                        flush_chunk()
                next_seq += 1
            if method != "none":
                try:
                    while True:
                        wr_out.get_nowait()
                        acked += 1
                except queue.Empty:
                    pass
            if block or not got:
                return

    n_events = 0
    for event in stream:
        if not started:
            start_procs(stream.mysql_version, stream._BinLogStreamReader__use_checksum,
                        stream._ctl_connection._get_dbms(), stream._BinLogStreamReader__post_header_lengths,
                        stream._BinLogStreamReader__optional_meta_data)
            started = True
        kind = type(event)
        if kind is XidEvent:
            ends.append(len(job_meta) - 1)  # -1: the transaction ended before this job's first event
            if job_rows_est >= job_rows:
                send_job()
            if (stream.log_file, stream.log_pos) >= end:
                break
            continue
        raw = event.packet.packet._data
        if kind is TableMapEvent:
            maps[event.table_id] = raw
            job.append((None, raw))
            job_has.add(event.table_id)
            continue
        if event.table_id not in job_has:
            job.append((None, maps[event.table_id]))
            job_has.add(event.table_id)
        job.append((OPTYPE[kind], raw))
        job_meta.append(event.timestamp)
        job_rows_est += max(1, event.event_size // 64)  # a guess; only sizes the jobs
        n_events += 1
        if job_rows_est >= 8 * job_rows:  # inside a big transaction
            send_job()
    stream.close()
    send_job()
    while next_seq < seq:
        drain(block=True)
    flush_chunk(final=True)
    if method != "none":
        while acked < submitted:
            wr_out.get()
            acked += 1
    wall = time.perf_counter() - t0
    main_cpu = time.process_time() - c0
    pids = {role: [p.pid for r, p in procs if r == role] for role in ("decoder", "writer")}
    role_cpu = {role: cpu_of(p) for role, p in pids.items()}
    for q in dec_in:
        q.put(None)
    for _ in range(writers if method != "none" else 0):
        wr_in.put(None)
    for _, p in procs:
        p.join(timeout=10)
    check = None
    if method != "none":
        with box.dc.connect(db) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*), MAX(id), MAX(tid) FROM transfer_data")
            check = cur.fetchone()
        bm.drop_channel(box.dc, db)
    return {"decoders": decoders, "writers": writers, "method": method, "rows": rows_total, "wall_s": wall,
            "rows_per_s": rows_total / wall, "main_cpu_us_per_row": main_cpu / rows_total * 1e6,
            "decoder_cpu_us_per_row": role_cpu["decoder"] / rows_total * 1e6,
            "writer_cpu_us_per_row": role_cpu["writer"] / rows_total * 1e6, "dc_check": check}


def reference_rows(box: Any, start: bm.Position, end: bm.Position, limit: int) -> list[Any]:
    _, dc_rows = stages.collect(box, start, end, 0)
    return dc_rows[:limit]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--workload", choices=["a", "b"], default="a")
    parser.add_argument("--decoders", default="1,2")
    parser.add_argument("--writers", type=int, default=1)
    parser.add_argument("--write", default="values")
    parser.add_argument("--job-rows", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--wait-quiet", type=float, default=60.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gate-proto-"))
    box = bm.Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True)
    results: dict[str, Any] = {"args": vars(args), "runs": []}
    try:
        box.up()
        title, db, ddl, load = bm.WORKLOADS[args.workload]
        with box.source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            for statement in ddl:
                cur.execute(statement)
            cur.execute("FLUSH BINARY LOGS")
            start = bm.master_position(conn)
            load(conn, args.rows)
            end = bm.master_position(conn)
        bm.wait_quiet(args.wait_quiet)
        base = bm.baseline(box.source, start, end)
        results["baseline"] = base
        print(f"workload {title}: baseline {base['rows_per_s']:,.0f} rows/s, CPU {base['cpu_us_per_row']:.1f} µs/row",
              flush=True)
        reference = reference_rows(box, start, end, 5000)
        for decoders in map(int, args.decoders.split(",")):
            for method in args.write.split(","):
                bm.wait_quiet(args.wait_quiet)
                r = run(box, start, end, decoders, args.writers, method, args.job_rows, args.batch,
                        f"proto_{decoders}_{method}")
                r["ratio"] = r["rows_per_s"] / base["rows_per_s"]
                results["runs"].append(r)
                print(f"  decoders {decoders} writers {args.writers} write {method:11s}: {r['rows']} rows "
                      f"{r['rows_per_s']:>9,.0f} rows/s (ratio {r['ratio']:.2f}); CPU µs/row main "
                      f"{r['main_cpu_us_per_row']:.1f}, decoders {r['decoder_cpu_us_per_row']:.1f}, writers "
                      f"{r['writer_cpu_us_per_row']:.1f}; DC count/max id/max tid {r['dc_check']}", flush=True)
        # correctness of the prototype's numbering and JSON on a sample: rerun once, keep the DC rows
        r = run_and_keep(box, start, end, args)
        ok = r == [tuple(x) for x in reference[:len(r)]]
        print(f"  sample of {len(r)} DC rows identical to gate's translation: {ok}", flush=True)
        results["sample_identical"] = ok
    finally:
        box.down()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


def run_and_keep(box: Any, start: bm.Position, end: bm.Position, args: argparse.Namespace) -> list[Any]:
    db = "proto_keep"
    bm_drop = bm.drop_channel
    bm.drop_channel = lambda dc, name: None  # type: ignore[assignment]
    try:
        run(box, start, end, 2, 1, "values", args.job_rows, args.batch, db)
    finally:
        bm.drop_channel = bm_drop
    with box.dc.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SELECT id, tid, dbname, tablename, DATE_FORMAT(create_time, '%Y-%m-%d %H:%i:%s'), "
                    "instance_name, optype, data FROM transfer_data ORDER BY id LIMIT 5000")
        rows = [tuple(r) for r in cur.fetchall()]
    bm.drop_channel(box.dc, db)
    return rows


if __name__ == "__main__":
    main()
