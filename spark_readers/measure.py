"""Throughput of the incremental load against a plain JDBC scan of the same rows, in one run.

``python -m spark_readers.measure CHANNEL [--partitions N]`` prints rows/s of:

- ``jdbc_scan``: a partitioned JDBC read of ``transfer_data`` (id <= checkpoint), rows discarded;
- ``jdbc_scan_to_parquet``: the same read written unparsed to Parquet (JSON text as is);
- ``incremental_read``: the incremental reader's read and JSON parsing of the same rows, discarded;
- ``incremental_load``: the whole load job (read, parse, Parquet write, cursor) into a fresh directory.

Each is run ``repeat`` times after one warm-up scan; the best time counts.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from gate.common.config import load_config
from gate.consume.client import Consumer
from spark_readers.incremental import read_increment
from spark_readers.load import load
from spark_readers.session import ChannelSource, spark_job


def _plain_scan(spark: SparkSession, source: ChannelSource, end: int, partitions: int) -> DataFrame:
    return (spark.read.format("jdbc").options(**source.jdbc_options())
            .option("dbtable", "transfer_data")
            .option("partitionColumn", "id").option("lowerBound", 1).option("upperBound", end + 1)
            .option("numPartitions", partitions).option("fetchsize", 10000)
            .load().where(f"id <= {end}"))


def _best(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(spark: SparkSession, source: ChannelSource, partitions: int = 4, repeat: int = 2) -> dict[str, float]:
    """rows (the checkpoint's id) and rows/s of each way of reading them (see the module docstring)."""
    with Consumer(source.dc, source.channel) as dc:
        rows = dc.checkpoint().id

    def discard(frame: DataFrame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    def load_fresh() -> None:
        with tempfile.TemporaryDirectory(prefix="gate-measure-") as out:
            load(spark, source, out, partitions)

    def scan_to_parquet() -> None:
        with tempfile.TemporaryDirectory(prefix="gate-measure-") as out:
            _plain_scan(spark, source, rows, partitions).write.mode("overwrite").parquet(out)

    discard(_plain_scan(spark, source, rows, partitions))  # warm-up: JDBC driver, code generation
    seconds = {
        "jdbc_scan": _best(lambda: discard(_plain_scan(spark, source, rows, partitions)), repeat),
        "jdbc_scan_to_parquet": _best(scan_to_parquet, repeat),
        "incremental_read": _best(lambda: discard(read_increment(spark, source, 0, rows, partitions)), repeat),
        "incremental_load": _best(load_fresh, repeat),
    }
    return {"rows": rows, **{f"{name}_rows_per_s": rows / s for name, s in seconds.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="spark_readers.measure", description=__doc__.split("\n")[0])
    parser.add_argument("channel")
    parser.add_argument("--config", help="gate's config.yaml [default: $GATE_CONFIG, else ./config.yaml]")
    parser.add_argument("--master", help="Spark master URL [default: local[2]]")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    with spark_job(args.master) as spark:
        figures = measure(spark, ChannelSource(load_config(args.config).dc, args.channel), args.partitions)
    print("  ".join(f"{name}={value:.0f}" for name, value in figures.items()))


if __name__ == "__main__":
    main()
