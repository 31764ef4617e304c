"""Stage-by-stage costs of gate's pipeline, and prototypes of faster variants (scratch, for issue 6).

    .venv/bin/python scripts/bench/stages.py [--rows 200000] [--workload a|b] [--skip-writers]

On a private sandbox it loads one workload (scripts/bench/benchmark.py's loaders), then measures in this
process, each over the whole binlog range:

  reader   gate's BinlogReader, items only (row events not decoded)
  decode   + every row decoded by python-mysql-replication (event.rows)
  translate + Translator.rows (values rendered, JSON text)
  sequence + Sequencer.number
  pickle   + pickling each 1000-row chunk, as multiprocessing.Queue does in gate's main process

then per-row costs of pieces (CPU µs/row): none_sources, render, json.dumps, a direct JSON builder,
pickle/unpickle of DC rows; and DC writes of the same DC rows by 1..4 processes with three methods:
executemany (gate's writer today), a hand-built multi-row INSERT with str.translate escaping, and
LOAD DATA LOCAL INFILE (tab-separated text in /dev/shm), measuring wall rows/s, client CPU and the DC
mariadbd's CPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark as bm  # noqa: E402

from gate.config import ChannelDefaults  # noqa: E402
from gate.reader import BinlogReader, Commit, Position, Rows  # noqa: E402
from gate.sequencer import Sequencer  # noqa: E402
from gate.translate import TableFilter, Translator, dumps  # noqa: E402
from gate.values import ImageRenderer  # noqa: E402


def cpu() -> float:
    return time.process_time()


def stream_items(box: Any, start: bm.Position, end: bm.Position):  # type: ignore[no-untyped-def]
    reader = BinlogReader(bm.server_config(box.source), 4243, Position(start[0], start[1], None))
    for item in reader:
        yield item
        if type(item) is Commit and (item.position.log_file, item.position.log_pos) >= end:
            reader.stop()
            return


def stage_run(box: Any, start: bm.Position, end: bm.Position, depth: str) -> dict[str, Any]:
    translator = Translator(ZoneInfo("UTC"), "base64", TableFilter(), None)
    sequencer = Sequencer(0, 0, "127.0.0.1:1")
    rows = 0
    chunk: list[Any] = []
    w0, c0 = time.perf_counter(), cpu()
    for item in stream_items(box, start, end):
        if type(item) is Rows:
            if depth == "reader":
                rows += 1  # events, not rows
                continue
            if depth == "decode":
                for r in item.event.rows:
                    rows += 1
                continue
            changes = translator.rows(item)
            if depth == "translate":
                rows += len(changes)
                continue
            numbered = sequencer.number(changes, item.event.timestamp)
            rows += len(numbered)
            if depth == "pickle":
                chunk.extend(numbered)
                if len(chunk) >= 1000:
                    pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)
                    chunk = []
        elif type(item) is Commit:
            sequencer.begin()
    wall, used = time.perf_counter() - w0, cpu() - c0
    return {"stage": depth, "units": rows, "wall_s": wall, "cpu_s": used, "per_s": rows / wall,
            "cpu_us_per_unit": used / rows * 1e6 if rows else 0}


def collect(box: Any, start: bm.Position, end: bm.Position, limit: int) -> tuple[list[Any], list[Any]]:
    """Decoded rows (with their renderer and optype) and DC rows of the first ``limit`` rows."""
    translator = Translator(ZoneInfo("UTC"), "base64", TableFilter(), None)
    sequencer = Sequencer(0, 0, "127.0.0.1:1")
    decoded: list[Any] = []
    dc_rows: list[Any] = []
    for item in stream_items(box, start, end):
        if type(item) is Rows:
            ev = item.event
            if len(decoded) < limit:
                renderer = translator._renderer(ev)
                decoded.extend((renderer, item.optype, r) for r in ev.rows)
            dc_rows.extend(sequencer.number(translator.rows(item), ev.timestamp))
        elif type(item) is Commit:
            sequencer.begin()
    return decoded, dc_rows


def direct_json(renderer: ImageRenderer) -> Any:
    """Prototype: build the NEW/OLD JSON text by concatenation instead of dicts + json.dumps."""
    from json.encoder import encode_basestring  # C implementation, ensure_ascii=False semantics

    enc = encode_basestring
    parts = tuple((name, '{' + enc(name) + ':', render, zero) for name, render, zero in renderer._plan)

    def image(values: dict[str, Any], none_sources: dict[str, str]) -> str:
        out = []
        for (name, prefix, render, zero), v in zip(parts, values.values()):
            if v is not None:
                out.append(prefix + enc(render(v)) + '}')
            elif zero is None or none_sources.get(name, "null") == "null":
                out.append(prefix + 'null}')
            else:
                out.append(prefix + enc(zero) + '}')
        return '[' + ','.join(out) + ']'

    return image


def micro(decoded: list[Any], dc_rows: list[Any]) -> dict[str, float]:
    n = len(decoded)
    out: dict[str, float] = {}

    def timed(name: str, fn: Any, count: int) -> None:
        best = float("inf")
        for _ in range(3):
            gc.collect()
            gc.disable()
            try:
                c0 = cpu()
                fn()
                best = min(best, cpu() - c0)
            finally:
                gc.enable()
        out[name] = best / count * 1e6

    def imgs(r: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, str]]]:
        if "values" in r:
            return [(r["values"], r["none_sources"])]
        return [(r["after_values"], r["after_none_sources"]), (r["before_values"], r["before_none_sources"])]

    timed("render_us", lambda: [renderer.render(v, s) for renderer, _, r in decoded for v, s in imgs(r)], n)
    rendered = [renderer.render(v, s) for renderer, _, r in decoded for v, s in imgs(r)]
    timed("json_dumps_us", lambda: [dumps({"NEW": x}) for x in rendered], n)
    timed("render_and_dumps_us", lambda: [dumps({"NEW": renderer.render(v, s)}) for renderer, _, r in decoded
                                          for v, s in imgs(r)], n)
    builders: dict[int, Any] = {}

    def direct() -> None:
        for renderer, _, r in decoded:
            b = builders.get(id(renderer))
            if b is None:
                b = builders[id(renderer)] = direct_json(renderer)
            for v, s in imgs(r):
                '{"NEW":' + b(v, s) + '}'

    timed("direct_json_us", direct, n)
    # check the direct builder gives the same text (INSERT rows)
    for renderer, _, r in decoded[:200]:
        if "values" in r:
            assert '{"NEW":' + direct_json(renderer)(r["values"], r["none_sources"]) + '}' == \
                dumps({"NEW": renderer.render(r["values"], r["none_sources"])})
    from pymysqlreplication.row_event import RowsEvent

    def none_sources() -> None:
        for _, _, r in decoded:
            for v, _s in imgs(r):
                RowsEvent._get_none_sources(_FakeEvent, v)  # type: ignore[arg-type]

    timed("none_sources_us", none_sources, n)
    chunks = [dc_rows[i:i + 1000] for i in range(0, min(len(dc_rows), 100_000), 1000)]
    m = sum(map(len, chunks))
    timed("pickle_us", lambda: [pickle.dumps(c, protocol=pickle.HIGHEST_PROTOCOL) for c in chunks], m)
    blobs = [pickle.dumps(c, protocol=pickle.HIGHEST_PROTOCOL) for c in chunks]
    timed("unpickle_us", lambda: [pickle.loads(b) for b in blobs], m)
    out["row_json_bytes"] = sum(len(r[7].encode()) for r in dc_rows[:10000]) / min(10000, len(dc_rows))
    return out


class _FakeEvent:
    _RowsEvent__none_sources: dict[str, str] = {}


# --- writer prototypes ------------------------------------------------------------------------

INSERT_PREFIX = "INSERT INTO transfer_data (id, tid, dbname, tablename, create_time, instance_name, optype, data) VALUES "
_SQL_ESCAPE = str.maketrans({"\0": "\\0", "\n": "\\n", "\r": "\\r", "\\": "\\\\", "'": "\\'", '"': '\\"',
                             "\x1a": "\\Z"})
_TSV_ESCAPE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\0": "\\0"})


def _sql_lit(v: Any) -> str:
    """A quoted SQL string literal (NO_BACKSLASH_ESCAPES off): only \\, ' and NUL need escaping."""
    if v is None:
        return "NULL"
    if "\\" in v:
        v = v.replace("\\", "\\\\")
    if "'" in v:
        v = v.replace("'", "\\'")
    if "\0" in v:
        v = v.replace("\0", "\\0")
    return "'" + v + "'"


