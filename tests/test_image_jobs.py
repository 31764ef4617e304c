"""The image jobs as users start them, on a real DC and Spark: every entry point (``gate spark-materialise``,
``python -m spark_readers.materialise``, from the DC or from increments) gives the same typed image naming
its channel; a table skipped for want of a key stays reported until it is imaged; a session without Delta
Lake's jars or settings is refused at the start of a job, with what to add."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyspark
from click.testing import Result
from pyspark.sql import SparkSession

from gate.common.dc import connect
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import SyntheticChannel
from spark_readers.delta_jars import PACKAGE, jar_dir
from spark_readers.load import load
from spark_readers.materialise import main as materialise_main
from spark_readers.session import MARIADB_JAR, ChannelSource
from tests.replay import make_channel
from tests.test_images import image_tables, state

ROOT = Path(__file__).resolve().parent.parent
Gate = Callable[..., Result]
NO_KEY = "no primary key known: give it as a key (--key DB.TABLE=COL,...)"
ORDERS = [{"field_name": "id", "nullable": "No", "primary_key": "Yes", "data_type": "int(11)"},
          {"field_name": "amount", "nullable": "Yes", "primary_key": "No", "data_type": "decimal(10,2)"}]


def order(id_: int, amount: str) -> list[dict[str, str]]:
    return [{"id": str(id_)}, {"amount": amount}]


def test_every_entry_point_gives_the_same_typed_image_of_its_channel(
        spark: SparkSession, sandbox: Sandbox, gate: Gate, gate_config: Path, unique_name: str,
        tmp_path: Path) -> None:
    """``gate spark-materialise --increments`` and the module's job, from the DC and from the increments (the
    module under spark-submit: tests/test_docs_recipes.py): typed columns, the channel named."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    SyntheticChannel(connect(dc, "DC", unique_name), unique_name).write([
        [("shop", "orders", "CREATETABLE", {"NEW": ORDERS})],
        [("shop", "orders", "INSERT", {"NEW": order(1, "2.50")}), ("shop", "orders", "INSERT", {"NEW": order(2, "-1.00")})],
        [("shop", "orders", "UPDATE", {"NEW": order(2, "7.25"), "OLD": order(2, "-1.00")})]])
    increments = str(tmp_path / "increments")
    load(spark, ChannelSource(dc, unique_name), increments)
    images = {way: tmp_path / way for way in ("cli_increments", "module", "module_increments")}
    assert gate("spark-materialise", unique_name, "--increments", increments, "--out",
                str(images["cli_increments"])).exit_code == 0
    materialise_main([unique_name, "--out", str(images["module"]), "--config", str(gate_config)])
    materialise_main([unique_name, "--increments", increments, "--out", str(images["module_increments"]),
                      "--config", str(gate_config)])
    expected = {"channel": unique_name, "watermark": {"id": 4, "tid": 3}, "skipped": {},
                "typing": {"timezone": "UTC", "binary_format": "base64", "as_text": []},
                "orders": {"path": "shop/orders", "version": 0, "columns": ["id", "amount"],
                           "types": ["int(11)", "decimal(10,2)"], "key": ["id"], "rows": 2, "complete": True,
                           "snapshot": None}}
    for way, out in images.items():
        image: dict[str, Any] = state(out)
        got = {"orders": image["tables"]["shop.orders"], **{k: image[k] for k in expected if k != "orders"}}
        assert got == expected, way
        assert image_tables(spark, out) == {"shop.orders": (["id", "amount", "_invalid"], [
            (1, Decimal("2.50"), None), (2, Decimal("7.25"), None)])}, way


def test_a_skipped_table_stays_reported_until_it_is_imaged(spark: SparkSession, sandbox: Sandbox, gate: Gate,
                                                           unique_name: str, tmp_path: Path) -> None:
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    channel = SyntheticChannel(connect(dc, "DC", unique_name), unique_name)
    out = str(tmp_path / "image")
    channel.write([[("shop", "orders", "CREATETABLE", {"NEW": ORDERS})],
                   [("shop", "orders", "INSERT", {"NEW": order(1, "2.50")}),
                    ("shop", "log", "INSERT", {"NEW": [{"at": "1"}, {"what": "x"}]})]])
    first = gate("spark-materialise", unique_name, "--out", out)
    assert (first.exit_code, first.stdout, first.stderr) == (0, "shop.orders: 1 rows\n", f"skipped shop.log: {NO_KEY}\n")
    channel.write([[("shop", "orders", "INSERT", {"NEW": order(2, "3.00")})]])  # no row of shop.log
    second = gate("spark-materialise", unique_name, "--out", out)
    assert (second.exit_code, second.stdout, second.stderr) == (
        0, "shop.orders: 2 rows\n", f"skipped shop.log: {NO_KEY}\n")
    assert state(Path(out))["skipped"] == {"shop.log": NO_KEY}
    channel.write([[("shop", "orders", "INSERT", {"NEW": order(3, "4.00")})]])
    assert gate("--json", "spark-materialise", unique_name, "--out", out).stdout == json.dumps(
        {"tables": {"shop.orders": 3}, "skipped": {"shop.log": NO_KEY}, "verified": {}}, indent=2) + "\n"
    channel.write([[("shop", "log", "DROPTABLE", {"DROPTABLE": [{"dbname": "shop", "tablename": "log"}],
                                                  "SQL": "DROP TABLE log"})]])
    dropped = gate("spark-materialise", unique_name, "--out", out)
    assert (dropped.exit_code, dropped.stderr) == (0, "")
    assert state(Path(out))["skipped"] == {}


DRIVER = """
import sys
from pyspark.sql import SparkSession
from gate.common.errors import DeltaUnavailable
from spark_readers.materialise import ImageUpdater, main

spark = SparkSession.builder.getOrCreate()  # the job's own session, without Delta's settings
try:
    ImageUpdater(sys.argv[1] + "/stream", "shop")
except DeltaUnavailable as exc:
    print(f"ImageUpdater: {exc}")
spark.stop()
main(["shop", "--increments", sys.argv[1] + "/none", "--out", sys.argv[1] + "/image"])
"""


def test_an_image_job_without_deltas_jars_says_what_to_add(tmp_path: Path) -> None:
    """Under spark-submit with only Connector/J: the updater made in the job's session, then the module's job in a
    session of its own (which spark_session() gives no Delta settings without Delta's jars)."""
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", "local[1]",
                           "--jars", MARIADB_JAR, "--conf", "spark.ui.enabled=false", "driver.py", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    add = (f"Give the job Delta's jars, --packages {PACKAGE} (or --jars with the jars in {jar_dir()}, which "
           "scripts/setup.sh fetches), and its settings, --conf spark.sql.extensions=io.delta.sql."
           "DeltaSparkSessionExtension --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog."
           "DeltaCatalog.")
    refused = "This Spark session has no Delta Lake, which table images are written with: "
    lines = done.stdout.splitlines()  # spark-submit gives the driver's stderr as its stdout
    missing = ("its jars are not on the class path; spark.sql.extensions is not io.delta.sql.DeltaSparkSessionExtension;"
               " spark.sql.catalog.spark_catalog is not org.apache.spark.sql.delta.catalog.DeltaCatalog")
    assert lines[0] == f"ImageUpdater: {refused}{missing}. {add}"
    assert f"error: {refused}{missing}. {add}" in lines
    assert done.returncode == 1
    assert not (tmp_path / "image").exists()
