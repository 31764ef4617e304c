"""``gate status``: the standby, the age of its newest sample, the failover settings and the switch history."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

from click.testing import Result

from gate.config import ChannelDefaults
from gate.failover import PLANNED
from gate.sandbox import Sandbox
from tests.replay import make_channel, running, server_config, wait_caught_up, wait_sampled

Gate = Callable[..., Result]
FAST = ChannelDefaults(standby_sample_seconds=0.3, failover_margin_seconds=1.0)


def test_status_shows_the_standby_its_sample_age_and_the_switches(
        gate: Gate, sandbox: Sandbox, unique_name: str) -> None:
    assert sandbox.standby is not None
    source, standby = sandbox.source.address, sandbox.standby.address
    dc = make_channel(sandbox.dc, sandbox.source, unique_name, standby=server_config(sandbox.standby),
                      failover_mode="fingerprint", defaults=FAST)
    with running(dc, unique_name):
        wait_sampled(sandbox.dc, unique_name)
        time.sleep(2.1)  # then a checkpoint newer than a sample plus the margin (whole seconds)
        with sandbox.source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE src_{unique_name}")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        live = json.loads(gate("--json", "status", unique_name, "--sample", "0").stdout)
        text = gate("status", unique_name, "--sample", "0").stdout
    assert (live["state"], live["source"], live["standby"]) == ("running", source, standby)
    assert 0 <= live["standby_sample_age_seconds"] < 2
    assert (live["failover_mode"], live["on_divergence"], live["switches"]) == ("fingerprint", "stop", [])
    width = len("standby_sample_age_seconds") + 2
    for key, value in (("standby", standby), ("failover_mode", "fingerprint"), ("on_divergence", "stop"),
                       ("switches", "0")):
        assert f"\n{key.ljust(width)}{value}\n" in text + "\n"
    assert re.search(r"\nstandby_sample_age_seconds  \d+\.\d\n", text)

    checkpoint = live["checkpoint_id"]
    assert gate("channel", "switch", unique_name, "--yes").exit_code == 0
    after = json.loads(gate("--json", "status", unique_name).stdout)
    assert (after["state"], after["source"], after["standby"], after["standby_sample_age_seconds"]) == (
        "stopped", standby, None, None)  # the old source replicates from nobody: no standby, no samples
    [switch] = after["switches"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", switch.pop("switched_at"))
    assert switch == {"from_instance": source, "to_instance": standby, "reason": PLANNED, "at_id": checkpoint}
    lines = gate("status", unique_name).stdout.splitlines()
    assert lines[-4:-2] == [f"{'switches'.ljust(width)}1", ""]
    assert lines[-2].split() == ["switched_at", "from_instance", "to_instance", "at_id", "reason"]
    assert lines[-1].split()[2:] == [source, standby, str(checkpoint), *PLANNED.split()]
