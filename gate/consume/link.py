"""Where a consumer's DC connection comes from: gate's own PyMySQL connection, or the pool of an
application's SQLAlchemy engine (``mysql+pymysql://user:pw@host:port/``, or a URL to make one from).

Either way the consumer holds one PyMySQL connection in autocommit (so each poll sees the newest
checkpoint) whose session reads the channel's database with ``time_zone`` '+00:00' (create_time comes
back in UTC): :attr:`Link.connection`.
"""

from __future__ import annotations

from typing import Any, cast

import pymysql
import sqlalchemy
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import DBAPIError

from gate.common.config import ServerConfig
from gate.common.dc import connect
from gate.common.errors import ConnectionFailed, InvalidValue

Rows = tuple[tuple[Any, ...], ...]
DCServer = ServerConfig | Engine | URL | str  # what a Consumer connects with
UTC_SESSION = "SET time_zone = '+00:00'"
_ER_BAD_DB = 1049


class Link:
    """A consumer's DC connection, and how to replace it when it is lost."""

    connection: pymysql.Connection

    def run(self, sql: str, args: tuple[Any, ...]) -> Rows:
        """One statement; its rows."""
        with self.connection.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def reopen(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def dc_engine(server: ServerConfig, **options: Any) -> Engine:
    """A SQLAlchemy engine (PyMySQL driver) on the DC whose connections gate opens, with the server's TLS
    settings, for an application to use and to give a :class:`Consumer`. (An engine or URL of the
    application's own carries its own TLS arguments, e.g. ``?ssl_ca=...``.)"""
    url = URL.create("mysql+pymysql", username=server.user, host=server.host, port=server.port)
    return sqlalchemy.create_engine(url, creator=lambda: connect(server, "DC", autocommit=False), **options)


def open_link(dc: DCServer, channel: str) -> Link:
    if isinstance(dc, ServerConfig):
        return PyMySQLLink(dc, channel)
    return EngineLink(dc, channel)


class PyMySQLLink(Link):
    """A connection of gate's own."""

    def __init__(self, dc: ServerConfig, channel: str) -> None:
        self.connection = connect(dc, "DC", channel, init_command=UTC_SESSION)

    def reopen(self) -> None:
        self.connection.connect()

    def close(self) -> None:
        self.connection.close()


class EngineLink(Link):
    """One connection borrowed from a SQLAlchemy engine's pool for the consumer's life.

    Its session is changed (autocommit, utf8mb4, the channel's database, UTC), so :meth:`close` discards it from
    the pool instead of handing it back to the application's other users; an engine made here from a URL
    is disposed. Only the PyMySQL driver is accepted: the consumer's statements are PyMySQL's.
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
        self._checkout()

    def _address(self) -> str:
        return f"{self._engine.url.host}:{self._engine.url.port or 3306}"

    def _checkout(self) -> None:
        try:
            self._borrowed = self._engine.raw_connection()
        except (DBAPIError, pymysql.err.MySQLError) as exc:  # the pool's connect hands the driver's error on
            cause = exc.orig if isinstance(exc, DBAPIError) else exc
            raise ConnectionFailed(f"The DC server at {self._address()} (SQLAlchemy engine) could not be used: "
                                   f"{cause}. Check the engine's URL, user and password.") from None
        self.connection = cast(pymysql.Connection, self._borrowed.driver_connection)  # the PyMySQL dialect's
        try:
            self.connection.autocommit(True)
            self.connection.set_character_set("utf8mb4")  # whatever the URL chose: values as gate's own path reads them
            self.connection.select_db(self._channel)
            self.run(UTC_SESSION, ())
        except pymysql.err.OperationalError as exc:
            self._borrowed.invalidate()
            if exc.args and exc.args[0] == _ER_BAD_DB:
                raise ConnectionFailed(f"The DC server {self._address()} has no database '{self._channel}'.") from None
            raise

    def reopen(self) -> None:
        self._borrowed.invalidate()
        self._checkout()

    def close(self) -> None:
        self._borrowed.invalidate()
        self._dispose()

    def _dispose(self) -> None:
        if self._owned:
            self._engine.dispose()
