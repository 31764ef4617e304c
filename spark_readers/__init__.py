"""Spark readers of gate channels. ``spark_readers.register(spark)`` makes ``format("gate")`` known to a
session (spark_readers.source)."""

from spark_readers.source import register

__all__ = ["register"]
