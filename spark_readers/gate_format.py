"""``format("gate")`` and ``format("gate_python")`` as Spark sees them: the Python data source, which reads a
channel's rows (spark_readers.source) or, with option table, one table's changes typed (spark_readers.typed),
and :func:`register`, which makes the names known to a session."""

from __future__ import annotations

import os
from typing import Any

from pyspark import SparkFiles
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_readers.rows import ROW_SCHEMA
from spark_readers.source import NAME, PYTHON_NAME, GateBatchReader, GateStreamReader, jvm_source, settings
from spark_readers.typed import TypedBatchReader, TypedStreamReader, planned_table, typed_table


class GateDataSource(DataSource):
    """``format("gate")``: a channel's transfer_data rows, parsed (see spark_readers.source)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = settings(options)
        self.typed: Any = None  # with option table: its spark_readers.typed_rows.TypedTable, once known

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        if self.settings.table is None:
            return ROW_SCHEMA
        self.typed = typed_table(self.settings, self.settings.table)
        return self.typed.schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        if self.settings.table is None:
            return GateBatchReader(self.settings)
        return TypedBatchReader(self.settings, planned_table(self.settings, self.typed, schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self.settings.table is None:
            return GateStreamReader(self.settings)
        return TypedStreamReader(self.settings, planned_table(self.settings, self.typed, schema))


class PythonGateSource(GateDataSource):
    """This source under the name ``gate_python``: where the JVM ``format("gate")`` is on the classpath (which
    reads typed too, option table), it reads where a PEM client certificate is needed."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_NAME


def register(spark: SparkSession) -> None:
    """Make ``format("gate")`` known to ``spark`` (once per session): the JVM source where its jar is on the
    classpath (spark_readers.jvm_source), else the Python one; the Python one is ``format("gate_python")`` in both cases.

    The zips of ``--py-files`` (``spark.submit.pyFiles``) go first on the PYTHONPATH of the source's
    Python processes: the one Spark starts on the driver for a streaming query looks for them in a
    directory of its own where they are not (Spark 4.x), so without this it fails to import the source
    (``No module named 'spark_readers'``), or imports another installed copy of gate. Executors, which
    find the zips themselves, ignore the driver's paths."""
    context = spark.sparkContext
    shipped = [os.path.join(SparkFiles.getRootDirectory(), name) for name in context._python_includes or []]
    environment = context.environment
    before = environment.get("PYTHONPATH")
    if shipped:  # the environment the source's processes get is taken from the session's now
        environment["PYTHONPATH"] = os.pathsep.join([*shipped, *([before] if before else [])])
    try:
        spark.dataSource.register(PythonGateSource)
        if not jvm_source(spark):
            spark.dataSource.register(GateDataSource)
    finally:
        if before is None:
            environment.pop("PYTHONPATH", None)
        else:
            environment["PYTHONPATH"] = before
