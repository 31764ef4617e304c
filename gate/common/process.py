"""gate's child processes (writers, decoders): their names in ps and top, and that they die with gate."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal


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
