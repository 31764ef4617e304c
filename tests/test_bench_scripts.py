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


def test_the_latency_target_is_judged_on_the_steady_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run over a slow link pays its start-up's round trips once: the whole run's ratio is printed, the steady
    one is the verdict; for c, whose checkpoint moves once, the rows the DC inserted, or in results made before
    that count, the highest id landed."""
    monkeypatch.syspath_prepend(str(BENCH))
    import benchmark

    def run(seconds: float, steady: float | None, landed: float, written: float | None = None) -> dict[str, object]:
        return {"rows_per_s": 1e6 / seconds, "ratio_to_0ms": 10.0 / seconds, "steady_ratio_to_0ms": steady,
                "landed_steady_ratio_to_0ms": landed, "written_steady_ratio_to_0ms": written, "seconds": seconds,
                "extra_s": seconds - 10.0, "startup_s": 0.5, "same_rows": True}

    results = {"workloads": {
        "a": {"workload": "a", "latency": {"none 0 ms": run(10.0, 1.0, 1.0, 1.0), "dc 300 ms": run(12.0, 0.92, 0.5, 0.5)}},
        "c": {"workload": "c", "latency": {"none 0 ms": run(10.0, None, 1.0, 1.0), "dc 100 ms": run(10.5, None, 0.95, 0.88),
                                           "dc 300 ms": run(11.0, None, 0.85, 0.93),
                                           "source 300 ms": run(12.5, None, 0.95)}}}}
    lines = [line.split() for line in benchmark.latency_report(results).splitlines()[1:]]
    assert [(line[:3], line[-7:-4]) for line in lines if line[1] != "none"] == [
        (["a", "dc", "300"], [">=", "0.9", "PASS"]), (["c", "dc", "100"], [">=", "0.9", "FAIL"]),
        (["c", "dc", "300"], [">=", "0.9", "PASS"]), (["c", "source", "300"], [">=", "0.9", "PASS"])]
    assert [line[5] for line in lines] == ["1.00", "0.83", "1.00", "0.95", "0.91", "0.80"]  # the whole runs' ratios
    assert [line[-4:-2] for line in lines if line[1] != "none"] == [
        ["2.00", "6.7"], ["0.50", "5.0"], ["1.00", "3.3"], ["2.50", "8.3"]]


def test_the_median_of_two_rounds_is_their_mean_and_the_run_kept_the_lower(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over an even number of rounds no ratio is the better round's alone; the run kept is the worse one."""
    monkeypatch.syspath_prepend(str(BENCH))
    import benchmark

    def run(whole: float, landed: float | None, written: float | None, extra: float) -> dict[str, object]:
        return {"ratio_to_0ms": whole, "rows_per_s": 1000 * whole, "steady_ratio_to_0ms": None,
                "landed_steady_ratio_to_0ms": landed, "written_steady_ratio_to_0ms": written, "extra_s": extra,
                "same_rows": True}

    figures = benchmark.round_figures({"dc 300 ms": [run(0.95, 0.9, 1.0, 2.0), run(0.85, 0.8, None, 3.0)],
                                       "dc 100 ms": [run(1.0, 1.0, 0.9, 1.0), run(0.9, 0.7, 0.8, 2.0),
                                                     run(0.8, 0.9, 0.85, 0.5)]})
    two, three = figures["dc 300 ms"], figures["dc 100 ms"]
    assert (two["rows_per_s"], two["landed_steady_ratio_to_0ms"], two["written_steady_ratio_to_0ms"],
            two["extra_s"], two["steady_ratio_to_0ms"]) == (850.0, pytest.approx(0.85), 1.0, 2.5, None)
    assert (two["round_ratios"], two["round_written_steady_ratios"]) == ([0.95, 0.85], [1.0, None])
    assert (three["rows_per_s"], three["landed_steady_ratio_to_0ms"], three["written_steady_ratio_to_0ms"],
            three["extra_s"]) == (900.0, 0.9, 0.85, 1.0)


def test_the_median_run_of_an_even_number_is_the_slower_in_the_middle(monkeypatch: pytest.MonkeyPatch) -> None:
    """gate's and each peer's figures in the main table: of two runs, never the faster one alone."""
    monkeypatch.syspath_prepend(str(BENCH))
    import benchmark

    runs = [{"rows_per_s": rate, "n": n} for n, rate in enumerate((300.0, 100.0, 400.0, 200.0))]
    assert benchmark.median_run(runs) == {"rows_per_s": 200.0, "n": 3}
    assert benchmark.median_run(runs[:3]) == {"rows_per_s": 300.0, "n": 0}
    assert benchmark.median_run(runs[:2]) == {"rows_per_s": 100.0, "n": 1}
