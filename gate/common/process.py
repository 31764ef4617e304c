"""gate's child processes (writers, decoders): their names in ps and top, that they die with gate, and the
pool base both kinds of children share."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Callable
from typing import Any

_CTX = mp.get_context("spawn")


def name_process(name: str) -> None:
    """Name this process as ps and top show it (PR_SET_NAME; at most 15 bytes are kept)."""
    ctypes.CDLL("libc.so.6").prctl(15, name.encode()[:15])


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (PR_SET_PDEATHSIG). gate's writer and
    decoder processes call it first: an orphan could write after a restart has cleaned up. A parent
    that died before the signal was armed (the child was still starting) is not ``parent_pid`` any
    more: then leave at once. The sandbox uses it as preexec_fn for servers tied to the tests."""
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def die_with_multiprocessing_parent() -> None:
    """die_with_parent for a multiprocessing child, whose parent is the process that started it."""
    parent = mp.parent_process()
    assert parent is not None and parent.pid is not None, "not a multiprocessing child"
    die_with_parent(parent.pid)


def start_child(name: str) -> None:
    """What every child process does first: die with gate, show ``name`` in ps, and leave SIGINT and
    SIGTERM to gate's main process, which decides when children stop."""
    die_with_multiprocessing_parent()
    name_process(name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class WorkerPool:
    """``processes`` spawned children running ``target(*args, inbox, outbox)``: one bounded inbox (the
    backpressure on gate's main loop), one outbox, and the liveness check and shutdown they share.
    Subclasses say what their messages are; ``failure`` is the error a dead child is reported as."""

    kind = "worker"
    failure: type[Exception] = RuntimeError

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], processes: int, depth: int) -> None:
        self.capacity = max(2, depth * processes)
        self._inbox: Any = _CTX.Queue(maxsize=self.capacity)
        self._outbox: Any = _CTX.Queue()
        self._procs = [_CTX.Process(target=target, args=(*args, self._inbox, self._outbox),
                                    name=f"gate-{self.kind}-{n}", daemon=True) for n in range(processes)]
        for proc in self._procs:
            proc.start()
        self._next_check = 0.0

    @property
    def queued(self) -> int:
        """Messages waiting in the inbox (approximate, as the queue's own count is)."""
        return int(self._inbox.qsize())

    def _put(self, message: Any, while_full: Callable[[], None] = lambda: None) -> None:
        """Hand ``message`` to the children, waiting while the inbox is full (checking that they live,
        and calling ``while_full`` every second)."""
        while True:
            try:
                self._inbox.put(message, timeout=1.0)
                return
            except queue.Full:
                while_full()
                self._check_alive()

    def _check_alive(self, every: float = 0.0) -> None:
        """Raise ``failure`` if a child has died (its work would never come back); with ``every``, look
        at most that often."""
        now = time.monotonic()
        if every and now < self._next_check:
            return
        self._next_check = now + every
        dead = [p.name for p in self._procs if not p.is_alive()]
        if dead:
            raise self.failure(f"{self.kind} process(es) {', '.join(dead)} died; see the log above.")

    def close(self, graceful: bool = True, wait: float | None = None) -> None:
        """Graceful: each child finishes the inbox and leaves (waiting ``wait`` seconds, 10 by default).
        Else the children are told to leave but what they have not taken is dropped, and those still
        there after ``wait`` seconds (0 by default) are killed."""
        if wait is None:
            wait = 10.0 if graceful else 0.0
        if graceful:
            for _ in self._procs:
                self._inbox.put(None)
        else:  # messages no child will take must not hold up gate's exit (the queue's feeder thread)
            self._inbox.cancel_join_thread()
            for _ in self._procs:
                try:
                    self._inbox.put_nowait(None)
                except queue.Full:
                    break
        for proc in self._procs:
            proc.join(timeout=wait)
            if proc.is_alive():
                proc.kill()
                proc.join()
