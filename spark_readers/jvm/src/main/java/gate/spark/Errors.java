package gate.spark;

/** The errors of format("gate"), named and worded as the Python source's (gate.common.errors). */
public final class Errors {
    private Errors() {
    }

    /** A bad option or configuration value: the message names the problem and the fix. */
    public static class InvalidValue extends IllegalArgumentException {
        public InvalidValue(String message) {
            super(message);
        }
    }

    /** gate's config file cannot give the DC's login. */
    public static class ConfigError extends IllegalArgumentException {
        public ConfigError(String message) {
            super(message);
        }
    }

    /** A read starts on or after a row beyond the checkpoint. */
    public static class CursorBeyondCheckpoint extends InvalidValue {
        public CursorBeyondCheckpoint(String message) {
            super(message);
        }
    }

    /** Rows asked for were removed by retention. */
    public static class CursorExpiredError extends IllegalStateException {
        public CursorExpiredError(String channel, long cursor, long purged, String retention) {
            super("Channel '" + channel + "' no longer holds the rows after cursor id " + cursor + ": retention has "
                + "removed every row up to id " + purged + ", so the oldest kept row is " + (purged + 1) + " ("
                + retention + "), and rows " + (cursor + 1) + " to " + purged + " cannot be read again. Restart "
                + "from the oldest kept row (option startingId=" + (purged + 1) + ", or a new checkpointLocation) "
                + "or rebuild from a new snapshot of the source tables; to keep it from happening again, register "
                + "the reader as a named consumer (Consumer(..., name=...) with commit(), or the consumer name of "
                + "the Spark loader or of format(\"gate\")), so that retention waits for it.");
        }
    }

    /** Rows below the checkpoint are gone although retention did not remove them. */
    public static class RowsMissing extends IllegalStateException {
        public RowsMissing(String message) {
            super(message);
        }
    }

    /** A connection or query on the DC failed. */
    public static class DcFailed extends RuntimeException {
        public DcFailed(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /** A typed read (option table) meets a statement that changes the table's columns, or rows of other columns. */
    public static class TableSchemaChanged extends IllegalStateException {
        public TableSchemaChanged(String message) {
            super(message);
        }
    }

    /** The kept rows define no such table. */
    public static class TableSchemaUnknown extends IllegalStateException {
        public TableSchemaUnknown(String message) {
            super(message);
        }
    }

    /** The reader's DC user lacks a privilege the read needs. */
    public static class MissingPrivileges extends IllegalStateException {
        public MissingPrivileges(String message) {
            super(message);
        }
    }
}
