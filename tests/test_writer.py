"""The writers' hand-built INSERT statements, against a real DC server: exact text back, split by size."""

from __future__ import annotations

from gate.common.dc import ChannelSettings, connect, create_channel
from gate.devtools.sandbox import Sandbox
from gate.capture.writer import MAX_STATEMENT, _dc_session, _write, insert_statements
from tests.replay import server_config

AWKWARD = ["", "'", "''", "\\", "\\'", "\\\\0", "\0", "a\0b", "\n\r\t\x1a", '"', "é🚀", "%s", "{}", "?", "`x`;",
           "\\N", "NULL", "--", "/*", "*/", "x" * 30000]


def test_awkward_text_comes_back_exactly_and_long_chunks_split(sandbox: Sandbox, unique_name: str) -> None:
    dc = server_config(sandbox.dc)
    with connect(dc, "DC") as conn:
        create_channel(conn, ChannelSettings(unique_name, server_config(sandbox.source)))
    rows = [(n + 1, 1, text[:64], f"t{n}", "2024-05-01 10:00:00", "h:1", "INSERT", f'{{"NEW":[{{"c":"{text}"}}]}}')
            for n, text in enumerate(AWKWARD * 40)]
    statements = insert_statements(rows)
    assert len(statements) > 1 and all(len(s) <= MAX_STATEMENT + 4000 for s in statements)
    conn = _dc_session(dc, unique_name)
    try:
        with conn.cursor() as cur:  # a DC server configured without backslash escapes: the session undoes it
            cur.execute("SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES')")
        conn.close()
        conn = _dc_session(dc, unique_name)
        _write(conn, rows)
        with conn.cursor() as cur:
            cur.execute("SELECT id, tid, dbname, tablename, DATE_FORMAT(create_time, '%Y-%m-%d %H:%i:%s'), "
                        "instance_name, optype, data FROM transfer_data ORDER BY id")
            assert list(cur.fetchall()) == rows
    finally:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = REPLACE(@@GLOBAL.sql_mode, ',NO_BACKSLASH_ESCAPES', '')")
        conn.close()
