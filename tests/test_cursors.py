"""Cursors a channel does not have, and gate tail's starting options, on a real DC: refused before
anything is read or stored, with one message naming the problem and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from gate.cli import main
from gate.common.config import ServerConfig
from gate.common.errors import CursorBeyondCheckpoint, InvalidValue
from gate.consume.client import MAKE_CURSOR, Consumer, Cursor
from gate.devtools.sandbox import Sandbox
from tests.test_client import HOLES, ROWS, _url, channel

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def consumers(sandbox: Sandbox, name: str) -> list[tuple[Any, ...]]:
    with sandbox.dc.connect(name) as conn, conn.cursor() as cur:
        cur.execute("SELECT name, id, tid FROM gate_consumer ORDER BY name")
        return list(cur.fetchall())


def beyond(name: str, what: str, skipped: str, fix: str = MAKE_CURSOR) -> str:
    return (f"{what} is beyond the checkpoint of channel '{name}' (row 6): rows above the checkpoint may be missing "
            f"or incomplete, and reading on from there would skip {skipped} without a word. {fix}")


def mismatch(name: str, what: str, row: int, tid: int, given: int) -> str:
    return (f"{what} does not fit channel '{name}': its row {row} has tid {tid}, not {given}, so the cursor comes "
            f"from another channel (or from one dropped and created again). {MAKE_CURSOR}")


@pytest.mark.parametrize("via", ["pymysql", "sqlalchemy"])
def test_a_start_cursor_the_channel_does_not_have_is_refused(sandbox: Sandbox, unique_name: str, via: str) -> None:
    dc = channel(sandbox, unique_name, ROWS + HOLES, (6, 4))  # rows 8, 9, 12 are above the checkpoint
    server: ServerConfig | str = dc if via == "pymysql" else _url(dc)
    refused = {
        Cursor(10**9, 5): beyond(unique_name, "start=Cursor(id=1000000000, tid=5)", "rows 7 to 1000000000"),
        Cursor(7, 5): beyond(unique_name, "start=Cursor(id=7, tid=5)", "row 7"),
        Cursor(4, 2): mismatch(unique_name, "start=Cursor(id=4, tid=2)", 4, 3, 2),
        Cursor(6, 3): mismatch(unique_name, "start=Cursor(id=6, tid=3)", 6, 4, 3),
        Cursor(0, 5): mismatch(unique_name, "start=Cursor(id=0, tid=5)", 0, 0, 5),
        Cursor(-5, -5): "start=Cursor(id=-5, tid=-5) is not a cursor: ids and tids are 0 or more (Cursor() is the "
                        f"beginning). {MAKE_CURSOR}",
    }
    for cursor, message in refused.items():
        with pytest.raises(InvalidValue) as error:
            Consumer(server, unique_name, name="fut", start=cursor)
        assert str(error.value) == message
    assert consumers(sandbox, unique_name) == []
    with Consumer(server, unique_name, name="fut", start=Cursor(4, 3)) as consumer:  # a cursor it has
        assert [c.id for c in consumer.poll()] == [5, 6]
        consumer.commit()
        consumer.cursor = Cursor(10**9, 5)  # set by hand: checked at the next poll or commit
        for call in (consumer.poll, consumer.commit):
            with pytest.raises(CursorBeyondCheckpoint) as error:
                call()
            assert str(error.value) == beyond(unique_name, "consumer.cursor = Cursor(id=1000000000, tid=5)",
                                              "rows 7 to 1000000000")
    assert consumers(sandbox, unique_name) == [("fut", 6, 4)]


def test_a_stored_cursor_beyond_the_checkpoint_is_refused(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:  # as an earlier version let commit() store it
        cur.execute("INSERT INTO gate_consumer (name, id, tid) VALUES ('fut', 1000000000, 5)")
    with pytest.raises(CursorBeyondCheckpoint) as error:
        Consumer(dc, unique_name, name="fut")
    assert str(error.value) == beyond(
        unique_name, "The stored cursor of consumer 'fut', Cursor(id=1000000000, tid=5),", "rows 7 to 1000000000",
        f"Forget it with 'gate consumer drop {unique_name} fut --yes' and start the consumer again from a cursor at "
        "or below the checkpoint.")


def test_position_names_the_row_beyond_the_checkpoint(sandbox: Sandbox, unique_name: str) -> None:
    dc = channel(sandbox, unique_name, ROWS, (6, 4))
    with Consumer(dc, unique_name) as consumer:
        with pytest.raises(CursorBeyondCheckpoint) as error:
            consumer.position(8)
        assert str(error.value) == beyond(unique_name, "Row 8", "rows 7 to 8", "Give a row at or below the checkpoint "
                                          "(consumer.checkpoint() is the newest).")
        with pytest.raises(InvalidValue) as error:
            consumer.position(-1)
        assert str(error.value) == "Row -1 is not a row id: ids are 0 or more (0: before the first row)."


def tail(gate_config: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--config", str(gate_config), "tail", *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_tail_refuses_starts_and_intervals_it_cannot_use(sandbox: Sandbox, unique_name: str, gate_config: Path) -> None:
    channel(sandbox, unique_name, ROWS + HOLES, (6, 4))
    from_fix = "Give --from 7 or less (7: only the rows still to come)."
    assert tail(gate_config, unique_name, "--from", "999999") == (
        2, f"error: {beyond(unique_name, '--from 999999', 'rows 7 to 999998', from_fix)}\n")
    assert tail(gate_config, unique_name, "--from", "8", "--no-follow") == (
        2, f"error: {beyond(unique_name, '--from 8', 'row 7', from_fix)}\n")
    assert tail(gate_config, unique_name, "--from", "7", "--no-follow") == (0, "")  # the rows still to come
    assert tail(gate_config, unique_name, "--from", "²") == (
        2, "error: --from '²' is neither a row id nor a time. Give an id such as 1200 or a time such as "
           "2024-05-01T10:00:00 (UTC) or 2024-05-01T12:00:00+02:00.\n")
    assert tail(gate_config, unique_name, "--lines", "-3") == (
        2, "error: --lines must be 0 or more, not -3: it counts the rows before the checkpoint to show.\n")
    for interval in ("-1", "0", "0.01", "nan", "inf"):
        assert tail(gate_config, unique_name, "--interval", interval) == (
            2, f"error: --interval must be between 0.05 and 3600 seconds, not {float(interval):g} (below 0.05 s tail "
               "would query the DC server in a tight loop).\n")
    assert tail(gate_config, unique_name, "--lines", "0", "--no-follow", "--interval", "0.05") == (0, "")


def test_the_spark_source_refuses_starts_and_offsets_beyond_the_checkpoint(sandbox: Sandbox, unique_name: str) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_readers.source import Channel, GateStreamReader, settings

    dc = channel(sandbox, unique_name, ROWS + HOLES, (6, 4))
    options = settings({"channel": unique_name, "host": dc.host, "port": str(dc.port), "user": dc.user,
                        "startingId": "51", "consumer": "spark:fut"})
    with Channel(options.login) as reader:
        assert reader.start(7) == 6  # only the rows still to come
        with pytest.raises(CursorBeyondCheckpoint) as error:
            reader.start(51)
    assert str(error.value) == beyond(unique_name, "Option startingId=51", "rows 7 to 50",
                                      "Give startingId 7 or less (7: only the rows still to come).")
    stream = GateStreamReader(options)
    with pytest.raises(CursorBeyondCheckpoint):
        stream.initialOffset()
    assert consumers(sandbox, unique_name) == []  # nothing registered
    with pytest.raises(CursorBeyondCheckpoint) as error:
        stream.latestOffset({"id": 9}, ReadAllAvailable())
    assert str(error.value) == beyond(unique_name, "The query's offset, row 9,", "rows 7 to 9", "Was the channel "
                                      "dropped and created again? Start the query with a new checkpointLocation.")


def test_spark_load_refuses_a_cursor_the_channel_does_not_have(spark: SparkSession, sandbox: Sandbox,
                                                              unique_name: str, tmp_path: Path) -> None:
    from spark_readers.load import CURSOR_FILE, load
    from spark_readers.session import ChannelSource

    source = ChannelSource(channel(sandbox, unique_name, ROWS, (6, 4)), unique_name)
    for cursor, message in (((50, 9), beyond(unique_name, f"The cursor of file:{tmp_path}, Cursor(id=50, tid=9),",
                                             "rows 7 to 50", "Was the channel dropped and created again? Load it into "
                                             "a new output directory.")),
                            ((4, 9), f"The cursor of file:{tmp_path}, Cursor(id=4, tid=9), does not fit channel "
                                     f"'{unique_name}': its row 4 has tid 3, not 9, so the cursor comes from another "
                                     "channel (or from one dropped and created again). Was the channel dropped and "
                                     "created again? Load it into a new output directory.")):
        (tmp_path / CURSOR_FILE).write_text(json.dumps({"channel": unique_name, "id": cursor[0], "tid": cursor[1]}))
        with pytest.raises(InvalidValue) as error:
            load(spark, source, str(tmp_path), consumer="spark:fut")
        assert str(error.value) == message
    assert consumers(sandbox, unique_name) == [] and sorted(p.name for p in tmp_path.iterdir()) == [CURSOR_FILE]
