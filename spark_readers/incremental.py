"""Read a range ``(last, end]`` of a channel's transfer_data with partitioned JDBC reads, parsed into columns.

The DataFrame has, per row: optype, dbname, tablename, id, tid (long), create_time (timestamp, UTC),
instance_name; for INSERT/UPDATE/DELETE ``new`` and ``old`` (map<string,string>: column -> text, null
for SQL NULL) and ``columns`` (array<string>: the table's column names in order, which maps do not
keep); for the other optypes ``ddl``, the payload parsed with :data:`DDL_SCHEMA` (null for DML rows).
SNAPSHOT rows count as row changes (their payload is an INSERT's); see spark_readers.rows.

Each of the ``partitions`` JDBC reads covers a slice of the id range through the primary key. Read
only up to the checkpoint (``end <= checkpoint.id``): rows above it may be incomplete.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType, StructField, StructType

from spark_readers.rows import DDL_SCHEMA, ROW_OPTYPES
from spark_readers.session import ChannelSource

_IMAGES = StructType([StructField("NEW", ArrayType(MapType(StringType(), StringType()))),
                      StructField("OLD", ArrayType(MapType(StringType(), StringType())))])


def _as_map(cells: Column) -> Column:
    """``[{"c1": v1}, {"c2": v2}]`` as the map ``{c1: v1, c2: v2}``."""
    return F.map_from_entries(F.transform(cells, lambda m: F.struct(F.map_keys(m)[0].alias("key"),
                                                                     F.map_values(m)[0].alias("value"))))


def parse(raw: DataFrame) -> DataFrame:
    """Rows as read from transfer_data (``create_ts`` = UNIX_TIMESTAMP(create_time)) to the parsed columns.

    A DML row's JSON is parsed once (the images go through an intermediate column that Spark does not
    inline, being expensive); a DDL row's with :data:`DDL_SCHEMA`.
    """
    dml = F.col("optype").isin(*ROW_OPTYPES)
    images = F.col("images")
    return raw.withColumn("images", F.when(dml, F.from_json("data", _IMAGES))).select(
        "optype", "dbname", "tablename",
        F.col("id").cast("long").alias("id"),
        F.col("tid").cast("long").alias("tid"),
        F.timestamp_seconds("create_ts").alias("create_time"),
        "instance_name",
        F.transform(F.coalesce(images["NEW"], images["OLD"]), lambda m: F.map_keys(m)[0]).alias("columns"),
        _as_map(images["NEW"]).alias("new"),
        _as_map(images["OLD"]).alias("old"),
        F.when(~dml, F.from_json("data", DDL_SCHEMA)).alias("ddl"),
    )


def read_raw(spark: SparkSession, source: ChannelSource, last: int, end: int, partitions: int = 4) -> DataFrame:
    """transfer_data rows with ``last < id <= end`` as stored (``data`` JSON text), in ``partitions`` slices.

    create_time comes as ``create_ts``, UNIX_TIMESTAMP of the column: exact whatever the time zones of
    the DC session, the JVM and the Spark session.
    """
    query = (f"(SELECT id, tid, dbname, tablename, UNIX_TIMESTAMP(create_time) AS create_ts, instance_name, optype, "
             f"data FROM transfer_data WHERE id > {int(last)} AND id <= {int(end)}) AS increment")
    return (spark.read.format("jdbc").options(**source.jdbc_options())
            .option("dbtable", query)
            .option("partitionColumn", "id")
            .option("lowerBound", int(last) + 1)
            .option("upperBound", int(end) + 1)
            .option("numPartitions", max(1, min(partitions, int(end) - int(last))))
            .option("fetchsize", 10000)
            .load())


def read_increment(spark: SparkSession, source: ChannelSource, last: int, end: int, partitions: int = 4) -> DataFrame:
    """The parsed rows ``last < id <= end`` (see the module docstring for the columns)."""
    return parse(read_raw(spark, source, last, end, partitions))
