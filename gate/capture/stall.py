"""A stalled DC is not silent: while work waits for the DC (chunks for the writers, a checkpoint to store)
and the DC makes no progress for STALL_AFTER seconds, a WARNING names the server and what waits, again
every WARN_EVERY seconds, and an INFO says when it moves again. A thread of its own checks, as gate's main
thread may itself be the one waiting for the DC's answer."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

STALL_AFTER = 5.0  # seconds without progress of the DC, while work waits for it, before the first warning
WARN_EVERY = 60.0  # seconds between the warnings of one stall
CHECK_EVERY = 0.5


class DcWatch:
    """Watches the DC ``server`` (HOST:PORT) of a run: ``waiting`` says what waits for it now ('' when
    nothing does); the pipeline calls :meth:`moved` whenever the DC has done something (a writer committed
    a chunk, a checkpoint was stored)."""

    def __init__(self, server: str, waiting: Callable[[], str]) -> None:
        self.server = server
        self.waiting = waiting
        self._lock = threading.Lock()
        self._moved_at = time.monotonic()
        self._stalled_at: float | None = None  # monotonic: when the stall began (its last progress)
        self._warned_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gate-dc-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def stalled_for(self) -> float:
        """Seconds since the DC's last progress while it is stalled (warned of); 0 when it is not."""
        stalled_at = self._stalled_at
        return 0.0 if stalled_at is None else round(time.monotonic() - stalled_at, 1)

    def moved(self) -> None:
        with self._lock:
            now = time.monotonic()
            if self._stalled_at is not None:
                log.info("DC %s moves again after %.0f s without progress", self.server, now - self._stalled_at)
                self._stalled_at = None
            self._moved_at = now

    def check(self) -> None:
        """Warn (or warn again) if work has waited for the DC without progress for long enough."""
        what = self.waiting()
        with self._lock:
            now = time.monotonic()
            if not what:
                self._moved_at = now  # the quiet time counts from when work waits again
                return
            quiet = now - self._moved_at
            if quiet < STALL_AFTER or (self._stalled_at is not None and now - self._warned_at < WARN_EVERY):
                return
            self._stalled_at, self._warned_at = self._moved_at, now
        log.warning("DC %s has made no progress for %.0f s; waiting for it: %s (a slow, locked or unreachable "
                    "DC server, or a network partition)", self.server, quiet, what)

    def _run(self) -> None:
        while not self._stop.wait(CHECK_EVERY):
            self.check()
