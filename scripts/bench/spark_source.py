"""Spark readers of a channel, measured in one run on private servers with Spark local[2].

    .venv/bin/python scripts/bench/spark_source.py                 # 1,000,000 rows (20 to 40 min on 2 busy cores)
    .venv/bin/python scripts/bench/spark_source.py --rows 200000 --readers-only --json figures.json

Writes a synthetic history into a channel's transfer_data (one table of 6 columns; transactions of 10
rows: 70 % inserts, 20 % updates, 10 % deletes), then times, after a warm-up read of 200,000 rows by each, the
readers in ``--repeat`` rounds (each round runs every reader once, so a change in the machine's load falls on all
of them; the median run of each is kept):

- ``plain_jdbc_scan``: a partitioned JDBC scan of transfer_data, rows discarded (the bar);
- ``jdbc_incremental_read``: the JDBC incremental reader (read and parse), rows discarded;
- ``gate_batch``: read.format("gate") (the JVM source, spark_readers/jvm) up to the last row, rows discarded;
- ``gate_stream``: readStream.format("gate") (micro-batches of ``--max-rows``), rows discarded by the streaming
  noop sink (a foreachBatch that discards them costs one more copy of each row: Spark hands the batch to it as
  an RDD of rows already made);
- ``gate_stream_all``: the same without maxRowsPerTrigger (the source's default): the backlog in one
  micro-batch, so Spark's own cost per micro-batch is paid once;
- ``gate_python_batch``, ``gate_python_stream``: the same with format("gate_python"), the Python source;
- ``gate_typed_batch``, ``gate_typed_stream``: format("gate") with option table (the history's one table, typed
  columns: every row but its CREATETABLE), as a batch and as a stream in one micro-batch with a consumer;

and, once each, unless ``--readers-only``:

- ``jdbc_incremental_load``: the whole spark-load job (read, parse, Parquet, cursor);
- ``gate_stream_parquet``: the stream into Parquet with a checkpointLocation.

Spark's own cost per micro-batch is measured beside them: ``spark_job_floor`` is the median time of a job that
writes one row to the noop sink (planning, scheduling, the write's commit), and the stream's micro-batches are
counted, so the share of ``gate_stream``'s time that one such job per micro-batch comes to is printed: a lower
bound of Spark's share (a micro-batch also plans its read and writes its offset and commit logs).

The DC server runs with ``--dc-buffer-pool`` (1G by default) as its InnoDB buffer pool: a DC in service keeps
its recent rows in memory, and the sandbox's 256M held too little of a 1,000,000-row transfer_data (about 300 MB),
so 40 % of its pages came from the file system on every read and both readers waited on them (256M: runs
before this option).

The table images (an incremental update against a rebuild) are measured by scripts/bench/image.py.

Prints rows/s, seconds, the CPU seconds of the driver's process tree (Python, the JVM and its Python
workers; not the MariaDB servers) and per row, the DC server's CPU seconds and per row (the two share the
machine's cores), the peak RSS of one Python worker, the JVM old generation's growth (collected before
each read), the load average and the machine's CPU use during each measurement, then the readers side by
side as ratios against the plain scan of the same run (other work on the machine skews wall times; ratios
less so).
``--skip-python`` leaves the two Python readers out (they take 10 times longer); ``--only a,b`` times those
readers alone beside the scan (for profiling one of them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from monitors import busy_percent, machine_busy, mariadbd_cpu  # noqa: I001 (beside this script: on sys.path)

from gate.common.config import ServerConfig
from gate.common.dc import ChannelSettings, connect, create_channel
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import Change, SyntheticChannel, cells
from spark_readers.incremental import read_increment
from spark_readers.load import load
from spark_readers.measure import _plain_scan
from spark_readers.session import ChannelSource, spark_session

COLUMNS = ("id", "name", "amount", "note", "flag", "updated")


class DriverTree(threading.Thread):
    """Peak RSS and CPU seconds of this process and its children (the JVM and Spark's Python workers),
    MariaDB servers left out; and the peak RSS of one Python worker since :meth:`reset_worker_peak`."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.worker_peak = 0
        self.cpu: dict[int, float] = {}
        self.halt = threading.Event()

    def procs(self) -> list[psutil.Process]:
        me = psutil.Process()
        found = []
        for proc in [me, *me.children(recursive=True)]:
            try:
                if "mariadbd" not in proc.name():
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def run(self) -> None:
        me = os.getpid()
        while not self.halt.is_set():
            rss = 0
            for proc in self.procs():
                try:
                    memory = proc.memory_info().rss
                    rss += memory
                    times = proc.cpu_times()
                    self.cpu[proc.pid] = times.user + times.system
                    if proc.pid != me and proc.name().startswith("python"):  # a pyspark daemon or worker
                        self.worker_peak = max(self.worker_peak, memory)
                except psutil.Error:
                    continue
            self.peak = max(self.peak, rss)
            self.halt.wait(0.1)

    def cpu_seconds(self) -> float:
        return sum(self.cpu.values())

    def reset_worker_peak(self) -> None:
        self.worker_peak = 0


class History:
    """Random transactions of one table: inserts of new keys, updates and deletes of live ones."""

    def __init__(self, channel: SyntheticChannel, seed: int = 1) -> None:
        self.channel = channel
        self.rng = random.Random(seed)
        self.live: list[int] = []
        self.next = 1

    def create(self) -> None:
        new = [{"field_name": c, "nullable": "No" if c == "id" else "Yes", "primary_key": "Yes" if c == "id" else "No",
                "data_type": "int" if c == "id" else "varchar(40)"} for c in COLUMNS]
        self.channel.write([[("bench", "t", "CREATETABLE", {"NEW": new, "primary_key": ["id"]})]])

    def row(self, key: int) -> dict[str, str | None]:
        r = self.rng.random()
        return {"id": str(key), "name": f"name {key}", "amount": f"{r * 1000:.3f}", "note": "x" * int(r * 60),
                "flag": str(int(r * 256)), "updated": "2026-11-22 10:00:00"}

    def change(self) -> Change:
        roll = self.rng.random()
        if roll < 0.7 or len(self.live) < 100:
            key, self.next = self.next, self.next + 1
            self.live.append(key)
            return ("bench", "t", "INSERT", {"NEW": cells(self.row(key))})
        slot = self.rng.randrange(len(self.live))
        key = self.live[slot]
        if roll < 0.9:
            return ("bench", "t", "UPDATE", {"NEW": cells(self.row(key)), "OLD": cells(self.row(key))})
        self.live[slot] = self.live[-1]
        self.live.pop()
        return ("bench", "t", "DELETE", {"OLD": cells(self.row(key))})

    def write(self, rows: int) -> None:
        for start in range(0, rows, 20_000):
            count = min(20_000, rows - start)
            self.channel.write([[self.change() for _ in range(min(10, count - i))] for i in range(0, count, 10)])


class OldGen:
    """The JVM's old generation (G1 Old Gen in local mode, where the driver's JVM runs the tasks): what a read
    keeps alive longer than a few young collections lands there, so its growth during a read tells a reader
    that holds a bounded chunk from one that holds the batch. Collected (System.gc) before each read."""

    def __init__(self, pool: Any, runtime: Any) -> None:
        self.pool = pool
        self.runtime = runtime
        self.base = 0

    @classmethod
    def of(cls, spark: Any) -> OldGen | None:
        """The JVM's old generation (G1's, Parallel's, generational ZGC's); None under a collector without one
        named so (Serial's Tenured Gen, single-generation ZGC, Shenandoah): the figure is then left out."""
        pools = spark._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
        pool = next((p for p in pools if "Old Gen" in p.getName()), None)
        return cls(pool, spark._jvm.java.lang.System) if pool is not None else None

    def start(self) -> None:
        self.runtime.gc()
        time.sleep(0.25)  # the driver tree's CPU is sampled every 0.1 s: the collection's falls before the read
        self.pool.resetPeakUsage()
        self.base = self.pool.getUsage().getUsed()

    def growth_mb(self) -> float:
        return round((self.pool.getPeakUsage().getUsed() - self.base) / 2**20, 1)


def measure(name: str, rows: int, run: Callable[[], Any], tree: DriverTree, dc_cpu: Callable[[], float],
            old_gen: OldGen | None = None) -> dict[str, Any]:
    """One run of ``run``: its wall time, the CPU seconds of the driver's process tree and of the DC server,
    and with ``old_gen`` the JVM old generation's growth during it."""
    tree.reset_worker_peak()
    if old_gen:
        old_gen.start()
    before, cpu, dc, load = machine_busy(), tree.cpu_seconds(), dc_cpu(), psutil.getloadavg()[0]
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    busy = busy_percent(before, machine_busy())  # over the run alone: the wait below would dilute it
    time.sleep(0.3)  # one more sample of the tree's CPU times
    cpu_s, dc_s = tree.cpu_seconds() - cpu, dc_cpu() - dc
    figures = {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
               "driver_cpu_s": round(cpu_s, 1), "cpu_us_per_row": round(cpu_s / rows * 1e6, 1),
               "dc_cpu_s": round(dc_s, 1), "dc_cpu_us_per_row": round(dc_s / rows * 1e6, 1),
               "peak_python_worker_rss_mb": round(tree.worker_peak / 2**20),
               "machine_busy_pct": busy, "load_average": load}
    if old_gen:
        figures["jvm_old_gen_growth_mb"] = old_gen.growth_mb()
    print(name, json.dumps(figures), flush=True)
    return figures


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median seconds (of an even number: the first run, with the median's seconds and rows/s),
    and every run's rows/s."""
    median = statistics.median(r["seconds"] for r in runs)
    kept = next(r for r in runs if r["seconds"] == median) if len(runs) % 2 else dict(
        runs[0], seconds=round(median, 2), rows_per_s=round(runs[0]["rows"] / median))
    return dict(kept, runs_rows_per_s=[r["rows_per_s"] for r in runs])


READERS = ("plain_jdbc_scan", "jdbc_incremental_read", "gate_batch", "gate_stream", "gate_stream_all",
           "gate_typed_batch", "gate_typed_stream", "gate_python_batch", "gate_python_stream")


def table(figures: dict[str, Any]) -> str:
    """The readers side by side, with ratios against the plain scan of the same run."""
    scan = figures["plain_jdbc_scan"]
    lines = [f"{'reader':<24}{'rows/s':>10}{'x scan':>8}{'CPU us/row':>12}{'x scan':>8}{'DC us/row':>11}"
             f"{'worker MB':>11}{'old gen MB':>12}"]
    for name in (n for n in READERS if n in figures):
        f = figures[name]
        lines.append(f"{name:<24}{f['rows_per_s']:>10,}{f['rows_per_s'] / scan['rows_per_s']:>8.2f}"
                     f"{f['cpu_us_per_row']:>12.1f}{f['cpu_us_per_row'] / scan['cpu_us_per_row']:>8.2f}"
                     f"{f['dc_cpu_us_per_row']:>11.1f}{f['peak_python_worker_rss_mb']:>11}"
                     f"{f.get('jvm_old_gen_growth_mb', ''):>12}")
    floor = figures.get("spark_job_floor")
    if floor:
        lines.append(f"Spark's own cost of a job here: {floor['one_row_job_s']} s; gate_stream ran "
                     f"{floor['gate_stream_micro_batches']} micro-batches: one such job each is "
                     f"{floor['gate_stream_share']:.0%} of its time.")
    return "\n".join(lines)


@contextmanager
def bench_channel(tmp: Path, rows: int, buffer_pool: str | None = None
                  ) -> Iterator[tuple[ServerConfig, History, Callable[[], float]]]:
    """Private servers in ``tmp`` with a channel "bench" whose transfer_data holds ``rows`` rows of History,
    and the DC server's CPU seconds so far; the servers stop when the block ends. ``buffer_pool``: the DC's
    InnoDB buffer pool size (default: the sandbox's)."""
    dc_args = (f"--innodb-buffer-pool-size={buffer_pool}",) if buffer_pool else ()
    box = Sandbox(tmp / "servers", with_standby=False, tied_to_parent=True, dc_args=dc_args)
    box.up()
    try:
        dc = ServerConfig("127.0.0.1", box.dc.port, "root")
        with connect(dc, "DC") as conn:
            create_channel(conn, ChannelSettings("bench", ServerConfig("127.0.0.1", box.source.port, "root")))
        history = History(SyntheticChannel(connect(dc, "DC", "bench"), "bench"))
        history.create()
        started = time.perf_counter()
        history.write(rows - 1)
        print(f"wrote {rows} rows in {time.perf_counter() - started:.0f} s", flush=True)
        yield dc, history, lambda: mariadbd_cpu(box.dc)
    finally:
        box.down()


def spark_job_floor(spark: Any, stream_seconds: float, micro_batches: int) -> dict[str, Any]:
    """Spark's own cost of one job here (the median of 20 jobs writing one row to the noop sink), and what
    ``micro_batches`` of them come to in a stream that took ``stream_seconds``: a part no source can save."""
    times = []
    for _ in range(21):
        start = time.perf_counter()
        spark.range(1).write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - start)
    job = statistics.median(times[1:])  # the first compiles its code
    floor = {"one_row_job_s": round(job, 3), "gate_stream_micro_batches": micro_batches,
             "gate_stream_share": round(job * micro_batches / stream_seconds, 2)}
    print("spark_job_floor", json.dumps(floor), flush=True)
    return floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of history")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-rows", type=int, default=100_000, help="maxRowsPerTrigger of the stream")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each reader (the median is kept)")
    parser.add_argument("--readers-only", action="store_true", help="measure the readers only, skip the Parquet jobs")
    parser.add_argument("--skip-python", action="store_true", help="leave out the Python format(\"gate_python\")")
    parser.add_argument("--only", help="these readers only (comma-separated names; plain_jdbc_scan is always read)")
    parser.add_argument("--dc-buffer-pool", default="1G",
                        help="the DC server's InnoDB buffer pool size [1G]; '' keeps the sandbox's 256M")
    parser.add_argument("--json", help="write the figures to this file too")
    args = parser.parse_args()
    figures: dict[str, Any] = {"machine_load_average_at_start": psutil.getloadavg(),
                               "dc_buffer_pool": args.dc_buffer_pool}
    with tempfile.TemporaryDirectory(prefix="gate-spark-bench-") as tmp, bench_channel(
            Path(tmp), args.rows, args.dc_buffer_pool) as (dc, history, dc_cpu):
        run(args, dc, history, dc_cpu, Path(tmp), figures)
    print(json.dumps(figures, indent=2))
    print(table(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


def run(args: argparse.Namespace, dc: ServerConfig, history: History, dc_cpu: Callable[[], float], tmp: Path,
        figures: dict[str, Any]) -> None:
    tree = DriverTree()
    tree.start()
    spark = spark_session("local[2]")
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")  # every micro-batch is counted
    old_gen = OldGen.of(spark)
    source = ChannelSource(dc, "bench")
    options = {"channel": "bench", "host": dc.host, "port": str(dc.port), "user": dc.user,
               "partitions": str(args.partitions)}
    end = history.channel.id

    def discard(frame: Any) -> None:
        frame.write.format("noop").mode("overwrite").save()

    micro_batches: dict[tuple[str, bool], int] = {}  # of each stream's last run, those that read rows

    def stream(name: str, parquet: bool, reader: str = "gate", limit: bool = True, **more: str) -> None:
        trigger = {"maxRowsPerTrigger": str(args.max_rows)} if limit else {}
        writer = (spark.readStream.format(reader).options(**options, **trigger, **more).load()
                  .writeStream.option("checkpointLocation", str(tmp / f"{name}.checkpoint")))
        writer = (writer.format("parquet").option("path", str(tmp / name)) if parquet else
                  writer.format("noop"))  # the streaming noop sink: foreachBatch would copy every row once more
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        micro_batches[reader, limit] = sum(1 for p in query.recentProgress if p["numInputRows"])

    warm = min(200_000, end)  # warm-ups: the JIT compiles each reader's code first (endingId above the checkpoint
    for reader, typed in (("gate", {}), ("gate", {"table": "bench.t"}), ("gate_python", {})):   # is refused)
        discard(spark.read.format(reader).options(**options, **typed, endingId=str(warm)).load())
    discard(_plain_scan(spark, source, warm, args.partitions))
    streams = iter(range(1_000_000))
    readers: dict[str, Callable[[], Any]] = {
        "plain_jdbc_scan": lambda: discard(_plain_scan(spark, source, end, args.partitions)),
        "jdbc_incremental_read": lambda: discard(read_increment(spark, source, 0, end, args.partitions)),
        "gate_batch": lambda: discard(spark.read.format("gate").options(**options, endingId=str(end)).load()),
        "gate_stream": lambda: stream(f"stream_noop{next(streams)}", False),
        "gate_stream_all": lambda: stream(f"stream_noop{next(streams)}", False, limit=False),
        "gate_typed_batch": lambda: discard(spark.read.format("gate").options(**options, endingId=str(end),
                                                                              table="bench.t").load()),
        "gate_typed_stream": lambda: stream(f"stream_noop{(n := next(streams))}", False, limit=False, table="bench.t",
                                            consumer=f"typed{n}"),
        "gate_python_batch": lambda: discard(spark.read.format("gate_python").options(**options, endingId=str(end))
                                             .load()),
        "gate_python_stream": lambda: stream(f"stream_noop{next(streams)}", False, "gate_python"),
    }
    if args.skip_python:
        del readers["gate_python_batch"], readers["gate_python_stream"]
    if args.only:
        wanted = {"plain_jdbc_scan", *args.only.split(",")}
        readers = {name: read for name, read in readers.items() if name in wanted}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in readers}
    for _ in range(args.repeat):  # in rounds, so that a change in the machine's load falls on every reader
        for name, read in readers.items():
            runs[name].append(measure(name, end, read, tree, dc_cpu, old_gen))
    figures.update({name: median_run(r) for name, r in runs.items()})
    if "gate_stream" in figures:
        figures["spark_job_floor"] = spark_job_floor(spark, figures["gate_stream"]["seconds"],
                                                     micro_batches["gate", True])
    scan = figures["plain_jdbc_scan"]
    if not args.readers_only:
        figures["jdbc_incremental_load"] = measure(
            "jdbc_incremental_load", end, lambda: load(spark, source, str(tmp / "load"), args.partitions), tree, dc_cpu)
        figures["gate_stream_parquet"] = measure("gate_stream_parquet", end, lambda: stream("stream_parquet", True),
                                                 tree, dc_cpu)
    tree.halt.set()
    measured = [n for n in (*READERS, "jdbc_incremental_load", "gate_stream_parquet") if n in figures]
    figures["ratios_to_plain_jdbc_scan"] = {n: {"rows_per_s": round(figures[n]["rows_per_s"] / scan["rows_per_s"], 2),
                                                "cpu_per_row": round(figures[n]["cpu_us_per_row"] /
                                                                     scan["cpu_us_per_row"], 2)} for n in measured}
    if "jdbc_incremental_read" in figures:
        figures["gate_vs_jdbc_incremental_read"] = {n: round(figures[n]["rows_per_s"] /
                                                             figures["jdbc_incremental_read"]["rows_per_s"], 2)
                                                    for n in READERS[2:] if n in figures}
    figures["peak_driver_tree_rss_mb"] = round(tree.peak / 2**20)
    spark.stop()


if __name__ == "__main__":
    main()
