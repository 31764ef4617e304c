"""Test tools: run a channel, wait for it, apply its DC rows to an empty copy, compare tables."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql

from gate.capture.lag import only_bookkeeping_after
from gate.capture.pipeline import Pipeline
from gate.capture.reader import current_position
from gate.common.config import ServerConfig
from gate.common.dc import ChannelSettings, connect, create_channel, lock_holder, write_start_position
from gate.devtools.sandbox import MariaDBServer


def server_config(server: MariaDBServer) -> ServerConfig:
    return server.config()


def config_yaml(dc: MariaDBServer, user: str = "root", password: str = "") -> str:
    """A config.yaml whose DC is ``dc`` as ``user``, with its TLS settings."""
    tls = dc.tls
    lines = "".join(f"    {key}: {value}\n" for key, value in tls.as_row().items() if value)
    return f"dc:\n  host: 127.0.0.1\n  port: {dc.port}\n  user: {user}\n  password: '{password}'\n  tls:\n{lines}"


def make_channel(dc: MariaDBServer, source: MariaDBServer, name: str, **settings: Any) -> ServerConfig:
    """Create channel ``name`` reading ``source`` from its current position; returns the DC config."""
    dc_config = server_config(dc)
    with connect(dc_config, "DC") as conn:
        create_channel(conn, ChannelSettings(name, server_config(source), server_id=settings.pop("server_id", 4242),
                                             **settings))
        pos = current_position(server_config(source))
        with conn.cursor() as cur:
            write_start_position(cur, name, pos.log_file, pos.log_pos, pos.gtid_pos, source.address)
    return dc_config


_THREADS: dict[int, threading.Thread] = {}  # the thread of each pipeline in a running() block, by id()


@contextmanager
def running(dc_config: ServerConfig, channel: str) -> Iterator[Pipeline]:
    """The pipeline in a thread for the duration of the block; errors of the run are raised at exit."""
    pipeline = Pipeline(dc_config, channel, preflight=False)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            pipeline.run()
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    _THREADS[id(pipeline)] = thread
    try:
        yield pipeline
    except BaseException as exc:  # e.g. a wait that timed out because the pipeline had stopped with an error
        if errors:
            exc.add_note(f"the pipeline had stopped with: {errors[0]!r}")
        raise
    finally:
        del _THREADS[id(pipeline)]
        pipeline.stop()
        thread.join(timeout=60)
        if thread.is_alive():  # its writers and decoders ignore SIGTERM: they would hold up pytest's exit
            for child in multiprocessing.active_children():
                child.kill()
            raise AssertionError(f"the pipeline of {channel} did not stop within 60 s of stop()")
    if errors:
        raise errors[0]


def wait_started(pipeline: Pipeline, timeout: float = 30.0) -> None:
    """Until the run of ``pipeline`` (in a running() block) is past its start-up and reads the stream."""
    deadline = time.monotonic() + timeout
    while not pipeline.stats.started:
        assert time.monotonic() < deadline, f"gate did not start reading within {timeout:g} s"
        time.sleep(0.01)


def wait_stopped(pipeline: Pipeline, timeout: float) -> None:
    """Until the run of ``pipeline`` (in a running() block) has ended by itself, e.g. with an error that the
    block raises at its end."""
    thread = _THREADS[id(pipeline)]
    thread.join(timeout)
    assert not thread.is_alive(), f"the pipeline still runs after {timeout} s"


GATE = str(Path(sys.executable).with_name("gate"))


STARTED: list[subprocess.Popen[bytes]] = []  # killed after each test by conftest's autouse fixture


def start_gate(tmp_path: Path, dc: MariaDBServer, channel: str, user: str = "root", password: str = "",
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``gate run CHANNEL --no-check`` as a process, logging to ``tmp_path/CHANNEL.log``, as the DC's ``user``;
    ``env``: more environment variables (its children inherit them)."""
    config = tmp_path / "config.yaml"
    config.write_text(config_yaml(dc, user, password))
    log = open(tmp_path / f"{channel}.log", "ab")
    gate = subprocess.Popen([GATE, "--config", str(config), "run", channel, "--no-check"], stdout=log, stderr=log,
                            env={**os.environ, **env} if env else None)
    STARTED.append(gate)
    return gate


