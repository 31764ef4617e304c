"""The benchmark's report: one table of figures and targets as pass/fail marks, never assertions."""

from __future__ import annotations

from typing import Any

from ceiling import ceiling_lines  # beside this script

TARGET_RATIO = 1.5  # gate r/s over the bare reader's, workloads a and b
TARGET_RATIO_C = 1.3  # the same for the one big transaction
TARGET_CPU_RATIO = 0.8  # gate's CPU per row (all its processes) over the bare reader's, a and b
TARGET_LAG_P99 = 1.0
TARGET_RSS_MB = 300.0


def mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def report(results: dict[str, Any]) -> str:
    head = ["workload", "rows", "baseline r/s", "gate r/s", "ratio", "lag p50/p99/max s", "peak RSS MB (tree/main)",
            "target", "result"]
    lines = [head]
    for key in ("a", "b", "c"):
        r = results["workloads"].get(key)
        if r is None:
            continue
        g = r["gate"]
        if key == "c":
            target = f"ratio >= {TARGET_RATIO_C}, RSS < {TARGET_RSS_MB:.0f} MB"
            ok = g["complete"] and g["peak_rss_mb"] < TARGET_RSS_MB and r["ratio"] >= TARGET_RATIO_C
        else:
            target = f"ratio >= {TARGET_RATIO}"
            ok = r["ratio"] >= TARGET_RATIO and g["complete"]
        lines.append([r["workload"], f"{r['rows']:,}", f"{r['baseline']['rows_per_s']:,.0f}",
                      f"{g['rows_per_s']:,.0f}", f"{r['ratio']:.2f}", "-",
                      f"{g['peak_rss_mb']:.0f} / {g['peak_main_rss_mb']:.0f}", target, mark(ok)])
    lag = results.get("lag")
    if lag is not None:
        lines.append([f"lag: {lag['source_rows_per_s']:,.0f} rows/s steady", f"{lag['rows']:,}", "-", "-", "-",
                      f"{lag['lag_p50_s']:.3f} / {lag['lag_p99_s']:.3f} / {lag['lag_max_s']:.3f}",
                      f"{lag['peak_rss_mb']:.0f} / {lag['peak_main_rss_mb']:.0f}",
                      f"p99 < {TARGET_LAG_P99:.0f} s", mark(lag["lag_p99_s"] < TARGET_LAG_P99)])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    text = ["  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    cpu_lines = ["", "CPU while gate ran (% of one core, over gate's run): main / decoders / writers / resource_tracker / "
                 "mariadbd source / mariadbd DC / whole machine (all processes, of 200)"]
    for key in ("a", "b", "c"):
        r = results["workloads"].get(key)
        if r is not None:
            c = r["gate"]["cpu_percent"]
            cpu_lines.append(f"  {key}: {c.get('main', 0):.0f} / {c.get('decoder', 0):.0f} / {c.get('writer', 0):.0f} / "
                             f"{c.get('resource_tracker', 0):.0f} / {c.get('mariadbd_source', 0):.0f} / "
                             f"{c.get('mariadbd_dc', 0):.0f} / {r['gate']['machine_busy_percent']:.0f}"
                             f"   (baseline ran with the machine {r['baseline']['machine_busy_percent']:.0f}% busy; "
                             f"first checkpoint {r['gate']['startup_s'] or 0:.2f} s after start"
                             + (f", steady {r['gate']['steady_rows_per_s']:,.0f} rows/s)" if r['gate']['steady_rows_per_s']
                                else ")"))
    cpu_lines += ["", f"CPU µs per row: bare reader / gate (main + decoders + writers + resource_tracker = total; "
                  f"ratio to the bare reader, target <= {TARGET_CPU_RATIO} on a and b) / DC server; whole run, "
                  "then steady (after 10% of the rows: no start-up)"]
    for key in ("a", "b", "c"):
        r = results["workloads"].get(key)
        if r is None:
            continue
        g = r["gate"]
        for label, per_row, total, ratio in (("whole ", g["cpu_us_per_row"], g["cpu_us_per_row_gate"], r["cpu_ratio"]),
                                             ("steady", g.get("steady_cpu_us_per_row"), g.get("steady_cpu_us_per_row_gate"),
                                              r.get("steady_cpu_ratio"))):
            if not per_row or ratio is None:
                continue
            ok = ratio <= TARGET_CPU_RATIO if key != "c" else None
            cpu_lines.append(
                f"  {key} {label}: {r['baseline']['cpu_us_per_row']:.1f} / {per_row.get('main', 0):.1f} + "
                f"{per_row.get('decoder', 0):.1f} + {per_row.get('writer', 0):.1f} + "
                f"{per_row.get('resource_tracker', 0):.1f}"
                f" = {total:.1f} ({ratio:.2f}{'' if ok is None else ' ' + mark(ok)}) / "
                f"{g['cpu_us_per_row'].get('mariadbd_dc', 0):.1f}")
    if lag is not None:
        c = lag["cpu_percent"]
        cpu_lines.append(f"  lag: {c.get('main', 0):.0f} / {c.get('decoder', 0):.0f} / {c.get('writer', 0):.0f}"
                         f" / {c.get('resource_tracker', 0):.0f}"
                         f" / {c.get('mariadbd_source', 0):.0f} / {c.get('mariadbd_dc', 0):.0f}"
                         f" / {lag['machine_busy_percent']:.0f}   (includes the load generator's process)")
    return "\n".join(text + cpu_lines + ceiling_lines(results))




def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(line[i]) for line in [head] + rows) for i in range(len(head))]
    text = ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in [head] + rows]
    text.insert(1, "  ".join("-" * w for w in widths))
    return text


