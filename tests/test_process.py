"""gate's child processes: forked by the forkserver with gate's environment as it is when the child starts,
without running gate's main script again."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from gate.common.process import _CTX, start_forkserver


def _report(name: str, out: Any) -> None:
    out.put((os.environ.get(name), getattr(sys.modules["__main__"], "__file__", None)))  # a main run again has a file


def test_a_child_has_the_environment_of_its_start_and_not_the_main_script(monkeypatch: pytest.MonkeyPatch) -> None:
    start_forkserver(["gate.capture.children"])
    monkeypatch.setenv("GATE_TEST_CHILD_ENV", "set after the forkserver started")  # e.g. a hash rule's key
    out = _CTX.Queue()
    child = _CTX.Process(target=_report, args=("GATE_TEST_CHILD_ENV", out), daemon=True)
    child.start()
    try:
        assert out.get(timeout=60) == ("set after the forkserver started", None)
    finally:
        child.join(timeout=10)
