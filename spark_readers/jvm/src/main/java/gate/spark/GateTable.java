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
 * (default: the checkpoint when the query is planned), and micro-batch streams ({@link GateStream}). */
final class GateTable implements SupportsRead, ScanBuilder, Scan, Batch {
    private final Settings settings;

    GateTable(Settings settings) {
        this.settings = settings;
    }

    @Override
    public String name() {
        return "gate:" + settings.login.channel;
    }

    @Override
    public StructType schema() {
        return Rows.SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return this;
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return Rows.SCHEMA;
    }

    @Override
    public String description() {
        return "gate channel " + settings.login; // Login.toString leaves the password out
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return new GateStream(settings);
    }

    @Override
    public InputPartition[] planInputPartitions() {
        long start;
        long checkpoint;
        try (Channel dc = new Channel(settings.login)) {
            start = dc.start(settings.startingId);
            checkpoint = dc.checkpoint();
        }
        long end = settings.endingId == null ? checkpoint : settings.endingId;
        if (end > checkpoint) {
            throw new Errors.InvalidValue("endingId=" + end + " is above the checkpoint of channel '"
                + settings.login.channel + "', " + checkpoint + ": rows above it may be incomplete.");
        }
        return IdRange.split(start, end, settings.partitions);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new RangeReader.Factory(settings.login);
    }
}
