package gate.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/**
 * readStream.format("gate"): micro-batches of whole transactions up to the checkpoint. An offset {@code {"id": N}}
 * means every row up to N has been read; N is never above the checkpoint and always a transaction's last row. The
 * offset JSON is the Python source's, so either source continues a checkpointLocation the other wrote. A typed
 * stream ({@code typed}) ends a micro-batch before a statement that changes its table's columns, and the next one
 * stops the query with TableSchemaChanged, its position stored for its consumer: started again, the query takes
 * its schema there and continues.
 */
final class GateStream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    private final Settings settings;
    private final TypedTable typed; // null: every row, untyped
    private Long target; // Trigger.AvailableNow: the checkpoint when the query started
    private long[] planned; // a typed stream: the last micro-batch latestOffset planned, start, end, 1 if by key

    GateStream(Settings settings, TypedTable typed) {
        this.settings = settings;
        this.typed = typed;
    }

    /** An offset: every row up to {@code id} has been read. */
    static final class IdOffset extends Offset {
        final long id;

        IdOffset(long id) {
            this.id = id;
        }

        @Override
        public String json() {
            return "{\"id\": " + id + "}"; // as Python's json.dumps writes the Python source's offsets
        }
    }

    private static long id(Offset offset) {
        return offset instanceof IdOffset ? ((IdOffset) offset).id : parse(offset.json()).id;
    }

    private static IdOffset parse(String json) {
        try {
            JsonNode id = MAPPER.readTree(json).get("id");
            if (id == null || !id.canConvertToLong()) {
                throw new Errors.InvalidValue("The offset " + json + " in the checkpointLocation is not a format(\"gate\") "
                    + "offset ({\"id\": N}). Start the query with a new checkpointLocation.");
            }
            return new IdOffset(id.asLong());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public Offset initialOffset() {
        try (Channel dc = new Channel(settings.login)) {
            long start = dc.start(settings.startingId);
            if (typed != null) {
                requireSameColumns(dc, start);
            }
            if (settings.consumer != null) {
                dc.register(settings.consumer, start);
            }
            return new IdOffset(start);
        }
    }

    /** A new typed query must start where its table has the columns of the consumer's stored position. */
    private void requireSameColumns(Channel dc, long start) {
        java.util.List<TableSchema.Column> columns;
        try {
            columns = TypedTable.columnsAt(dc, settings.login.channel, typed.db, typed.name, start, dc.checkpoint(),
                settings.partitions);
        } catch (java.sql.SQLException e) {
            throw dc.failed("reading the columns of " + typed.table(), e);
        }
        if (!TableSchema.same(columns, typed.columns)) {
            throw new Errors.TableSchemaChanged("This new query starts after row " + start + ", where "
                + typed.table() + " has other columns than the " + typed.names() + " of the position consumer '"
                + settings.consumer + "' stored. Give a new query its own consumer name (or drop the old one), or "
                + "startingId after that position.");
        }
    }

    @Override
    public Offset deserializeOffset(String json) {
        return parse(json);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return settings.maxRows == null ? ReadLimit.allAvailable() : ReadLimit.maxRows(settings.maxRows);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        try (Channel dc = new Channel(settings.login)) {
            target = dc.checkpoint();
        }
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("format(\"gate\") plans micro-batches with latestOffset(start, limit)");
    }

    @Override
    public Offset latestOffset(Offset startOffset, ReadLimit limit) {
        long after = id(startOffset);
        try (Channel dc = new Channel(settings.login)) {
            long checkpoint = dc.checkpoint();
            dc.requireAtMostCheckpoint(after, checkpoint, "The query's offset, row " + after + ",", "Was the channel "
                + "dropped and created again? Start the query with a new checkpointLocation.");
            dc.checkCursor(after);
            long ceiling = target == null ? checkpoint : Math.min(checkpoint, Math.max(target, after));
            long want = limit instanceof ReadMaxRows ? after + ((ReadMaxRows) limit).maxRows() : ceiling;
            long end = dc.transactionEnd(after, want, ceiling);
            if (typed == null || end <= after) {
                return new IdOffset(end);
            }
            boolean byKey = typed.byKey(dc, after, end);
            TableSchema.Change change = typed.change(dc, after, end, byKey, settings.partitions);
            if (change == null || change.id() - 1 > after) {
                end = change == null ? end : change.id() - 1; // a statement is a transaction of its own
                planned = new long[] {after, end, byKey ? 1 : 0};
                return new IdOffset(end);
            }
            dc.register(settings.consumer, after);
            throw new Errors.TableSchemaChanged("The typed stream of " + typed.table() + " stops at "
                + typed.describe(change) + ", which changes its columns. Every row before it has been read (up to "
                + after + ", stored for consumer '" + settings.consumer + "'); start the query again with the same "
                + "checkpointLocation and it continues from row " + change.id() + " with the new schema.");
        }
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        long lo = id(start);
        long hi = id(end);
        if (typed == null || lo >= hi) {
            return IdRange.split(lo, hi, settings.partitions);
        }
        if (planned == null || planned[0] != lo || planned[1] != hi) { // a micro-batch of the offset log, after a restart
            try (Channel dc = new Channel(settings.login)) {
                planned = new long[] {lo, hi, typed.byKey(dc, lo, hi) ? 1 : 0};
            }
        }
        return IdRange.split(lo, hi, settings.partitions, planned[2] == 1);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return typed == null ? new RangeReader.Factory(settings.login) : new TypedReader.Factory(settings.login, typed);
    }

    @Override
    public void commit(Offset end) {
        if (settings.consumer != null) {
            try (Channel dc = new Channel(settings.login)) {
                dc.register(settings.consumer, id(end));
            }
        }
    }

    @Override
    public void stop() {
    }
}
