"""Named exceptions. Every message says what is wrong and how to fix it, in one paragraph."""

from __future__ import annotations


class GateError(Exception):
    """Base of every error gate reports to a user; the CLI prints it and exits with ``exit_code``."""

    exit_code = 1


class ConfigError(GateError):
    """config.yaml is missing, malformed, or has unknown or invalid keys."""

    exit_code = 2


class InvalidIdentifier(GateError):
    """A name from the command line or config is not safe to use as a SQL identifier."""

    exit_code = 2


class InvalidValue(GateError):
    """A value from the command line is malformed or does not fit (address, pattern, time zone, position)."""

    exit_code = 2


class TlsFailed(GateError):
    """A TLS connection could not be made as its settings ask (certificate not verified, no TLS offered,
    unusable or unprotected certificate files); retrying cannot help, so, like :class:`ServerRefused`, its
    exit status tells systemd not to restart gate."""

    exit_code = 3


class NotConfirmed(GateError):
    """A destructive command was not confirmed."""


class ConnectionFailed(GateError):
    """A server could not be reached, or turned the connection away for now (too many connections)."""


class ServerRefused(GateError):
    """A server refused what gate asked in a way retrying cannot fix (a login, a privilege, a missing database
    or table, a read-only DC): an operator must act, so the exit status tells systemd not to restart gate."""

    exit_code = 3


class ChannelExists(GateError):
    """A channel with that name already exists on the DC server."""


class ChannelNotFound(GateError):
    """No channel with that name exists on the DC server."""


class SchemaVersionError(GateError):
    """The channel's DC database was created by an incompatible gate version."""


class ChannelDamaged(SchemaVersionError):
    """A channel's DC database lacks a table gate made in it (dropped by hand)."""


class PreflightFailed(GateError):
    """The source (or standby) is not configured for row-based change capture."""


class PositionPurged(GateError):
    """The resume position is no longer in the source's binary logs."""


class SandboxError(GateError):
    """A sandbox MariaDB server could not be created, started or stopped."""


class StreamLost(GateError):
    """The binlog connection broke; the reader reconnects from the last complete transaction."""


class FailoverError(GateError):
    """The switch to the standby could not be made exactly."""


class DrainAbandoned(GateError):
    """A second stop signal ended gate before its writers drained; a restart rewrites what was in flight."""


class RowTooLarge(GateError):
    """One row's INSERT is larger than the DC server's max_allowed_packet: it cannot be written until that is raised."""

    def __init__(self, row_id: int, size: int, max_packet: int) -> None:
        super().__init__(f"Row id {row_id} does not fit the DC server's max_allowed_packet: its INSERT is {size} bytes "
                         f"and the server accepts packets of {max_packet} bytes. Raise max_allowed_packet on the DC "
                         "server above the INSERT's size.")
        self.row_id = row_id
        self.size = size
        self.max_packet = max_packet


class UnsupportedEvent(GateError):
    """The binlog holds an event gate cannot translate without guessing; it stops instead of skipping it."""


class ChannelBusy(GateError):
    """Another gate process is running the channel."""


class Deposed(GateError):
    """Another gate process took the channel over (a standby, after this one went silent for longer than
    lease_seconds): this one writes nothing more and exits. Not restarted blindly: see docs/dba/several-hosts.md."""

    exit_code = 5


class MissingPrivileges(GateError):
    """The DC user lacks a privilege gate needs in a channel database."""


class DecoderFailed(GateError):
    """A decoder process died or could not decode a row event."""


class SnapshotReaderFailed(GateError):
    """A snapshot reader process died: the chunk it held would never come."""


class SourceDown(StreamLost):
    """The source stayed unreachable for the reader's whole ``retry_for``: time to fail over."""


class WriterFailed(GateError):
    """A writer hit an error that retrying cannot fix."""


