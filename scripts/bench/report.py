"""The benchmark's report: one table of figures and targets as pass/fail marks, never assertions."""

from __future__ import annotations

from typing import Any

TARGET_RATIO = 0.8
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
            target = f"RSS < {TARGET_RSS_MB:.0f} MB, completes"
            ok = g["complete"] and g["peak_rss_mb"] < TARGET_RSS_MB
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
    if lag is not None:
        c = lag["cpu_percent"]
        cpu_lines.append(f"  lag: {c.get('main', 0):.0f} / {c.get('decoder', 0):.0f} / {c.get('writer', 0):.0f}"
                         f" / {c.get('resource_tracker', 0):.0f}"
                         f" / {c.get('mariadbd_source', 0):.0f} / {c.get('mariadbd_dc', 0):.0f}"
                         f" / {lag['machine_busy_percent']:.0f}   (includes the load generator's process)")
    return "\n".join(text + cpu_lines)