def _tsv_field(v: Any) -> str:
    if v is None:
        return "\\N"
    if "\\" in v:
        v = v.replace("\\", "\\\\")
    if "\t" in v:
        v = v.replace("\t", "\\t")
    if "\n" in v:
        v = v.replace("\n", "\\n")
    if "\0" in v:
        v = v.replace("\0", "\\0")
    return v


def sql_values(rows: list[Any]) -> str:
    lit = _sql_lit

    return INSERT_PREFIX + ",".join(
        f"({r[0]},{r[1]},{lit(r[2])},{lit(r[3])},'{r[4]}',{lit(r[5])},'{r[6]}',{lit(r[7])})" for r in rows)


def tsv(rows: list[Any]) -> bytes:
    field = _tsv_field

    return "".join(
        f"{r[0]}\t{r[1]}\t{field(r[2])}\t{field(r[3])}\t{r[4]}\t{field(r[5])}\t{r[6]}\t{field(r[7])}\n"
        for r in rows).encode("utf-8")


def _write_proc(port: int, db: str, method: str, chunks: list[list[Any]], barrier: Any, out: Any) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=db,
                           charset="utf8mb4", autocommit=False, local_infile=(method == "loaddata"))
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    conn.commit()
    path = f"/dev/shm/gate-bench-{os.getpid()}.tsv"
    barrier.wait()
    c0 = cpu()
    with conn.cursor() as cur:
        for rows in chunks:
            if method == "executemany":
                cur.executemany(INSERT_PREFIX + "(%s, %s, %s, %s, %s, %s, %s, %s)", rows)
            elif method == "values":
                cur.execute(sql_values(rows))
            else:
                with open(path, "wb") as f:
                    f.write(tsv(rows))
                cur.execute(f"LOAD DATA LOCAL INFILE '{path}' INTO TABLE transfer_data CHARACTER SET utf8mb4 "
                            "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
                            "(id, tid, dbname, tablename, create_time, instance_name, optype, data)")
            conn.commit()
    out.put(cpu() - c0)
    conn.close()
    if os.path.exists(path):
        os.unlink(path)


