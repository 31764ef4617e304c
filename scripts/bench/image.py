"""The Delta table image: an incremental update against a full rebuild, in one run with Spark local[2].

    .venv/bin/python scripts/bench/image.py                 # 1,000,000 rows of history, 1 % new
    .venv/bin/python scripts/bench/image.py --rows 200000   # smaller

Writes the synthetic history of scripts/bench/spark_source.py (one table of 6 columns; transactions of
10 rows: 70 % inserts, 20 % updates, 10 % deletes) into a channel, builds the image (not timed), writes
``--new`` (1 %) more rows, then warms up: ``--warm-ups`` (1) updates of copies of the image and one
rebuild less (the first build ran the rebuild's code), none timed, so that the JIT has compiled both
paths. Then times ``image_incremental`` (the update: a MERGE of the changed keys) against
``image_full`` (a rebuild from the whole history into a new directory), median of ``--repeat`` runs
each (each incremental run on a fresh copy of the image before the new rows). Prints rows/s, seconds,
the driver tree's CPU seconds and peak RSS, the speed-up, and checks both images hold the same rows.

    .venv/bin/python scripts/bench/image.py --warm-ups 3 --repeat 5   # nearer a long-running stream's steady state
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from spark_source import (  # beside this script: python puts its folder first on sys.path
    DriverTree,
    History,
    bench_channel,
    measure,
)

from gate.common.config import ServerConfig
from spark_readers.image import read_image
from spark_readers.materialise import materialise_channel
from spark_readers.session import spark_session


def compare(args: argparse.Namespace, dc: ServerConfig, history: History, dc_cpu: Callable[[], float], tmp: Path
            ) -> dict[str, Any]:
    tree = DriverTree()
    tree.start()
    spark = spark_session("local[2]")
    options = {"channel": "bench", "host": dc.host, "port": str(dc.port), "user": dc.user,
               "partitions": str(args.partitions)}
    materialise_channel(spark, options, str(tmp / "before"))  # the image before the new rows
    new = int(args.rows * args.new)
    history.write(new)
    everything = history.channel.id
    for warm in range(args.warm_ups):  # not timed: the JIT compiles the MERGE's code (the first build ran the rebuild's)
        shutil.copytree(tmp / "before", tmp / f"warm{warm}")
        materialise_channel(spark, options, str(tmp / f"warm{warm}"))
        if warm:  # the rebuild gets as many untimed runs as the update
            materialise_channel(spark, options, str(tmp / f"warm_full{warm}"))
    runs: dict[str, list[dict[str, Any]]] = {"image_incremental": [], "image_full": []}
    for attempt in range(args.repeat):
        shutil.copytree(tmp / "before", tmp / f"inc{attempt}")
        for name, rows, out in (("image_incremental", new, f"inc{attempt}"), ("image_full", everything, f"full{attempt}")):
            runs[name].append(measure(name, rows, lambda out=out: materialise_channel(spark, options, str(tmp / out)),
                                      tree, dc_cpu))
    same = {d: sorted(tuple(r) for r in read_image(spark, str(tmp / d))["bench.t"].collect()) for d in ("inc0", "full0")}
    tree.halt.set()
    spark.stop()
    median = {name: statistics.median(r["seconds"] for r in results) for name, results in runs.items()}
    return {"warm_ups": args.warm_ups, "runs": runs, "median_seconds": median,
            "incremental_rows_per_s": round(new / median["image_incremental"]),
            "speedup": round(median["image_full"] / median["image_incremental"], 1),
            "same_rows": same["inc0"] == same["full0"], "live_rows": len(same["full0"]),
            "peak_driver_tree_rss_mb": round(tree.peak / 2**20)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of history")
    parser.add_argument("--new", type=float, default=0.01, help="new rows for the update, share of --rows")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement (the median is reported)")
    parser.add_argument("--warm-ups", type=int, default=1,
                        help="untimed runs of each path before the measured ones (the first build is the rebuild's first)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--json", help="write the figures to this file too")
    args = parser.parse_args()
    figures: dict[str, Any] = {"machine_load_average_at_start": psutil.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="gate-image-bench-") as tmp, bench_channel(Path(tmp), args.rows) as (
            dc, history, dc_cpu):
        figures.update(compare(args, dc, history, dc_cpu, Path(tmp)))
    figures["machine_load_average_at_end"] = psutil.getloadavg()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
