"""Failover to the standby: samples, the switch, and exact removal of duplicates.

While a channel runs with a standby, :class:`StandbySampler` records the standby's binlog position,
clock and GTID position every few seconds. When the source has been unreachable for
``failover_after_seconds`` (or the DBA asks for a planned switch), :func:`plan_switch` picks the
newest sample older than the last checkpointed transaction's source time minus
``failover_margin_seconds``, and stores, in one DC transaction, the new source (the standby), the
resume position at that sample and a *dedupe marker*. From that position :func:`without_held` drops
every transaction the DC already holds, asking :class:`Deduper`: by GTID (the standby's binlog keeps
the origin GTIDs) or by a fingerprint of origin server_id, source timestamp and row images. The
marker is cleared by the first checkpoint after the dropping has ended, so a crash anywhere in the
switch repeats the same steps.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pymysql

from gate.capture.holder import Fence, tag_session
from gate.capture.reader import Begin, Commit, Idle, Item, Rows, Statement
from gate.capture.translate import Change, Translator
from gate.common.config import ServerConfig
from gate.common.dc import ChannelSettings, ResumeState, connect, one_row, q, store_settings, write_resume
from gate.common.errors import FailoverError, GateError
from gate.common.retry import is_transient, refusals

log = logging.getLogger(__name__)

KEEP_SAMPLES = 2000
MARKER = "failover_dedupe"
PLANNED = "planned switch by the DBA"
MODES = ("gtid", "fingerprint")
ON_DIVERGENCE = ("stop", "continue")


class StandbySampler(threading.Thread):
    """Every ``interval`` seconds: the standby's SHOW MASTER STATUS, UNIX_TIMESTAMP() and @@gtid_binlog_pos -> DC."""

    def __init__(self, dc: ServerConfig, channel: str, standby: ServerConfig, interval: float,
                 on_fatal: Callable[[GateError], None] = lambda exc: None, fence: Fence | None = None) -> None:
        super().__init__(name="gate-standby-sampler", daemon=True)
        self.fence = fence  # checked first in each sample's DC transaction
        self.dc, self.channel, self.standby, self.interval = dc, channel, standby, interval
        self.on_fatal = on_fatal  # told an error that retrying cannot fix (gate stops); sampling ends
        self._halt = threading.Event()  # not "_stop": threading.Thread uses that name itself

    def stop(self) -> None:
        """Stop sampling and wait for a sample in progress: none may land after a switch."""
        self._halt.set()
        if self.is_alive():
            self.join()

    def sample_once(self) -> None:
        """One sample. The position is read before the clock, so the sample never claims a position
        the standby reached only after its timestamp. Errors that are not transient are :class:`ServerRefused`."""
        with (refusals("standby", self.standby, "SHOW MASTER STATUS (a sample of its binlog position)"),
              connect(self.standby, "standby", connect_timeout=3) as conn, conn.cursor() as cur):
            cur.execute("SHOW MASTER STATUS")
            status = cur.fetchone()
            cur.execute("SELECT UNIX_TIMESTAMP(), @@gtid_binlog_pos")
            now, gtid = one_row(cur)
        if status is None:
            raise FailoverError(f"The standby {self.standby.address} has binary logging off; it cannot be failed over to.")
        with (refusals("DC", self.dc, "storing a standby sample in gate_standby_sample", self.channel),
              connect(self.dc, "DC", self.channel, autocommit=False) as conn, conn.cursor() as cur):
            tag_session(conn, self.channel)
            if self.fence is not None:
                self.fence.check(cur)
            cur.execute("REPLACE INTO gate_standby_sample (sampled_at, log_file, log_pos, gtid_pos) "
                        "VALUES (%s, %s, %s, %s)", (int(now), status[0], int(status[1]), gtid or None))
            cur.execute("DELETE FROM gate_standby_sample WHERE sampled_at < %s", (int(now) - KEEP_SAMPLES * self.interval,))
            conn.commit()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.sample_once()
            except (GateError, pymysql.err.Error) as exc:  # sample_once turned server errors that stay into GateErrors
                if isinstance(exc, GateError) and not is_transient(exc):
                    self.on_fatal(exc)
                    return
                log.warning("standby sample not taken: %s", exc)
            self._halt.wait(self.interval)


