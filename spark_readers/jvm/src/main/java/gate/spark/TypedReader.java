package gate.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.IOException;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * An executor's read of one {@link IdRange} of a typed read (option table): the table's rows, which {@link Fetcher}
 * reads, as rows of {@link TypedTable#schema} (spark_readers.typed_rows in Java). Columns: the table's, typed by
 * {@link Types} (a value its type cannot hold is NULL, its text in _invalid), then _op ('c', 'u', 'd', 'r', 't'),
 * _id, _tid, _ts, _before (updates and deletes) and _invalid. A delete's columns hold the deleted row; CREATETABLE,
 * ALTERTABLE, SNAPSHOTEND and VERIFY rows give no row.
 */
final class TypedReader implements PartitionReader<InternalRow> {
    /** What the executors get: the login (password included, never shown) and the table. */
    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Login login;
        private final TypedTable table;

        Factory(Login login, TypedTable table) {
            this.login = login;
            this.table = table;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            IdRange range = (IdRange) partition;
            return new TypedReader(login, table, range.lo, range.hi, range.byKey);
        }
    }

    private static final String[] OPTYPES = {"INSERT", "UPDATE", "DELETE", "SNAPSHOT", "TRUNCATE", "DROPTABLE", "RENAME",
        "SNAPSHOTSTART"};
    private static final byte[][] OPTYPE_BYTES = Arrays.stream(OPTYPES).map(o -> o.getBytes(StandardCharsets.UTF_8))
        .toArray(byte[][]::new);
    private static final String[] OPS = {"c", "u", "d", "r", "t", "t", "t", "t"}; // _op of each of OPTYPES
    private static final Map<String, UTF8String> OP_TEXT = Map.of("c", UTF8String.fromString("c"), "u",
        UTF8String.fromString("u"), "d", UTF8String.fromString("d"), "r", UTF8String.fromString("r"), "t",
        UTF8String.fromString("t"));
    private static final JsonFactory JSON = JsonFactory.builder()
        .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS)
        .streamReadConstraints(StreamReadConstraints.builder().maxStringLength(Integer.MAX_VALUE).build())
        .build();

    /** One row image: its column names and values in payload order, each value a slice of the payload's bytes
     * (length -1: NULL) or, parsed by Jackson, a text (null: NULL). */
    private static final class Image {
        final List<String> names = new ArrayList<>(); // unless ours
        final List<String> texts = new ArrayList<>();
        boolean ours; // the stream's column names, byte for byte, in its order (names left empty)
        byte[] bytes; // the payload whose slices the values are; null: the values are texts
        int[] slices = new int[64]; // four ints per value, as Images has them: the value's start and length at 2, 3

        void clear() {
            names.clear();
            texts.clear();
            bytes = null;
            ours = false;
        }

        /** Value {@code i}'s text (null: NULL). */
        String text(int i) {
            if (bytes == null) {
                return texts.get(i);
            }
            int length = slices[i * 4 + 3];
            return length < 0 ? null : new String(bytes, slices[i * 4 + 2], length, StandardCharsets.UTF_8);
        }
    }

    private final TypedTable table;
    private final Fetcher fetcher;
    private final Types.Converter[] converters;
    private final boolean[] text; // columns of text as it is: their bytes go into the row as they are
    private final String[] names;
    private final byte[][] nameBytes;
    private final String[] folded;
    private final int width;
    private final Images images = new Images();
    private final Image added = new Image();
    private final Image removed = new Image();
    private final Map<String, String> invalid = new LinkedHashMap<>(); // the row's values their types cannot hold
    private Fetcher.Block block;
    private int next;
    private InternalRow row;

    TypedReader(Login login, TypedTable table, long lo, long hi, boolean byKey) {
        this.table = table;
        this.fetcher = lo < hi ? new Fetcher(login, lo, hi, table.db, table.name, byKey) : null;
        Types.ColumnType[] types = table.types();
        this.width = types.length;
        this.converters = new Types.Converter[width];
        this.text = new boolean[width];
        this.names = new String[width];
        this.nameBytes = new byte[width][];
        this.folded = new String[width];
        for (int i = 0; i < width; i++) {
            converters[i] = types[i].convert;
            text[i] = types[i].convert == Types.TEXT;
            names[i] = table.columns.get(i).name();
            nameBytes[i] = names[i].getBytes(StandardCharsets.UTF_8);
            folded[i] = TableSchema.fold(names[i]);
        }
    }

    @Override
    public boolean next() throws IOException {
        if (fetcher == null) {
            return false;
        }
        while (true) {
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
            int i = next++;
            for (int o = 0; o < OPTYPES.length; o++) {
                if (Arrays.equals(OPTYPE_BYTES[o], block.optype[i])) {
                    row = row(block.id[i], block.tid[i], block.seconds[i], OPTYPES[o], OPS[o], block.data[i]);
                    return true;
                }
            }
        }
    }

    private InternalRow row(long id, long tid, long seconds, String optype, String op, byte[] data) throws IOException {
        Object[] values = new Object[width + 6];
        invalid.clear();
        if (!op.equals("t")) {
            images(data);
            Image image = optype.equals("DELETE") ? removed : added;
            typed(id, image, values, "", invalid);
            if (op.equals("u") || op.equals("d")) {
                Object[] before = new Object[width];
                typed(id, removed, before, "_before.", invalid);
                values[width + 4] = new GenericInternalRow(before);
            }
        }
        values[width] = OP_TEXT.get(op);
        values[width + 1] = id;
        values[width + 2] = tid;
        values[width + 3] = seconds * 1_000_000L;
        if (!invalid.isEmpty()) {
            List<Object> keys = new ArrayList<>();
            List<Object> texts = new ArrayList<>();
            for (Map.Entry<String, String> e : invalid.entrySet()) {
                keys.add(UTF8String.fromString(e.getKey()));
                texts.add(UTF8String.fromString(e.getValue()));
            }
            values[width + 5] = new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(texts));
        }
        return new GenericInternalRow(values);
    }

    /** The payload's NEW and OLD images into {@link #added} and {@link #removed}. */
    private void images(byte[] data) throws IOException {
        added.clear();
        removed.clear();
        if (data == null || data.length == 0) {
            return;
        }
        if (images.read(data)) { // gate's plain shape: slices of the bytes
            byte[] d = images.bytes();
            for (int image = Images.NEW; image <= Images.OLD; image++) {
                Image into = image == Images.NEW ? added : removed;
                int[] slices = images.cells[image];
                int count = images.present[image] ? images.count[image] : 0; // count is of the last image present
                into.ours = count == width;
                for (int c = 0; c < count && into.ours; c++) {
                    into.ours = Arrays.equals(d, slices[c * 4], slices[c * 4] + slices[c * 4 + 1], nameBytes[c], 0,
                        nameBytes[c].length);
                }
                for (int c = 0; c < count && !into.ours; c++) {
                    int key = slices[c * 4];
                    int keyLength = slices[c * 4 + 1];
                    into.names.add(c < width && Arrays.equals(d, key, key + keyLength, nameBytes[c], 0,
                        nameBytes[c].length) ? names[c] : new String(d, key, keyLength, StandardCharsets.UTF_8));
                }
                into.bytes = d;
                if (into.slices.length < count * 4) {
                    into.slices = new int[count * 4];
                }
                System.arraycopy(slices, 0, into.slices, 0, count * 4); // Images reuses its arrays for the next payload
            }
            return;
        }
        try (JsonParser p = JSON.createParser(data)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                return;
            }
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String name = p.currentName();
                p.nextToken();
                Image into = name.equals("NEW") ? added : name.equals("OLD") ? removed : null;
                if (into == null || p.currentToken() != JsonToken.START_ARRAY) {
                    p.skipChildren();
                    continue;
                }
                into.clear();
                while (p.nextToken() != JsonToken.END_ARRAY) {
                    if (p.currentToken() != JsonToken.START_OBJECT) {
                        p.skipChildren();
                        continue;
                    }
                    while (p.nextToken() == JsonToken.FIELD_NAME) {
                        into.names.add(p.currentName());
                        p.nextToken();
                        into.texts.add(text(p));
                    }
                }
            }
        }
    }

    /** A value's text: a JSON string's, null for null, else its JSON text. */
    private static String text(JsonParser p) throws IOException {
        JsonToken token = p.currentToken();
        if (token == JsonToken.VALUE_STRING) {
            return p.getText();
        }
        if (token == JsonToken.VALUE_NULL) {
            return null;
        }
        StringWriter out = new StringWriter();
        try (JsonGenerator g = JSON.createGenerator(out)) {
            g.copyCurrentStructure(p);
        }
        return out.toString();
    }

    /** One image's typed values into {@code values}; a text its type cannot hold is NULL, kept in {@code invalid}. */
    private void typed(long id, Image image, Object[] values, String prefix, Map<String, String> invalid) {
        if (!sameNames(image)) {
            throw new Errors.TableSchemaChanged("Row " + id + " of " + table.table() + " has the columns "
                + list(image.names) + ", the stream's schema has " + list(Arrays.asList(names)) + ": the table changed "
                + "in a way its DDL rows do not show (a table renamed into its name?). Restart the query: it reads the "
                + "schema again from the channel.");
        }
        for (int i = 0; i < width; i++) {
            if (text[i] && image.bytes != null) { // no string decoded and encoded again
                int length = image.slices[i * 4 + 3];
                values[i] = length < 0 ? null : UTF8String.fromBytes(image.bytes, image.slices[i * 4 + 2], length);
                continue;
            }
            String value = image.text(i);
            if (value != null) {
                try {
                    values[i] = converters[i].convert(value);
                } catch (Types.Unrepresentable e) {
                    invalid.put(prefix + names[i], value);
                }
            }
        }
    }

    private boolean sameNames(Image image) {
        if (image.ours) {
            return true;
        }
        if (image.names.size() != width) {
            return false;
        }
        for (int i = 0; i < width; i++) {
            String name = image.names.get(i);
            if (name != names[i] && !TableSchema.fold(name).equals(folded[i])) {
                return false;
            }
        }
        return true;
    }

    private static String list(List<String> names) {
        List<String> quoted = new ArrayList<>();
        for (String name : names) {
            quoted.add("'" + name + "'");
        }
        return "[" + String.join(", ", quoted) + "]";
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
