package gate.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A channel's transfer_data as a table: batch reads from startingId (default: the oldest kept row) to endingId
 * (default: the checkpoint when the query is planned), and micro-batch streams ({@link GateStream}); with
 * {@code typed}, one table's changes as typed rows ({@link TypedReader}), never read across a statement that
 * changes the table's columns. Each scan Spark builds (one per action) is a GateTable of its own that plans its
 * partitions once: Spark asks the scan for them twice while it plans an action (the second time from a copy of its
 * plan), and a typed read's search for statements reads every row of its range. */
final class GateTable implements SupportsRead, ScanBuilder, Scan, Batch {
    private final Settings settings;
    private final TypedTable typed; // null: every row, untyped
    private final StructType schema;
    private InputPartition[] partitions; // once planned

    GateTable(Settings settings, TypedTable typed) {
        this.settings = settings;
        this.typed = typed;
        this.schema = typed == null ? Rows.SCHEMA : typed.schema();
    }

    @Override
    public String name() {
        return "gate:" + settings.login.channel;
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new GateTable(settings, typed);
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return schema;
    }

    @Override
    public String description() {
        return "gate channel " + settings.login + (typed == null ? "" : ", table " + typed.table()); // no password
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        if (typed != null && settings.consumer == null) {
            throw new Errors.InvalidValue("A typed stream (option \"table\") needs the option consumer, e.g. "
                + ".option(\"consumer\", \"orders_stream\"): a restarted query finds its schema at the position stored "
                + "under that name.");
        }
        return new GateStream(settings, typed);
    }

    @Override
    public InputPartition[] planInputPartitions() {
        if (partitions == null) {
            partitions = plan();
        }
        return partitions;
    }

    private InputPartition[] plan() {
        try (Channel dc = new Channel(settings.login)) {
            long start = dc.start(settings.startingId);
            long checkpoint = dc.checkpoint();
            long end = settings.endingId == null ? checkpoint : settings.endingId;
            if (end > checkpoint) {
                throw new Errors.InvalidValue("endingId=" + end + " is above the checkpoint of channel '"
                    + settings.login.channel + "', " + checkpoint + ": rows above it may be incomplete.");
            }
            if (typed == null || start >= end) {
                return IdRange.split(start, end, settings.partitions);
            }
            boolean byKey = typed.byKey(dc, start, end);
            TableSchema.Change change = typed.change(dc, start, end, byKey, settings.partitions);
            if (change != null) {
                throw new Errors.TableSchemaChanged("The rows to read change the columns of " + typed.table() + " at "
                    + typed.describe(change) + ". Read up to it (endingId=" + (change.id() - 1) + "), then from it "
                    + "(startingId=" + change.id() + ") with its new schema.");
            }
            return IdRange.split(start, end, settings.partitions, byKey);
        }
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return typed == null ? new RangeReader.Factory(settings.login) : new TypedReader.Factory(settings.login, typed);
    }
}
