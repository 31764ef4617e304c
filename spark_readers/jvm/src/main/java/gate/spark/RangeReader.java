package gate.spark;

import java.io.IOException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/**
 * An executor's read of one {@link IdRange}: primary-key range queries of {@link #CHUNK} rows, each held in memory
 * (so a task holds one chunk at most), parsed by {@link Rows}. Ids are gap-free below the checkpoint: a chunk with
 * fewer rows than ids means retention removed them meanwhile (CursorExpiredError) or something else deleted them
 * (RowsMissing), never fewer rows read.
 */
final class RangeReader implements PartitionReader<InternalRow> {
    static final int CHUNK = 10_000;
    private static final String QUERY = "SELECT id, tid, dbname, tablename, UNIX_TIMESTAMP(create_time), "
        + "instance_name, optype, data FROM transfer_data WHERE id > ? AND id <= ? ORDER BY id";

    /** What the executors get: the login (password included, never shown) and nothing else. */
    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Login login;

        Factory(Login login) {
            this.login = login;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            IdRange range = (IdRange) partition;
            return new RangeReader(login, range.lo, range.hi);
        }
    }

    private final Login login;
    private final long hi;
    private long next; // the first id of the next chunk - 1
    private Connection conn;
    private PreparedStatement statement;
    private ResultSet rows;
    private InternalRow row;

    RangeReader(Login login, long lo, long hi) {
        this.login = login;
        this.next = lo;
        this.hi = hi;
    }

    @Override
    public boolean next() throws IOException {
        try {
            while (rows == null || !rows.next()) {
                if (next >= hi) {
                    return false;
                }
                query();
            }
            row = Rows.row(rows.getLong(1), rows.getLong(2), rows.getBytes(3), rows.getBytes(4), rows.getLong(5),
                rows.getBytes(6), rows.getString(7), rows.getBytes(8));
            return true;
        } catch (SQLException e) {
            throw new Errors.DcFailed("Channel '" + login.channel + "': reading rows up to " + hi + " failed: "
                + e.getMessage(), e);
        }
    }

    /** Read the next chunk; refuse it unless it holds every row of its ids. */
    private void query() throws SQLException {
        if (conn == null) {
            conn = login.connect();
            statement = conn.prepareStatement(QUERY, ResultSet.TYPE_SCROLL_INSENSITIVE, ResultSet.CONCUR_READ_ONLY);
        }
        if (rows != null) {
            rows.close();
        }
        long first = next;
        long last = Math.min(first + CHUNK, hi);
        statement.setLong(1, first);
        statement.setLong(2, last);
        rows = statement.executeQuery();
        rows.last();
        int count = rows.getRow();
        rows.beforeFirst();
        if (count != last - first) { // retention removed some while this query read them
            Channel.requireKept(conn, login.channel, first);
            throw new Errors.RowsMissing("Channel '" + login.channel + "': rows " + (first + 1) + " to " + last
                + " are not all there (" + count + " of " + (last - first) + "), yet retention has removed none of "
                + "them: rows of transfer_data below the checkpoint were deleted by other means. Rebuild from a new "
                + "snapshot of the source tables.");
        }
        next = last;
    }

    @Override
    public InternalRow get() {
        return row;
    }

    @Override
    public void close() throws IOException {
        if (conn != null) {
            try {
                conn.close();
            } catch (SQLException e) {
                // the task is over: a connection that fails to close changes nothing
            }
        }
    }
}
