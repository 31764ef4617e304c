"""Verifications: is the DC's fold of a table equal to the source table, chunk by chunk, at exact points?

``gate verify`` requests a verification of each table (a row of the channel's ``gate_verify``); the running
gate reads the table in chunks as it reads a snapshot's (each chunk one read view at a binlog position P,
placed in the stream at P) and writes one VERIFY row per chunk: the chunk's key range, row count and
checksum (:mod:`gate.common.checksum`). Once a verification is done (its last VERIFY row at or below the
checkpoint), this module folds the table's rows of ``transfer_data`` in id order and, at each of its VERIFY
rows, compares the checksum of the fold's rows in the chunk's range with the source's. A chunk that differs
is read again, its range only, by a *narrowing* (a verification whose VERIFY rows carry the source rows):
comparing them with the fold at that row's id names each key that differs, with both values.

The fold holds one table's rows (key -> image and digest) in memory: the DC's image of that table, not a
chunk. Key ranges compare key values as the DC renders them: numbers as numbers, other text by code
point (see docs/dba/verify.md for the keys this orders otherwise than the source).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql

import dc_schema
from gate.admin.catalog import captured, source_tables
from gate.admin.snapshot import _matching, name_of, split_unreadable
from gate.common import checksum, dc
from gate.common.checksum import KeyValues, in_range, sort_key
from gate.common.config import check_identifier
from gate.common.dc import q
from gate.common.errors import InvalidValue, VerifyTimedOut

TABLE = "gate_verify"
ACTIVE = ("requested", "running")
BATCH = 5000  # transfer_data rows read per query while folding
Image = dict[str, "str | None"]


# --- requests ------------------------------------------------------------------------------------

def request(conn: pymysql.Connection, channel: str, patterns: Sequence[str] = (),
            max_rate: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A verification of each captured table ``patterns`` match (all without), but those that already have
    one requested or running (resumed: their ids are returned too) and those without a key to page on
    (returned second, with the reason and fix). Returns ([{id, table, resumed}], [{table, reason}])."""
    settings = dc.read_settings(conn, channel)
    tables = captured(source_tables(settings.source), settings.allow, settings.deny)
    chosen, unmatched = _matching(tables, patterns)
    if unmatched or not tables:
        raise InvalidValue(
            f"No table that channel '{channel}' captures matches {', '.join(repr(p) for p in unmatched) or 'any'} "
            f"on its source {settings.source.address}; nothing was requested. Correct the pattern (db.table, with "
            "* and ?).")
    readable, refused = split_unreadable(settings, chosen, {})
    with conn.cursor() as cur:
        cur.execute(f"USE {q(channel)}")
        cur.execute(dc_schema.table_ddl(TABLE))
        conn.begin()
        cur.execute(f"SELECT id, dbname, tablename FROM {TABLE} WHERE state IN %s AND parent IS NULL "
                    "ORDER BY id FOR UPDATE", (ACTIVE,))
        pending = {(db, table): id_ for id_, db, table in cur.fetchall()}
        out = []
        for table in readable:
            if table in pending:
                out.append({"id": pending[table], "table": name_of(table), "resumed": True})
                continue
            cur.execute(f"INSERT INTO {TABLE} (dbname, tablename, reason, max_rate) VALUES (%s, %s, 'gate verify', %s)",
                        (*table, max_rate))
            out.append({"id": cur.lastrowid, "table": name_of(table), "resumed": False})
        conn.commit()
    for item in refused:
        item["reason"] = item["reason"].replace("snapshot", "verify")
    return out, refused


