"""Spark readers of gate channels. ``spark_readers.register(spark)`` makes ``format("gate")`` known to a
session (spark_readers.gate_format)."""

from spark_readers.gate_format import register

__all__ = ["register"]
