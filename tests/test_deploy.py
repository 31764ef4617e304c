"""What an operator installs beside gate: the systemd unit, the Prometheus alert rules and the Grafana
dashboard, checked with the tools that load them (systemd-analyze, promtool) and against a real gate run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gate.admin.verify import metrics_text
from gate.common.config import ChannelDefaults
from gate.common.errors import ConfigError, Deposed, ServerRefused
from gate.devtools.sandbox import Sandbox, free_port
from tests.replay import GATE, STARTED, make_channel, wait_caught_up, wait_running
from tests.test_metrics import get, wait_status

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "deploy" / "systemd" / "gate@.service"
RULES = ROOT / "deploy" / "prometheus" / "gate-rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "gate-rules.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "gate-dashboard.json"
INSTALLED_GATE = "/opt/gate/bin/gate"  # where the unit expects gate (docs/operations/systemd.md)
# The series retention serves (its contract with the alert rules and the dashboard).
RETENTION_SERIES = {
    "gate_consumer_cursor_id", "gate_consumer_lag_rows", "gate_consumer_last_move_timestamp_seconds",
    "gate_consumer_stale", "gate_retention_purged_through_id", "gate_retention_rows_removed_total",
    "gate_retention_errors_total", "gate_retention_last_run_timestamp_seconds", "gate_retention_oldest_kept_id",
}
PROMETHEUS_OWN = {"up"}  # series Prometheus itself makes for every target


def unit_settings() -> dict[str, list[str]]:
    """``Key=Value`` lines of the unit, every value of a key in order (sections do not share key names)."""
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (Debian package {package}; scripts/setup.sh installs it)")
    return path


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """verify needs ExecStart's program to exist: the unit is rendered with this checkout's gate in its place.
    Unknown keys and bad values are only warnings for verify, so its output must be empty too."""
    analyze = need("systemd-analyze", "systemd")
    text = UNIT.read_text()
    assert unit_settings()["ExecStart"] == [f"{INSTALLED_GATE} run %i"]
    unit = tmp_path / "gate@shop.service"
    unit.write_text(text.replace(INSTALLED_GATE, GATE))
    result = subprocess.run([analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def unit_command(channel: str, config: Path) -> tuple[list[str], dict[str, str]]:
    """ExecStart and the environment of the unit's instance ``channel``, with this checkout's gate and ``config``."""
    settings = unit_settings()
    [environment] = settings["Environment"]
    assert environment == "GATE_CONFIG=/etc/gate/config.yaml"
    [exec_start] = settings["ExecStart"]
    command = exec_start.replace(INSTALLED_GATE, GATE).replace("%i", channel).split()
    return command, {**os.environ, "GATE_CONFIG": str(config)}


def test_gate_exits_as_the_unit_expects(sandbox: Sandbox, unique_name: str, tmp_path: Path) -> None:
    """A malformed config exits with a status the unit does not restart; SIGTERM drains the writers, stores
    the checkpoint and exits 0, well within TimeoutStopSec."""
    settings = unit_settings()
    assert (settings["Restart"], settings["KillSignal"], settings["KillMode"]) == (["on-failure"], ["SIGTERM"],
                                                                                    ["mixed"])
    [prevent] = settings["RestartPreventExitStatus"]
    [stop_timeout] = settings["TimeoutStopSec"]
    config = tmp_path / "config.yaml"
    config.write_text("dc:\n  port: not-a-port\n")
    command, env = unit_command(unique_name, config)
    bad = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert prevent.split() == [str(ConfigError.exit_code), str(ServerRefused.exit_code),  # 2, 3, 5: not restarted
                               str(Deposed.exit_code)]
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        ConfigError.exit_code, "", f"error: {config} line 2: dc.port must be a whole number, not 'not-a-port'.\n")

    db = f"src_{unique_name}"
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(40))")
    make_channel(sandbox.dc, sandbox.source, unique_name, allow=(f"{db}.*",),
                 defaults=ChannelDefaults(batch_rows=10))
    config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {sandbox.dc.port}\n  user: root\n  password: ''\n")
    with open(tmp_path / "gate.log", "wb") as log:
        run = subprocess.Popen([*command, "--no-check"], env=env, stdout=log, stderr=log)
    STARTED.append(run)
    wait_running(sandbox.dc, unique_name, run)
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {db}.t VALUES (0, 'first')")
        wait_caught_up(sandbox.source, sandbox.dc, unique_name)
        for n in range(1, 21):  # 2000 rows in 20 transactions, the last ones still on their way at SIGTERM
            cur.execute(f"INSERT INTO {db}.t VALUES " + ",".join(f"({n * 1000 + i}, 'row {i}')" for i in range(100)))
    run.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert run.wait(timeout=float(stop_timeout.removesuffix("s"))) == 0
    drained = time.monotonic() - started
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("SELECT c.id, c.tid, COUNT(d.id) FROM transfer_checkpoint c, transfer_data d")
        checkpoint_id, checkpoint_tid, rows = cur.fetchone()
    # what was read before the signal is all written and checkpointed, nothing above the checkpoint
    assert rows == checkpoint_id and checkpoint_id >= 1 and checkpoint_tid >= 1, (rows, checkpoint_id)
    log_text = (tmp_path / "gate.log").read_text()
    assert f"channel {unique_name} stopped at checkpoint id={checkpoint_id} tid={checkpoint_tid}" in log_text
    assert drained < 30, f"gate took {drained:.1f} s to stop (machine busy?)"


def test_rules_pass_promtool_check_and_their_unit_tests() -> None:
    promtool = need("promtool", "prometheus")
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert (checked.returncode, checked.stdout.split()) == (
        0, ["Checking", str(RULES), "SUCCESS:", "15", "rules", "found"]), checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                            timeout=120, cwd=RULE_TESTS.parent)
    assert (tested.returncode, tested.stdout.split()) == (0, ["Unit", "Testing:", str(RULE_TESTS), "SUCCESS"]), \
        tested.stdout + tested.stderr


def rule_expressions() -> list[str]:
    import yaml

    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def test_dashboard_queries_are_valid_promql_filtered_by_the_channel_variable(tmp_path: Path) -> None:
    """promtool checks each query as a recording rule, with Grafana's variables replaced as Grafana does."""
    promtool = need("promtool", "prometheus")
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["channel"]["query"]["query"] == "label_values(gate_build_info, channel)"
    expressions = dashboard_expressions()
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    assert all('channel=~"$channel"' in expr for expr in expressions)
    import yaml

    rules = [{"record": f"dashboard:query{n}", "expr": expr.replace("$channel", ".+").replace("$__rate_interval", "5m")}
             for n, expr in enumerate(expressions)]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in checked.stdout, \
        checked.stdout + checked.stderr