def _narrow(cur: pymysql.cursors.Cursor, parent: int, db: str, table: str, chunk: dict[str, Any]) -> int:
    """A narrowing of one differing chunk: its range read again, the VERIFY rows carrying the source's rows."""
    info = chunk["verify"]

    def text(value: Any) -> str | None:
        return None if value is None else json.dumps(value)

    cur.execute(f"INSERT INTO {TABLE} (dbname, tablename, reason, snap_key, snap_last, snap_bound, snap_after, "
                "snap_upto, with_rows, parent) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 1, %s)",
                (db, table, f"narrowing chunk {info['chunk']} of verification {parent}", json.dumps(info["key"]),
                 text(info["source_after"]), text(info["source_upto"]), text(info["after"]), text(info["upto"]),
                 parent))
    return int(cur.lastrowid)


def wait(conn: pymysql.Connection, channel: str, ids: Sequence[int], progress: Callable[[list[dict[str, Any]]], None],
         interval: float = 0.5, timeout: float | None = None) -> list[dict[str, Any]]:
    """Until every verification of ``ids`` has ended (done or cancelled), calling ``progress`` with their rows."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with conn.cursor() as cur:
        while True:
            conn.commit()  # a fresh read view
            cur.execute(f"SELECT id, dbname, tablename, state, rows_done, chunks_done, rows_estimate, message "
                        f"FROM {q(channel)}.{TABLE} WHERE id IN %s ORDER BY id", (list(ids),))
            rows = [{"id": i, "table": f"{d}.{t}", "state": s, "rows_done": r, "chunks_done": c, "rows_estimate": e,
                     "message": m} for i, d, t, s, r, c, e, m in cur.fetchall()]
            progress(rows)
            if all(row["state"] not in ACTIVE for row in rows):
                return rows
            if deadline is not None and time.monotonic() > deadline:
                raise VerifyTimedOut(
                    f"The verifications {list(ids)} of channel '{channel}' did not end within {timeout} s. They go on "
                    f"in the running gate: run 'gate verify {channel}' again (same --table) to wait for them and compare.")
            time.sleep(interval)


# --- the fold and the comparison ------------------------------------------------------------------

@dataclass
class Fold:
    """One table's rows in the DC as a consumer folds them, by key: (image, digest)."""

    key: list[str]
    rows: dict[KeyValues, tuple[Image, int]] = field(default_factory=dict)

    def _key(self, image: Image) -> KeyValues:
        return sort_key([image.get(k) for k in self.key])

    def apply(self, optype: str, payload: dict[str, Any]) -> None:
        if optype in ("SNAPSHOTSTART", "TRUNCATE", "DROPTABLE", "CREATETABLE", "RENAME"):
            self.rows.clear()  # a new image starts (RENAME: the rows left under another name)
        elif optype in ("INSERT", "SNAPSHOT", "UPDATE", "DELETE"):
            if payload.get("OLD") is not None:
                self.rows.pop(self._key(checksum.image(payload["OLD"])), None)
            if payload.get("NEW") is not None:
                new = checksum.image(payload["NEW"])
                self.rows[self._key(new)] = (new, checksum.digest(new))
        elif optype == "ALTERTABLE":
            self._alter(payload)

    def _alter(self, payload: dict[str, Any]) -> None:
        """Columns dropped, renamed or added (NULL: the DC holds no other value for rows not written since)."""
        renames = {c["origin_field_name"]: c["field_name"] for c in payload.get("CHANGECOLUMN") or []}
        dropped = set(payload.get("DROPCOLUMN") or [])
        added = [c["field_name"] for c in payload.get("ADDCOLUMN") or []]
        if not (renames or dropped or added):
            return
        for key, (image, _) in list(self.rows.items()):
            new = {renames.get(n, n): v for n, v in image.items() if n not in dropped}
            new.update({n: None for n in added if n not in new})
            self.rows[key] = (new, checksum.digest(new))

    def within(self, after: KeyValues | None, upto: KeyValues | None) -> Iterator[tuple[KeyValues, Image, int]]:
        for key, (image, value) in self.rows.items():
            if in_range(key, after, upto):
                yield key, image, value


def _bounds(info: dict[str, Any]) -> tuple[KeyValues | None, KeyValues | None]:
    after, upto = info.get("after"), info.get("upto")
    return (None if after is None else sort_key(after)), (None if upto is None else sort_key(upto))


