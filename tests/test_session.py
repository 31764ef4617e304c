"""The session helpers of spark_readers.session: scoped settings, the user's own settings, the codegen cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_readers.session import CODEGEN_CACHE, _user_sets, session_conf

KEY = "spark.gate.test.setting"


def test_session_conf_gives_each_setting_its_value_back(spark: SparkSession) -> None:
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    with pytest.raises(RuntimeError), session_conf(spark, {"spark.sql.shuffle.partitions": "7", KEY: "on"}):
        assert (spark.conf.get("spark.sql.shuffle.partitions"), spark.conf.get(KEY)) == ("7", "on")
        raise RuntimeError("the block fails")
    assert spark.conf.get("spark.sql.shuffle.partitions") == partitions
    assert spark.conf.get(KEY, None) is None


def test_a_session_gate_starts_keeps_a_thousand_generated_classes(spark: SparkSession) -> None:
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == CODEGEN_CACHE[1] == "1000"


@pytest.mark.parametrize(("submit_args", "defaults", "found"), [
    ("", None, False),
    ("--conf spark.sql.codegen.cache.maxEntries=50 pyspark-shell", None, True),
    ("", "spark.sql.codegen.cache.maxEntries 50\n", True),
    ("", "  spark.sql.codegen.cache.maxEntries=50\n", True),
    ("", "# spark.sql.codegen.cache.maxEntries 50\n", False),
    ("", "spark.sql.codegen.cache.maxEntriesX 50\n", False),
    ("--conf spark.sql.codegen.cache.maxEntriesX=50 pyspark-shell", None, False),
    ("--conf 'spark.sql.codegen.cache.maxEntries=50' pyspark-shell", None, True),
    ("--conf xspark.sql.codegen.cache.maxEntries=50 pyspark-shell", None, False),
    ('--driver-java-options "-Dspark.sql.codegen.cache.maxEntries=50" pyspark-shell', None, True),
    ("", "spark.sql.codegen.cache.maxEntries.x 50\n", False),
])
def test_user_settings_are_found_in_submit_args_and_spark_defaults(submit_args: str, defaults: str | None,
                                                                   found: bool, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", submit_args)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    if defaults is not None:
        (tmp_path / "spark-defaults.conf").write_text(defaults)
    assert _user_sets(r"spark\.sql\.codegen\.cache\.maxEntries") is found