@dataclass(frozen=True)
class DedupeMarker:
    """What the DC held when the switch was planned; stored in gate_meta until the switch completes."""

    mode: str  # gtid | fingerprint
    held_gtids: dict[str, list[int]] = field(default_factory=dict)  # domain -> [server_id, seq] of the DC's last GTID
    origin_server_id: int = 0  # the old source's server_id, for fingerprints
    margin: float = 5.0  # fingerprint mode compares DC transactions from a standby one's time - margin
    checkpoint_id: int = 0
    from_instance: str = ""
    sampled_at: int = 0  # the standby's clock at the sample the switch reads from

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> DedupeMarker:
        """Also reads a marker of an earlier gate, which kept only the sequence number per domain: its
        last GTIDs came from the old source, whose server_id the marker has."""
        fields = json.loads(text)
        origin = fields.get("origin_server_id", 0)
        fields["held_gtids"] = {domain: [origin, last] if isinstance(last, int) else last
                                for domain, last in fields.get("held_gtids", {}).items()}
        return cls(**fields)


def parse_gtids(gtids: str | None) -> dict[tuple[str, int], int]:
    """A MariaDB GTID list (a position like '0-1-100,1-1-7' or a binlog state like '0-1-100,0-2-5')
    -> (domain, server_id) -> the highest sequence number listed."""
    seqs: dict[tuple[str, int], int] = {}
    for gtid in filter(None, (g.strip() for g in (gtids or "").split(","))):
        domain, server_id, seq = gtid.split("-")
        seqs[domain, int(server_id)] = max(seqs.get((domain, int(server_id)), 0), int(seq))
    return seqs


def _never_received(held: dict[str, list[int]], standby_state: dict[tuple[str, int], int]) -> list[str]:
    """The DC's GTIDs beyond the standby's binlog state: per domain, from the standby's last GTID of the
    server that wrote the DC's last one (whatever GTIDs of other servers the standby has written since)."""
    lost = []
    for domain, (server_id, seq) in sorted(held.items()):
        have = standby_state.get((domain, server_id), 0)
        if have < seq:
            lost.append(f"{domain}-{server_id}-{have + 1}..{domain}-{server_id}-{seq}")
    return lost


def fingerprint(server_id: int, timestamp: int, changes: Sequence[Change]) -> str:
    digest = hashlib.sha256(f"{server_id}|{timestamp}".encode())
    for change in changes:
        digest.update("\x1f".join(change).encode())
        digest.update(b"\x1e")
    return digest.hexdigest()


def record_source_server_id(cur: pymysql.cursors.Cursor, channel: str, server_id: int) -> None:
    """The source's server_id, recorded at each start: fingerprints need it after the source's death."""
    cur.execute(f"REPLACE INTO {q(channel)}.gate_meta (name, value) VALUES ('source_server_id', %s)", (str(server_id),))


def marker_query(channel: str) -> tuple[str, tuple[Any, ...]]:
    """A switch's dedupe marker in the channel's gate_meta (:func:`marker_from` reads the answer)."""
    return f"SELECT value FROM {q(channel)}.gate_meta WHERE name = %s", (MARKER,)


def marker_from(rows: list[tuple[Any, ...]]) -> DedupeMarker | None:
    return DedupeMarker.from_json(rows[0][0]) if rows else None


def read_marker(conn: pymysql.Connection, channel: str) -> DedupeMarker | None:
    with conn.cursor() as cur:
        cur.execute(*marker_query(channel))
        return marker_from(list(cur.fetchall()))


def clear_marker(cur: pymysql.cursors.Cursor, channel: str) -> None:
    cur.execute(f"DELETE FROM {q(channel)}.gate_meta WHERE name = %s", (MARKER,))


