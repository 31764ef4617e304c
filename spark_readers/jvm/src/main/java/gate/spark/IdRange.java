package gate.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** Rows {@code lo < id <= hi}; of a typed read, whether to find its table's rows by the primary key. */
final class IdRange implements InputPartition {
    private static final long serialVersionUID = 1L;

    final long lo;
    final long hi;
    final boolean byKey; // a typed read: scan the primary key, most of the rows being the table's (TypedTable.byKey)

    IdRange(long lo, long hi, boolean byKey) {
        this.lo = lo;
        this.hi = hi;
        this.byKey = byKey;
    }

    /** {@code (lo, hi]} in at most {@code parts} ranges of nearly equal size (spark_readers.source.split). */
    static InputPartition[] split(long lo, long hi, int parts) {
        return split(lo, hi, parts, false);
    }

    static InputPartition[] split(long lo, long hi, int parts, boolean byKey) {
        long count = Math.min(parts, hi - lo);
        List<InputPartition> ranges = new ArrayList<>();
        for (long i = 0; i < count; i++) {
            ranges.add(new IdRange(lo + (hi - lo) * i / count, lo + (hi - lo) * (i + 1) / count, byKey));
        }
        return ranges.toArray(new InputPartition[0]);
    }

    @Override
    public String toString() {
        return "IdRange(" + lo + ", " + hi + "]" + (byKey ? " by key" : "");
    }
}
