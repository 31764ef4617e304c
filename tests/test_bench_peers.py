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
    gate = {"rows": 1000, "rows_per_s": 5000.0, "steady_rows_per_s": 6000.0, "cpu_us_per_row_gate": 20.0,
            "steady_cpu_us_per_row_gate": 15.0, "cpu_us_per_row": {"mariadbd_dc": 12.5}, "peak_rss_mb": 230.0}
    debezium = {"peer": "debezium", "rows": 1000, "expected_rows": 1000, "complete": True, "rows_per_s": 2000.0,
                "steady_rows_per_s": 2500.0, "cpu_us_per_row": 80.0, "steady_cpu_us_per_row": 40.0,
                "peak_rss_mb": 700.0}
    maxwell = {"peer": "maxwell", "rows": 0, "expected_rows": 1000, "complete": False, "rows_per_s": None,
               "peak_rss_mb": 170.0}
    return {"workloads": {"a": {"workload": "a: inserts", "baseline": {"rows": 1000, "rows_per_s": 4000.0,
                                                                     "cpu_us_per_row": 30.0},
                                "gate": gate, "peers": {"debezium": debezium, "maxwell": maxwell}}}}


def test_the_peers_table_puts_gate_beside_each_peer_and_marks_a_peer_that_failed() -> None:
    lines = report.peers_report(figures()).splitlines()
    cells = [[cell for cell in line.split("  ") if cell.strip()] for line in lines[3:]]
    assert [[c.strip() for c in row] for row in cells] == [
        ["a: inserts", "bare reader (decodes only)", "1,000", "4,000", "1.25", "-", "30.0", "-"],
        ["gate (captures + writes the DC)", "1,000", "5,000", "1.00", "6,000", "20.0 (15.0) +12.5 DC server", "230"],
        ["debezium (captures, counts)", "1,000", "2,000", "2.50", "2,500", "80.0 (40.0)", "700", "PASS"],
        ["maxwell (captures, counts)", "0 of 1,000", "did not complete", "-", "-", "-", "170", "PASS (it failed)"],
    ]
    assert "gate captures AND writes every row into the DC; the peers only capture and count" in lines[0]


def test_the_chart_has_a_bar_per_system_and_says_which_peer_did_not_complete() -> None:
    svg = gen_charts.systems_chart(figures())
    assert [text.split(">")[-1] for text in svg.split("</text>")[1:-1]] == [
        "bare reader", "gate (+ DC writes)", "Debezium (capture only)", "Maxwell (capture only)", "a: inserts",
        "4,000 rows/s", "5,000 rows/s", "2,000 rows/s", "did not complete"]
