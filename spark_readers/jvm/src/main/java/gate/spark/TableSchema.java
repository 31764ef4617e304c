package gate.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * A table's columns and their types at a point of a channel, worked out from the DDL rows before it
 * (spark_readers.table_schema in Java: CREATETABLE and SNAPSHOTSTART set them, ALTERTABLE changes them, RENAME moves
 * them, DROPTABLE forgets them).
 */
final class TableSchema {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final String CHANGE_OPTYPES = "'CREATETABLE', 'SNAPSHOTSTART', 'ALTERTABLE', 'DROPTABLE'";
    private static final String SCHEMA_OPTYPES = CHANGE_OPTYPES + ", 'RENAME'"; // and renames, for columnsAt
    private static final int DDL_BATCH = 100; // statements whose payloads one query of payloads() reads
    private static final Set<String> ROW_OPTYPES = Set.of("INSERT", "UPDATE", "DELETE", "SNAPSHOT");

    private TableSchema() {
    }

    /** One column: its name and data_type as the DDL payloads carry them. */
    record Column(String name, String type) implements Serializable {
    }

    /** A statement that changes a table's columns: its row id, optype and text. */
    record Change(long id, String optype, String sql) {
    }

    static JsonNode json(String text) {
        try {
            return text == null || text.isEmpty() ? MAPPER.createObjectNode() : MAPPER.readTree(text);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static String fold(String name) {
        return name.toLowerCase(Locale.ROOT);
    }

    private static String text(JsonNode node, String field) {
        JsonNode value = node.get(field);
        return value == null || value.isNull() ? "" : value.asText();
    }

    private static List<Column> columns(JsonNode list) {
        List<Column> result = new ArrayList<>();
        if (list != null) {
            for (JsonNode c : list) {
                result.add(new Column(c.get("field_name").asText(), text(c, "data_type")));
            }
        }
        return result;
    }

    /** The columns after one DDL row of the table (null: the table does not exist). */
    static List<Column> apply(List<Column> columns, String optype, JsonNode ddl) {
        if (optype.equals("CREATETABLE") || optype.equals("SNAPSHOTSTART")) {
            List<Column> created = columns(ddl.get("NEW"));
            return created.isEmpty() ? columns : created;
        }
        if (optype.equals("DROPTABLE")) {
            return null;
        }
        if (!optype.equals("ALTERTABLE") || columns == null) {
            return columns;
        }
        Map<String, Column> changed = new HashMap<>();
        for (JsonNode c : ddl.path("CHANGECOLUMN")) {
            changed.put(fold(c.get("origin_field_name").asText()), new Column(c.get("field_name").asText(),
                text(c, "data_type")));
        }
        Set<String> dropped = new HashSet<>();
        for (JsonNode name : ddl.path("DROPCOLUMN")) {
            dropped.add(fold(name.asText()));
        }
        List<Column> result = new ArrayList<>();
        Set<String> present = new HashSet<>();
        for (Column c : columns) {
            if (!dropped.contains(fold(c.name()))) {
                Column now = changed.getOrDefault(fold(c.name()), c);
                result.add(now);
                present.add(fold(now.name()));
            }
        }
        for (Column c : columns(ddl.get("ADDCOLUMN"))) {
            if (!present.contains(fold(c.name()))) {
                result.add(c);
            }
        }
        return result;
    }

    /** Same column names (case-insensitively) and types converting alike, in the same order. */
    static boolean same(List<Column> a, List<Column> b) {
        if (a == null || b == null) {
            return a == b;
        }
        if (a.size() != b.size()) {
            return false;
        }
        for (int i = 0; i < a.size(); i++) {
            if (!fold(a.get(i).name()).equals(fold(b.get(i).name())) || !identity(a.get(i)).equals(identity(b.get(i)))) {
                return false;
            }
        }
        return true;
    }

    private static String identity(Column c) {
        return Types.of(c.type(), ZoneOffset.UTC, "base64").identity();
    }

    private interface RowHandler {
        boolean row(ResultSet rs) throws SQLException; // false: stop
    }

    private static void query(Connection conn, String sql, RowHandler handler, Object... args) throws SQLException {
        try (PreparedStatement statement = conn.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                statement.setObject(i + 1, args[i]);
            }
            try (ResultSet rs = statement.executeQuery()) {
                while (rs.next() && handler.row(rs)) {
                    // handled
                }
            }
        }
    }

    private static List<String> key(JsonNode table) {
        return List.of(text(table, "dbname"), text(table, "tablename"));
    }

    /** The ids of every table's statements that define, change or rename columns among rows {@code lo < id <= hi},
     * in order: ids only, as {@link #statements} reads them. */
    static List<Long> schemaStatements(Connection conn, long lo, long hi) throws SQLException {
        List<Long> ids = new ArrayList<>();
        query(conn, "SELECT id FROM transfer_data WHERE id > ? AND id <= ? AND optype IN (" + SCHEMA_OPTYPES
            + ") ORDER BY id", rs -> ids.add(rs.getLong(1)), lo, hi);
        return ids;
    }

    /** The columns of {@code db.table} for its rows after id {@code after}: every table's DDL up to it replayed
     * (following renames; {@code statements}: their ids, of {@link #schemaStatements} from the oldest kept row), then
     * the table's own DDL rows after it up to its first row change. */
    static List<Column> columnsAt(Connection conn, String channel, String db, String table, long after,
                                  long checkpoint, List<Long> statements) throws SQLException {
        Map<List<String>, List<Column>> tables = new HashMap<>();
        payloads(conn, statements, rs -> {
            String optype = rs.getString(2);
            List<String> name = List.of(rs.getString(3), rs.getString(4));
            JsonNode ddl = json(rs.getString(5));
            if (!optype.equals("RENAME")) {
                tables.put(name, apply(tables.get(name), optype, ddl));
            }
            for (JsonNode pair : ddl.path("RENAME")) {
                tables.put(key(pair.path("to")), tables.remove(key(pair.path("from"))));
            }
            return true;
        });
        List<List<Column>> columns = new ArrayList<>();
        columns.add(tables.get(List.of(db, table)));
        query(conn, "SELECT optype, data FROM transfer_data WHERE dbname = ? AND tablename = ? AND id > ? AND id <= ? "
            + "ORDER BY id LIMIT 1000", rs -> {
                String optype = rs.getString(1);
                if (ROW_OPTYPES.contains(optype)) {
                    return false;
                }
                columns.set(0, apply(columns.get(0), optype, json(rs.getString(2))));
                return true;
            }, db, table, after, checkpoint);
        List<Column> found = columns.get(0);
        if (found == null || found.isEmpty()) {
            throw new Errors.TableSchemaUnknown("Channel '" + channel + "' has no definition of table " + db + "."
                + table + " (a CREATETABLE or SNAPSHOTSTART row) at or before row " + after + ", nor right after it: the "
                + "table is not captured, or its definition was removed by retention. Check the name, or take a "
                + "snapshot of it (gate snapshot " + channel + " --table " + db + "." + table + ") and read from its "
                + "SNAPSHOTSTART row.");
        }
        return found;
    }

    /** The ids of {@code db.table}'s statements that may change its columns among rows {@code lo < id <= hi}, in
     * order. {@code byKey}: found by a scan of the primary key, not the index on the names. The scan reads each row's
     * id, names and optype, not its payload: read with it, the payload costs the DC a fifth more for every row. */
    static List<Long> statements(Connection conn, String db, String table, long lo, long hi, boolean byKey)
            throws SQLException {
        List<Long> ids = new ArrayList<>();
        query(conn, "SELECT id FROM transfer_data" + (byKey ? " FORCE INDEX (PRIMARY)" : "")
            + " WHERE dbname = ? AND tablename = ? AND id > ? AND id <= ? AND optype IN (" + CHANGE_OPTYPES
            + ") ORDER BY id", rs -> ids.add(rs.getLong(1)), db, table, lo, hi);
        return ids;
    }

    /** The first of the statements {@code ids} (of {@link #statements}) after which the table no longer has
     * {@code columns}; null if none. Their payloads are read {@link #DDL_BATCH} at a time. */
    static Change firstChange(Connection conn, List<Column> columns, List<Long> ids) throws SQLException {
        List<List<Column>> current = new ArrayList<>();
        current.add(columns);
        Change[] found = new Change[1];
        payloads(conn, ids, rs -> {
            String optype = rs.getString(2);
            JsonNode ddl = json(rs.getString(5));
            current.set(0, apply(current.get(0), optype, ddl));
            if (!optype.equals("DROPTABLE") && !same(current.get(0), columns)) {
                String sql = text(ddl, "SQL");
                found[0] = new Change(rs.getLong(1), optype, sql.isEmpty() ? optype : sql);
                return false;
            }
            return true;
        });
        return found[0];
    }

    /** Rows {@code ids} (id, optype, dbname, tablename, data), in order, {@link #DDL_BATCH} to a query, each to
     * {@code handler} until it returns false. A row gone (retention ran since the ids were read) is an error. */
    private static void payloads(Connection conn, List<Long> ids, RowHandler handler) throws SQLException {
        for (int from = 0; from < ids.size(); from += DDL_BATCH) {
            List<Long> batch = ids.subList(from, Math.min(from + DDL_BATCH, ids.size()));
            String marks = String.join(", ", Collections.nCopies(batch.size(), "?"));
            int[] seen = {0};
            boolean[] stopped = {false};
            query(conn, "SELECT id, optype, dbname, tablename, data FROM transfer_data WHERE id IN (" + marks
                + ") ORDER BY id", rs -> {
                    seen[0]++;
                    stopped[0] = !handler.row(rs);
                    return !stopped[0];
                }, batch.toArray());
            if (stopped[0]) {
                return;
            }
            if (seen[0] < batch.size()) {
                throw new SQLException("statements among rows " + batch.get(0) + " to " + batch.get(batch.size() - 1)
                    + " were removed while they were read (retention ran meanwhile): read again");
            }
        }
    }
}
