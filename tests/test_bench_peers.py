"""The benchmark's peers table and its chart of rows/s per system (pure functions over its JSON figures)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path += [str(ROOT / "scripts" / "bench"), str(ROOT / "scripts" / "docs")]

import gen_charts  # noqa: E402  (scripts, not packages: found through the path above, after everything else)
import report  # noqa: E402


def figures() -> dict[str, Any]:
    gate = {"rows": 1000, "complete": True, "rows_per_s": 5000.0, "steady_rows_per_s": 6000.0,
            "cpu_us_per_row_gate": 20.0, "steady_cpu_us_per_row_gate": 15.0, "cpu_us_per_row": {"mariadbd_dc": 12.5},
            "peak_rss_mb": 230.0}
    capture = {**gate, "rows_per_s": 8000.0, "steady_rows_per_s": None, "cpu_us_per_row_gate": 16.0,
               "steady_cpu_us_per_row_gate": None, "cpu_us_per_row": {"mariadbd_dc": 0.5}, "peak_rss_mb": 220.0}
    debezium = {"peer": "debezium", "version": "Debezium 3.5.0.Final, MariaDB connector", "rows": 1000,
                "expected_rows": 1000, "complete": True, "rows_per_s": 6000.0, "steady_rows_per_s": 2500.0,
                "cpu_us_per_row": 80.0, "steady_cpu_us_per_row": 40.0, "peak_rss_mb": 700.0}
    maxwell = {"peer": "maxwell", "version": "Maxwell 1.22.6, stdout producer", "rows": 0, "expected_rows": 1000,
               "complete": False, "rows_per_s": None, "peak_rss_mb": 170.0}
    return {"workloads": {"a": {"workload": "a: inserts", "baseline": {"rows": 1000, "rows_per_s": 4000.0,
                                                                     "cpu_us_per_row": 30.0},
                                "gate": gate, "gate_capture": capture,
                                "peers": {"debezium": debezium, "maxwell": maxwell}}}}


def cells(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in text.splitlines()[3:]]


def test_the_peers_table_puts_both_gate_figures_beside_each_versioned_peer_and_marks_a_peer_that_failed() -> None:
    text = report.peers_report(figures())
    assert cells(text) == [
        ["a: inserts", "bare reader (decodes only)", "1,000", "4,000", "-", "30.0", "-", "2.00", "1.25"],
        ["gate, capture only (renders the JSON, counts)", "1,000", "8,000", "-", "16.0 +0.5 DC server", "220", "1.00",
         "0.62"],
        ["gate (captures + writes the DC)", "1,000", "5,000", "6,000", "20.0 (15.0) +12.5 DC server", "230", "1.60",
         "1.00"],
        ["Debezium 3.5.0.Final, MariaDB connector (captures, counts)", "1,000", "6,000", "2,500", "80.0 (40.0)", "700",
         "1.33", "0.83", "PASS, FAIL"],
        ["Maxwell 1.22.6, stdout producer (captures, counts)", "0 of 1,000", "did not complete", "-", "-", "170", "-",
         "-", "PASS (it failed)"],
    ]
    assert "gate twice: capture only (every row decoded and rendered to the JSON text of transfer_data.data" in text


def test_without_peers_the_table_still_puts_gate_capture_only_beside_gate_with_its_dc_writes() -> None:
    results = figures()
    del results["workloads"]["a"]["peers"]
    assert [row[:2] for row in cells(report.peers_report(results))] == [
        ["a: inserts", "bare reader (decodes only)"], ["gate, capture only (renders the JSON, counts)", "1,000"],
        ["gate (captures + writes the DC)", "1,000"]]


def texts(svg: str) -> list[str]:
    return [text.split(">")[-1] for text in svg.split("</text>")[1:-1]]


def test_the_chart_has_a_bar_per_system_with_the_peers_versions_and_says_which_peer_did_not_complete() -> None:
    assert texts(gen_charts.systems_chart(figures())) == [
        "bare reader", "gate, capture only", "gate (+ DC writes)", "Debezium 3.5.0.Final (capture only)",
        "Maxwell 1.22.6 (capture only)", "a: inserts", "4,000 rows/s", "8,000 rows/s", "5,000 rows/s", "6,000 rows/s",
        "did not complete"]


def test_the_chart_of_a_run_without_peers_has_the_bare_reader_and_both_gate_bars() -> None:
    results = figures()
    del results["workloads"]["a"]["peers"]
    assert texts(gen_charts.systems_chart(results)) == [
        "bare reader", "gate, capture only", "gate (+ DC writes)", "a: inserts", "4,000 rows/s", "8,000 rows/s",
        "5,000 rows/s"]
