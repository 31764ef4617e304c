"""Every benchmark script starts: its imports resolve and ``--help`` prints its usage (a script that imports a
helper another change renamed would otherwise fail only when somebody runs the benchmark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


def test_the_benchmark_scripts_are_found() -> None:
    assert {"benchmark.py", "image.py", "spark_source.py", "snapshot.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_script_prints_its_usage(script: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=BENCH.parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {script} ")
