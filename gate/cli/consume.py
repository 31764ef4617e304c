"""Commands for reading a channel: ``gate tail``, ``gate spark-load`` and ``gate spark-materialise``.

They are registered on the main group by gate.cli (``main.add_command(...)``) and, like every command
there, get gate.cli's ``App`` as the click context object: its ``dc`` is the DC server of config.yaml,
its ``as_json`` the global ``--json`` flag. pyspark is imported only by the spark commands.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone

import click

from gate.cli.app import App
from gate.common.config import check_identifier
from gate.common.dc import require_at_most_checkpoint
from gate.common.errors import InvalidValue
from gate.consume.client import OPTYPES, Change, Consumer, SnapshotInfo

_PLAIN = re.compile(r"^[^\s,{}=\"']{1,40}$")
_ROW_ID = re.compile(r"[0-9]+")
INTERVAL = (0.05, 3600.0)  # --interval, seconds: shorter would query the DC in a tight loop


def _value(value: str | None) -> str:
    """A value for a human-readable line: NULL, bare text, or quoted (and shortened past 40 chars)."""
    if value is None:
        return "NULL"
    if _PLAIN.match(value) and value != "NULL":
        return value
    if len(value) > 40:
        return json.dumps(value[:40], ensure_ascii=False)[:-1] + f"…\"({len(value)})"
    return json.dumps(value, ensure_ascii=False)


def _image(image: dict[str, str | None]) -> str:
    return "{" + ", ".join(f"{name}={_value(value)}" for name, value in image.items()) + "}"


def describe(change: Change) -> str:
    """One line: id, tid, UTC time, db.table, optype, then NEW and the OLD columns that changed (UPDATE),
    the image (INSERT, DELETE, SNAPSHOT), the snapshot (SNAPSHOTSTART, SNAPSHOTEND), the verified chunk (VERIFY)
    or the DDL statement."""
    head = (f"{change.id} tid={change.tid} {change.create_time:%Y-%m-%d %H:%M:%S}Z "
            f"{change.dbname}.{change.tablename} {change.optype}")
    if change.new is not None and change.old is not None:
        changed = {k: v for k, v in change.old.items() if change.new.get(k, v) != v or k not in change.new}
        return f"{head} NEW{_image(change.new)} OLD{_image(changed)}"
    if change.new is not None:
        return f"{head} NEW{_image(change.new)}"
    if change.old is not None:
        return f"{head} OLD{_image(change.old)}"
    if change.snapshot is not None:
        return f"{head} {_snapshot(change.snapshot)}"
    if change.verify is not None:
        info = change.verify
        return (f"{head} verification {info.id} chunk {info.chunk}{' (last)' if info.last else ''}: keys after "
                f"{list(info.after) if info.after else 'the start'} up to {list(info.upto) if info.upto else 'the end'}"
                f", {info.rows} rows, checksum {info.checksum}")
    ddl = change.ddl or {}
    text = ddl.get("SQL") or (json.dumps(ddl, ensure_ascii=False, separators=(",", ":")) if ddl else "")
    return f"{head} {text}".rstrip()


def _snapshot(info: SnapshotInfo) -> str:
    """SNAPSHOTSTART: id, reason and key; SNAPSHOTEND: id, state, rows and why it was cancelled."""
    if info.state is None:
        return f"snapshot {info.id} ({info.reason}) key ({', '.join(info.key or ()) or 'none'})"
    return f"snapshot {info.id} {info.state}, {info.rows} rows" + (f" ({info.reason})" if info.reason else "")


def _start(text: str) -> int | datetime:
    """``--from``: a row id, or a time (ISO 8601; UTC unless it carries an offset)."""
    if _ROW_ID.fullmatch(text):
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidValue(f"--from {text!r} is neither a row id nor a time. Give an id such as 1200 or a time "
                           "such as 2024-05-01T10:00:00 (UTC) or 2024-05-01T12:00:00+02:00.") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


@click.command()
@click.argument("channel")
@click.option("--from", "start", metavar="ID|TIME",
              help="start with row ID, or with the first row executed at TIME or later (ISO 8601, UTC unless an "
                   "offset is given) [default: the last --lines rows]")
@click.option("-n", "--lines", default=10, show_default=True, help="without --from, start this many rows before "
              "the checkpoint")
@click.option("--db", "dbname", metavar="DB", help="only changes of this database")
@click.option("--table", "tablename", metavar="TABLE", help="only changes of tables with this name")
@click.option("--optype", "optypes", multiple=True, type=click.Choice(sorted(OPTYPES)),
              help="only this kind of change (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line (also with gate --json)")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="keep waiting for new changes, like tail -f; --no-follow stops at the checkpoint")
@click.option("--interval", default=0.5, show_default=True, metavar="SECONDS", help="how often to look for "
              f"new changes when following ({INTERVAL[0]:g} to {INTERVAL[1]:g})")
@click.pass_obj
def tail(app: App, channel: str, start: str | None, lines: int, dbname: str | None, tablename: str | None,
         optypes: tuple[str, ...], as_json: bool, follow: bool, interval: float) -> None:
    """Print a channel's changes as they become complete, like tail -f.

    Reads transfer_data in id order up to the checkpoint only, so every line printed is final. A
    line shows id, tid, the time the change was executed on the source (UTC), db.table, optype and
    the row: NEW{...} for an INSERT, OLD{...} for a DELETE, and for an UPDATE NEW{...} with OLD{...}
    holding only the columns that changed; DDL rows show their statement; a SNAPSHOT row shows NEW{...},
    SNAPSHOTSTART the snapshot's id, reason and key, SNAPSHOTEND its state and rows. Values longer than 40
    characters are shortened; --json prints every value in full, one object per line with the keys
    id, tid, dbname, tablename, create_time, instance_name, optype, new, old and ddl.

    Example:

    \b
        gate tail shop --db shop --table orders --optype UPDATE --optype DELETE
        gate tail shop --from 2024-05-01T10:00:00 --no-follow --json | jq .new
    """
    check_identifier(channel, "Channel name")
    if lines < 0:
        raise InvalidValue(f"--lines must be 0 or more, not {lines}: it counts the rows before the checkpoint to show.")
    if not INTERVAL[0] <= interval <= INTERVAL[1]:
        raise InvalidValue(f"--interval must be between {INTERVAL[0]:g} and {INTERVAL[1]:g} seconds, not {interval:g} "
                           f"(below {INTERVAL[0]:g} s tail would query the DC server in a tight loop).")
    json_lines = as_json or app.as_json
    begin = _start(start) if start is not None else None
    with Consumer(app.dc, channel, dbname=dbname, tablename=tablename, optypes=optypes or None) as consumer:
        if isinstance(begin, datetime):
            consumer.cursor = consumer.position_at_time(begin)
        else:
            checkpoint = consumer.checkpoint()
            if begin is not None:
                require_at_most_checkpoint(channel, begin - 1, checkpoint.id, f"--from {begin}",
                                           f"Give --from {checkpoint.id + 1} or less ({checkpoint.id + 1}: only the "
                                           "rows still to come).")
            consumer.cursor = consumer.position(max(0, begin - 1) if begin is not None
                                                else max(consumer.purged_through(), checkpoint.id - lines), checkpoint)
        changes = consumer.follow(interval) if follow else _until_checkpoint(consumer)
        try:
            for change in changes:
                click.echo(json.dumps(change.as_json(), ensure_ascii=False) if json_lines else describe(change))
        except KeyboardInterrupt:
            pass


def _until_checkpoint(consumer: Consumer) -> Iterator[Change]:
    while batch := consumer.poll():
        yield from batch


@click.command(name="spark-load")
@click.argument("channel")
@click.option("--out", required=True, metavar="DIR", help="output directory (local path, hdfs://, s3a://, ...)")
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL")
@click.option("--partitions", default=4, show_default=True, help="parallel JDBC reads (partitions on id)")
@click.option("--max-rows", type=int, help="split the load into increments of at most this many rows")
@click.option("--jdbc-url", metavar="URL", help="JDBC URL of the channel database, when executors reach the DC by "
              "another address [default: jdbc:mysql://DC_HOST:DC_PORT/CHANNEL]")
@click.option("--consumer", metavar="NAME", help="register the cursor under NAME in the channel's gate_consumer, so "
              "that retention keeps every row the load has not read")
@click.pass_obj
def spark_load(app: App, channel: str, out: str, master: str, partitions: int, max_rows: int | None,
               jdbc_url: str | None, consumer: str | None) -> None:
    """Append a channel's new changes to Parquet with Spark.

    Reads the rows after the cursor stored in DIR (_gate_cursor.json) up to the channel's checkpoint
    with partitioned JDBC reads, parses the JSON into columns and writes them as one increment,
    DIR/increment=FIRST-LAST/, partitioned by dbname, tablename and date; then moves the cursor.
    Run it as often as you like: a run that was killed at any point is completed or redone by the
    next one, without duplicates or gaps. Prints the increments written. --consumer NAME also
    stores the cursor in the channel's gate_consumer, so that retention waits for the load.

    Example:

    \b
        gate spark-load shop --out /data/gate/shop --partitions 8 --consumer spark:shop
        spark-submit --master spark://spark1:7077 --jars /usr/share/java/mariadb-java-client.jar \\
            "$(python -c 'import spark_readers.load as m; print(m.__file__)')" shop \\
            --out hdfs:///gate/shop --config /etc/gate/config.yaml
    """
    from spark_readers.load import load
    from spark_readers.session import ChannelSource, spark_job

    source = ChannelSource(app.dc, channel, jdbc_url)
    with spark_job(master) as spark:
        written = load(spark, source, out, partitions=partitions, max_rows=max_rows, consumer=consumer)
    rows = [{"increment": inc.name, "first_id": inc.first, "last_id": inc.last, "last_tid": inc.last_tid}
            for inc in written]
    if app.as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo("\n".join(f"wrote {r['increment']} (tid {r['last_tid']})" for r in rows) or "nothing new")


@click.command(name="spark-materialise")
@click.argument("channel")
@click.option("--out", required=True, metavar="DIR", help="the image directory (created, or brought up to date)")
@click.option("--increments", metavar="DIR", help="read the history from this --out directory of gate spark-load "
              "[default: read the channel in the DC]")
@click.option("--key", "keys", multiple=True, metavar="DB.TABLE=COL[,COL...]",
              help="primary key of a table whose CREATE TABLE is not in the history (repeatable)")
@click.option("--full", is_flag=True, help="rebuild the image from the whole history instead of applying the rows "
              "after its watermark")
@click.option("--heal", is_flag=True, help="rebuild the image from the whole history when its check of a VERIFY "
              "row finds a chunk that differs from the source")
@click.option("--database", metavar="NAME", help="also register the tables in Spark's catalog as NAME.DB_TABLE")
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL")
@click.pass_obj
def spark_materialise(app: App, channel: str, out: str, increments: str | None, keys: tuple[str, ...], full: bool,
                      heal: bool, database: str | None, master: str) -> None:
    """Build or update the current image of every captured table.

    Applies the change history in id order, by primary key: inserts, updates (a primary-key change
    moves the row), deletes, TRUNCATE, DROP TABLE, RENAME, ADD/DROP/CHANGE COLUMN and snapshots
    (SNAPSHOTSTART empties the table, SNAPSHOT rows upsert, SNAPSHOTEND marks it complete). An
    image that exists is updated with the rows after its watermark only; --full rebuilds it. The
    rows come from the DC (format("gate")), or from DIR written by 'gate spark-load CHANNEL'. Each
    source table is a Delta Lake table OUT/DB/TABLE, its columns typed as the typed stream's (a
    table whose CREATE TABLE is not in the history: strings, the DC's text); an update MERGEs the
    changed keys into it (or rewrites a table whose columns changed), then commits the image's
    state OUT/_gate, each as an idempotent Delta commit. The primary key comes from the table's
    CREATE TABLE or snapshot in the history, else from --key. Prints each table's row count;
    tables without a known key are listed and skipped. Each VERIFY row ('gate verify') the update
    applies is checked against the image: a chunk that differs is printed, kept in the image's
    state, and makes the exit status 5; --heal then rebuilds the image from the whole history.

    Example:

    \b
        gate spark-materialise shop --out /data/gate/shop_now
        gate spark-materialise shop --increments /data/gate/shop --out /data/gate/shop_now --key shop.legacy=id
        gate spark-materialise shop --out /data/gate/shop_now --database lake
        gate spark-materialise shop --out /data/gate/shop_now --heal
    """
    from spark_readers import image_verify
    from spark_readers.image import register_tables
    from spark_readers.materialise import materialise_job, parse_keys
    from spark_readers.session import spark_job

    check_identifier(channel, "Channel name")
    source = {"channel": channel, **({"config": str(app.config.path.resolve())} if app.config.path else
                                     {"host": app.dc.host, "port": str(app.dc.port), "user": app.dc.user})}
    with spark_job(master) as spark:
        result = materialise_job(spark, source, out, increments, parse_keys(keys), full, heal)
        if database is not None:
            register_tables(spark, out, database)
    if app.as_json:
        click.echo(json.dumps({"tables": result.tables, "skipped": result.skipped, "verified": result.verified},
                              indent=2))
    else:
        for table, count in sorted(result.tables.items()):
            click.echo(f"{table}: {count} rows")
        for table, reason in sorted(result.skipped.items()):
            click.echo(f"skipped {table}: {reason}", err=True)
        for line in image_verify.describe(result.verified, f"gate spark-materialise {channel} --out {out} --heal"):
            click.echo(line, err=True)
    if result.differs:
        click.get_current_context().exit(image_verify.DIFFERENT)