def used_series(expressions: list[str]) -> set[str]:
    """Series names in PromQL: gate_* and process_* identifiers, and up (functions and labels are neither)."""
    return {name for expr in expressions for name in re.findall(r"\b(?:gate|process)_[a-z0-9_]+\b|\bup\b", expr)}


def served_series(text: str) -> set[str]:
    """Every series name in a /metrics reply: families (also those without samples yet) and samples."""
    names = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    return names | {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line[0] == "#"}


def test_every_series_the_rules_and_dashboard_use_is_served(sandbox: Sandbox, unique_name: str,
                                                            tmp_path: Path) -> None:
    """Scrapes a real 'gate run' (with a registered consumer, so that consumer series exist): every series
    the alert rules and the dashboard use is served, retention's among them."""
    port = free_port()
    make_channel(sandbox.dc, sandbox.source, unique_name, defaults=ChannelDefaults(metrics_port=port))
    with sandbox.dc.connect(unique_name) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO gate_consumer (name, id, tid) VALUES ('billing', 0, 0)")
    config = tmp_path / "config.yaml"
    config.write_text(f"dc:\n  host: 127.0.0.1\n  port: {sandbox.dc.port}\n  user: root\n  password: ''\n")
    with sandbox.source.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@binlog_expire_logs_seconds")
        [expire] = cur.fetchone()
        cur.execute("SET GLOBAL binlog_expire_logs_seconds = 864000")  # 10 days: nothing of this session goes
        try:
            with open(tmp_path / "gate.log", "wb") as log:
                run = subprocess.Popen([GATE, "--config", str(config), "run", unique_name, "--no-check"], stdout=log,
                                       stderr=log)
            STARTED.append(run)
            wait_status(port, "/readyz", 200)
            status, text = get(port, "/metrics")
        finally:
            cur.execute("SET GLOBAL binlog_expire_logs_seconds = %s", (expire,))
    run.send_signal(signal.SIGTERM)
    assert status == 200 and run.wait(timeout=60) == 0
    used = used_series(rule_expressions()) | used_series(dashboard_expressions())
    assert {"gate_replication_lag_seconds", "gate_source_binlog_expire_seconds", "process_start_time_seconds",
            "gate_retention_errors_total", "gate_consumer_stale"} <= used
    served = served_series(text)
    assert f'gate_source_binlog_expire_seconds{{channel="{unique_name}"}} 864000.0\n' in text
    assert RETENTION_SERIES <= served
    verify_file = served_series(metrics_text(unique_name, [{"table": "db.t", "matched": True}], 0.0))
    assert sorted(used - served - verify_file - PROMETHEUS_OWN) == []  # gate verify's series: its --metrics-file