def forget_samples(cur: pymysql.cursors.Cursor, channel: str) -> None:
    """Drop the standby samples: positions of one server mean nothing for another."""
    cur.execute(f"DELETE FROM {q(channel)}.gate_standby_sample")


def _standby(settings: ChannelSettings) -> ServerConfig:
    if settings.standby is None:
        raise FailoverError(f"Channel '{settings.name}' has no standby to switch to. Set one with "
                            f"'gate channel set-standby {settings.name} HOST:PORT'.")
    return settings.standby


def catch_up(settings: ChannelSettings, timeout: float) -> int:
    """Wait until the standby has applied all that the (live) source has binlogged; returns the source's
    server_id. For a planned switch: afterwards the standby holds every transaction the DC holds."""
    source, standby = settings.source, _standby(settings)
    with connect(source, "source") as conn, conn.cursor() as cur:
        cur.execute("SELECT @@server_id, @@gtid_binlog_pos")
        server_id, position = one_row(cur)
    with connect(standby, "standby", read_timeout=timeout + 30) as conn, conn.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (position or "", timeout))
        if one_row(cur)[0] != 0:
            raise FailoverError(
                f"The standby {standby.address} has not applied the source's GTID position {position} within "
                f"{timeout:.0f} s, so channel '{settings.name}' was not switched. Check its replication (SHOW SLAVE "
                "STATUS on the standby) and try again, or allow more time with --catch-up-timeout.")
    return int(server_id)


def _wait_relay_applied(standby: ServerConfig, timeout: float = 30.0) -> str:
    """Let the standby apply what it has received; returns its final @@gtid_binlog_state (the last GTID
    of each domain and server, where @@gtid_binlog_pos has only the last of each domain)."""
    deadline = time.monotonic() + timeout
    with (refusals("standby", standby, "SHOW SLAVE STATUS and @@gtid_binlog_state (the switch's start)"),
          connect(standby, "standby") as conn, conn.cursor(pymysql.cursors.DictCursor) as cur):
        while True:
            cur.execute("SHOW SLAVE STATUS")
            status = cur.fetchone()
            if status is None or (status["Read_Master_Log_Pos"] == status["Exec_Master_Log_Pos"]
                                  and status["Relay_Master_Log_File"] == status["Master_Log_File"]):
                break
            if time.monotonic() > deadline:
                log.warning("standby %s still applying its relay log after %.0f s; switching anyway",
                            standby.address, timeout)
                break
            time.sleep(0.1)
        cur.execute("SELECT @@gtid_binlog_state AS state")
        return one_row(cur)["state"] or ""


