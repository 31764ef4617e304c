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
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeArrayWriter;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DayTimeIntervalType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.unsafe.Platform;
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
    private static final int BOOLEAN = 0;
    private static final int BYTE = 1;
    private static final int SHORT = 2;
    private static final int INT = 3; // and DATE
    private static final int LONG = 4; // and TIMESTAMP, TIMESTAMP_NTZ, day-time intervals
    private static final int FLOAT = 5;
    private static final int DOUBLE = 6;
    private static final int DECIMAL = 7;
    private static final int STRING = 8;
    private static final int BINARY = 9;
    private static final int STRINGS = 10; // an array of strings
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
    private final int[] kinds; // each column's layout (BOOLEAN ... STRINGS)
    private final int[] precision; // of decimal columns
    private final int[] scale;
    private final UnsafeRowWriter out; // the row, reused from row to row
    private final UnsafeRowWriter before; // _before, in out's buffer
    private final UnsafeArrayWriter array; // SET values and _invalid's keys and values, in out's buffer
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
        this.kinds = new int[width];
        this.precision = new int[width];
        this.scale = new int[width];
        for (int i = 0; i < width; i++) {
            kinds[i] = kind(types[i].spark);
            if (types[i].spark instanceof DecimalType decimal) {
                precision[i] = decimal.precision();
                scale[i] = decimal.scale();
            }
        }
        this.out = new UnsafeRowWriter(width + 6, 64 * width);
        this.before = new UnsafeRowWriter(out, width);
        this.array = new UnsafeArrayWriter(out, 8);
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
        invalid.clear();
        out.reset();
        out.zeroOutNullBytes();
        if (op.equals("t")) {
            for (int i = 0; i < width; i++) {
                nothing(out, i);
            }
        } else {
            images(data);
            typed(id, optype.equals("DELETE") ? removed : added, out, "");
        }
        out.write(width, OP_TEXT.get(op));
        out.write(width + 1, id);
        out.write(width + 2, tid);
        out.write(width + 3, seconds * 1_000_000L);
        if (op.equals("u") || op.equals("d")) {
            int start = out.cursor();
            before.resetRowWriter();
            typed(id, removed, before, "_before.");
            out.setOffsetAndSizeFromPreviousCursor(width + 4, start);
        } else {
            out.setNullAt(width + 4);
        }
        if (invalid.isEmpty()) {
            out.setNullAt(width + 5);
        } else { // a map<string,string>: the key array's size in bytes, the key array, the value array
            int start = out.cursor();
            out.grow(8);
            out.increaseCursor(8);
            int keys = out.cursor();
            strings(invalid.keySet());
            Platform.putLong(out.getBuffer(), keys - 8, out.cursor() - keys);
            strings(invalid.values());
            out.setOffsetAndSizeFromPreviousCursor(width + 5, start);
        }
        return out.getRow();
    }

    /** An array<string> of {@code texts} at the writer's cursor. */
    private void strings(Collection<String> texts) {
        array.initialize(texts.size());
        int i = 0;
        for (String text : texts) {
            array.write(i++, UTF8String.fromString(text));
        }
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

    /** One image's typed values into fields 0 to width - 1 of {@code into}; a text its type cannot hold is NULL,
     * kept in {@link #invalid} under its name after {@code prefix}. */
    private void typed(long id, Image image, UnsafeRowWriter into, String prefix) {
        if (!sameNames(image)) {
            throw new Errors.TableSchemaChanged("Row " + id + " of " + table.table() + " has the columns "
                + list(image.names) + ", the stream's schema has " + list(Arrays.asList(names)) + ": the table changed "
                + "in a way its DDL rows do not show (a table renamed into its name?). Restart the query: it reads the "
                + "schema again from the channel.");
        }
        for (int i = 0; i < width; i++) {
            if (text[i] && image.bytes != null) { // no string decoded and encoded again
                int length = image.slices[i * 4 + 3];
                if (length < 0) {
                    into.setNullAt(i);
                } else {
                    into.write(i, image.bytes, image.slices[i * 4 + 2], length);
                }
                continue;
            }
            String value = image.text(i);
            if (value == null) {
                nothing(into, i);
                continue;
            }
            try {
                write(into, i, converters[i].convert(value));
            } catch (Types.Unrepresentable e) {
                invalid.put(prefix + names[i], value);
                nothing(into, i);
            }
        }
    }

    /** Field {@code i} NULL (a wide decimal keeps its room, as Spark's own rows do). */
    private void nothing(UnsafeRowWriter into, int i) {
        if (kinds[i] == DECIMAL && precision[i] > Decimal.MAX_LONG_DIGITS()) {
            into.write(i, (Decimal) null, precision[i], scale[i]);
        } else {
            into.setNullAt(i);
        }
    }

    /** Field {@code i}: the converted {@code value}, as its column's Spark type lays it out. */
    private void write(UnsafeRowWriter into, int i, Object value) {
        switch (kinds[i]) {
            case BOOLEAN -> into.write(i, (boolean) (Boolean) value);
            case BYTE -> into.write(i, (byte) (Byte) value);
            case SHORT -> into.write(i, (short) (Short) value);
            case INT -> into.write(i, (int) (Integer) value);
            case LONG -> into.write(i, (long) (Long) value);
            case FLOAT -> into.write(i, (float) (Float) value);
            case DOUBLE -> into.write(i, (double) (Double) value);
            case DECIMAL -> into.write(i, (Decimal) value, precision[i], scale[i]);
            case STRING -> into.write(i, (UTF8String) value);
            case BINARY -> into.write(i, (byte[]) value);
            default -> { // an array of strings (SET)
                ArrayData labels = (ArrayData) value;
                int start = into.cursor();
                array.initialize(labels.numElements());
                for (int j = 0; j < labels.numElements(); j++) {
                    array.write(j, labels.getUTF8String(j));
                }
                into.setOffsetAndSizeFromPreviousCursor(i, start);
            }
        }
    }

    /** How {@link #write} lays out a value of Spark type {@code type}. */
    private static int kind(DataType type) {
        if (type instanceof BooleanType) {
            return BOOLEAN;
        } else if (type instanceof ByteType) {
            return BYTE;
        } else if (type instanceof ShortType) {
            return SHORT;
        } else if (type instanceof IntegerType || type instanceof DateType) {
            return INT;
        } else if (type instanceof LongType || type instanceof TimestampType || type instanceof TimestampNTZType
                   || type instanceof DayTimeIntervalType) {
            return LONG;
        } else if (type instanceof FloatType) {
            return FLOAT;
        } else if (type instanceof DoubleType) {
            return DOUBLE;
        } else if (type instanceof DecimalType) {
            return DECIMAL;
        } else if (type instanceof StringType) {
            return STRING;
        } else if (type instanceof BinaryType) {
            return BINARY;
        } else if (type instanceof ArrayType array && array.elementType() instanceof StringType) {
            return STRINGS;
        }
        throw new IllegalStateException("no layout for Spark type " + type); // Types gives none other
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
