"""spark_readers.source (format("gate")) on a real DC and Spark local[2]: the rows equal the JDBC reader's,
micro-batches end at transaction boundaries, consumers are registered, expired cursors refused; a
standalone cluster reads through the shipped package; a streaming query killed -9 loses and doubles no
row. One SparkSession serves the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from gate.common.config import ServerConfig
from gate.common.dc import connect
from gate.devtools.sandbox import Sandbox
from gate.devtools.synthetic import ImageModel, RandomHistory, SyntheticChannel
from spark_readers.image import POINTER, read_image
from spark_readers.incremental import read_increment
from spark_readers.materialise import materialise_channel
from spark_readers.session import ChannelSource, spark_session
from spark_readers.source import transaction_end
from tests.replay import make_channel


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]")
    yield session
    session.stop()


@dataclass(frozen=True)
class Synthetic:
    dc: ServerConfig
    channel: str
    history: RandomHistory


@pytest.fixture(scope="module")
def synthetic(sandbox: Sandbox) -> Synthetic:
    """A channel holding random contract rows of every optype (snapshots included), written directly."""
    name = "spark_source_random"
    dc = make_channel(sandbox.dc, sandbox.source, name)
    conn = connect(dc, "DC", name)
    history = RandomHistory(SyntheticChannel(conn, name), "shop", seed=5)
    history.run(300)
    return Synthetic(dc, name, history)


def options(data: Synthetic, **more: object) -> dict[str, str]:
    return {"channel": data.channel, "host": data.dc.host, "port": str(data.dc.port), "user": data.dc.user,
            **{k: str(v) for k, v in more.items()}}


def test_batch_rows_equal_the_jdbc_readers(spark: SparkSession, synthetic: Synthetic) -> None:
    end = synthetic.history.channel.id
    frame = spark.read.format("gate").options(**options(synthetic, partitions=3)).load()
    jdbc = read_increment(spark, ChannelSource(synthetic.dc, synthetic.channel), 0, end)
    got = frame.orderBy("id").collect()
    assert [r.id for r in got] == list(range(1, end + 1))
    assert got == jdbc.orderBy("id").collect()
    assert {r.optype for r in got} >= {"SNAPSHOTSTART", "SNAPSHOT", "SNAPSHOTEND", "RENAME", "TRUNCATE"}


@pytest.mark.parametrize(("start", "want", "expected"), [
    (0, 2, 2),    # 2 ends transaction 1
    (0, 3, 2),    # 3 is inside transaction 2 (3..6): back to the end of 1
    (2, 4, 6),    # transaction 2 is longer than the limit: all of it
    (2, 7, 7),
    (6, 9, 9),    # 9 ends the last transaction before the checkpoint ... and the limit
    (7, 8, 9),    # 8..9 is one transaction
    (9, 100, 10),  # the checkpoint
])
def test_transaction_end(start: int, want: int, expected: int) -> None:
    tids = {1: 1, 2: 1, 3: 2, 4: 2, 5: 2, 6: 2, 7: 3, 8: 4, 9: 4, 10: 5}
    looked: list[int] = []

    def tid_of(id_: int) -> int:
        looked.append(id_)
        return tids[id_]

    assert transaction_end(start, want, 10, tid_of) == expected
    assert len(looked) <= 8


Tables = dict[str, tuple[list[str], list[tuple[Any, ...]]]]


def image_tables(spark: SparkSession, out: Path) -> Tables:
    return {name: (frame.columns, sorted((tuple(row) for row in frame.collect()), key=repr))
            for name, frame in read_image(spark, str(out)).items()}


def model_tables(model: ImageModel) -> Tables:
    return {name: (table.columns, sorted((tuple(row[c] for c in table.columns) for row in table.rows.values()), key=repr))
            for name, table in model.tables.items()}


def test_incremental_images_equal_a_full_rebuild(spark: SparkSession, sandbox: Sandbox, unique_name: str,
                                                 tmp_path: Path) -> None:
    """Four incremental updates of one image equal one rebuild from the whole history and the images a
    consumer applying the rows holds: key changes, ADD/DROP COLUMN, TRUNCATE, RENAME, DROP and CREATE
    again, snapshots done and cancelled (each after a row the snapshot must make the image forget)."""
    dc = make_channel(sandbox.dc, sandbox.source, unique_name)
    history = RandomHistory(SyntheticChannel(connect(dc, "DC", unique_name), unique_name), "shop", seed=7)
    source = {"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user}
    for _ in range(4):
        history.run(70)
        materialise_channel(spark, source, str(tmp_path / "inc"))
        pointer = json.loads((tmp_path / "inc" / POINTER).read_text())
        assert pointer["watermark"] == {"id": history.channel.id, "tid": history.channel.tid}
        assert image_tables(spark, tmp_path / "inc") == model_tables(history.model)
    with connect(dc, "DC", unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT optype, COUNT(*) FROM transfer_data GROUP BY optype")
        optypes = dict(cur.fetchall())
        cur.execute("SELECT COUNT(*) FROM transfer_data WHERE optype = 'UPDATE' AND "
                    "JSON_VALUE(data, '$.NEW[0].id') <> JSON_VALUE(data, '$.OLD[0].id')")
        assert cur.fetchone()[0] > 0  # key changes
    assert set(optypes) == {"CREATETABLE", "INSERT", "UPDATE", "DELETE", "ALTERTABLE", "TRUNCATE", "RENAME",
                            "DROPTABLE", "SNAPSHOTSTART", "SNAPSHOT", "SNAPSHOTEND"}
    result = materialise_channel(spark, source, str(tmp_path / "full"))
    assert image_tables(spark, tmp_path / "full") == image_tables(spark, tmp_path / "inc")
    assert result.tables == {name: len(rows) for name, (_, rows) in model_tables(history.model).items()}
    versions = {p.name for p in (tmp_path / "inc").iterdir() if p.name.startswith("v-")}
    assert 1 <= len(versions) <= 2  # versions no pointer uses are gone
