"""The benchmark's charts as SVG, drawn from the committed result files in scripts/bench/results/.

Plain SVG text (no plotting library): grouped horizontal bars, one group per workload or phase, with
each bar's value written beside it. :data:`CHARTS` names each image and what it is drawn from.
scripts/bench/benchmark.py draws its chart of rows/s per system with :func:`systems_chart` too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "results"
COLOURS = ("#9e9e9e", "#3f51b5", "#ff9800", "#4caf50", "#e91e63")
_BAR, _GAP, _LABEL, _WIDTH = 18, 14, 210, 720


def _load(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def bars(title: str, unit: str, groups: list[str], series: dict[str, list[float | None]]) -> str:
    """Grouped horizontal bars: ``series`` maps a legend entry to one value per group (None: no figure). The
    legend has up to 4 entries a line, fewer when its longest entry needs the room."""
    per_line = max(1, min(4, 700 // (30 + 7 * max((len(name) for name in series), default=0))))
    top = 56 + 18 * ((len(series) - 1) // per_line)
    height = top + len(groups) * (len(series) * _BAR + _GAP) + 10
    scale = (_WIDTH - _LABEL - 130) / max((v for values in series.values() for v in values if v is not None), default=1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="0" y="16" font-size="14" font-weight="bold">{escape(title)}</text>']
    for i, name in enumerate(series):
        x, y = (i % per_line) * (700 // per_line), 28 + 18 * (i // per_line)
        out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{COLOURS[i]}"/>'
                   f'<text x="{x + 16}" y="{y + 10}">{escape(name)}</text>')
    y = top
    for g, group in enumerate(groups):
        out.append(f'<text x="0" y="{y + len(series) * _BAR / 2 + 4}">{escape(group)}</text>')
        for i, values in enumerate(series.values()):
            value = values[g]
            if value is None:
                out.append(f'<text x="{_LABEL + 4}" y="{y + _BAR - 6}">did not complete</text>')
                y += _BAR
                continue
            width = value * scale
            out.append(f'<rect x="{_LABEL}" y="{y}" width="{width:.1f}" height="{_BAR - 3}" fill="{COLOURS[i]}"/>'
                       f'<text x="{_LABEL + width + 4:.1f}" y="{y + _BAR - 6}">{_number(value)} {escape(unit)}</text>')
            y += _BAR
        y += _GAP
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _workloads(name: str) -> dict[str, Any]:
    return dict(_load(name)["workloads"])


def _against_baseline(title: str, unit: str, baseline: str, gate: str) -> str:
    """One bar each for the bare reader's figure ``baseline`` and gate's figure ``gate`` per workload."""
    runs = _workloads("compiled-decoders-quiet.json").values()
    return bars(title, unit, [w["workload"] for w in runs],
                {"bare reader (baseline)": [w["baseline"][baseline] for w in runs],
                 "gate": [w["gate"][gate] for w in runs]})


def throughput() -> str:
    return _against_baseline("Rows per second, gate against the bare binlog reader (quiet machine)", "rows/s",
                             "rows_per_s", "rows_per_s")


def cpu() -> str:
    return _against_baseline("CPU microseconds per row (all of gate's processes)", "µs",
                             "cpu_us_per_row", "cpu_us_per_row_gate")


def ratio_history() -> str:
    before, after = _workloads("before-compiled-decoders.json"), _workloads("compiled-decoders-quiet.json")
    return bars("gate's rows/s as a multiple of the baseline's, before and after compiled decoders", "x",
                [w["workload"] for w in after.values()],
                {"before (contended machine)": [before[k]["ratio"] for k in after],
                 "compiled decoders (quiet)": [w["ratio"] for w in after.values()]})


def systems_chart(results: dict[str, Any]) -> str:
    """Rows/s per system and workload from a benchmark.py JSON: the bare reader, gate capture only (when
    measured), gate with its DC writes and each peer (capture only, with its version); a run that did not
    complete has no bar. Without peers (``--peers none``) the chart has gate's bars alone."""
    runs = [w for w in results["workloads"].values() if w.get("gate")]
    names = sorted({name for w in runs for name in w.get("peers") or {}})
    series: dict[str, list[float | None]] = {"bare reader": [w["baseline"]["rows_per_s"] for w in runs]}
    if any(w.get("gate_capture") for w in runs):
        series["gate, capture only"] = [w["gate_capture"]["rows_per_s"] if (w.get("gate_capture") or {}).get("complete")
                                        else None for w in runs]
    series["gate (+ DC writes)"] = [w["gate"]["rows_per_s"] for w in runs]
    for name in names:
        peers = [(w.get("peers") or {}).get(name) for w in runs]
        version = next((p["version"].split(",")[0] for p in peers if p and p.get("version")), name.capitalize())
        series[f"{version} (capture only)"] = [p["rows_per_s"] if p and p["complete"] else None for p in peers]
    return bars("Rows per second on the same binlog range, same machine, same run", "rows/s",
                [w["workload"] for w in runs], series)


def peers() -> str:
    return systems_chart(_load("peers.json"))


def retention_lag() -> str:
    phases = _load("retention-run.json")["results"]
    return bars("Lag at 5,000 rows/s while 5,000,000 old rows are removed", "s",
                [p["mode"] for p in phases],
                {"p50": [p["lag_p50_s"] for p in phases], "p99": [p["lag_p99_s"] for p in phases],
                 "max": [p["lag_max_s"] for p in phases]})


CHARTS: dict[str, Callable[[], str]] = {
    "img/bench-throughput.svg": throughput,
    "img/bench-cpu.svg": cpu,
    "img/bench-ratio-history.svg": ratio_history,
    "img/retention-lag.svg": retention_lag,
    # the path the benchmark's own chart has beside scripts/bench/README.md, which the docs include
    "results/peers.svg": peers,
}
