"""The DC's ingest ceiling for the rows gate wrote, and what the DC server pays per row on each write path.

    .venv/bin/python scripts/bench/ceiling.py [--rows 200000] [--repeat 3] [--json FILE]

:func:`measure_ceiling` is the benchmark's hook (benchmark.py and snapshot.py call it before they drop a
channel): it exports the channel's transfer_data rows (``SELECT ... INTO OUTFILE`` on the DC server, in id
order), loads them with one ``LOAD DATA INFILE`` into an empty copy of transfer_data (``CREATE TABLE ...
LIKE``: the same columns, indexes and server) ``repeat`` times, and returns the median rows/s: the
fastest the DC server stores exactly those rows, the ceiling gate's rows/s is read against.

Run as a script it is the profile of the DC side: on its own sandbox it writes ``--rows`` rows shaped like
workload a's into a channel and times the same rows through each write path (gate's multi-row INSERTs in
transactions of ``batch_rows``, larger transactions and statements, one or two sessions, LOAD DATA LOCAL
of client-side files, without the secondary indexes), printing rows/s, the DC server's CPU µs per row and
its redo bytes, data bytes, fsyncs, commits and handler writes per row of each. :func:`ceiling_lines` and
:func:`cpu_bound` are the report's: gate's ratio to the ceiling and the highest ratio the machine's CPU allows.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pymysql
from monitors import global_status, mariadbd_cpu  # beside this script

from gate.capture import writer
from gate.capture.sequencer import DCRow
from gate.capture.writer import insert_statements
from gate.common.config import ChannelDefaults
from gate.devtools.sandbox import MariaDBServer, Sandbox

COPY_DB = "gate_ceiling"
COLUMNS = "id, tid, dbname, tablename, create_time, instance_name, optype, data"


def _session(dc: MariaDBServer, database: str | None = None, **kwargs: Any) -> pymysql.Connection:
    conn = dc.connect(database, **kwargs)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")  # create_time (TIMESTAMP) goes out and in as UTC text
    return conn


def _copy_table(cur: pymysql.cursors.Cursor, channel: str) -> str:
    """An empty ``gate_ceiling.transfer_data`` with the channel's DDL (columns, indexes, engine)."""
    cur.execute(f"CREATE DATABASE IF NOT EXISTS {COPY_DB}")
    cur.execute(f"DROP TABLE IF EXISTS {COPY_DB}.transfer_data")
    cur.execute(f"CREATE TABLE {COPY_DB}.transfer_data LIKE `{channel}`.transfer_data")
    return f"{COPY_DB}.transfer_data"


def timed(dc: MariaDBServer, work: Callable[[], Any]) -> tuple[float, float]:
    """Wall seconds and the DC server's CPU seconds of ``work``."""
    cpu0, t0 = mariadbd_cpu(dc), time.perf_counter()
    work()
    return time.perf_counter() - t0, mariadbd_cpu(dc) - cpu0


STATUS = ("Innodb_os_log_written", "Innodb_data_written", "Innodb_data_fsyncs", "Com_commit", "Com_insert",
          "Handler_write", "Bytes_received")  # the DC server's global counters, per row in the profile


def status(cur: pymysql.cursors.Cursor) -> dict[str, int]:
    return global_status(cur, STATUS)


def summary(rows: int, runs: list[tuple[float, float]]) -> dict[str, Any]:
    """Median rows/s and DC CPU µs per row of ``runs`` (wall s, DC CPU s) over ``rows`` rows."""
    seconds = statistics.median(s for s, _ in runs)
    return {"rows": rows, "rows_per_s": round(rows / seconds), "seconds": round(seconds, 3),
            "runs_s": [round(s, 3) for s, _ in runs],
            "dc_cpu_us_per_row": round(statistics.median(c for _, c in runs) / max(rows, 1) * 1e6, 2)}


