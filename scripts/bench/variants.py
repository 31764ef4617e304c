"""Compare gate variants on one loaded workload, with the same binlog and the same baseline (scratch, issue 6).

    .venv/bin/python scripts/bench/variants.py [--workload a|b] [--rows N] [--repeat 2] \\
        [--variants "default;write=values;json=direct;write=values,json=direct;writers=1,write=values"]

A variant is comma-separated key=value: ``writers`` and ``batch_rows`` are channel settings, the other
keys select prototype fast paths of scripts/bench/fastpaths.py (``write=values|loaddata``, ``json=direct``).
Runs are interleaved (v1, v2, ..., v1, v2, ...) so that a noisy neighbour hurts all variants alike; the
baseline is measured before each round. Each run's transfer_data fingerprint is printed: equal
fingerprints mean the variant wrote exactly the rows gate's own code writes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark as bm  # noqa: E402

from gate.config import ChannelDefaults  # noqa: E402

SETTINGS = ("writers", "batch_rows")


def parse(spec: str) -> tuple[ChannelDefaults, str]:
    parts = dict(p.split("=", 1) for p in spec.split(",") if "=" in p)
    defaults = ChannelDefaults(**{k: int(v) for k, v in parts.items() if k in SETTINGS})
    env = ",".join(f"{k}={v}" for k, v in parts.items() if k not in SETTINGS)
    return defaults, env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=["a", "b"], default="a")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--variants", default="default;write=values;json=direct;write=values,json=direct")
    parser.add_argument("--wait-quiet", type=float, default=60.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="gate-variants-"))
    box = bm.Sandbox(workdir / "sandbox", with_standby=False, tied_to_parent=True)
    results: dict[str, Any] = {"workload": args.workload, "rows": args.rows, "baselines": [], "runs": {}}
    try:
        box.up()
        title, db, ddl, load = bm.WORKLOADS[args.workload]
        with box.source.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            for statement in ddl:
                cur.execute(statement)
            cur.execute("FLUSH BINARY LOGS")
            start = bm.master_position(conn)
            changed = load(conn, args.rows)
            end = bm.master_position(conn)
        print(f"workload {title}: {changed} rows", flush=True)
        n = 0
        for round_no in range(args.repeat):
            bm.wait_quiet(args.wait_quiet)
            base = bm.baseline(box.source, start, end)
            results["baselines"].append(base)
            print(f"round {round_no + 1}: baseline {base['rows_per_s']:,.0f} rows/s, CPU "
                  f"{base['cpu_us_per_row']:.1f} µs/row (machine busy {base['machine_busy_percent']:.0f}%)", flush=True)
            for spec in variants:
                defaults, env = parse(spec)
                n += 1
                bm.wait_quiet(args.wait_quiet)
                r = bm.run_gate(box, f"var_{n}", start, end, changed, workdir, defaults, (f"{db}.*",),
                                timeout=600, variant=env)
                r["ratio"] = r["rows_per_s"] / base["rows_per_s"]
                results["runs"].setdefault(spec, []).append(r)
                c = r["cpu_percent"]
                u = r["cpu_us_per_row"]
                print(f"  {spec:40s} {r['rows_per_s']:>8,.0f} rows/s  ratio {r['ratio']:.2f}  steady "
                      f"{r['steady_rows_per_s'] or 0:>8,.0f}  CPU% main {c.get('main', 0):.0f} writers "
                      f"{c.get('writer', 0):.0f} DC {c.get('mariadbd_dc', 0):.0f} machine "
                      f"{r['machine_busy_percent']:.0f}; CPU µs/row main {u.get('main', 0):.1f} writers "
                      f"{u.get('writer', 0):.1f} DC {u.get('mariadbd_dc', 0):.1f}  rss {r['peak_rss_mb']:.0f} MB  "
                      f"fp {r['dc_checksum']}", flush=True)
    finally:
        box.down()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    print("\nmedian over rounds:")
    fingerprints = {r["dc_checksum"] for runs in results["runs"].values() for r in runs}
    for spec, runs in results["runs"].items():
        print(f"  {spec:40s} {statistics.median(r['rows_per_s'] for r in runs):>8,.0f} rows/s  ratio "
              f"{statistics.median(r['ratio'] for r in runs):.2f}  main CPU "
              f"{statistics.median(r['cpu_percent'].get('main', 0) for r in runs):.0f}%, main CPU µs/row "
              f"{statistics.median(r['cpu_us_per_row'].get('main', 0) for r in runs):.1f}, writers "
              f"{statistics.median(r['cpu_us_per_row'].get('writer', 0) for r in runs):.1f}, DC "
              f"{statistics.median(r['cpu_us_per_row'].get('mariadbd_dc', 0) for r in runs):.1f}")
    base_cpu = statistics.median(b["cpu_us_per_row"] for b in results["baselines"])
    print(f"  baseline CPU µs/row {base_cpu:.1f}: the ratio gate could reach with a whole core for its main "
          f"process is baseline µs/row / main µs/row")
    print(f"  all variants wrote identical rows: {len(fingerprints) == 1}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
