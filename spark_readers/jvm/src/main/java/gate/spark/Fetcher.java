package gate.spark;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;

/**
 * The rows {@code lo < id <= hi} of transfer_data, read by a thread of their own into blocks of raw column values
 * while the task's thread parses the blocks before them: the socket is read, and the DC sends on, during the
 * parsing. One range query, streamed by Connector/J {@link #FETCH} rows at a time; at most {@link #QUEUED} blocks
 * wait, so a task holds about two fetches of rows, whatever the range's size.
 *
 * <p>Ids are gap-free below the checkpoint, so every row must carry the id after the one before it: a missing id
 * means retention removed rows before the query began (CursorExpiredError) or something else deleted them
 * (RowsMissing), never fewer rows read. The query reads one consistent view: retention that runs meanwhile
 * changes nothing in it. A typed read reads one table's rows of the range (the DC's index on dbname, tablename),
 * whose ids have gaps: once they are read, retention having removed rows of the range (which the view may have
 * missed) raises CursorExpiredError.
 */
final class Fetcher implements Runnable {
    static final int FETCH = 10_000;
    static final int BLOCK = 1_000;
    static final int QUEUED = FETCH / BLOCK;
    private static final String QUERY = "SELECT id, tid, dbname, tablename, UNIX_TIMESTAMP(create_time), "
        + "instance_name, optype, data FROM transfer_data%s WHERE id > ? AND id <= ?%s ORDER BY id";
    private static final String TABLE = " AND dbname = ? AND tablename = ?";

    /** Up to {@link #BLOCK} rows' columns as the query gives them; {@code failure} ends the range with an error,
     * a block of no rows and no failure ends it. */
    static final class Block {
        final long[] id = new long[BLOCK];
        final long[] tid = new long[BLOCK];
        final byte[][] dbname = new byte[BLOCK][];
        final byte[][] tablename = new byte[BLOCK][];
        final long[] seconds = new long[BLOCK];
        final byte[][] instance = new byte[BLOCK][];
        final byte[][] optype = new byte[BLOCK][];
        final byte[][] data = new byte[BLOCK][];
        int size;
        RuntimeException failure;
    }

    private final Login login;
    private final long lo;
    private final long hi;
    private final String[] table; // a typed read's db and table name; null: every row
    private final boolean byKey; // a typed read by a scan of the primary key (else by the index on the names)
    private final BlockingQueue<Block> queue = new ArrayBlockingQueue<>(QUEUED);
    private final Thread thread;
    private volatile Connection conn;

    Fetcher(Login login, long lo, long hi) {
        this(login, lo, hi, null, false);
    }

    /** The rows of table {@code db.name} only, found by the primary key ({@code byKey}) or the DC's index on the
     * names. */
    Fetcher(Login login, long lo, long hi, String db, String name, boolean byKey) {
        this(login, lo, hi, new String[] {db, name}, byKey);
    }

    private Fetcher(Login login, long lo, long hi, String[] table, boolean byKey) {
        this.login = login;
        this.lo = lo;
        this.hi = hi;
        this.table = table;
        this.byKey = byKey;
        this.thread = new Thread(this, "gate-fetch-" + login.channel + "-" + lo + "-" + hi);
        thread.setDaemon(true);
        thread.start();
    }

    /** The next block (empty at the end of the range); a failure of the reading thread is thrown here. */
    Block take() {
        try {
            Block block = queue.take();
            if (block.failure != null) {
                throw block.failure;
            }
            return block;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Errors.DcFailed("Channel '" + login.channel + "': reading rows up to " + hi + " was interrupted",
                e);
        }
    }

    @Override
    public void run() {
        Block end = new Block();
        try {
            conn = login.connect();
            read();
        } catch (RuntimeException e) {
            end.failure = e;
        } catch (SQLException e) {
            end.failure = new Errors.DcFailed("Channel '" + login.channel + "': reading rows up to " + hi
                + " failed: " + e.getMessage(), e);
        } catch (InterruptedException e) {
            return; // the task was closed early: nobody takes the rest
        }
        try {
            queue.put(end);
        } catch (InterruptedException e) {
            // the task was closed early
        }
    }

    private void read() throws SQLException, InterruptedException {
        try (PreparedStatement statement = conn.prepareStatement(String.format(QUERY,
                byKey ? " FORCE INDEX (PRIMARY)" : "", table == null ? "" : TABLE),
                ResultSet.TYPE_FORWARD_ONLY, ResultSet.CONCUR_READ_ONLY)) {
            statement.setFetchSize(FETCH); // Connector/J streams the result instead of holding all of it
            statement.setLong(1, lo);
            statement.setLong(2, hi);
            if (table != null) {
                statement.setString(3, table[0]);
                statement.setString(4, table[1]);
            }
            long last = lo;
            long found = hi + 1; // the id after a gap
            try (ResultSet rows = statement.executeQuery()) {
                Block block = new Block();
                while (rows.next()) {
                    long id = rows.getLong(1);
                    if (id != last + 1 && table == null) {
                        found = id;
                        break;
                    }
                    int i = block.size++;
                    block.id[i] = id;
                    block.tid[i] = rows.getLong(2);
                    block.dbname[i] = rows.getBytes(3);
                    block.tablename[i] = rows.getBytes(4);
                    block.seconds[i] = rows.getLong(5);
                    block.instance[i] = rows.getBytes(6);
                    block.optype[i] = rows.getBytes(7);
                    block.data[i] = rows.getBytes(8);
                    last = id;
                    if (block.size == BLOCK) {
                        queue.put(block);
                        block = new Block();
                    }
                }
                if (block.size > 0) {
                    queue.put(block);
                }
            }
            if (table != null) {
                Channel.requireKept(conn, login.channel, lo);
            } else if (last != hi) {
                missing(last, found);
            }
        }
    }

    /** Refuse the range: the rows after {@code last} and before {@code found} are not there. */
    private void missing(long last, long found) throws SQLException {
        Channel.requireKept(conn, login.channel, last);
        String rows = found == last + 2 ? "row " + (last + 1) + " is" : "rows " + (last + 1) + " to " + (found - 1)
            + " are";
        throw new Errors.RowsMissing("Channel '" + login.channel + "': " + rows + " not there, yet retention has "
            + "removed none of them: rows of transfer_data below the checkpoint were deleted by other means. Rebuild "
            + "from a new snapshot of the source tables.");
    }

    /** Stop reading (at once if the range was not read to its end) and close the connection. */
    void close() {
        if (thread.isAlive()) {
            thread.interrupt();
            Connection open = conn;
            if (open != null) {
                try {
                    open.abort(Runnable::run); // a streamed result would otherwise be read to its end first
                } catch (SQLException e) {
                    // the connection is being dropped anyway
                }
            }
            try {
                thread.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        Connection open = conn;
        if (open != null) {
            try {
                open.close();
            } catch (SQLException e) {
                // the task is over: a connection that fails to close changes nothing
            }
        }
    }
}