def measure_ceiling(dc: MariaDBServer, channel: str, where: str = "", repeat: int = 1) -> dict[str, Any]:
    """The DC server's LOAD DATA rate for the rows of ``channel``'s transfer_data (``where``: an SQL condition
    choosing some of them), the median of ``repeat`` loads into an emptied copy of the table."""
    path = Path(dc.tmpdir) / f"ceiling-{channel}-{os.getpid()}.tsv"
    path.unlink(missing_ok=True)
    with _session(dc) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {COLUMNS} INTO OUTFILE %s CHARACTER SET utf8mb4 FROM `{channel}`.transfer_data "
                    f"{'WHERE ' + where if where else ''} ORDER BY id", (str(path),))
        rows = cur.rowcount
        table = _copy_table(cur, channel)
        runs = []
        try:
            for _ in range(repeat):
                cur.execute(f"TRUNCATE TABLE {table}")
                runs.append(timed(dc, lambda: cur.execute(
                    f"LOAD DATA INFILE %s INTO TABLE {table} CHARACTER SET utf8mb4 ({COLUMNS})", (str(path),))))
                cur.execute(f"SELECT COUNT(*) FROM {table}")
                loaded = cur.fetchone()[0]
                if loaded != rows:
                    raise RuntimeError(f"the ceiling's LOAD DATA stored {loaded} rows of the {rows} exported")
        finally:
            cur.execute(f"DROP DATABASE IF EXISTS {COPY_DB}")
            nbytes = path.stat().st_size if path.exists() else 0
            path.unlink(missing_ok=True)
    return {**summary(rows, runs), "bytes_per_row": round(nbytes / max(rows, 1), 1)}


TARGETS = {"a": 0.9, "b": 0.8, "c": 0.9, "snapshot": 0.9}  # gate's rows/s over the ceiling


def ceiling_figures(rows_per_s: float, ceilings: list[dict[str, Any]]) -> dict[str, Any]:
    """A workload's ceiling (the median of the ceilings measured after each of its gate runs) and gate's
    rows/s as a ratio of it."""
    rate = statistics.median(c["rows_per_s"] for c in ceilings)
    return {"ceiling_rows_per_s": round(rate), "ceiling_ratio": round(rows_per_s / rate, 3),
            "ceiling_dc_cpu_us_per_row": statistics.median(c["dc_cpu_us_per_row"] for c in ceilings)}


def cpu_bound(per_row: dict[str, float], ceiling_us: float, cores: int) -> float:
    """The highest ratio to the ceiling the machine's CPU allows: the LOAD DATA keeps about one core busy for
    ``ceiling_us`` µs per row, so the ceiling is about 1e6 / ``ceiling_us`` rows/s on a quiet machine; gate
    with every core busy gives ``cores`` * 1e6 / (the CPU µs per row of gate's processes and both servers,
    ``per_row``). Contention changes neither CPU figure much, so the bound holds on a busy machine too."""
    return cores * ceiling_us / max(sum(per_row.values()), 1e-9)


def ceiling_lines(results: dict[str, Any]) -> list[str]:
    """The report's lines: per workload gate's rows/s, the ceiling, their ratio and its target, and the CPU
    bound (what stands in the way when the target is missed)."""
    cores = results["meta"].get("cpus") or 1
    lines = ["", "DC ingest ceiling (one LOAD DATA INFILE of exactly the rows gate wrote, into an empty copy of "
             "transfer_data on the same DC server, after each gate run): gate r/s / ceiling r/s = ratio (target); "
             f"DC server CPU µs per row, gate's run / the LOAD DATA; CPU bound: {cores} cores x the LOAD DATA's µs per "
             "row / (gate + servers) µs per row = the highest ratio this machine's CPU allows (steady: gate's CPU "
             "after 10% of the rows)"]
    for key in ("a", "b", "c"):
        r = results["workloads"].get(key)
        if r is None or "ceiling_rows_per_s" not in r:
            continue
        ok = r["ceiling_ratio"] >= TARGETS[key]
        per_row, load_us = r["gate"]["cpu_us_per_row"], r["ceiling_dc_cpu_us_per_row"]
        servers = {k: v for k, v in per_row.items() if k.startswith("mariadbd_")}
        steady = r["gate"].get("steady_cpu_us_per_row")
        steady_bound = f" (steady: {cpu_bound({**steady, **servers}, load_us, cores):.2f})" if steady else ""
        lines.append(f"  {key}: {r['gate']['rows_per_s']:,.0f} / {r['ceiling_rows_per_s']:,} = {r['ceiling_ratio']:.2f} "
                     f"(>= {TARGETS[key]} {'PASS' if ok else 'FAIL'}); DC CPU µs/row "
                     f"{per_row.get('mariadbd_dc', 0):.1f} / {load_us:.1f}; CPU bound {cores} x {load_us:.1f} / "
                     f"{sum(per_row.values()):.1f} = {cpu_bound(per_row, load_us, cores):.2f}{steady_bound}")
    return lines


