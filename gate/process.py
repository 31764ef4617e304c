"""Child processes that must not outlive the process that started them."""

from __future__ import annotations

import ctypes
import signal


def name_process(name: str) -> None:
    """Name this process as ps and top show it (PR_SET_NAME; at most 15 bytes are kept)."""
    ctypes.CDLL("libc.so.6").prctl(15, name.encode()[:15])


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (PR_SET_PDEATHSIG). gate's writer and
    decoder processes call it first: an orphan could write after a restart has cleaned up. The sandbox
    uses it as preexec_fn for servers tied to the tests."""
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)
