"""Summarise a py-spy raw (collapsed stacks) file: per process, top functions by cumulative and self %.

    .venv/bin/python scripts/bench/spy_summary.py py-spy-a.txt [--top 25] [--match gate/capture/pipeline.py]

py-spy was run with --subprocesses --idle (scripts/bench/benchmark.py --py-spy WORKLOAD), so the stacks of
each process start with ``process PID:"cmdline"`` frames, and idle (waiting) stacks are included:
percentages are of wall time, per thread (py-spy --threads: main thread, multiprocessing's queue
feeder thread, other threads).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict


def load(path: str) -> dict[str, list[tuple[list[str], int]]]:
    """Stacks per process: the last 'process ...' frame names the process."""
    by_proc: dict[str, list[tuple[list[str], int]]] = defaultdict(list)
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        procs = [f for f in frames if f.startswith("process ")]
        threads = [f for f in frames if f.startswith("thread ")]
        rest = [f for f in frames if not f.startswith(("process ", "thread "))]
        name = procs[-1]
        if "spawn_main" in name:
            kind = "writer"
        elif "resource_tracker" in name:
            kind = "resource_tracker"
        else:
            kind = "main"
        pid = re.match(r"process (\d+)", name)
        thread = ""
        if threads:
            thread = " feeder-thread" if any("Queue._feed" in f for f in rest) else " " + threads[-1]
            if thread != " feeder-thread" and any("Thread._bootstrap" in f for f in rest):
                thread = " other-thread"
            elif thread != " feeder-thread":
                thread = " main-thread"
        by_proc[f"{kind} {pid.group(1) if pid else '?'}{thread}"].append((rest, int(count)))
    return by_proc


def short(frame: str) -> str:
    return re.sub(r"/.*/(site-packages|lib/python3\.\d+)/", "", frame)


def summarise(stacks: list[tuple[list[str], int]], top: int) -> str:
    total = sum(c for _, c in stacks)
    cum: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, count in stacks:
        names = [re.sub(r":\d+\)$", ")", f) for f in frames]  # function level, not line level
        for name in set(names):
            cum[name] += count
        if names:
            own[names[-1]] += count
    out = [f"  samples {total}"]
    out.append("  cumulative %  self %   function")
    for name, c in cum.most_common(top):
        out.append(f"  {c / total * 100:11.1f}  {own[name] / total * 100:6.1f}   {short(name)}")
    out.append("  -- top self --")
    for name, c in own.most_common(top // 2):
        out.append(f"  {cum[name] / total * 100:11.1f}  {c / total * 100:6.1f}   {short(name)}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    for proc, stacks in sorted(load(args.path).items()):
        print(f"== {proc}")
        print(summarise(stacks, args.top))


if __name__ == "__main__":
    main()