# --- the profile of write paths (the script) ----------------------------------------------------

def workload_a_rows(count: int, instance: str = "127.0.0.1:3306") -> list[DCRow]:
    """DC rows as gate writes them for workload a (100-row transactions of 8-column INSERT images)."""
    rows: list[DCRow] = []
    for n in range(1, count + 1):
        image = [{"id": str(n)}, {"name": f"row {n} délta 数据"}, {"amount": f"{(n % 100000) * 1.125:.3f}"},
                 {"ratio": repr(n / 7)}, {"created": "2024-01-01 00:00:00.000"}, {"flag": str(n % 256)},
                 {"payload": {"base64": "ZGF0YWRhdGFkYXRhZGF0YWRhdGE="}}, {"note": "lorem ipsum " * (1 + n % 8)}]
        data = json.dumps({"NEW": image}, ensure_ascii=False, separators=(",", ":"))
        rows.append((n, (n - 1) // 100 + 1, "bench_a", "t", "2026-01-01 00:00:00", instance, "INSERT", data))
    return rows


def chunks(rows: list[DCRow], size: int) -> Iterable[list[DCRow]]:
    return (rows[i:i + size] for i in range(0, len(rows), size))


def by_insert(dc: MariaDBServer, table: str, rows: list[DCRow], batch: int, sessions: int = 1,
              statement_chars: int | None = None) -> None:
    """gate's writer path: multi-row INSERTs, one transaction per ``batch`` rows, over ``sessions`` sessions;
    ``statement_chars``: the statements' size instead of the writer's (``writer.MAX_STATEMENT``)."""
    parts = list(chunks(rows, batch))

    def one(mine: list[list[DCRow]]) -> None:
        with _session(dc, autocommit=False) as conn, conn.cursor() as cur:
            for chunk in mine:
                for statement in insert_statements(chunk):
                    cur.execute(statement.replace(b"INSERT INTO transfer_data", f"INSERT INTO {table}".encode(), 1))
                conn.commit()

    threads = [threading.Thread(target=one, args=(parts[k::sessions],)) for k in range(sessions)]
    size, writer.MAX_STATEMENT = writer.MAX_STATEMENT, statement_chars or writer.MAX_STATEMENT  # the writer's cap
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        writer.MAX_STATEMENT = size


def _field(text: str) -> str:
    """``text`` with LOAD DATA's default escapes (backslash, tab, newline, NUL)."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    return text.replace("\t", "\\t").replace("\n", "\\n").replace("\0", "\\0")


def tsv(rows: list[DCRow]) -> bytes:
    """The rows in LOAD DATA's default text format (tab-separated, backslash escapes, one line each)."""
    return "".join(f"{r[0]}\t{r[1]}\t{_field(r[2])}\t{_field(r[3])}\t{r[4]}\t{_field(r[5])}\t{r[6]}\t{_field(r[7])}\n"
                   for r in rows).encode()


def by_load_local(dc: MariaDBServer, table: str, rows: list[DCRow], batch: int, folder: Path) -> None:
    """LOAD DATA LOCAL INFILE of each ``batch`` rows (a client-side file each), one transaction each."""
    with _session(dc, autocommit=False, local_infile=True) as conn, conn.cursor() as cur:
        for n, chunk in enumerate(chunks(rows, batch)):
            path = folder / f"chunk-{n}.tsv"
            path.write_bytes(tsv(chunk))
            cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} CHARACTER SET utf8mb4 ({COLUMNS})",
                        (str(path),))
            conn.commit()
            path.unlink()


def by_load_infile(dc: MariaDBServer, table: str, path: Path) -> None:
    """One LOAD DATA INFILE of a file on the DC server's machine: the ceiling's statement."""
    with _session(dc) as conn, conn.cursor() as cur:
        cur.execute(f"LOAD DATA INFILE %s INTO TABLE {table} CHARACTER SET utf8mb4 ({COLUMNS})", (str(path),))


