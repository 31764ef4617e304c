import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.ChangeEvent;
import java.io.ObjectOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * The benchmark's Debezium peer: Debezium's MySQL connector in its embedded engine reads a binlog range
 * from a given file and position, and a consumer counts its row change records (nothing else).
 *
 * <p>Arguments: HOST PORT USER PASSWORD DATABASE START_FILE START_POS START_GTIDS ROWS WORKDIR. It writes the start
 * position into a Kafka Connect offset file, so the engine streams from there; "recovery" snapshot mode
 * reads the tables' current structure into an in-memory schema history first (the range has no DDL). It
 * prints "started T" before the engine runs, "rows N T" at every tenth of ROWS, and exits when ROWS row
 * records were counted (T: seconds since the epoch).
 */
public final class DebeziumCount {
    private static final String NAME = "bench";

    private DebeziumCount() {
    }

    private static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    /** The start position as Kafka Connect's FileOffsetBackingStore stores it: JSON key and value bytes. */
    private static void writeOffset(Path file, String binlog, long pos, String gtids) throws Exception {
        HashMap<byte[], byte[]> offsets = new HashMap<>();
        offsets.put(("[\"" + NAME + "\",{\"server\":\"" + NAME + "\"}]").getBytes(StandardCharsets.UTF_8),
                ("{\"file\":\"" + binlog + "\",\"pos\":" + pos + ",\"gtids\":\"" + gtids + "\"}").getBytes(StandardCharsets.UTF_8));
        try (ObjectOutputStream out = new ObjectOutputStream(Files.newOutputStream(file))) {
            out.writeObject(offsets);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 10) {
            System.err.println("usage: DebeziumCount HOST PORT USER PASSWORD DATABASE START_FILE START_POS START_GTIDS ROWS WORKDIR");
            System.exit(2);
        }
        long rows = Long.parseLong(args[8]);
        Path workdir = Path.of(args[9]);
        Path offsets = workdir.resolve("debezium-offsets.dat");
        writeOffset(offsets, args[5], Long.parseLong(args[6]), args[7]);

        Properties props = new Properties();
        props.setProperty("name", NAME);
        props.setProperty("topic.prefix", NAME);
        props.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
        props.setProperty("database.hostname", args[0]);
        props.setProperty("database.port", args[1]);
        props.setProperty("database.user", args[2]);
        props.setProperty("database.password", args[3]);
        props.setProperty("database.server.id", "5151");
        props.setProperty("database.include.list", args[4]);
        props.setProperty("snapshot.mode", "recovery");
        props.setProperty("snapshot.locking.mode", "none");
        props.setProperty("include.schema.changes", "false");
        props.setProperty("tombstones.on.delete", "false");
        props.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        props.setProperty("offset.storage.file.filename", offsets.toString());
        props.setProperty("offset.flush.interval.ms", "60000");
        props.setProperty("schema.history.internal", "io.debezium.relational.history.MemorySchemaHistory");

        long step = Math.max(1, rows / 10);
        long[] counted = {0};
        DebeziumEngine<ChangeEvent<SourceRecord, SourceRecord>> engine = DebeziumEngine.create(Connect.class)
                .using(props)
                .notifying((List<ChangeEvent<SourceRecord, SourceRecord>> records,
                            DebeziumEngine.RecordCommitter<ChangeEvent<SourceRecord, SourceRecord>> committer) -> {
                    for (ChangeEvent<SourceRecord, SourceRecord> event : records) {
                        if (event.value() != null && event.value().value() != null) {  // a row change (no tombstones, no schema changes)
                            counted[0]++;
                            if (counted[0] % step == 0 || counted[0] == rows) {
                                System.out.println("rows " + counted[0] + " " + now());
                            }
                        }
                        committer.markProcessed(event);
                    }
                    committer.markBatchFinished();
                    if (counted[0] >= rows) {
                        System.out.flush();
                        Runtime.getRuntime().halt(0);
                    }
                })
                .using((success, message, error) -> {
                    if (!success) {
                        System.err.println("debezium engine stopped: " + message);
                        if (error != null) {
                            error.printStackTrace();
                        }
                        Runtime.getRuntime().halt(1);
                    }
                })
                .build();
        System.out.println("started " + now());
        engine.run();
        System.err.println("debezium engine returned after " + counted[0] + " of " + rows + " rows");
        System.exit(1);
    }
}
