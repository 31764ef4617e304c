"""No module of gate shadows a dependency, whatever the entry point: a script run by path (spark-submit
.../spark_readers/load.py) has its folder first on ``sys.path``, so a module named like an installed package's
top-level module (spark_readers/delta.py against delta-spark's ``delta``) would be imported in its place."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OWN = {"gate", "spark_readers"}  # this project's own distribution provides these


def module_names() -> dict[str, list[str]]:
    """Each name a module or package of gate and spark_readers can be imported as from its folder."""
    names: dict[str, list[str]] = {}
    for package in OWN:
        for path in (ROOT / package).rglob("*.py"):
            name = path.parent.name if path.name == "__init__.py" else path.stem
            names.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return names


def test_no_module_is_named_like_an_installed_top_level_module() -> None:
    installed = {top: dists for top, dists in importlib.metadata.packages_distributions().items() if top not in OWN}
    clashes = {name: (paths, installed[name]) for name, paths in module_names().items() if name in installed}
    assert clashes == {}, "rename these modules: they shadow the installed distributions' modules of that name"


@pytest.mark.parametrize("script", ["spark_readers/load.py", "spark_readers/materialise.py"])
def test_the_entry_points_run_by_path(script: str, tmp_path: Path) -> None:
    """As spark-submit runs them: by path, the script's folder first on sys.path (gate from PYTHONPATH)."""
    done = subprocess.run([sys.executable, str(ROOT / script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: spark_readers.{Path(script).stem} ")