def plan_switch(conn: pymysql.Connection, settings: ChannelSettings, state: ResumeState, origin_server_id: int,
                reason: str) -> tuple[ChannelSettings, ResumeState]:
    """Choose the restart point on the standby and store the switch; returns the new settings and state.

    In one DC transaction: the standby becomes the source and the channel has no standby any more
    (the old source does not replicate from the new one), the resume position is the chosen sample's,
    the samples (positions of the new source) are dropped, the dedupe marker is set and the switch
    is recorded in gate_switch.
    """
    channel, standby = settings.name, _standby(settings)
    held = {domain: [server_id, seq] for (domain, server_id), seq in parse_gtids(state.gtid_pos).items()}
    lost = _never_received(held, parse_gtids(_wait_relay_applied(standby)))
    mode = settings.failover_mode
    if mode == "gtid" and lost:  # known from the GTIDs alone: reported before, and whether or not, a sample fits
        report_divergence(settings, f"GTIDs the standby never received ({', '.join(lost)})")
    margin = settings.defaults.failover_margin_seconds
    newest_allowed = (state.event_time or 0) - margin
    with conn.cursor() as cur:
        cur.execute(f"SELECT sampled_at, log_file, log_pos FROM {q(channel)}.gate_standby_sample "
                    "WHERE sampled_at < %s ORDER BY sampled_at DESC LIMIT 1", (newest_allowed,))
        sample = cur.fetchone()
    if sample is None:
        raise FailoverError(
            f"Channel '{channel}' cannot fail over to {standby.address}: no standby sample is older than the last "
            f"checkpointed transaction's time minus the margin ({newest_allowed}). Samples are taken every "
            f"{settings.defaults.standby_sample_seconds} s while gate runs; set a start position on the standby "
            "by hand ('gate channel set-source' and 'set-position') if you know it."
        )
    sampled_at, log_file, log_pos = sample
    marker = DedupeMarker(mode, held, origin_server_id, margin, state.id,
                          state.instance_name or settings.source.address, int(sampled_at))
    new_settings = replace(settings, source=standby, standby=None)
    new_state = replace(state, log_file=log_file, log_pos=int(log_pos), gtid_pos=None, instance_name=standby.address)
    conn.begin()
    with conn.cursor() as cur:
        store_settings(cur, new_settings)
        write_resume(cur, channel, new_state)
        forget_samples(cur, channel)
        cur.execute(f"REPLACE INTO {q(channel)}.gate_meta (name, value) VALUES (%s, %s)", (MARKER, marker.to_json()))
        cur.execute(f"INSERT INTO {q(channel)}.gate_switch (from_instance, to_instance, reason, at_id) "
                    "VALUES (%s, %s, %s, %s)", (marker.from_instance, standby.address, reason[:2000], state.id))
    conn.commit()
    log.warning("channel %s switched from %s to the standby %s (%s); reading it from %s:%s, sample of %s, %s dedupe",
                channel, marker.from_instance, standby.address, reason, log_file, log_pos, sampled_at, mode)
    return new_settings, new_state


def report_divergence(settings: ChannelSettings, what: str) -> None:
    message = (f"DIVERGENCE on channel '{settings.name}': the DC holds {what}. Those changes were lost by "
               "asynchronous replication and exist only in the DC.")
    log.error(message)
    if settings.on_divergence != "continue":
        raise FailoverError(message + " gate stops here; set on_divergence to 'continue' for this channel "
                                      f"('gate channel set {settings.name} --on-divergence continue') to accept "
                                      "the loss and go on.")


class Deduper:
    """Decides, per standby transaction in binlog order, whether the DC already holds it."""

    def __init__(self, marker: DedupeMarker, conn: pymysql.Connection, channel: str) -> None:
        self.marker = marker
        self._conn, self._channel = conn, channel
        self._dc: dict[str, list[int]] = {}  # fingerprint -> tids, of the DC transactions from self._since on
        self._since: float | None = None
        self._last = 0  # tid of the last DC transaction matched

    def held(self, gtid: str | None, server_id: int, timestamp: int, changes: Sequence[Change]) -> bool:
        """By GTID in gtid mode: held when written by the server of the DC's last GTID in its domain, with
        a sequence number up to that one's (a promoted standby numbers its own transactions on from its
        last applied one, so a sequence number alone may be one the DC holds from another server). Else by
        fingerprint, against the DC transactions from ``timestamp`` minus the margin on; the standby replays
        the source's order, so a match must come after the last one. A transaction with no change for
        the DC, without a GTID to tell, counts as held: it writes nothing."""
        if self.marker.mode == "gtid" and gtid:
            domain, origin, seq = gtid.split("-")
            last = self.marker.held_gtids.get(domain)
            return last is not None and int(origin) == last[0] and int(seq) <= last[1]
        if not changes:
            return True
        since = timestamp - self.marker.margin
        if self._since is None or since < self._since:
            self._load(since)
        for tid in self._dc.get(fingerprint(server_id, timestamp, changes), ()):
            if tid > self._last:
                self._last = tid
                return True
        return False

    def _load(self, since: float) -> None:
        """Fingerprints of the DC's transactions from ``since`` up to the checkpoint at the switch."""
        with self._conn.cursor() as cur:
            cur.execute(
                f"SELECT tid, UNIX_TIMESTAMP(create_time), dbname, tablename, optype, data FROM "
                f"{q(self._channel)}.transfer_data WHERE id <= %s AND create_time >= FROM_UNIXTIME(%s) ORDER BY id",
                (self.marker.checkpoint_id, max(1, int(since))))
            rows = cur.fetchall()
        by_tid: dict[int, tuple[int, list[Change]]] = {}
        for tid, ts, db, table, optype, data in rows:
            by_tid.setdefault(tid, (int(ts), []))[1].append((db, table, optype, data))
        self._dc = {}
        for tid, (ts, changes) in by_tid.items():
            self._dc.setdefault(fingerprint(self.marker.origin_server_id, ts, changes), []).append(tid)
        self._since = since

    def lost(self) -> list[int]:
        """Fingerprint mode, once the standby has no more transactions the DC holds: tids of DC transactions
        the standby never had. They are the ones after the last matched transaction; with none matched, at
        least those newer than the sample plus the margin (the standby had applied none of them by then)."""
        if self.marker.mode == "gtid":
            return []
        after, value = ("tid > %s", self._last) if self._last else (
            "create_time > FROM_UNIXTIME(%s)", self.marker.sampled_at + int(self.marker.margin))
        with self._conn.cursor() as cur:
            cur.execute(f"SELECT DISTINCT tid FROM {q(self._channel)}.transfer_data WHERE id <= %s AND {after} "
                        "ORDER BY tid", (self.marker.checkpoint_id, value))
            return [row[0] for row in cur.fetchall()]


