"""Spark drivers the tests run as child processes (one SparkContext per process).

``python -m tests.spark_job stream OPTIONS_JSON OUT CHECKPOINT [all]``: readStream.format("gate") into
Parquet with a checkpointLocation; with ``all``, Trigger.AvailableNow (ends when caught up), else runs
until killed.

``python -m tests.spark_job cluster OPTIONS_JSON MASTER ZIP``: a batch read of format("gate") on a
standalone cluster, the package shipped as ``ZIP``, and a typed stream of table shop.typed
(Trigger.AvailableNow into a memory table); prints one JSON line: the ids read, where the executors
imported spark_readers.source from, and the typed rows.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from spark_readers.session import spark_session


def stream(options: dict[str, str], out: str, checkpoint: str, until_caught_up: bool) -> None:
    spark = spark_session("local[2]")
    writer = (spark.readStream.format("gate").options(**options).load().writeStream.format("parquet")
              .option("path", out).option("checkpointLocation", checkpoint))
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
    (spark.readStream.format("gate").options(**options, table="shop.typed", consumer="cluster_typed").load()
     .writeStream.format("memory").queryName("typed").trigger(availableNow=True).start().awaitTermination())
    typed = [[str(r.id), str(r.amount), r._op, r._id] for r in spark.sql("SELECT * FROM typed ORDER BY _id").collect()]
    print(json.dumps({"ids": sorted(r.id for r in rows), "optypes": sorted({r.optype for r in rows}),
                      "executor_module": where[0], "typed": typed}))
    spark.stop()


if __name__ == "__main__":
    mode, options = sys.argv[1], json.loads(sys.argv[2])
    if mode == "stream":
        stream(options, sys.argv[3], sys.argv[4], sys.argv[5:] == ["all"])
    else:
        cluster(options, sys.argv[3], sys.argv[4])
