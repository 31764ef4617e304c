"""Spark drivers the tests run as child processes (one SparkContext per process).

``python -m tests.spark_job stream OPTIONS_JSON OUT CHECKPOINT [all]``: readStream.format("gate") into
Parquet with a checkpointLocation; with ``all``, Trigger.AvailableNow (ends when caught up), else runs
until killed. ``image`` instead of ``stream``: the same into a table image (foreachBatch(ImageUpdater)).

``python -m tests.spark_job cluster OPTIONS_JSON MASTER ZIP``: a batch read of format("gate") on a
standalone cluster, the package shipped as ``ZIP``; prints one JSON line: the ids read and where the
executors imported spark_readers.source from.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from spark_readers.materialise import ImageUpdater
from spark_readers.session import spark_session


def stream(options: dict[str, str], out: str, checkpoint: str, until_caught_up: bool, image: bool = False) -> None:
    spark = spark_session("local[2]")
    spark.conf.set("spark.sql.shuffle.partitions", "2")  # the image updates of small test batches: fewer tasks
    writer = spark.readStream.format("gate").options(**options).load().writeStream
    writer = (writer.foreachBatch(ImageUpdater(out, options["channel"])) if image
              else writer.format("parquet").option("path", out)).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if until_caught_up else writer.trigger(processingTime="0 seconds")
    writer.start().awaitTermination()


def cluster(options: dict[str, str], master: str, shipped: str) -> None:
    spark = (SparkSession.builder.master(master).appName("gate-cluster-test")
             .config("spark.submit.pyFiles", shipped).config("spark.executor.memory", "512m")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    import spark_readers

    spark_readers.register(spark)
    rows = spark.read.format("gate").options(**options).load().select("id", "optype").collect()

    def origin(_: object) -> str:
        import spark_readers.source

        return str(spark_readers.source.__file__)

    where = spark.sparkContext.parallelize([0], 1).map(origin).collect()
    print(json.dumps({"ids": sorted(r.id for r in rows), "optypes": sorted({r.optype for r in rows}),
                      "executor_module": where[0]}))
    spark.stop()


if __name__ == "__main__":
    mode, options = sys.argv[1], json.loads(sys.argv[2])
    if mode in ("stream", "image"):
        stream(options, sys.argv[3], sys.argv[4], sys.argv[5:] == ["all"], mode == "image")
    else:
        cluster(options, sys.argv[3], sys.argv[4])
