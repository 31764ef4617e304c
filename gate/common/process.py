"""gate's child processes (writers, decoders, snapshot readers): how they start, their names in ps and top,
that they die with gate, and the pool base writers and decoders share.

Children start from a forkserver (multiprocessing's): a process that gate starts once, which imports the
children's modules (its preload, :mod:`gate.capture.children`) and forks each child from there, so that
every child shares those pages with the others instead of importing its own copy. A child does not run
gate's main script again either (see :class:`ChildProcess`). Each child ends when gate's process is
gone, and so does the forkserver (:func:`start_child`): no child outlives a killed gate.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing as mp
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.forkserver
import os
import queue
import select
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

_PR_SET_NAME, _PR_SET_PDEATHSIG = 15, 1
_NO_MAIN = types.ModuleType("__main__")  # no __file__ and no __spec__: nothing for a child to import


def name_process(name: str) -> None:
    """Name this process as ps and top show it (PR_SET_NAME; at most 15 bytes are kept)."""
    ctypes.CDLL("libc.so.6").prctl(_PR_SET_NAME, name.encode()[:15])


def _arm_parent_death() -> None:
    """SIGKILL this process when the thread that started it ends (PR_SET_PDEATHSIG): for gate's children
    that is the forkserver's only thread."""
    ctypes.CDLL("libc.so.6").prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (PR_SET_PDEATHSIG). A parent
    that died before the signal was armed (the child was still starting) is not ``parent_pid`` any
    more: then leave at once. The sandbox uses it as preexec_fn for servers tied to the tests."""
    _arm_parent_death()
    if os.getppid() != parent_pid:
        os._exit(1)


def forkserver_ready() -> None:
    """What gate's forkserver does once its preload is imported: show as gate-forkserver and freeze the
    garbage collector's objects, so that the children's collections never write to the pages they share.
    It leaves when gate does: it waits for every holder of its pipe to gate to be gone, and children
    close theirs (start_child)."""
    name_process("gate-forkserver")
    gc.freeze()


def start_child(name: str) -> None:
    """What every child process does first: die with gate, show ``name`` in ps, and leave SIGINT and
    SIGTERM to gate's main process, which decides when children stop.

    gate is not the child's parent (the forkserver is), so the kernel's PR_SET_PDEATHSIG cannot tie
    the child to gate directly: a thread of the child waits for gate's end of the pipe it was started
    through and ends the process when gate is gone, and PR_SET_PDEATHSIG ties it to the forkserver,
    which leaves when gate is gone. A child whose gate or forkserver is already gone leaves at once."""
    forkserver = os.getppid()
    _arm_parent_death()
    # multiprocessing hands each child the forkserver's "gate is alive" pipe; the forkserver leaves
    # when every copy is closed, so only gate's own copy may keep it
    alive_fd = getattr(multiprocessing.forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive_fd is not None:
        os.close(alive_fd)
    gate = mp.parent_process()
    if os.getppid() != forkserver or gate is None or not gate.is_alive():
        os._exit(1)
    threading.Thread(target=_leave_with, args=(gate.sentinel,), name="gate-watch", daemon=True).start()
    name_process(name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _leave_with(sentinel: int) -> None:
    """End this process as soon as ``sentinel`` (gate's end of a pipe) shows that gate is gone."""
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


def start_forkserver(preload: Sequence[str]) -> None:
    """Start the forkserver now (it takes a moment to import ``preload``), before any child is asked for:
    gate calls it once, early. A forkserver already running is kept."""
    _CTX.set_forkserver_preload(list(preload))
    multiprocessing.forkserver.ensure_running()


@contextmanager
def _main_hidden() -> Iterator[None]:
    """multiprocessing makes each child import the parent's ``__main__`` again from its file, for targets
    defined there; gate's targets live in its modules, and its main script (the ``gate`` command)
    imports the whole command line. While a child starts, ``__main__`` is an empty module."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = _NO_MAIN
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class ChildProcess(multiprocessing.context.ForkServerProcess):
    """A child forked by the forkserver, without gate's main script, with gate's environment as it is when
    the child starts (the forkserver's is gate's when the forkserver started), as a spawned child has."""

    _environ: dict[str, str]

    def start(self) -> None:
        self._environ = dict(os.environ)
        with _main_hidden():
            super().start()

    def run(self) -> None:
        os.environ.clear()
        os.environ.update(self._environ)
        super().run()


class _Context(multiprocessing.context.ForkServerContext):
    Process = ChildProcess


_CTX = _Context()


class Outbox:
    """The reading end of a multiprocessing queue, for the one process that reads it, with a cheap look
    at an empty queue. ``Queue.get_nowait`` asks ``multiprocessing.connection.wait``, which builds and
    registers a new selector on the queue's pipe for each look (about 4 us); a ``select.poll`` kept
    registered on that pipe answers in 0.4 us, and gate's main loop looks at its children's queues
    about once every 5 rows. The pipe is the queue's private ``_reader`` (CPython 3.8 to 3.13 alike);
    messages are still taken by the queue's own ``get``."""

    def __init__(self, box: Any) -> None:
        self.queue = box
        self._poll = select.poll()
        self._poll.register(box._reader.fileno(), select.POLLIN)

    def get(self, timeout: float = 0.0) -> Any:
        """The next message, waiting up to ``timeout`` seconds for it; queue.Empty when none came."""
        if timeout:
            return self.queue.get(timeout=timeout)
        if not self._poll.poll(0):  # nothing in the pipe: the queue's get would find nothing either
            raise queue.Empty
        return self.queue.get_nowait()


class WorkerPool:
    """``processes`` children running ``target(*args, inbox, outbox)``: one bounded inbox (the
    backpressure on gate's main loop), one outbox, and the liveness check and shutdown they share.
    Subclasses say what their messages are; ``failure`` is the error a dead child is reported as."""

    kind = "worker"
    failure: type[Exception] = RuntimeError

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], processes: int, depth: int) -> None:
        self.capacity = max(2, depth * processes)
        self._inbox: Any = _CTX.Queue(maxsize=self.capacity)
        outbox = _CTX.Queue()
        self._outbox = Outbox(outbox)
        self._procs = [_CTX.Process(target=target, args=(*args, self._inbox, outbox),
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