def wait_running(dc: MariaDBServer, channel: str, gate: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Until the gate process holds the channel lock (its signal handlers are in place by then)."""
    deadline = time.monotonic() + timeout
    with dc.connect() as conn:
        while time.monotonic() < deadline and gate.poll() is None:
            if lock_holder(conn, channel) is not None:
                return
            time.sleep(0.02)
    raise AssertionError(f"gate did not start running {channel} (exit status {gate.poll()})")


def wait_row(dc: MariaDBServer, channel: str, sql: str, timeout: float = 30.0) -> None:
    """Until ``sql`` on the channel's database returns a row."""
    deadline = time.monotonic() + timeout
    with dc.connect(channel) as conn, conn.cursor() as cur:
        while not cur.execute(sql):
            assert time.monotonic() < deadline, f"no row from {sql} after {timeout} s"
            time.sleep(0.01)


def wait_sampled(dc: MariaDBServer, channel: str) -> None:
    """Until gate holds a standby sample two seconds old: a switch needs one older than the last transaction's
    time minus the margin (1 s in the tests), and samples and transaction times are whole seconds."""
    wait_row(dc, channel, "SELECT 1 FROM gate_standby_sample WHERE sampled_at <= UNIX_TIMESTAMP() - 2")


def wait_caught_up(source: MariaDBServer, dc: MariaDBServer, channel: str, timeout: float = 60.0) -> tuple[int, int]:
    """Until the channel's resume position is the source's binlog end, or only bookkeeping follows it (the
    server writes a new file's Binlog_checkpoint event when it gets to it, after later transactions at times);
    returns the checkpoint."""
    with source.connect() as sconn, sconn.cursor() as scur, dc.connect(channel) as conn, conn.cursor() as cur:
        scur.execute("SHOW MASTER STATUS")
        file, pos = scur.fetchone()[:2]
        deadline = time.monotonic() + timeout
        while True:
            cur.execute("SELECT r.log_file, r.log_pos, c.id, c.tid FROM gate_resume r, transfer_checkpoint c")
            rfile, rpos, cid, ctid = cur.fetchone()
            if rfile is not None and ((rfile, rpos) >= (file, pos) or only_bookkeeping_after(scur, rfile, rpos)):
                return cid, ctid
            if time.monotonic() > deadline:
                raise AssertionError(f"channel {channel} at {rfile}:{rpos}, source at {file}:{pos} after {timeout} s")
            time.sleep(0.05)


def dc_rows(dc: MariaDBServer, channel: str) -> list[tuple[Any, ...]]:
    with dc.connect(channel) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, tid, dbname, tablename, create_time, instance_name, optype, data "
                    "FROM transfer_data ORDER BY id")
        return list(cur.fetchall())


def _column_kinds(cur: pymysql.cursors.Cursor, db: str, table: str) -> dict[str, str]:
    cur.execute("SELECT column_name, data_type, column_key FROM information_schema.columns "
                "WHERE table_schema=%s AND table_name=%s", (db, table))
    return {name: ("pk:" if key == "PRI" else "") + dtype for name, dtype, key in cur.fetchall()}


def _value_sql(kind: str) -> str:
    kind = kind.removeprefix("pk:")
    if kind in ("binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob"):
        return "FROM_BASE64(%s)"
    if kind == "bit":
        return "CAST(%s AS UNSIGNED)"
    return "%s"


def _image(cur: pymysql.cursors.Cursor, image: list[dict[str, Any]], kinds: dict[str, str],
           sep: str, keys_only: bool) -> tuple[str, list[Any]]:
    parts, args = [], []
    keyed = any(kind.startswith("pk:") for kind in kinds.values())  # else every column identifies the row
    for cell in image:
        (name, value), = cell.items()
        if keys_only and keyed and not kinds[name].startswith("pk:"):
            continue
        op = " <=> " if keys_only else " = "
        parts.append(f"`{name}`{op}{_value_sql(kinds[name])}")
        args.append(value)
    return sep.join(parts), args


