"""When a server's error is worth retrying, what stops gate instead, and how long to wait before the next try.

The one place that classifies errors, for every connection gate keeps (binlog stream, writers, control
connection, retention, standby sampler, snapshot readers, clients). An error is *transient* when the
connection was lost, the server went away, is restarting or has no connection free, or the statement
lost a lock race: gate retries it. Anything else will not go away by itself: a refused login (1045), a
missing privilege (1044, 1142, 1143, 1227), an unknown database or table (1049, 1146), a read-only
server (1290, 1836: on the DC that is an operator's matter, gate never waits it out), a rejected value.
gate stops on those with :class:`ServerRefused`, which names the server, its answer and the fix, and
exits with its status (3): an operator must act, a restart cannot help.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pymysql

from gate.common.config import ServerConfig
from gate.common.errors import ConnectionFailed, GateError, ServerRefused, StreamLost

# client side (2xxx): the server cannot be reached or the connection broke
UNREACHABLE = frozenset({2002, 2003, 2005, 2006, 2013, 2055})
# server side: too many connections (1040, 1203, 1226), shutting down (1053), connection aborted or network
# errors (1152, 1158-1161, 1184), query or connection killed (1317, 1927), lock wait timeout (1205), deadlock
# (1213), statement time limit (1969 MariaDB, 3024 MySQL), idle client disconnected (4031 MySQL)
TRANSIENT = UNREACHABLE | {1040, 1203, 1226, 1053, 1152, 1158, 1159, 1160, 1161, 1184, 1317, 1927, 1205, 1213,
                           1969, 3024, 4031}
_PRIVILEGES = frozenset({1044, 1142, 1143, 1227})
_READ_ONLY = frozenset({1290, 1836})
_ACCOUNT = re.compile(r"user '([^']*)'@'([^']*)'")
_NEEDED = re.compile(r"the ([A-Z ,]+?) privilege")
# what gate does on each kind of server: the source's, and the DC's in a channel database (the DC user
# needs them before a channel is created)
SOURCE_PRIVILEGES = "REPLICATION SLAVE, BINLOG MONITOR, SELECT"
CHANNEL_PRIVILEGES = ("CREATE", "DROP", "SELECT", "INSERT", "UPDATE", "DELETE")


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL error, if it carries one."""
    code = exc.args[0] if exc.args else None
    return code if isinstance(code, int) else None


def is_transient(exc: BaseException) -> bool:
    """Whether trying again later may succeed. gate's own errors are, when they say a server cannot be
    reached (:class:`ConnectionFailed`, :class:`StreamLost`); a server's error is, by its number (see
    TRANSIENT). Errors without a number (a socket closed under PyMySQL, an OSError, a connection PyMySQL
    has closed) are lost connections."""
    if isinstance(exc, GateError):
        return isinstance(exc, (ConnectionFailed, StreamLost))
    if isinstance(exc, pymysql.err.InterfaceError):
        return True
    code = error_code(exc)
    return code is None or code in TRANSIENT


def _fix(code: int, text: str, role: str, server: ServerConfig, database: str | None) -> str:
    """What an operator does about a server's answer ``code``/``text``."""
    found = _ACCOUNT.search(text)
    user = found[1] if found else server.user
    # the error names the host gate connected from, not the account's host part (e.g. '%')
    account = (f"'{user}'@HOST (HOST: the host part of the account gate logs in as, which SELECT CURRENT_USER() "
               "shows as that user)")
    if code in _PRIVILEGES:
        if role == "DC":
            target = f"`{database}`.*" if database else "the channel's database"
            return (f"Grant gate's DC user what it needs in the channel's database, on the DC server: GRANT "
                    f"{', '.join(CHANNEL_PRIVILEGES)} ON {target} TO {account}.")
        needed = _NEEDED.search(text)
        privileges = needed[1] if code == 1227 and needed else SOURCE_PRIVILEGES
        return (f"Grant it on the {role} server: GRANT {privileges} ON *.* TO {account}; gate needs "
                f"{SOURCE_PRIVILEGES} ON *.* there.")
    if code == 1045:
        where = "config.yaml's dc" if role == "DC" else f"the channel's {role} ('gate channel show')"
        return (f"Check the user and password in {where}, and that the user may connect from this host.")
    if code in _READ_ONLY:
        return (f"The {role} server is read-only and gate must write there: SET GLOBAL read_only = OFF on it, or "
                "point gate at the writable primary (dc in config.yaml).")
    if code in (1049, 1146) and role == "DC":
        return ("The channel's database or one of its tables is gone (dropped by hand or by 'gate channel drop "
                "--force'?): 'gate channel list' shows the channels there; create the channel again, or restore "
                "the database.")
    return "Fix what the server names, then start gate again."


def refusal(exc: BaseException, role: str, server: ServerConfig, doing: str,
            database: str | None = None) -> GateError:
    """What stops gate when ``server`` (the ``role``: DC, source or standby) answered ``doing`` with
    ``exc``, which is not transient: ``exc`` itself when it is already one of gate's errors, else
    :class:`ServerRefused` naming the server, its answer and the fix (``database``: the channel's)."""
    if isinstance(exc, GateError):
        return exc
    code = error_code(exc) or 0
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return ServerRefused(
        f"The {role} server {server.address} refused {doing}: [{code}] {text}. {_fix(code, text, role, server, database)} "
        "Retrying cannot help, so gate stops (exit status 3: its systemd unit does not restart it); start it "
        "again once that is done.")


def raise_unless_transient(exc: BaseException, role: str, server: ServerConfig, doing: str,
                           database: str | None = None) -> None:
    """Return when ``exc`` is transient (the caller retries it); else raise :func:`refusal`."""
    if is_transient(exc):
        return
    if isinstance(exc, GateError):
        raise exc
    raise refusal(exc, role, server, doing, database) from exc


@contextmanager
def refusals(role: str, server: ServerConfig, doing: str, database: str | None = None) -> Iterator[None]:
    """Within the block, a server error that is not transient becomes :func:`refusal`; transient ones and
    gate's own errors pass unchanged."""
    try:
        yield
    except pymysql.err.MySQLError as exc:
        raise_unless_transient(exc, role, server, doing, database)
        raise


def backoff(step: int, base: float = 0.1, cap: float = 2.0) -> float:
    """Seconds to wait before try ``step`` + 1: doubling from ``base``, at most ``cap``."""
    return min(cap, base * 2 ** min(step, 6))