def _table_rows(cur: pymysql.cursors.Cursor, db: str, table: str, start: int, end: int) -> Iterator[tuple[int, str, Any]]:
    """The table's transfer_data rows with start < id <= end, in id order, a batch at a time."""
    while True:
        cur.execute("SELECT id, optype, data FROM transfer_data WHERE dbname = %s AND tablename = %s AND id > %s "
                    "AND id <= %s ORDER BY id LIMIT %s", (db, table, start, end, BATCH))
        rows = cur.fetchall()
        for id_, optype, data in rows:
            yield int(id_), optype, data
        if len(rows) < BATCH:
            return
        start = int(rows[-1][0])


def _verify_rows(cur: pymysql.cursors.Cursor, db: str, table: str, verify_id: int) -> list[tuple[int, dict[str, Any]]]:
    cur.execute("SELECT id, data FROM transfer_data WHERE dbname = %s AND tablename = %s AND optype = 'VERIFY' "
                "AND JSON_VALUE(data, '$.VERIFY.id') = %s ORDER BY id", (db, table, verify_id))
    return [(int(id_), json.loads(data)) for id_, data in cur.fetchall()]


def _start(cur: pymysql.cursors.Cursor, db: str, table: str, first: int) -> int | None:
    """Where the fold starts: 0 while transfer_data holds every row from 1; else (retention removed the
    oldest rows) at the table's last SNAPSHOTSTART below ``first``; None when there is none."""
    cur.execute("SELECT MIN(id) FROM transfer_data")
    oldest = dc.one_row(cur)[0]
    if oldest is None or int(oldest) <= 1:
        return 0
    cur.execute("SELECT MAX(id) FROM transfer_data WHERE dbname = %s AND tablename = %s AND optype = 'SNAPSHOTSTART' "
                "AND id < %s", (db, table, first))
    found = dc.one_row(cur)[0]
    return None if found is None else int(found) - 1


def compare(cur: pymysql.cursors.Cursor, db: str, table: str, verify_id: int) -> dict[str, Any]:
    """Fold the table's rows and compare each VERIFY row of ``verify_id`` with the fold below it: the chunks
    and rows checked and the chunks that differ (with their VERIFY payload, for a narrowing). A narrowing's
    VERIFY rows (with ROWS) are compared key by key: ``keys`` lists each key that differs."""
    verifies = _verify_rows(cur, db, table, verify_id)
    result: dict[str, Any] = {"chunks": len(verifies), "rows": 0, "differing": [], "keys": []}
    if not verifies:
        return result
    start = _start(cur, db, table, verifies[0][0])
    if start is None:
        result["unverifiable"] = (f"retention removed rows of transfer_data before the first VERIFY row of {db}.{table} "
                                  "and no snapshot of the table is left after them, so the DC holds no whole image of it "
                                  "to compare")
        return result
    fold = Fold(verifies[0][1]["VERIFY"]["key"])
    at = {id_: payload for id_, payload in verifies}
    for id_, optype, data in _table_rows(cur, db, table, start, verifies[-1][0]):
        payload = json.loads(data) if data else {}
        if id_ in at:
            _check(fold, id_, payload, result)
        elif optype != "VERIFY":
            fold.apply(optype, payload)
    return result


def _check(fold: Fold, id_: int, payload: dict[str, Any], result: dict[str, Any]) -> None:
    info = payload["VERIFY"]
    after, upto = _bounds(info)
    mine = list(fold.within(after, upto))
    dc_sum = checksum.combine(value for _, _, value in mine)
    result["rows"] += info["rows"]
    if (dc_sum, len(mine)) == (info["checksum"], info["rows"]):
        return
    result["differing"].append({"id": id_, "chunk": info["chunk"], "after": info["after"], "upto": info["upto"],
                                "source_rows": info["rows"], "dc_rows": len(mine), "source_checksum": info["checksum"],
                                "dc_checksum": dc_sum, "verify": info})
    if "ROWS" in payload:
        source = {fold._key(image): image for image in map(checksum.image, payload["ROWS"])}
        ours = {key: image for key, image, _ in mine}
        for key in sorted(source.keys() | ours.keys()):
            if source.get(key) != ours.get(key):
                image = source.get(key) or ours[key]
                result["keys"].append({"key": {k: image.get(k) for k in fold.key}, "source": source.get(key),
                                       "dc": ours.get(key)})


