"""Spark readers of a channel, measured in one run on private servers with Spark local[2].

    .venv/bin/python scripts/bench/spark_source.py                 # 1,000,000 rows (about 10 min on 2 cores)
    .venv/bin/python scripts/bench/spark_source.py --rows 200000   # smaller

Writes a synthetic history into a channel's transfer_data (one table of 6 columns; transactions of 10
rows: 70 % inserts, 20 % updates, 10 % deletes), then times, each once (after a warm-up read):

- ``plain_jdbc_scan``: a partitioned JDBC scan of transfer_data, rows discarded (the floor);
- ``jdbc_incremental_read``: today's JDBC incremental reader (read and parse), rows discarded;
- ``jdbc_incremental_load``: the whole spark-load job (read, parse, Parquet, cursor);
- ``gate_stream``: readStream.format("gate") (micro-batches of ``--max-rows``), rows discarded;
- ``gate_stream_parquet``: the same stream into Parquet with a checkpointLocation;
- ``image_full``: a full rebuild of the table image from the history (format("gate") from the DC)
  after ``--new`` (1 %) more rows, against ``image_incremental``: the update of the image built before
  them with just those rows.

Prints rows/s, seconds, the CPU seconds of the driver's process tree (Python, the JVM and its Python
workers; not the MariaDB servers), ratios against the JDBC scan, the image speed-up, the peak RSS of
the driver's process tree, and the machine's CPU use during each measurement (other work on the
machine skews wall times; CPU seconds and ratios less so).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from monitors import busy_percent, machine_busy  # beside this script: python puts its folder first on sys.path

from gate.common.config import ServerConfig
from gate.common.dc import ChannelSettings, connect, create_channel
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import Change, SyntheticChannel, cells
from spark_readers.image import read_image
from spark_readers.incremental import read_increment
from spark_readers.load import load
from spark_readers.materialise import materialise_channel
from spark_readers.measure import _plain_scan
from spark_readers.session import ChannelSource, spark_session

COLUMNS = ("id", "name", "amount", "note", "flag", "updated")


class DriverTree(threading.Thread):
    """Peak RSS and CPU seconds of this process and its children, MariaDB servers left out."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
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
        while not self.halt.is_set():
            rss = 0
            for proc in self.procs():
                try:
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
                    self.cpu[proc.pid] = times.user + times.system
                except psutil.Error:
                    continue
            self.peak = max(self.peak, rss)
            self.halt.wait(0.1)

    def cpu_seconds(self) -> float:
        return sum(self.cpu.values())


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


def timed(name: str, rows: int, run: Callable[[], Any], tree: DriverTree, figures: dict[str, Any]) -> None:
    before, cpu = machine_busy(), tree.cpu_seconds()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    figures[name] = {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
                     "driver_cpu_s": round(tree.cpu_seconds() - cpu, 1),
                     "machine_busy_pct": busy_percent(before, machine_busy())}
    print(name, json.dumps(figures[name]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of history")
    parser.add_argument("--new", type=float, default=0.01, help="new rows for the image update, share of --rows")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-rows", type=int, default=100_000, help="maxRowsPerTrigger of the stream")
    parser.add_argument("--json", help="write the figures to this file too")
    args = parser.parse_args()
    figures: dict[str, Any] = {"machine_load_average_at_start": psutil.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="gate-spark-bench-") as tmp:
        box = Sandbox(Path(tmp) / "servers", with_standby=False, tied_to_parent=True)
        box.up()
        try:
            dc = ServerConfig("127.0.0.1", box.dc.port, "root")
            with connect(dc, "DC") as conn:
                create_channel(conn, ChannelSettings("bench", ServerConfig("127.0.0.1", box.source.port, "root")))
            history = History(SyntheticChannel(connect(dc, "DC", "bench"), "bench"))
            history.create()
            started = time.perf_counter()
            history.write(args.rows - 1)
            print(f"wrote {args.rows} rows in {time.perf_counter() - started:.0f} s", flush=True)
            run(args, dc, history, Path(tmp), figures)
        finally:
            box.down()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


def run(args: argparse.Namespace, dc: ServerConfig, history: History, tmp: Path, figures: dict[str, Any]) -> None:
    tree = DriverTree()
    tree.start()
    spark = spark_session("local[2]")
    source = ChannelSource(dc, "bench")
    options = {"channel": "bench", "host": dc.host, "port": str(dc.port), "user": dc.user,
               "partitions": str(args.partitions)}
    end = history.channel.id

    def discard(frame: Any) -> None:
        frame.write.format("noop").mode("overwrite").save()

    def stream(name: str, parquet: bool) -> None:
        writer = (spark.readStream.format("gate").options(**options, maxRowsPerTrigger=str(args.max_rows)).load()
                  .writeStream.option("checkpointLocation", str(tmp / f"{name}.checkpoint")))
        writer = (writer.format("parquet").option("path", str(tmp / name)) if parquet else
                  writer.foreachBatch(lambda frame, _: discard(frame)))
        writer.trigger(availableNow=True).start().awaitTermination()

    discard(spark.read.format("gate").options(**options, endingId="20000").load())  # warm-ups
    discard(_plain_scan(spark, source, 20_000, args.partitions))
    timed("plain_jdbc_scan", end, lambda: discard(_plain_scan(spark, source, end, args.partitions)), tree, figures)
    timed("jdbc_incremental_read", end, lambda: discard(read_increment(spark, source, 0, end, args.partitions)),
          tree, figures)
    timed("jdbc_incremental_load", end, lambda: load(spark, source, str(tmp / "load"), args.partitions), tree,
          figures)
    timed("gate_stream", end, lambda: stream("stream_noop", False), tree, figures)
    timed("gate_stream_parquet", end, lambda: stream("stream_parquet", True), tree, figures)
    materialise_channel(spark, options, str(tmp / "image"))  # the image before the new rows
    new = int(args.rows * args.new)
    history.write(new)
    everything = history.channel.id
    timed("image_incremental", new, lambda: materialise_channel(spark, options, str(tmp / "image")), tree, figures)
    timed("image_full", everything, lambda: materialise_channel(spark, options, str(tmp / "full")), tree, figures)
    same = [read_image(spark, str(tmp / d))["bench.t"].count() for d in ("image", "full")]
    tree.halt.set()
    scan = figures["plain_jdbc_scan"]["rows_per_s"]
    figures["ratios_to_plain_jdbc_scan"] = {name: round(figures[name]["rows_per_s"] / scan, 2) for name in (
        "jdbc_incremental_read", "jdbc_incremental_load", "gate_stream", "gate_stream_parquet")}
    figures["gate_stream_vs_jdbc_incremental_read"] = round(
        figures["gate_stream"]["rows_per_s"] / figures["jdbc_incremental_read"]["rows_per_s"], 2)
    figures["image_incremental_speedup"] = round(figures["image_full"]["seconds"] /
                                                 figures["image_incremental"]["seconds"], 1)
    figures["image_rows"] = {"incremental": same[0], "full": same[1], "live_keys": len(history.live)}
    figures["peak_driver_tree_rss_mb"] = round(tree.peak / 2**20)
    spark.stop()


if __name__ == "__main__":
    main()
