package gate.spark;

import java.io.IOException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/** An executor's read of one {@link IdRange}: the rows {@link Fetcher} reads, parsed by {@link UnsafeRows}. */
final class RangeReader implements PartitionReader<InternalRow> {
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

    private final Fetcher fetcher;
    private final UnsafeRows parser = new UnsafeRows();
    private Fetcher.Block block;
    private int next;
    private InternalRow row;

    RangeReader(Login login, long lo, long hi) {
        this.fetcher = lo < hi ? new Fetcher(login, lo, hi) : null;
    }

    @Override
    public boolean next() throws IOException {
        if (fetcher == null) {
            return false;
        }
        if (block == null || next == block.size) {
            if (block != null && block.size == 0) {
                return false;
            }
            block = fetcher.take();
            next = 0;
            if (block.size == 0) {
                return false;
            }
        }
        Fetcher.Block b = block;
        int i = next++;
        row = parser.row(b.id[i], b.tid[i], b.dbname[i], b.tablename[i], b.seconds[i], b.instance[i], b.optype[i],
            b.data[i]);
        return true;
    }

    @Override
    public InternalRow get() {
        return row;
    }

    @Override
    public void close() {
        if (fetcher != null) {
            fetcher.close();
        }
    }
}