def verify_table(conn: pymysql.Connection, channel: str, verify_id: int,
                 progress: Callable[[list[dict[str, Any]]], None] = lambda rows: None,
                 timeout: float | None = None) -> dict[str, Any]:
    """Compare a done verification with the DC's fold; narrow each differing chunk to its keys; store the
    outcome in gate_verify. Returns the table's report."""
    with conn.cursor() as cur:
        cur.execute(f"USE {q(channel)}")
        cur.execute(f"SELECT dbname, tablename, state, message FROM {TABLE} WHERE id = %s", (verify_id,))
        db, table, state, message = dc.one_row(cur)
        report: dict[str, Any] = {"table": f"{db}.{table}", "id": verify_id, "state": state}
        if state != "done":
            report.update(matched=False, message=message)
            return report
        found = compare(cur, db, table, verify_id)
        report.update(chunks=found["chunks"], rows=found["rows"])
        if "unverifiable" in found:
            report.update(matched=False, message=found["unverifiable"] + f". Fix: gate snapshot {channel} --table "
                          f"{db}.{table}, then verify again.")
            return report
        differing = found["differing"]
        keys: list[dict[str, Any]] = []
        if differing:
            conn.begin()
            cur.execute(f"SELECT id FROM {TABLE} WHERE parent = %s ORDER BY id", (verify_id,))
            narrowings = [row[0] for row in cur.fetchall()]  # a resumed gate verify: those already asked for
            if len(narrowings) != len(differing):
                narrowings = [_narrow(cur, verify_id, db, table, chunk) for chunk in differing]
            conn.commit()
            wait(conn, channel, narrowings, progress, timeout=timeout)
            for narrowing in narrowings:
                keys += compare(cur, db, table, narrowing)["keys"]
        for chunk in differing:
            del chunk["verify"]
        report.update(matched=not differing, differing_chunks=differing, differing_keys=keys)
        if differing:
            report["fix"] = f"gate snapshot {channel} --table {db}.{table}"
        cur.execute(f"UPDATE {TABLE} SET compared_at = NOW(3), chunks_differ = %s, keys_differ = %s WHERE id = %s",
                    (len(differing), len(keys), verify_id))
        conn.commit()
    return report


def check_channel(conn: pymysql.Connection, channel: str) -> None:
    check_identifier(channel, "Channel name")
    dc.schema_version(conn, channel)


# --- metrics --------------------------------------------------------------------------------------

def metrics_text(channel: str, reports: Sequence[dict[str, Any]], now: float) -> str:
    """The reports as Prometheus text, for node_exporter's textfile collector."""
    families = [
        ("gate_verify_last_timestamp_seconds", "When gate verify last compared the table (Unix time)",
         lambda r: now),
        ("gate_verify_matched", "1 if the table's last verification matched the source, else 0",
         lambda r: int(bool(r.get("matched")))),
        ("gate_verify_rows", "Source rows the table's last verification checked", lambda r: r.get("rows", 0)),
        ("gate_verify_differing_chunks", "Chunks of the table's last verification that differ from the DC",
         lambda r: len(r.get("differing_chunks", []))),
        ("gate_verify_differing_keys", "Keys found differing by the table's last verification",
         lambda r: len(r.get("differing_keys", []))),
    ]
    lines = []
    for name, text, value in families:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        for report in reports:
            label = report["table"].replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{name}{{channel="{channel}",table="{label}"}} {value(report)}')
    return "\n".join(lines) + "\n"
