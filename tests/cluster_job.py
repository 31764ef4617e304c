"""The driver of the cluster test, run as the README's cluster recipe runs one: ``spark-submit --master
spark://... --py-files gate-spark.zip --jars <connector> tests/cluster_job.py OPTIONS_JSON OUT``, with a
Python that has only pyarrow (gate comes from the zip alone). A batch read of format("gate"), then a
streaming query (Trigger.AvailableNow) into Parquet in OUT, and a typed stream of table shop.typed into a
memory table; prints one JSON line: the ids each read, where the executors imported spark_readers.source
from, and the typed rows.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

import spark_readers
import spark_readers.source


def main() -> None:
    options, out = json.loads(sys.argv[1]), sys.argv[2]
    spark = SparkSession.builder.getOrCreate()
    spark_readers.register(spark)
    batch = spark.read.format("gate").options(**options).load().select("id").collect()
    (spark.readStream.format("gate").options(**options).load().writeStream.format("parquet")
     .option("path", f"{out}/rows").option("checkpointLocation", f"{out}/checkpoint")
     .trigger(availableNow=True).start().awaitTermination())
    streamed = spark.read.parquet(f"{out}/rows").select("id").collect()
    (spark.readStream.format("gate").options(**options, table="shop.typed", consumer="cluster_typed").load()
     .writeStream.format("memory").queryName("typed").trigger(availableNow=True).start().awaitTermination())
    typed = [[str(r.id), str(r.amount), r._op, r._id] for r in spark.sql("SELECT * FROM typed ORDER BY _id").collect()]

    def origin(_: object) -> str:
        import spark_readers.source

        return str(spark_readers.source.__file__)

    print(json.dumps({"batch": sorted(r.id for r in batch), "stream": sorted(r.id for r in streamed),
                      "executor_module": spark.sparkContext.parallelize([0], 1).map(origin).collect()[0],
                      "typed": typed, "jvm_source": spark_readers.source.jvm_source(spark)}))
    spark.stop()


if __name__ == "__main__":
    main()
