package gate.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.ZoneId;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Pattern;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * With the option table: what the executors need to type one table's rows (its columns, the channel's time zone and
 * binary format, the columns a column rule turns into text of another kind), and the driver's work on it: the
 * columns where the query starts, and the statements that change them (spark_readers.typed, in Java).
 */
final class TypedTable implements Serializable {
    private static final long serialVersionUID = 1L;
    static final List<String> META = List.of("_op", "_id", "_tid", "_ts", "_before", "_invalid");
    private static final Pattern IDENTIFIER = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,63}");
    private static final int SAMPLE = 1_000; // the table's rows byKey looks at
    private static final long PIECE = 50_000; // rows: inPieces splits a range of at least twice that
    private static final int MAX_PIECES = 8;

    final String db;
    final String name;
    final List<TableSchema.Column> columns;
    final String timezone;
    final String binaryFormat;
    final Set<String> asText; // folded names of the columns kept as the DC's text

    TypedTable(String db, String name, List<TableSchema.Column> columns, String timezone, String binaryFormat,
               Set<String> asText) {
        this.db = db;
        this.name = name;
        this.columns = columns;
        this.timezone = timezone;
        this.binaryFormat = binaryFormat;
        this.asText = asText;
    }

    String table() {
        return db + "." + name;
    }

    Types.ColumnType[] types() {
        ZoneId tz = ZoneId.of(timezone);
        Types.ColumnType[] types = new Types.ColumnType[columns.size()];
        for (int i = 0; i < types.length; i++) {
            TableSchema.Column c = columns.get(i);
            types[i] = Types.of(asText.contains(TableSchema.fold(c.name())) ? "text" : c.type(), tz, binaryFormat);
        }
        return types;
    }

    private static StructField field(String name, org.apache.spark.sql.types.DataType type) {
        return new StructField(name, type, true, Metadata.empty());
    }

    StructType imageSchema() {
        Types.ColumnType[] types = types();
        StructField[] fields = new StructField[types.length];
        for (int i = 0; i < types.length; i++) {
            fields[i] = field(columns.get(i).name(), types[i].spark);
        }
        return new StructType(fields);
    }

    /** The table's columns, then _op, _id, _tid, _ts, _before, _invalid. */
    StructType schema() {
        StructType image = imageSchema();
        List<StructField> fields = new ArrayList<>(List.of(image.fields()));
        fields.add(field("_op", DataTypes.StringType));
        fields.add(field("_id", DataTypes.LongType));
        fields.add(field("_tid", DataTypes.LongType));
        fields.add(field("_ts", DataTypes.TimestampType));
        fields.add(field("_before", image));
        fields.add(field("_invalid", DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType)));
        return new StructType(fields.toArray(new StructField[0]));
    }

    /** {@code db.table} as its two names, both safe identifiers. */
    static String[] tableName(String text) {
        int dot = text.indexOf('.');
        if (dot < 0) {
            throw new Errors.InvalidValue("Option table='" + text + "' of format(\"gate\") must name a table as db.table, "
                + "e.g. \"shop.orders\".");
        }
        String[] names = {text.substring(0, dot), text.substring(dot + 1)};
        String[] kinds = {"Database name", "Table name"};
        for (int i = 0; i < 2; i++) {
            if (!IDENTIFIER.matcher(names[i]).matches()) {
                throw new Errors.InvalidValue(kinds[i] + " '" + names[i] + "' is not a safe identifier. Use 1 to 64 "
                    + "letters, digits or underscores, starting with a letter or underscore (no dots, spaces, quotes, "
                    + "backticks or semicolons).");
            }
        }
        return names;
    }

    private static Long consumerPosition(Connection conn, String consumer) throws SQLException {
        if (consumer == null) {
            return null;
        }
        try (PreparedStatement statement = conn.prepareStatement("SELECT id FROM gate_consumer WHERE name = ?")) {
            statement.setString(1, consumer);
            try (ResultSet rs = statement.executeQuery()) {
                return rs.next() ? rs.getLong(1) : null;
            }
        }
    }

    /** fnmatch.fnmatchcase's pattern as a regular expression (gate.common.columns.ColumnRule.matches). */
    static Pattern glob(String pattern) {
        StringBuilder out = new StringBuilder();
        int n = pattern.length();
        int i = 0;
        while (i < n) {
            char c = pattern.charAt(i++);
            int j = i < n && pattern.charAt(i) == '!' ? i + 1 : i;
            j = j < n && pattern.charAt(j) == ']' ? j + 1 : j;
            j = c == '[' ? pattern.indexOf(']', j) : -1;
            if (c == '*') {
                out.append(".*");
            } else if (c == '?') {
                out.append('.');
            } else if (j >= 0) { // a set: [abc], [!abc]
                String set = pattern.substring(i, j).replace("\\", "\\\\").replace("[", "\\[");
                out.append('[').append(set.startsWith("!") ? "^" + set.substring(1) : set).append(']');
                i = j + 1;
            } else {
                out.append(Pattern.quote(String.valueOf(c)));
            }
        }
        return Pattern.compile(out.toString(), Pattern.DOTALL);
    }

    /** The table's columns where the query starts (the consumer's stored position when it has one, else startingId
     * or the oldest kept row), with the channel's settings (spark_readers.typed.typed_table). */
    static TypedTable plan(Settings settings) {
        String[] names = tableName(settings.table);
        Login login = settings.login;
        try (Channel dc = new Channel(login)) {
            Connection conn = dc.conn();
            String timezone = "UTC";
            String binaryFormat = "base64";
            List<Pattern> asTextRules = new ArrayList<>();
            Long position;
            List<TableSchema.Column> columns;
            try {
                position = consumerPosition(conn, settings.consumer);
                if (position == null) {
                    position = dc.start(settings.startingId);
                }
                try (PreparedStatement statement = conn.prepareStatement("SELECT name, value FROM gate_settings WHERE "
                        + "name IN ('timezone', 'binary_format', 'columns')");
                     ResultSet rs = statement.executeQuery()) {
                    while (rs.next()) {
                        JsonNode value = TableSchema.json(rs.getString(2));
                        switch (rs.getString(1)) {
                            case "timezone" -> timezone = value.asText();
                            case "binary_format" -> binaryFormat = value.asText();
                            default -> {
                                for (JsonNode rule : value) {
                                    if (!rule.path("rule").asText().equals("exclude")) {
                                        asTextRules.add(glob(rule.path("pattern").asText()));
                                    }
                                }
                            }
                        }
                    }
                } catch (SQLException e) {
                    if (e.getErrorCode() != Channel.ER_TABLE_ACCESS_DENIED) {
                        throw e;
                    }
                    throw new Errors.MissingPrivileges("A typed read of channel '" + login.channel + "' needs its time "
                        + "zone and binary format from " + login.channel + ".gate_settings, which user '" + login.user
                        + "' cannot read (" + e.getMessage() + "). GRANT SELECT ON " + login.channel + ".gate_settings "
                        + "TO the reader.");
                }
                columns = columnsAt(dc, login.channel, names[0], names[1], position, dc.checkpoint(),
                    settings.partitions);
            } catch (SQLException e) {
                throw dc.failed("reading the columns of " + settings.table, e);
            }
            List<String> clash = new ArrayList<>();
            Set<String> asText = new HashSet<>();
            for (TableSchema.Column c : columns) {
                if (META.contains(TableSchema.fold(c.name()))) {
                    clash.add(c.name());
                }
                String path = names[0] + "." + names[1] + "." + c.name();
                if (asTextRules.stream().anyMatch(rule -> rule.matcher(path).matches())) {
                    asText.add(TableSchema.fold(c.name()));
                }
            }
            if (!clash.isEmpty()) {
                throw new Errors.InvalidValue("Table " + settings.table + " has columns named like the stream's own ("
                    + String.join(", ", clash) + "): read it without the option \"table\".");
            }
            return new TypedTable(names[0], names[1], List.copyOf(columns), timezone, binaryFormat, Set.copyOf(asText));
        }
    }

    /** Whether to find the table's rows among {@code lo < id <= hi} by a scan of the primary key: where they are a
     * quarter of the rows or more, judged by the first {@link #SAMPLE} of them after {@code lo} (the index alone, a
     * constant cost). The DC's index on dbname, tablename costs a lookup of the row by its key for each (about 1.5 µs
     * of the server's CPU a row against 0.6 for a scan, which sends only the table's rows), so a table that has most of
     * a channel's rows is read faster by key, and a table of few of them by the index. */
    boolean byKey(Channel dc, long lo, long hi) {
        try (PreparedStatement statement = dc.conn().prepareStatement("SELECT id FROM transfer_data WHERE dbname = ? "
                + "AND tablename = ? AND id > ? AND id <= ? ORDER BY id LIMIT 1 OFFSET " + (SAMPLE - 1))) {
            statement.setString(1, db);
            statement.setString(2, name);
            statement.setLong(3, lo);
            statement.setLong(4, hi);
            try (ResultSet rs = statement.executeQuery()) {
                return rs.next() && rs.getLong(1) - lo <= 4L * SAMPLE; // fewer rows: the index is cheap either way
            }
        } catch (SQLException e) {
            throw dc.failed("counting the rows of " + table(), e);
        }
    }

    /** The first statement of rows {@code lo < id <= hi} that changes these columns (null: none). A range read by
     * key is searched {@link #inPieces}. */
    TableSchema.Change change(Channel dc, long lo, long hi, boolean byKey, int parts) {
        try {
            List<Long> ids = byKey
                ? inPieces(dc, lo, hi, parts, (conn, from, to) -> TableSchema.statements(conn, db, name, from, to, true))
                : TableSchema.statements(dc.conn(), db, name, lo, hi, false);
            return TableSchema.firstChange(dc.conn(), columns, ids);
        } catch (SQLException e) {
            throw dc.failed("reading the statements on " + table(), e);
        }
    }

    /** The columns of {@code db.name} for its rows after {@code after} (TableSchema.columnsAt), every table's
     * statements from the oldest kept row up to it searched {@link #inPieces}. */
    static List<TableSchema.Column> columnsAt(Channel dc, String channel, String db, String name, long after,
                                              long checkpoint, int parts) throws SQLException {
        long oldest = Math.min(after, Channel.purgedThrough(dc.conn(), channel));
        List<Long> ids = inPieces(dc, oldest, after, parts, TableSchema::schemaStatements);
        return TableSchema.columnsAt(dc.conn(), channel, db, name, after, checkpoint, ids);
    }

    /** A search for the ids of some rows among {@code lo < id <= hi}, in order. */
    interface Search {
        List<Long> ids(Connection conn, long lo, long hi) throws SQLException;
    }

    /** The ids {@code search} finds among rows {@code lo < id <= hi}, in order. A range of at least twice
     * {@link #PIECE} rows is searched in up to {@code parts} pieces at once, each on a connection of its own: such a
     * search reads every row of its range (about 0.2 µs of the DC's CPU a row) before any row is read, so the DC's
     * cores share it. */
    static List<Long> inPieces(Channel dc, long lo, long hi, int parts, Search search) throws SQLException {
        int pieces = (int) Math.min(Math.min(parts, MAX_PIECES), (hi - lo) / PIECE);
        if (pieces <= 1) {
            return search.ids(dc.conn(), lo, hi);
        }
        ExecutorService pool = Executors.newFixedThreadPool(pieces);
        try {
            List<Future<List<Long>>> found = new ArrayList<>();
            for (InputPartition piece : IdRange.split(lo, hi, pieces)) {
                IdRange range = (IdRange) piece;
                found.add(pool.submit(() -> {
                    try (Channel own = dc.another()) {
                        return search.ids(own.conn(), range.lo, range.hi);
                    }
                }));
            }
            List<Long> ids = new ArrayList<>();
            for (Future<List<Long>> piece : found) {
                ids.addAll(piece.get());
            }
            return ids;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SQLException("interrupted", e);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof RuntimeException named) { // a connection refused: already named
                throw named;
            }
            throw e.getCause() instanceof SQLException sql ? sql : new SQLException(e.getCause().getMessage(),
                e.getCause());
        } finally {
            pool.shutdownNow();
        }
    }

    String describe(TableSchema.Change change) {
        String sql = change.sql();
        return change.optype() + " row " + change.id() + " on " + table() + ": "
            + (sql.length() > 300 ? sql.substring(0, 300) : sql);
    }

    /** The columns as a list of names, as the Python source names them in its errors. */
    String names() {
        List<String> names = new ArrayList<>();
        for (TableSchema.Column c : columns) {
            names.add("'" + c.name() + "'");
        }
        return "[" + String.join(", ", names) + "]";
    }
}
