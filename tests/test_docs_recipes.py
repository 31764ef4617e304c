"""The docs' Spark recipes marked 'run on a cluster' run as written, in page order, on one standalone master and
worker (pyspark's spark-class, as tests/test_spark_source.py starts them) against one channel ``shop`` of the test
DC: every one exits 0, and the increments and table images they write hold the channel's rows, typed, with the
channel named. The recipes' example addresses are the test's (:data:`PLACES`), nothing else is changed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from gate.common.dc import connect
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import SyntheticChannel
from tests.replay import make_channel
from tests.test_docs import BLOCKS, env
from tests.test_image_jobs import NO_KEY, ORDERS, order
from tests.test_images import delta_rs_table, state
from tests.test_spark_source import bare_python, standalone  # noqa: F401  (fixtures: one cluster for the module)

CLUSTER = [(where, code) for where, marker, lang, code in BLOCKS if marker == "run on a cluster"]


def places(tmp: Path, master: str, config: Path, dc_port: int, python: str) -> dict[str, str]:
    """The docs' example names -> the test's: the master, output folders, config file, DC address, executors'
    Python."""
    return {"spark://spark1:7077": master, "/data/gate/": f"{tmp}/data/gate/", "hdfs:///gate/": f"{tmp}/hdfs/gate/",
            "/etc/gate/config.yaml": str(config), "dc.internal:3306": f"127.0.0.1:{dc_port}",
            "/usr/bin/python3": python}


@pytest.fixture(scope="module")
def shop(sandbox: Sandbox) -> Iterator[str]:
    """Channel ``shop``: a table created in the history (typed) and one whose CREATE TABLE is not (no key)."""
    dc = make_channel(sandbox.dc, sandbox.source, "shop")
    SyntheticChannel(connect(dc, "DC", "shop"), "shop").write([
        [("shop", "orders", "CREATETABLE", {"NEW": ORDERS})],
        [("shop", "orders", "INSERT", {"NEW": order(1, "2.50")}), ("shop", "orders", "INSERT", {"NEW": order(2, "-1.00")})],
        [("shop", "legacy", "INSERT", {"NEW": [{"id": "7"}, {"name": "old"}]})],
        [("shop", "orders", "UPDATE", {"NEW": order(2, "7.25"), "OLD": order(2, "-1.00")})]])
    yield "shop"
    with connect(dc, "DC") as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE shop")


def rows(image: Path, table: str) -> list[tuple[Any, ...]]:
    """A table of the image in ``image`` as delta-rs reads it, sorted."""
    frame = delta_rs_table(image, state(image)["tables"][table])
    return sorted(tuple(str(v) for v in row.values()) for row in frame.to_pylist())


def test_the_spark_recipes_run_as_written_on_a_cluster(shop: str, sandbox: Sandbox, gate_config: Path,
                                                       standalone: str, bare_python: str, tmp_path: Path) -> None:  # noqa: F811
    assert len(CLUSTER) >= 4 and any("spark_readers.load" in code for _, code in CLUSTER)
    names = places(tmp_path, standalone, gate_config, sandbox.dc.port, bare_python)
    used = set()
    conf = tmp_path / "spark-conf"  # the cluster's defaults: executors that fit its one small worker, whose JVMs
    conf.mkdir()  # compile with the first-tier JIT only, as the drivers do (tests/conftest.py: SPARK_SUBMIT_OPTS)
    (conf / "spark-defaults.conf").write_text("spark.executor.memory 512m\n"
                                              "spark.executor.extraJavaOptions -XX:TieredStopAtLevel=1\n")
    base = {k: v for k, v in env().items() if not k.startswith("PYSPARK_")}
    base.update(GATE_CONFIG=str(gate_config), SPARK_LOCAL_IP="127.0.0.1", SPARK_CONF_DIR=str(conf),
                PATH=f"{base['PATH']}{os.pathsep}{Path(pyspark.__file__).parent / 'bin'}")
    for where, code in CLUSTER:
        for name, place in names.items():
            used |= {name} if name in code else set()
            code = code.replace(name, place)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=base, capture_output=True,
                              text=True, timeout=300)
        said = [line for line in (done.stdout + done.stderr).splitlines()
                if not re.search(r" (INFO|WARN) |^\s+(at |\.\.\. \d+ more)", line)]  # no logs, no JVM frames
        assert done.returncode == 0, f"{where}:\n" + "\n".join(said[-60:])
    assert used == set(names), "a place no recipe names: drop it"
    cursor = {"channel": "shop", "id": 5, "tid": 4}
    for out in ("data/gate/shop", "hdfs/gate/shop"):
        assert json.loads((tmp_path / out / "_gate_cursor.json").read_text()) == cursor, out
    orders = [("1", "2.50", "None"), ("2", "7.25", "None")]
    from_increments, on_cluster = tmp_path / "data/gate/shop_now", tmp_path / "hdfs/gate/shop_now"
    assert {k: state(from_increments)[k] for k in ("channel", "keys", "skipped")} == {
        "channel": "shop", "keys": {"shop.legacy": ["id"]}, "skipped": {}}
    assert state(from_increments)["tables"]["shop.legacy"]["types"] is None
    assert rows(from_increments, "shop.legacy") == [("7", "old")]
    assert rows(from_increments, "shop.orders") == orders
    assert {k: state(on_cluster)[k] for k in ("channel", "keys", "skipped")} == {
        "channel": "shop", "keys": {}, "skipped": {"shop.legacy": NO_KEY}}
    assert state(on_cluster)["tables"]["shop.orders"]["types"] == ["int(11)", "decimal(10,2)"]
    assert rows(on_cluster, "shop.orders") == orders
