"""Where a consumer's DC connection comes from: gate's own PyMySQL connection, or the pool of an
application's SQLAlchemy engine (``mysql+pymysql://user:pw@host:port/``, or a URL to make one from).

Either way the consumer holds one connection whose session reads the channel's database with
``time_zone`` '+00:00' (create_time comes back in UTC), and sees every statement's result at once
(autocommit, or a commit after each statement), so each poll sees the newest checkpoint.
"""

from __future__ import annotations

from typing import Any, Protocol

import pymysql
import sqlalchemy
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import DBAPIError

from gate.common.config import ServerConfig
from gate.common.dc import connect, q
from gate.common.errors import ConnectionFailed, InvalidValue

Rows = tuple[tuple[Any, ...], ...]
DCServer = ServerConfig | Engine | URL | str  # what a Consumer connects with
UTC_SESSION = "SET time_zone = '+00:00'"


class Link(Protocol):
    def run(self, sql: str, args: tuple[Any, ...]) -> Rows:
        """One statement; its rows."""

    def reopen(self) -> None:
        """Replace a connection that was lost."""

    def close(self) -> None: ...


def open_link(dc: DCServer, channel: str) -> Link:
    if isinstance(dc, ServerConfig):
        return PyMySQLLink(dc, channel)
    return EngineLink(dc, channel)


class PyMySQLLink:
    """A connection of gate's own, in autocommit."""

    def __init__(self, dc: ServerConfig, channel: str) -> None:
        self._conn = connect(dc, "DC", channel, init_command=UTC_SESSION)

    def run(self, sql: str, args: tuple[Any, ...]) -> Rows:
        with self._conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def reopen(self) -> None:
        self._conn.connect()

    def close(self) -> None:
        self._conn.close()


class EngineLink:
    """One connection borrowed from a SQLAlchemy engine's pool for the consumer's life.

    Its session is changed (the channel's database, UTC), so :meth:`close` discards it from the pool
    instead of handing it back to the application's other users; an engine made here from a URL is
    disposed. Only the PyMySQL driver is accepted: the statements use its ``%s`` parameters.
    """

    def __init__(self, dc: Engine | URL | str, channel: str) -> None:
        self._owned = not isinstance(dc, Engine)
        self._engine: Engine = dc if isinstance(dc, Engine) else sqlalchemy.create_engine(dc, pool_pre_ping=True)
        if self._engine.dialect.driver != "pymysql":
            name = self._engine.url.drivername
            self._dispose()
            raise InvalidValue(f"The consumer reads through SQLAlchemy's PyMySQL driver, not {name!r}: give a URL or "
                               "engine of the form mysql+pymysql://user:password@host:port/.")
        self._channel = channel
        self._conn = self._checkout()

    def _address(self) -> str:
        return f"{self._engine.url.host}:{self._engine.url.port or 3306}"

    def _checkout(self) -> Any:
        try:
            conn = self._engine.raw_connection()
        except (DBAPIError, pymysql.err.MySQLError) as exc:  # the pool's connect hands the driver's error on
            cause = exc.orig if isinstance(exc, DBAPIError) else exc
            raise ConnectionFailed(f"The DC server at {self._address()} (SQLAlchemy engine) could not be used: "
                                   f"{cause}. Check the engine's URL, user and password.") from None
        try:
            self._run(conn, f"USE {q(self._channel)}", ())
            self._run(conn, UTC_SESSION, ())
        except pymysql.err.OperationalError as exc:
            conn.invalidate()
            if exc.args and exc.args[0] == 1049:
                raise ConnectionFailed(f"The DC server {self._address()} has no database '{self._channel}'.") from None
            raise
        return conn

    @staticmethod
    def _run(conn: Any, sql: str, args: tuple[Any, ...]) -> Rows:
        cur = conn.cursor()
        try:
            cur.execute(sql, args)
            rows: Rows = cur.fetchall()
        finally:
            cur.close()
        conn.commit()  # a pool connection is not in autocommit: end the read so the next one sees new rows
        return rows

    def run(self, sql: str, args: tuple[Any, ...]) -> Rows:
        return self._run(self._conn, sql, args)

    def reopen(self) -> None:
        self._conn.invalidate()
        self._conn = self._checkout()

    def close(self) -> None:
        self._conn.invalidate()
        self._dispose()

    def _dispose(self) -> None:
        if self._owned:
            self._engine.dispose()
