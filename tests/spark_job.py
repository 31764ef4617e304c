"""Spark drivers the tests run as child processes (one SparkContext per process).

``python -m tests.spark_job stream OPTIONS_JSON OUT CHECKPOINT [all]``: readStream.format("gate") into
Parquet with a checkpointLocation; with ``all``, Trigger.AvailableNow (ends when caught up), else runs
until killed. ``image`` instead of ``stream``: the same into a table image (foreachBatch(ImageUpdater)).
"""

from __future__ import annotations

import json
import sys

from spark_readers.materialise import ImageUpdater
from spark_readers.session import spark_session


def stream(options: dict[str, str], out: str, checkpoint: str, until_caught_up: bool, image: bool = False) -> None:
    spark = spark_session("local[2]")
    spark.conf.set("spark.sql.shuffle.partitions", "2")  # the image updates of small test batches: fewer tasks
    writer = spark.readStream.format("gate").options(**options).load().writeStream
    writer = (writer.foreachBatch(ImageUpdater(out, options["channel"], source=options)) if image
              else writer.format("parquet").option("path", out)).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if until_caught_up else writer.trigger(processingTime="0 seconds")
    writer.start().awaitTermination()


if __name__ == "__main__":
    mode, options = sys.argv[1], json.loads(sys.argv[2])
    stream(options, sys.argv[3], sys.argv[4], sys.argv[5:] == ["all"], mode == "image")