def profile(rows: int, repeat: int, batch: int) -> dict[str, Any]:
    """Each write path's rows/s and DC CPU µs per row for the same ``rows`` rows, on a sandbox of its own."""
    results: dict[str, Any] = {"rows": rows, "batch_rows": batch, "loadavg_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="gate-ceiling-") as tmp:
        box = Sandbox(Path(tmp) / "sandbox", with_standby=False, tied_to_parent=True)
        box.up()
        try:
            channel = "ceiling_ch"
            from benchmark import drop_channel, new_channel  # beside this script

            new_channel(box.dc, box.source, channel, None, ChannelDefaults(), ("bench_a.*",))
            data = workload_a_rows(rows)
            by_insert(box.dc, f"`{channel}`.transfer_data", data, 10_000)
            results["ceiling"] = measure_ceiling(box.dc, channel, repeat=repeat)
            print("ceiling (LOAD DATA INFILE, one statement):", results["ceiling"], flush=True)
            infile = Path(box.dc.tmpdir) / "profile.tsv"
            infile.write_bytes(tsv(data))
            paths: dict[str, Callable[[str], None]] = {
                "LOAD DATA INFILE, one statement (the ceiling's)": lambda t: by_load_infile(box.dc, t, infile),
                f"INSERT, {batch}-row transactions, 1 session": lambda t: by_insert(box.dc, t, data, batch),
                f"INSERT, {batch}-row transactions, 2 sessions": lambda t: by_insert(box.dc, t, data, batch, 2),
                "INSERT, 10,000-row transactions, 1 session": lambda t: by_insert(box.dc, t, data, 10_000),
                "INSERT, 10,000-row transactions, 1M-character statements": lambda t: by_insert(
                    box.dc, t, data, 10_000, statement_chars=1 << 20),
                f"LOAD DATA LOCAL, {batch}-row transactions": lambda t: by_load_local(box.dc, t, data, batch, Path(tmp)),
                "LOAD DATA LOCAL, 10,000-row transactions": lambda t: by_load_local(box.dc, t, data, 10_000, Path(tmp)),
            }
            results["paths"] = {}
            with _session(box.dc) as conn, conn.cursor() as cur:
                table = _copy_table(cur, channel)

                def measure(name: str, path: Callable[[str], None]) -> None:
                    runs = []
                    for _ in range(repeat):
                        cur.execute(f"TRUNCATE TABLE {table}")
                        before = status(cur)
                        runs.append(timed(box.dc, functools.partial(path, table)))
                        after = status(cur)
                    results["paths"][name] = summary(rows, runs)
                    results["paths"][name]["per_row"] = {k: round((after[k] - before[k]) / rows, 3) for k in after}
                    print(f"{name}: {results['paths'][name]}", flush=True)

                for name, path in paths.items():
                    measure(name, path)
                cur.execute(f"ALTER TABLE {table} DROP INDEX idx_dbname_tablename, DROP INDEX idx_create_time")
                measure(f"INSERT, {batch}-row transactions, 1 session, no secondary indexes",
                        lambda t: by_insert(box.dc, t, data, batch))
                cur.execute(f"DROP DATABASE {COPY_DB}")
            drop_channel(box.dc, channel)
        finally:
            box.down()
    results["loadavg_end"] = os.getloadavg()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-rows", type=int, default=ChannelDefaults().batch_rows)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = profile(args.rows, args.repeat, args.batch_rows)
    ceiling = results["ceiling"]["rows_per_s"]
    print(f"\n{'path':<62} {'rows/s':>9} {'/ceiling':>8} {'DC µs/row':>9}")
    print(f"{'LOAD DATA INFILE, one statement (the ceiling)':<62} {ceiling:>9,} {1.0:>8.2f} "
          f"{results['ceiling']['dc_cpu_us_per_row']:>9.1f}")
    for name, r in results["paths"].items():
        print(f"{name:<62} {r['rows_per_s']:>9,} {r['rows_per_s'] / ceiling:>8.2f} {r['dc_cpu_us_per_row']:>9.1f}  "
              + ", ".join(f"{k} {v:g}" for k, v in r["per_row"].items()))
    print(f"(1-minute load average {results['loadavg_start'][0]:.2f} at start, {results['loadavg_end'][0]:.2f} at end)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
