"""A table image stays readable by every delta-rs reader path (to_pyarrow_table, hence to_pandas) when the
Spark session's defaults would give new Delta tables deletion vectors, which delta-rs 1.6 refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import deltalake
import pytest
from pyspark.sql import SparkSession

from gate.common.dc import connect
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import SyntheticChannel
from spark_readers.image import STATE
from spark_readers.materialise import materialise_channel
from tests.replay import make_channel

DEFAULT_DV = "spark.databricks.delta.properties.defaults.enableDeletionVectors"


@pytest.fixture
def dv_by_default(spark: SparkSession) -> Iterator[SparkSession]:
    """The session as a cluster that enables deletion vectors on every new table."""
    spark.conf.set(DEFAULT_DV, "true")
    try:
        yield spark
    finally:
        spark.conf.unset(DEFAULT_DV)


def test_image_tables_have_no_deletion_vectors_whatever_the_defaults(dv_by_default: SparkSession, sandbox: Sandbox,
                                                                     unique_name: str, tmp_path: Path) -> None:
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    columns = [{"field_name": c, "nullable": "No", "primary_key": "Yes" if c == "id" else "No", "data_type": "int"}
               for c in ("id", "v")]
    channel.write([[("shop", "t", "CREATETABLE", {"NEW": columns}),
                    ("shop", "t", "INSERT", {"NEW": [{"id": "1"}, {"v": "10"}]}),
                    ("shop", "t", "INSERT", {"NEW": [{"id": "2"}, {"v": "20"}]})]])
    out = tmp_path / "image"
    source = {"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user}
    materialise_channel(dv_by_default, source, str(out))
    channel.write([[("shop", "t", "UPDATE", {"NEW": [{"id": "1"}, {"v": "11"}], "OLD": [{"id": "1"}, {"v": "10"}]}),
                    ("shop", "t", "DELETE", {"OLD": [{"id": "2"}, {"v": "20"}]}),
                    ("shop", "t", "INSERT", {"NEW": [{"id": "3"}, {"v": "30"}]})]])
    materialise_channel(dv_by_default, source, str(out))  # a MERGE of the changed keys

    state = json.loads(deltalake.DeltaTable(str(out / STATE)).to_pyarrow_table().column("image")[0].as_py())
    table = deltalake.DeltaTable(str(out / "shop" / "t"))
    assert table.history(1)[0]["operation"] == "MERGE"
    assert state["tables"]["shop.t"]["version"] == table.version() == 1
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 11, "_invalid": None}, {"id": 3, "v": 30, "_invalid": None}]  # typed, as CREATETABLE says
    for path in (out / STATE, out / "shop" / "t"):
        protocol = deltalake.DeltaTable(str(path)).protocol()
        assert (protocol.min_reader_version, protocol.reader_features) == (1, None)
        assert deltalake.DeltaTable(str(path)).metadata().configuration == {
            "delta.enableDeletionVectors": "false", "delta.enableTypeWidening": "false",
            "delta.columnMapping.mode": "none"}