def _steady(value: float | None) -> str:
    return "" if value is None else f" ({value:.1f})"


def _ratio(a: dict[str, Any] | None, b: dict[str, Any]) -> str:
    return "-" if a is None or not b.get("rows_per_s") else f"{a['rows_per_s'] / b['rows_per_s']:.2f}"


def _ahead(gate: dict[str, Any] | None, peer: dict[str, Any]) -> str:
    return "-" if gate is None else mark(gate["complete"] and gate["rows_per_s"] > peer["rows_per_s"])


def peers_report(results: dict[str, Any]) -> str:
    """gate, capture alone and with its DC writes, beside the peers on each workload's range: rows/s, CPU per
    row, peak RSS; each gate figure as a multiple of each system's, and whether it is ahead of each peer."""
    head = ["workload", "system", "rows", "rows/s", "steady rows/s", "CPU µs/row (steady)", "peak RSS MB",
            "capture / it", "+ DC / it", "ahead: capture, + DC"]
    rows: list[list[str]] = []
    for key in ("a", "b", "c"):
        r = results["workloads"].get(key)
        if r is None or not (r.get("peers") or r.get("gate_capture")):
            continue
        g, base, cap = r["gate"], r["baseline"], r.get("gate_capture")
        rows.append([r["workload"], "bare reader (decodes only)", f"{base['rows']:,}", f"{base['rows_per_s']:,.0f}", "-",
                     f"{base['cpu_us_per_row']:.1f}", "-", _ratio(cap, base), _ratio(g, base), ""])
        for run, label in ((cap, "gate, capture only (renders the JSON, counts)"),
                           (g, "gate (captures + writes the DC)")):
            if run is None:
                continue
            cpu = f"{run['cpu_us_per_row_gate']:.1f}" + _steady(run["steady_cpu_us_per_row_gate"])
            dc = run["cpu_us_per_row"].get("mariadbd_dc", 0)
            rows.append(["", label, f"{run['rows']:,}", f"{run['rows_per_s']:,.0f}",
                         f"{run['steady_rows_per_s']:,.0f}" if run["steady_rows_per_s"] else "-",
                         f"{cpu} +{dc:.1f} DC server", f"{run['peak_rss_mb']:.0f}", _ratio(cap, run), _ratio(g, run), ""])
        for peer in (r.get("peers") or {}).values():
            label = f"{peer.get('version', peer['peer'])} (captures, counts)"
            if not peer["complete"]:
                rows.append(["", label, f"{peer['rows']:,} of {peer['expected_rows']:,}", "did not complete", "-",
                             "-", f"{peer['peak_rss_mb']:.0f}", "-", "-", "PASS (it failed)"])
                continue
            rows.append(["", label, f"{peer['rows']:,}", f"{peer['rows_per_s']:,.0f}",
                         f"{peer['steady_rows_per_s'] or 0:,.0f}",
                         f"{peer['cpu_us_per_row']:.1f}" + _steady(peer["steady_cpu_us_per_row"]),
                         f"{peer['peak_rss_mb']:.0f}", _ratio(cap, peer), _ratio(g, peer),
                         f"{_ahead(cap, peer)}, {_ahead(g, peer)}"])
    return "\n".join(["gate and its peers on the same binlog ranges, same machine, same run. gate twice: capture only "
                      "(every row decoded and rendered to the JSON text of transfer_data.data, handed to writer "
                      "processes that count it; the checkpoint still goes to the DC) and capture + its writes into the "
                      "DC; the peers only capture and count (no output written). rows/s from each engine's start "
                      "(gate: Pipeline.run(); Debezium: engine.run(); Maxwell: its main) to the last row; CPU: the "
                      "system's own processes (the JVM for a peer)."] + _table(head, rows))