class TransactionRefused(GateError):
    """A transaction changes a captured table in a form gate cannot capture. gate stops at its start, with
    everything before it written and checkpointed; ``gate channel skip`` moves past exactly it.

    ``tables``: the captured (db, table) pairs the refused event changes. ``transaction``: the refused
    transaction (GTID, start position, time), set by the pipeline once the checkpoint stands at its start."""

    def __init__(self, message: str, tables: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.tables = list(tables or [])
        self.transaction: dict[str, object] | None = None

    def stopped_at(self, transaction: dict[str, object], way_past: str) -> None:
        """The pipeline has checkpointed up to the refused ``transaction``: the message ends with the way past it."""
        self.transaction = transaction
        self.args = (f"{self.args[0]} {way_past}",)


class StatementFormatChange(TransactionRefused):
    """A captured table was changed by a statement logged as text (binlog_format STATEMENT or MIXED)."""


class PartialRowImage(TransactionRefused):
    """A row event of a captured table lacks columns (binlog_row_image MINIMAL or NOBLOB)."""


class UnhandledEvent(TransactionRefused):
    """The binlog holds an event of a type gate does not read (or a compressed event that does not
    decompress). Inside a transaction it refuses that transaction, as its base class says. Between
    transactions there is no transaction to skip: ``after`` is the end of the last transaction read (where
    the checkpoint stands once the writers drain) and ``way_past`` how to move the channel past the event alone."""

    def __init__(self, message: str, tables: list[tuple[str, str]] | None = None,
                 after: tuple[str | None, int | None] | None = None, way_past: str = "") -> None:
        super().__init__(message, tables)
        self.after = after
        self.way_past = way_past


class SkipRefused(GateError):
    """``gate channel skip`` was asked to skip a transaction that is not the one the channel stopped at."""


class UnsupportedServer(GateError):
    """The source or the DC is not a MariaDB server (e.g. MySQL): gate is tested on MariaDB only. Retrying
    cannot help, so the exit status tells systemd not to restart gate."""

    exit_code = 3


class RowMetadataMissing(TransactionRefused):
    """A table map of a captured table lacks the column names and labels (binlog_row_metadata below FULL)."""


class LoadError(GateError):
    """The output directory does not fit the channel or has been tampered with."""


class MaterialiseError(GateError):
    """The output directory is not one materialise may replace."""


class DeltaUnavailable(MaterialiseError):
    """The Spark session of an image job lacks Delta Lake: its jars, or the two settings that install it."""


class JvmSourceUnavailable(GateError):
    """The jar of the JVM format("gate") (spark_readers/jvm) is not built and cannot be built here."""


class MetricsPortBusy(GateError):
    """The address and port chosen for gate run's metrics and health endpoints cannot be listened on."""

    exit_code = 2


class MissingSecret(GateError):
    """An environment variable a column rule takes its key from is not set."""


class ColumnRuleRefused(GateError):
    """A column rule would remove or alter a primary-key column."""


class CursorExpiredError(GateError):
    """A reader asked for rows that retention has already removed from transfer_data."""

    def __init__(self, channel: str, cursor_id: int, purged_through: int, retention: str, restart: str = "") -> None:
        """``restart``: how this reader starts from the oldest kept row (default: the Python client's and
        gate tail's way)."""
        oldest = purged_through + 1
        restart = restart or f"Consumer.position({purged_through}), 'gate tail {channel} --from {oldest}'"
        super().__init__(
            f"Channel '{channel}' no longer holds the rows after cursor id {cursor_id}: retention has removed every "
            f"row up to id {purged_through}, so the oldest kept row is {oldest} ({retention}), and rows "
            f"{cursor_id + 1} to {purged_through} cannot be read again. Restart from the oldest kept row "
            f"({restart}) or rebuild from a new snapshot of the source tables; to keep it from happening again, "
            "register the reader as a named consumer (Consumer(..., name=...) with commit(), or the consumer name "
            "of the Spark loader or of format(\"gate\")), so that retention waits for it.")
        self.channel = channel
        self.cursor_id = cursor_id
        self.purged_through = purged_through


class CursorBeyondCheckpoint(InvalidValue):
    """A reader's cursor or first row lies beyond the channel's checkpoint: reading on would skip rows."""


class UnknownConsumer(GateError):
    """No consumer of that name is registered in the channel's gate_consumer table."""


class RowsMissing(GateError):
    """Rows of transfer_data below the checkpoint are gone although retention did not remove them."""


class TableSchemaChanged(GateError):
    """A typed change stream of one table reached a statement that changes the table's columns."""


class TableSchemaUnknown(GateError):
    """A typed change stream's table has no definition in the channel's kept rows."""


class VerifyTimedOut(GateError):
    """gate verify's --timeout passed before the verifications it waits for ended (they go on; exit 1)."""
