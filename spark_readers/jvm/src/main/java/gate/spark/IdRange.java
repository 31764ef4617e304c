package gate.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** Rows {@code lo < id <= hi}. */
final class IdRange implements InputPartition {
    private static final long serialVersionUID = 1L;

    final long lo;
    final long hi;

    IdRange(long lo, long hi) {
        this.lo = lo;
        this.hi = hi;
    }

    /** {@code (lo, hi]} in at most {@code parts} ranges of nearly equal size (spark_readers.source.split). */
    static InputPartition[] split(long lo, long hi, int parts) {
        long count = Math.min(parts, hi - lo);
        List<InputPartition> ranges = new ArrayList<>();
        for (long i = 0; i < count; i++) {
            ranges.add(new IdRange(lo + (hi - lo) * i / count, lo + (hi - lo) * (i + 1) / count));
        }
        return ranges.toArray(new InputPartition[0]);
    }

    @Override
    public String toString() {
        return "IdRange(" + lo + ", " + hi + "]";
    }
}