def write_test(box: Any, dc_rows: list[Any], method: str, procs: int, batch: int) -> dict[str, Any]:
    db = f"w_{method}_{procs}_{batch}"
    bm.new_channel(box.dc, box.source, db, None, ChannelDefaults(), ())
    chunks = [dc_rows[i:i + batch] for i in range(0, len(dc_rows), batch)]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    out = ctx.Queue()
    workers = [ctx.Process(target=_write_proc, args=(box.dc.port, db, method, chunks[k::procs], barrier, out))
               for k in range(procs)]
    for w in workers:
        w.start()
    barrier.wait()
    dc0 = bm.mariadbd_cpu(box.dc)
    t0 = time.perf_counter()
    client = [out.get() for _ in workers]
    wall = time.perf_counter() - t0
    dc_cpu = bm.mariadbd_cpu(box.dc) - dc0
    for w in workers:
        w.join()
    with box.dc.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), SUM(LENGTH(data)) FROM transfer_data")
        count, size = cur.fetchone()
        if method != "executemany":  # same bytes as gate's own path?
            cur.execute("SELECT id, data FROM transfer_data WHERE id IN (1, 2, 3, 500, 1001) ORDER BY id")
            for rid, data in cur.fetchall():
                assert data == dc_rows[rid - 1][7], (method, rid)
    bm.drop_channel(box.dc, db)
    n = len(dc_rows)
    assert count == n, (method, count, n)
    return {"method": method, "procs": procs, "batch": batch, "rows_per_s": n / wall,
            "client_cpu_us_per_row": sum(client) / n * 1e6, "dc_cpu_us_per_row": dc_cpu / n * 1e6,
            "data_bytes": int(size)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--workload", choices=["a", "b"], default="a")
    parser.add_argument("--skip-writers", action="store_true")
    parser.add_argument("--methods", default="executemany,values,loaddata")
    parser.add_argument("--procs", default="1,2,3")
    parser.add_argument("--batches", default="1000")
    parser.add_argument("--json")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gate-stages-"))
    box = bm.Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True)
    results: dict[str, Any] = {"workload": args.workload, "rows": args.rows}
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
        print(f"workload {title}: {start} .. {end}", flush=True)
        base = bm.baseline(box.source, start, end)
        print(f"baseline (bare BinLogStreamReader): {base['rows_per_s']:,.0f} rows/s", flush=True)
        results["baseline"] = base
        results["stages"] = []
        for depth in ("reader", "decode", "translate", "sequence", "pickle"):
            r = stage_run(box, start, end, depth)
            results["stages"].append(r)
            print(f"  {depth:10s} {r['units']:>8} {'events' if depth == 'reader' else 'rows':6s} "
                  f"{r['per_s']:>10,.0f}/s wall   CPU {r['cpu_us_per_unit']:6.1f} µs each", flush=True)
        decoded, dc_rows = collect(box, start, end, 50_000)
        results["micro_us_per_row"] = m = micro(decoded, dc_rows)
        print("  per-row CPU µs: " + ", ".join(f"{k} {v:.2f}" for k, v in m.items()), flush=True)
        del decoded
        if not args.skip_writers:
            results["writes"] = []
            for batch in map(int, args.batches.split(",")):
                for method in args.methods.split(","):
                    for procs in map(int, args.procs.split(",")):
                        r = write_test(box, dc_rows, method, procs, batch)
                        results["writes"].append(r)
                        print(f"  write {method:11s} procs {procs} batch {batch:5d}: {r['rows_per_s']:>9,.0f} rows/s, "
                              f"client CPU {r['client_cpu_us_per_row']:5.1f} µs/row, DC mariadbd "
                              f"{r['dc_cpu_us_per_row']:5.1f} µs/row", flush=True)
    finally:
        box.down()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
