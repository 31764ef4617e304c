"""Prototype fast paths (scratch, issue 6), patched into gate at run time by scripts/bench/gate_runner.py.

gate's code is not changed: ``GATE_BENCH_VARIANT`` (comma-separated) selects patches, applied in the
gate process and, for the writer patches, in each spawned writer process (spawn re-imports
gate_runner.py as ``__mp_main__``, whose module code calls :func:`apply`).

  write=values    writers send one hand-built multi-row INSERT per chunk (escaping with str.replace)
                  instead of pymysql's executemany
  write=loaddata  writers send each chunk with LOAD DATA LOCAL INFILE (tab-separated, from /dev/shm)
  json=direct     Translator.rows builds the JSON text by concatenation (json's C encode_basestring
                  per value) instead of a list of one-key dicts passed to json.dumps
"""

from __future__ import annotations

import os
from json.encoder import encode_basestring
from typing import Any

import pymysql

import gate.translate
import gate.writer

INSERT_PREFIX = ("INSERT INTO transfer_data (id, tid, dbname, tablename, create_time, instance_name, optype, data) "
                 "VALUES ")
LOAD = ("LOAD DATA LOCAL INFILE '{path}' INTO TABLE transfer_data CHARACTER SET utf8mb4 "
        "FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' "
        "(id, tid, dbname, tablename, create_time, instance_name, optype, data)")


def variant() -> dict[str, str]:
    spec = os.environ.get("GATE_BENCH_VARIANT", "")
    return dict(part.split("=", 1) for part in spec.split(",") if "=" in part)


# --- writers ----------------------------------------------------------------------------------

def sql_lit(v: Any) -> str:
    """A quoted SQL string (backslash escapes on, the server default): only \\, ' and NUL need escaping."""
    if v is None:
        return "NULL"
    if "\\" in v:
        v = v.replace("\\", "\\\\")
    if "'" in v:
        v = v.replace("'", "\\'")
    if "\0" in v:
        v = v.replace("\0", "\\0")
    return "'" + v + "'"


def tsv_field(v: Any) -> str:
    if v is None:
        return "\\N"
    if "\\" in v:
        v = v.replace("\\", "\\\\")
    if "\t" in v:
        v = v.replace("\t", "\\t")
    if "\n" in v:
        v = v.replace("\n", "\\n")
    if "\0" in v:
        v = v.replace("\0", "\\0")
    return v


def sql_values(rows: list[Any]) -> str:
    lit = sql_lit
    return INSERT_PREFIX + ",".join(
        f"({r[0]},{r[1]},{lit(r[2])},{lit(r[3])},{lit(r[4])},{lit(r[5])},{lit(r[6])},{lit(r[7])})" for r in rows)


def tsv(rows: list[Any]) -> bytes:
    f = tsv_field
    return "".join(f"{r[0]}\t{r[1]}\t{f(r[2])}\t{f(r[3])}\t{f(r[4])}\t{f(r[5])}\t{f(r[6])}\t{f(r[7])}\n"
                   for r in rows).encode("utf-8")


def _rollback(conn: pymysql.Connection) -> None:
    try:
        conn.rollback()
    except pymysql.err.Error:
        pass


def write_values(conn: pymysql.Connection, rows: list[Any]) -> None:
    try:
        with conn.cursor() as cur:
            cur.execute(sql_values(rows))
        conn.commit()
    except BaseException:
        _rollback(conn)
        raise


def dc_session_local_infile(server: Any, database: str) -> pymysql.Connection:
    """gate.writer._dc_session with LOAD DATA LOCAL allowed (a capability of the handshake)."""
    conn = gate.writer.connect(server, "DC", database, autocommit=False, local_infile=True)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    return conn


def write_loaddata(conn: pymysql.Connection, rows: list[Any]) -> None:
    path = f"/dev/shm/gate-bench-writer-{os.getpid()}.tsv"
    try:
        with open(path, "wb") as f:
            f.write(tsv(rows))
        with conn.cursor() as cur:
            cur.execute(LOAD.format(path=path))
        conn.commit()
    except BaseException:
        _rollback(conn)
        raise
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


# --- JSON -------------------------------------------------------------------------------------

def _image_builder(renderer: Any) -> Any:
    """The JSON array text of one row image, the same text as json.dumps(renderer.render(...))."""
    enc = encode_basestring
    plan = tuple((name, "{" + enc(name) + ":", render, None if zero is None else enc(zero))
                 for name, render, zero in renderer._plan)

    def image(values: dict[str, Any], none_sources: dict[str, str]) -> str:
        out = []
        append = out.append
        for name, prefix, render, zero in plan:
            v = values[name]
            if v is not None:
                append(prefix + enc(render(v)) + "}")
            elif zero is None or none_sources.get(name, "null") == "null":
                append(prefix + "null}")
            else:
                append(prefix + zero + "}")
        return "[" + ",".join(out) + "]"

    return image


def rows_direct(self: Any, item: Any) -> Any:
    event = item.event
    db, table = event.schema, event.table
    if not self.filter.passes(db, table):
        return ()
    tmap = event.table_map[event.table_id]
    image = getattr(tmap, "_bench_image", None)
    if image is None:
        image = tmap._bench_image = _image_builder(self._renderer(event))
    optype = item.optype
    if optype == "INSERT":
        return [(db, table, optype, '{"NEW":' + image(r["values"], r["none_sources"]) + "}") for r in event.rows]
    if optype == "DELETE":
        return [(db, table, optype, '{"OLD":' + image(r["values"], r["none_sources"]) + "}") for r in event.rows]
    return [(db, table, optype, '{"NEW":' + image(r["after_values"], r["after_none_sources"]) + ',"OLD":'
             + image(r["before_values"], r["before_none_sources"]) + "}") for r in event.rows]


def apply() -> list[str]:
    """Patch gate as GATE_BENCH_VARIANT says; returns what was patched."""
    v = variant()
    done = []
    if v.get("write") == "values":
        gate.writer._write = write_values  # type: ignore[assignment]
        done.append("write=values")
    elif v.get("write") == "loaddata":
        gate.writer._write = write_loaddata  # type: ignore[assignment]
        gate.writer._dc_session = dc_session_local_infile  # type: ignore[assignment]
        done.append("write=loaddata")
    if v.get("json") == "direct":
        gate.translate.Translator.rows = rows_direct  # type: ignore[method-assign]
        done.append("json=direct")
    return done
