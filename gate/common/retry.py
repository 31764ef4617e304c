"""When a MySQL error is worth retrying, and how long to wait before the next try.

One answer for every connection gate keeps (binlog stream, writers, control connection, clients):
an error is *transient* when the connection was lost or the server went away or is restarting, or
when the statement lost a lock race; anything else (a refused login, a missing table, a rejected
value) will not go away by itself and is reported instead.
"""

from __future__ import annotations

# client side (2xxx): the server cannot be reached or the connection broke
UNREACHABLE = frozenset({2002, 2003, 2005, 2006, 2013, 2055})
# server side: shutting down (1053), connection killed (1927), lock wait timeout (1205), deadlock (1213)
TRANSIENT = UNREACHABLE | {1053, 1927, 1205, 1213}


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL error, if it carries one."""
    code = exc.args[0] if exc.args else None
    return code if isinstance(code, int) else None


def is_transient(exc: BaseException) -> bool:
    """Whether trying again later may succeed. Errors without a number (a socket closed under
    PyMySQL, an OSError) are transient: they are lost connections."""
    code = error_code(exc)
    return code is None or code in TRANSIENT


def backoff(step: int, base: float = 0.1, cap: float = 2.0) -> float:
    """Seconds to wait before try ``step`` + 1: doubling from ``base``, at most ``cap``."""
    return min(cap, base * 2 ** min(step, 6))