def replay(rows: list[tuple[Any, ...]], target: pymysql.Connection) -> None:
    """Apply DC rows, in id order, to ``target`` (an empty server with the same database names), as a
    consumer folds them: SNAPSHOTSTART empties the table, SNAPSHOT and INSERT/UPDATE write rows, DELETE
    removes them (exactly one row, or the history is wrong; in a table without a key, one row equal to the
    image), SKIPPED and VERIFY rows are passed over. While a table is being snapshotted (between its SNAPSHOTSTART and a
    SNAPSHOTEND that is not cancelled) a change may meet a row whose chunk has not come yet: UPDATE then
    upserts its NEW image and DELETE may find nothing, as the DC contract says a consumer does."""
    snapshotting: set[tuple[str, str]] = set()
    with target.cursor() as cur:
        for _id, _tid, db, table, _ct, _inst, optype, data in rows:
            if optype in ("SKIPPED", "VERIFY"):  # a transaction 'gate channel skip' passed (its row may name no
                continue  # table), a chunk's checksum: no change
            payload = json.loads(data) if data else {}
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
            cur.execute(f"USE `{db}`")
            if optype in ("CREATETABLE", "ALTERTABLE", "DROPTABLE"):
                cur.execute(payload["SQL"])
            elif optype == "RENAME":
                pairs = ", ".join(f"`{p['from']['dbname']}`.`{p['from']['tablename']}` TO "
                                  f"`{p['to']['dbname']}`.`{p['to']['tablename']}`" for p in payload["RENAME"])
                cur.execute(f"RENAME TABLE {pairs}")
            elif optype == "TRUNCATE":
                cur.execute(f"TRUNCATE TABLE `{db}`.`{table}`")
            elif optype == "SNAPSHOTSTART":  # forget the table's rows (a table the history never created: create it)
                columns = [f"`{c['field_name']}` {c['data_type']}{'' if c['nullable'] == 'Yes' else ' NOT NULL'}"
                           for c in payload["NEW"]]
                key = payload["SNAPSHOT"]["key"]
                if key:
                    columns.append("PRIMARY KEY (" + ", ".join(f"`{k}`" for k in key) + ")")
                cur.execute(f"CREATE TABLE IF NOT EXISTS `{db}`.`{table}` ({', '.join(columns)})")
                cur.execute(f"DELETE FROM `{db}`.`{table}`")
                snapshotting.add((db, table))
            elif optype == "SNAPSHOTEND":  # after a cancelled one the image stays incomplete
                if payload["SNAPSHOT"]["state"] == "done":
                    snapshotting.discard((db, table))
            else:
                kinds = _column_kinds(cur, db, table)
                if optype in ("INSERT", "SNAPSHOT"):  # a SNAPSHOT row upserts
                    names = ", ".join(f"`{next(iter(c))}`" for c in payload["NEW"])
                    values = ", ".join(_value_sql(kinds[next(iter(c))]) for c in payload["NEW"])
                    verb = "REPLACE" if optype == "SNAPSHOT" else "INSERT"
                    cur.execute(f"{verb} INTO `{db}`.`{table}` ({names}) VALUES ({values})",
                                [next(iter(c.values())) for c in payload["NEW"]])
                elif optype == "DELETE":
                    where, args = _image(cur, payload["OLD"], kinds, " AND ", keys_only=True)
                    deleted = cur.execute(f"DELETE FROM `{db}`.`{table}` WHERE {where} LIMIT 1", args)
                    assert deleted == 1 or (deleted == 0 and (db, table) in snapshotting)
                elif (db, table) in snapshotting:  # UPDATE upserts: remove the old key, write the new image
                    where, old_args = _image(cur, payload["OLD"], kinds, " AND ", keys_only=True)
                    cur.execute(f"DELETE FROM `{db}`.`{table}` WHERE {where} LIMIT 1", old_args)
                    names = ", ".join(f"`{next(iter(c))}`" for c in payload["NEW"])
                    values = ", ".join(_value_sql(kinds[next(iter(c))]) for c in payload["NEW"])
                    cur.execute(f"REPLACE INTO `{db}`.`{table}` ({names}) VALUES ({values})",
                                [next(iter(c.values())) for c in payload["NEW"]])
                else:
                    assignments, new_args = _image(cur, payload["NEW"], kinds, ", ", keys_only=False)
                    where, old_args = _image(cur, payload["OLD"], kinds, " AND ", keys_only=True)
                    cur.execute(f"UPDATE `{db}`.`{table}` SET {assignments} WHERE {where} LIMIT 1", new_args + old_args)


def table_contents(conn: pymysql.Connection, db: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of ``db`` with its rows in primary-key order, for comparing two servers."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema=%s ORDER BY 1", (db,))
        for (table,) in cur.fetchall():
            cur.execute(f"SHOW CREATE TABLE `{db}`.`{table}`")
            ddl = cur.fetchone()[1]
            cur.execute(f"SELECT * FROM `{db}`.`{table}` ORDER BY 1")
            out[table] = [ddl, *cur.fetchall()]
    return out


def fresh_target(server: MariaDBServer, db: str) -> pymysql.Connection:
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    return conn


__all__ = ["make_channel", "running", "start_gate", "wait_running", "wait_row", "wait_sampled", "wait_caught_up",
           "wait_stopped", "dc_rows", "replay", "table_contents", "fresh_target", "server_config", "connect"]