def without_held(items: Iterator[Item], deduper: Deduper, translator: Translator,
                 settings: ChannelSettings) -> Iterator[Item]:
    """After a switch: drop the standby's transactions that the DC holds, then pass everything on.

    Dropping ends at the first transaction new to the DC, or at the first heartbeat between
    transactions (the standby has sent all it has; the switch waited for it to apply its relay log).
    Then the DC transactions the standby never had are reported as a divergence, and the Commit of the
    last dropped transaction is passed on alone: a transaction without changes takes no id or tid, but
    its end is checkpointed, so the resume position leaves the sample's (and lag is measured from there).
    """
    skipped = 0
    buffered: list[Item] = []
    last_dropped: Commit | None = None
    for item in items:
        if type(item) is Idle:
            if buffered:
                continue
            break
        buffered.append(item)
        if type(item) is not Commit:
            continue
        begin = buffered[0]
        changes: list[Change] = []
        first_time = item.timestamp
        for part in buffered:
            if type(part) is Rows:
                first_time = part.event.timestamp if not changes else first_time
                changes.extend(translator.rows(part))
            elif type(part) is Statement:
                first_time = part.timestamp if not changes else first_time
                changes.extend(translator.statement(part))
        gtid = begin.gtid if type(begin) is Begin else None
        server_id = begin.server_id if type(begin) is Begin else 0
        if deduper.marker.mode == "fingerprint" and (item.xa is not None or (type(begin) is Begin and begin.xid)):
            raise FailoverError(
                f"Channel '{settings.name}' cannot finish its switch to {settings.source.address}: the standby's "
                f"binlog from the switch point holds an XA transaction step ({item.xa[0] if item.xa else 'PREPARE'} "
                f"at {item.position.describe()}), and fingerprint mode cannot tell whether the DC holds it (XA rows "
                "are numbered at their commit, not where the binlog has them). Nothing was written. Set a start "
                f"position on the standby after the transactions the DC holds ('gate channel set-position "
                f"{settings.name} ...') and run again; for sources with XA transactions use failover_mode gtid.")
        if not deduper.held(gtid, server_id, first_time, changes):
            break
        skipped += 1
        last_dropped = item
        buffered = []
    else:
        return  # stopped while dropping: the next run repeats it from the same marker
    log.info("switch: skipped %d transactions the DC already held; %s", skipped,
             "the next one is new" if buffered else "the standby has sent all it has")
    lost = deduper.lost()
    if lost:
        report_divergence(settings, f"{len(lost)} transactions the standby never received (tids {lost[0]}..{lost[-1]})")
    if last_dropped is not None:
        yield last_dropped
    yield from buffered
    yield from items
