package gate.spark;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

/** The driver's small queries on a channel database (one connection, closed by close()), and the checks every
 * reader of it makes (spark_readers.source.Channel and gate.common.dc). */
final class Channel implements AutoCloseable {
    static final int ER_TABLE_ACCESS_DENIED = 1142;

    private final Login login;
    private final Connection conn;

    Channel(Login login) {
        this.login = login;
        this.conn = login.connect();
    }

    /** The connection, for the typed reads' own queries (TypedTable). */
    Connection conn() {
        return conn;
    }

    /** A connection of its own to the same channel, for work done beside this one's. */
    Channel another() {
        return new Channel(login);
    }

    Errors.DcFailed failed(String what, SQLException e) {
        return new Errors.DcFailed("Channel '" + login.channel + "': " + what + " failed: " + e.getMessage(), e);
    }

    @Override
    public void close() {
        try {
            conn.close();
        } catch (SQLException e) {
            // closing a connection that is gone already changes nothing
        }
    }

    private Long one(String sql, Object... args) throws SQLException {
        try (PreparedStatement statement = conn.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                statement.setObject(i + 1, args[i]);
            }
            try (ResultSet rs = statement.executeQuery()) {
                return rs.next() ? rs.getLong(1) : null;
            }
        }
    }

    long checkpoint() {
        try {
            return one("SELECT id FROM transfer_checkpoint");
        } catch (SQLException e) {
            throw failed("reading the checkpoint", e);
        }
    }

    /** The tid of row {@code id} (0 for 0 or a row retention removed). */
    long tid(long id) {
        try {
            Long tid = one("SELECT tid FROM transfer_data WHERE id = ?", id);
            return tid == null ? 0 : tid;
        } catch (SQLException e) {
            throw failed("reading the tid of row " + id, e);
        }
    }

    /** The highest id retention has removed (gate.common.dc.purged_through). */
    static long purgedThrough(Connection conn, String channel) throws SQLException {
        try (PreparedStatement statement = conn.prepareStatement(
                "SELECT value FROM gate_meta WHERE name = 'purged_through'");
             ResultSet rs = statement.executeQuery()) {
            return rs.next() ? Long.parseLong(rs.getString(1).strip()) : 0;
        } catch (SQLException e) {
            if (e.getErrorCode() != ER_TABLE_ACCESS_DENIED) {
                throw e;
            }
        }
        try (PreparedStatement statement = conn.prepareStatement(
                "SELECT c.id, (SELECT MIN(id) FROM transfer_data) FROM transfer_checkpoint c");
             ResultSet rs = statement.executeQuery()) {
            rs.next();
            long checkpoint = rs.getLong(1);
            long oldest = rs.getLong(2);
            return rs.wasNull() ? checkpoint : Math.min(checkpoint, oldest - 1);
        }
    }

    /** The channel's retention setting in words (gate.common.dc.describe_retention). */
    static String describeRetention(Connection conn, String channel) throws SQLException {
        String days;
        try (PreparedStatement statement = conn.prepareStatement(
                "SELECT value FROM gate_settings WHERE name = 'retain_days'");
             ResultSet rs = statement.executeQuery()) {
            days = rs.next() ? rs.getString(1).strip() : "0";
        } catch (SQLException e) {
            if (e.getErrorCode() != ER_TABLE_ACCESS_DENIED) {
                throw e;
            }
            return "'gate channel show " + channel + "' shows its retain_days";
        }
        if (days.equals("0")) {
            return "the channel's retention is off now (retain_days 0)";
        }
        return "the channel keeps rows for " + days + " days, and longer until every registered consumer has read "
            + "them";
    }

    /** Refuse to read the rows after {@code after} if retention has removed some of them. */
    static void requireKept(Connection conn, String channel, long after) throws SQLException {
        long purged = purgedThrough(conn, channel);
        if (after < purged) {
            throw new Errors.CursorExpiredError(channel, after, purged, describeRetention(conn, channel));
        }
    }

    void checkCursor(long after) {
        try {
            requireKept(conn, login.channel, after);
        } catch (SQLException e) {
            throw failed("reading what retention removed", e);
        }
    }

    /** Refuse to read on after row {@code after} beyond the checkpoint (gate.common.dc.require_at_most_checkpoint). */
    void requireAtMostCheckpoint(long after, long checkpoint, String what, String fix) {
        if (after > checkpoint) {
            String skipped = after == checkpoint + 1 ? "row " + after : "rows " + (checkpoint + 1) + " to " + after;
            throw new Errors.CursorBeyondCheckpoint(what + " is beyond the checkpoint of channel '" + login.channel
                + "' (row " + checkpoint + "): rows above the checkpoint may be missing or incomplete, and reading on "
                + "from there would skip " + skipped + " without a word. " + fix);
        }
    }

    /** Store {@code id} as the cursor of {@code consumer} in gate_consumer (retention keeps the rows after it). */
    void register(String consumer, long id) {
        try (PreparedStatement statement = conn.prepareStatement("INSERT INTO gate_consumer (name, id, tid) VALUES "
                + "(?, ?, ?) ON DUPLICATE KEY UPDATE id = VALUES(id), tid = VALUES(tid)")) {
            statement.setString(1, consumer);
            statement.setLong(2, id);
            statement.setLong(3, tid(id));
            statement.executeUpdate();
        } catch (SQLException e) {
            throw failed("registering the consumer " + consumer, e);
        }
    }

    /** The offset before the first row to read: startingId - 1, by default the last removed row. */
    long start(Long startingId) {
        long after;
        try {
            after = startingId == null ? purgedThrough(conn, login.channel) : startingId - 1;
        } catch (SQLException e) {
            throw failed("reading what retention removed", e);
        }
        long checkpoint = checkpoint();
        requireAtMostCheckpoint(after, checkpoint, "Option startingId=" + startingId, "Give startingId "
            + (checkpoint + 1) + " or less (" + (checkpoint + 1) + ": only the rows still to come).");
        checkCursor(after);
        return after;
    }

    /** The end of a batch after {@code start} holding at most {@code want - start} rows where it can: the last row
     * of a transaction (spark_readers.source.transaction_end, by bisection on tids). */
    long transactionEnd(long start, long want, long checkpoint) {
        if (want >= checkpoint) {
            return checkpoint;
        }
        long tid = tid(want + 1);
        if (tid(want) != tid) {
            return want;
        }
        long lo = start + 1;
        long hi = want;
        while (lo < hi) {
            long mid = (lo + hi) / 2;
            if (tid(mid) >= tid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if (lo - 1 > start) {
            return lo - 1;
        }
        lo = want + 1;
        hi = checkpoint;
        while (lo < hi) {
            long mid = (lo + hi + 1) / 2;
            if (tid(mid) == tid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        return lo;
    }
}
