"""Which servers gate works with: MariaDB, the servers its tests run on. Another server (MySQL, whose
binlog GTIDs and status statements differ) is refused by name before gate reads or writes anything."""

from __future__ import annotations

import pymysql

from gate.common.dc import one_row
from gate.common.errors import UnsupportedServer

TESTED = "MariaDB 10.11"  # the server versions gate's tests run on, as source, standby and DC
VERSION_QUERY = "SELECT @@version, @@version_comment"


def is_mariadb(version: str, version_comment: str) -> bool:
    """Whether a server is MariaDB, from its @@version ('10.11.6-MariaDB-0+deb12u1') and @@version_comment
    ('mariadb.org binary distribution'); MySQL's are '8.4.0' and 'MySQL Community Server - GPL'."""
    return "mariadb" in version.lower() or "mariadb" in version_comment.lower()


def unsupported(role: str, address: str, version: str, version_comment: str) -> str:
    """The message that refuses a server that is not MariaDB."""
    return (f"The {role} server {address} is not MariaDB: it reports version '{version}' ({version_comment!r}). "
            f"gate is tested on {TESTED} only (it reads MariaDB's GTIDs and binlog events, and keeps its DC in "
            "MariaDB's collations), so it refuses MySQL and other servers rather than capture them untested. Use a "
            f"MariaDB server ({TESTED}) as the {role}.")


def require_mariadb(conn: pymysql.Connection, role: str, address: str) -> None:
    """Refuse (UnsupportedServer) the server ``conn`` is connected to unless it is MariaDB."""
    with conn.cursor() as cur:
        cur.execute(VERSION_QUERY)
        version, comment = one_row(cur)
    check_mariadb(role, address, version, comment)


def check_mariadb(role: str, address: str, version: object, comment: object) -> None:
    """Refuse (UnsupportedServer) a server whose VERSION_QUERY answered ``version`` and ``comment``."""
    if not is_mariadb(str(version), str(comment or "")):
        raise UnsupportedServer(unsupported(role, address, str(version), str(comment or "")))
