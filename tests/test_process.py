"""gate's child processes: forked by the forkserver with gate's environment as it is when the child starts,
without running gate's main script again."""

from __future__ import annotations

import multiprocessing.connection
import os
import queue
import sys
from typing import Any

import pytest

from gate.common.process import _CTX, Outbox, start_forkserver


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


def test_an_outbox_looks_at_an_empty_queue_without_a_selector(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outbox.get() on an empty queue raises queue.Empty without multiprocessing.connection.wait (which
    builds a selector per look); a message sent by a child is taken, in order, then Empty again."""
    start_forkserver(["gate.capture.children"])
    box = _CTX.Queue()
    outbox = Outbox(box)
    real_wait = multiprocessing.connection.wait

    def no_selector(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an empty look went through multiprocessing.connection.wait")

    monkeypatch.setattr(multiprocessing.connection, "wait", no_selector)
    with pytest.raises(queue.Empty):
        outbox.get()
    monkeypatch.setattr(multiprocessing.connection, "wait", real_wait)
    child = _CTX.Process(target=_report, args=("GATE_TEST_UNSET_VARIABLE", box), daemon=True)
    child.start()
    try:
        assert outbox.get(timeout=60) == (None, None)
        box.put("second")
        assert real_wait([box._reader], timeout=10)  # the queue's feeder thread has written it
        assert outbox.get() == "second"
        with pytest.raises(queue.Empty):
            outbox.get()
    finally:
        child.join(timeout=10)
