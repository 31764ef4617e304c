"""Switch time: from the source's death (kill -9) to the first row read from the standby in the DC.

    python scripts/bench/switch_time.py [--failover-after SECONDS]

:func:`measure_switch_time` runs a channel with a standby in this process under a steady write load
on the source, kills the source, and then writes on the standby like an application that has moved
there (one small transaction every 10 ms). From the kill it measures when gate recorded the switch
(its gate_switch row) and when the first row read from the standby (instance_name = the standby)
reached transfer_data. Most of it is the detection time, ``failover_after_seconds``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pymysql

from gate.capture.pipeline import Pipeline
from gate.capture.reader import current_position
from gate.common.config import ChannelDefaults, Secret, ServerConfig
from gate.common.dc import (
    ChannelSettings,
    ResumeState,
    connect,
    create_channel,
    write_resume,
)
from gate.devtools.sandbox import MariaDBServer, Sandbox
from gate.devtools.workload import RandomWorkload

CHANNEL = "switch_time"
LOAD_DB = "switch_load"  # random transactions on the source
APP_DB = "switch_app"  # the application's writes on the standby after the switch


@dataclass(frozen=True)
class SwitchTime:
    failover_after_seconds: float  # the configured detection time
    switch_recorded_seconds: float  # kill -> gate_switch row
    first_new_row_seconds: float  # kill -> first row from the standby in transfer_data
    standby_rows: int  # rows from the standby in transfer_data at the end


def _login(server: MariaDBServer) -> ServerConfig:
    return ServerConfig("127.0.0.1", server.port, "root", Secret(""))


class _Writes(threading.Thread):
    """Transactions every 10 ms until ``halt`` is set or the server dies: random ones on the source, or
    the application's inserts on the standby."""

    def __init__(self, server: MariaDBServer, app: bool) -> None:
        super().__init__(daemon=True)
        self.server, self.app = server, app
        self.halt = threading.Event()

    def run(self) -> None:
        with self.server.connect() as conn, conn.cursor() as cur:
            work = RandomWorkload(conn, LOAD_DB, seed=9, ddl_every=30)
            if not self.app:
                work.setup()
            try:
                while not self.halt.is_set():
                    if self.app:
                        cur.execute(f"INSERT INTO {APP_DB}.writes (at) VALUES (%s)", (time.time(),))
                    else:
                        work.transaction()
                    time.sleep(0.01)
            except pymysql.err.Error:
                pass  # the server died under us (the source, killed)


def _first(dc: MariaDBServer, standby: MariaDBServer, t0: float, timeout: float) -> tuple[float, float]:
    """Seconds from ``t0`` to the gate_switch row and to the first standby row in transfer_data."""
    switched: float | None = None
    with dc.connect(CHANNEL) as conn, conn.cursor() as cur:
        while time.monotonic() - t0 < timeout:
            if switched is None:
                cur.execute("SELECT COUNT(*) FROM gate_switch")
                switched = time.monotonic() - t0 if cur.fetchone()[0] else None
            cur.execute("SELECT 1 FROM transfer_data WHERE instance_name = %s LIMIT 1", (standby.address,))
            if cur.fetchone() is not None:
                return switched if switched is not None else time.monotonic() - t0, time.monotonic() - t0
            time.sleep(0.02)
    raise TimeoutError(f"no row from the standby in the DC within {timeout:.0f} s of the source's death")


def measure_switch_time(box: Sandbox, defaults: ChannelDefaults | None = None, timeout: float = 120.0) -> SwitchTime:
    """Kill the source of ``box`` (a sandbox with a standby, used up by this) under load; see the module doc.

    The channel ``switch_time`` captures everything from the source's current position. ``defaults``
    are the channel's settings (the shipped defaults if None); the load runs long enough for a
    standby sample older than the margin to exist.
    """
    assert box.standby is not None, "the sandbox needs a standby"
    defaults = defaults or ChannelDefaults()
    dc_login = _login(box.dc)
    with connect(dc_login, "DC") as conn:
        create_channel(conn, ChannelSettings(CHANNEL, _login(box.source), _login(box.standby), server_id=4343,
                                             defaults=defaults))
        start = current_position(_login(box.source))
        conn.begin()
        with conn.cursor() as cur:
            write_resume(cur, CHANNEL, ResumeState(log_file=start.log_file, log_pos=start.log_pos,
                                                   gtid_pos=start.gtid_pos, instance_name=box.source.address))
        conn.commit()
    with box.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {APP_DB}")
        cur.execute(f"CREATE TABLE {APP_DB}.writes (id INT AUTO_INCREMENT PRIMARY KEY, at DOUBLE)")
    pipeline = Pipeline(dc_login, CHANNEL, preflight=False)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            pipeline.run()
        except BaseException as exc:  # raised below, after the measurement's clean-up
            failed.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    load, app = _Writes(box.source, app=False), _Writes(box.standby, app=True)
    runner.start()
    try:
        with box.dc.connect(CHANNEL) as conn, conn.cursor() as cur:
            while runner.is_alive() and not cur.execute("SELECT 1 FROM gate_standby_sample"):
                time.sleep(0.05)  # the load starts with the samples
        load.start()
        time.sleep(defaults.standby_sample_seconds + defaults.failover_margin_seconds + 1.0)
        t0 = time.monotonic()
        box.source.kill()
        app.start()
        switched, first_row = _first(box.dc, box.standby, t0, timeout)
    finally:
        load.halt.set()
        app.halt.set()
        load.join()
        if app.is_alive():
            app.join()
        pipeline.stop()
        runner.join(timeout=60)
        if failed:  # the pipeline's own error explains a time-out best
            raise failed[0]
    with box.dc.connect(CHANNEL) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM transfer_data WHERE instance_name = %s", (box.standby.address,))
        standby_rows = int(cur.fetchone()[0])
    return SwitchTime(defaults.failover_after_seconds, round(switched, 2), round(first_row, 2), standby_rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--failover-after", type=float, default=ChannelDefaults.failover_after_seconds,
                        metavar="SECONDS", help="the channel's failover_after_seconds")
    args = parser.parse_args()
    defaults = replace(ChannelDefaults(), failover_after_seconds=args.failover_after)
    with tempfile.TemporaryDirectory(prefix="gate-switch-time-") as tmp:
        box = Sandbox(Path(tmp), with_standby=True, tied_to_parent=True)
        box.up()
        try:
            print(json.dumps(asdict(measure_switch_time(box, defaults)), indent=2))
        finally:
            box.down()


if __name__ == "__main__":
    main()
