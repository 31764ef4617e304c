"""Shared fixtures: real MariaDB servers (source, standby, DC) in temporary directories."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pymysql
import pytest
from click.testing import CliRunner, Result

from gate.capture.libshim import fix_library_charsets
from gate.cli import main
from gate.devtools.sandbox import Sandbox
from tests.replay import STARTED

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_names = itertools.count(1)

# Every Spark driver the tests start (the session below, spark-submit jobs, gate's Spark commands run as child
# processes, which inherit this) runs its JVM with the first-tier JIT compiler only: a test's Spark work is short,
# and the optimising compiler's own work was half the JVM's CPU time (an image update of 100 rows, 3 MERGEs:
# 41.6 s of CPU against 22.6 s), on two cores shared by three workers. spark-submit adds SPARK_SUBMIT_OPTS to the
# driver's java command; a value already set is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

# make test runs the files on three pytest-xdist workers (-n 3 --dist loadfile --no-loadscope-reorder): a worker
# takes a whole file, so module fixtures are made once, and the files that take longest go out first so that
# the workers finish together. Longest first, by the files' times in a make test run (test_driver_commits.py, third
# there, and two other Spark files were not listed: they went out after every listed file).
LONGEST_FIRST = ("test_docs_recipes.py", "test_images.py", "test_driver_commits.py", "test_failover.py",
                 "test_typed_images.py", "test_spark_readers.py", "test_spark_source.py", "test_faults.py",
                 "test_image_features.py", "test_image_jobs.py", "test_snapshot.py", "test_links.py", "test_standby.py",
                 "test_verify.py", "test_metrics.py", "test_status.py", "test_jvm_source.py", "test_channel_guards.py",
                 "test_xa.py", "test_typed_stream.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (whose collection the controller hands out), the files of LONGEST_FIRST first, in
    that order; the others after them as collected."""
    if not hasattr(config, "workerinput"):
        return
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark for the session, started by the first test that asks for it (Spark is imported only
    then). Shuffles of the tests' small data use 2 partitions (Spark's 200 cost seconds per streaming batch)."""
    from spark_readers.session import spark_session

    session = spark_session("local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """One source + standby + DC shared by the whole session; tests keep to their own databases."""
    sb = Sandbox(tmp_path_factory.mktemp("sandbox"), with_standby=True, tied_to_parent=True)
    sb.up()
    yield sb
    sb.down()


@pytest.fixture
def make_sandbox(tmp_path: Path) -> Iterator[Callable[..., Sandbox]]:
    """Private servers for a test that restarts or kills them; all are stopped afterwards."""
    made: list[Sandbox] = []

    def make(with_standby: bool = False, source_args: tuple[str, ...] = (), dc_args: tuple[str, ...] = (),
             tls: bool = False) -> Sandbox:
        sb = Sandbox(tmp_path / f"sandbox{len(made)}", with_standby=with_standby,
                     tied_to_parent=True, source_args=source_args, dc_args=dc_args, tls=tls)
        made.append(sb)
        sb.up()
        return sb

    yield make
    for sb in made:
        sb.down()


@pytest.fixture(autouse=True)
def no_gate_left_running() -> Iterator[None]:
    """A gate process a test started (tests.replay.start_gate) does not outlive the test, even a failed one."""
    yield
    while STARTED:
        gate = STARTED.pop()
        if gate.poll() is None:
            gate.kill()
            gate.wait()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short identifier unique within the session, e.g. for a channel or a source database."""
    return re.sub(r"\W", "_", f"t{next(_names)}_{request.node.name[:20]}")


@pytest.fixture
def source_cursor(sandbox: Sandbox, unique_name: str) -> Iterator[pymysql.cursors.Cursor]:
    """A cursor on the session's source, in a new database ``unique_name`` (dropped after), time zone UTC."""
    fix_library_charsets()
    conn = sandbox.source.connect()
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE `{unique_name}`")
    cur.execute(f"USE `{unique_name}`")
    cur.execute("SET time_zone = '+00:00'")
    yield cur
    cur.execute(f"DROP DATABASE `{unique_name}`")
    conn.close()


@pytest.fixture(scope="session")
def gate_config(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config.yaml whose DC is the session sandbox's DC."""
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_text(f"dc:\n  host: 127.0.0.1\n  port: {sandbox.dc.port}\n  user: root\n  password: ''\n")
    return path


@pytest.fixture
def gate(gate_config: Path) -> Callable[..., Result]:
    """Run the gate CLI in-process with ``gate_config``: ``gate("channel", "list")`` returns click's Result."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None, env: dict[str, str | None] | None = None) -> Result:
        return runner.invoke(main, ["--config", str(gate_config), *args], input=input, env=env,
                             catch_exceptions=False)

    return run
