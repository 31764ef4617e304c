package gate.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import java.io.IOException;
import java.io.InputStream;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.ArrayBasedMapData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The columns of spark_readers.rows.ROW_SCHEMA (its JSON is in this jar, written from the Python definition when
 * the jar is built) and a transfer_data row parsed into them the way spark_readers.rows.to_batch does (the rows
 * of the plain shape take the faster way of {@link UnsafeRows} to the same values): a row
 * change's NEW and OLD images as maps (values that are not strings keep their JSON text, an image that is not a
 * list is null), its columns the keys of the new image else the old one; any other payload conformed to the
 * ddl struct as from_json does (missing keys and values of another kind are null, extra keys dropped).
 */
final class Rows {
    static final StructType SCHEMA = schema();
    private static final StructType DDL = (StructType) SCHEMA.apply("ddl").dataType();
    static final Set<String> ROW_OPTYPES = Set.of("INSERT", "UPDATE", "DELETE", "SNAPSHOT");
    private static final JsonFactory JSON = JsonFactory.builder()
        .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS) // NaN and Infinity, which Python's json reads
        .streamReadConstraints(StreamReadConstraints.builder().maxStringLength(Integer.MAX_VALUE).build())
        .build();

    private Rows() {
    }

    private static StructType schema() {
        try (InputStream in = Rows.class.getResourceAsStream("row_schema.json")) {
            return (StructType) DataType.fromJson(new String(in.readAllBytes(), StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** One image: its keys in order and their values. */
    private static final class Image {
        final List<Object> keys = new ArrayList<>();
        final List<Object> values = new ArrayList<>();
    }

    /** The row in ROW_SCHEMA's order: optype, dbname, tablename, id, tid, create_time, instance_name, columns,
     * new, old, ddl. {@code data} is the payload's UTF-8 JSON (null or empty: none). */
    static InternalRow row(long id, long tid, byte[] dbname, byte[] tablename, long seconds, byte[] instance,
                           String optype, byte[] data) throws IOException {
        Object[] values = new Object[11];
        values[0] = UTF8String.fromString(optype);
        values[1] = utf8(dbname);
        values[2] = utf8(tablename);
        values[3] = id;
        values[4] = tid;
        values[5] = seconds * 1_000_000L;
        values[6] = utf8(instance);
        boolean empty = data == null || data.length == 0;
        if (ROW_OPTYPES.contains(optype)) {
            Image added = null;
            Image removed = null;
            if (!empty) {
                try (JsonParser p = JSON.createParser(data)) {
                    if (p.nextToken() == JsonToken.START_OBJECT) {
                        while (p.nextToken() == JsonToken.FIELD_NAME) {
                            String name = p.currentName();
                            p.nextToken();
                            if (name.equals("NEW")) {
                                added = image(p, id);
                            } else if (name.equals("OLD")) {
                                removed = image(p, id);
                            } else {
                                p.skipChildren();
                            }
                        }
                    } else {
                        p.skipChildren();
                    }
                }
            }
            Image named = added != null ? added : removed;
            values[7] = named == null ? null : new GenericArrayData(named.keys);
            values[8] = map(added);
            values[9] = map(removed);
        } else if (!empty) {
            try (JsonParser p = JSON.createParser(data)) {
                p.nextToken();
                values[10] = conform(p, DDL);
            }
        }
        return new GenericInternalRow(values);
    }

    private static UTF8String utf8(byte[] bytes) {
        return bytes == null ? null : UTF8String.fromBytes(bytes);
    }

    private static ArrayBasedMapData map(Image image) {
        return image == null ? null
            : new ArrayBasedMapData(new GenericArrayData(image.keys), new GenericArrayData(image.values));
    }

    /** A list of one-key objects ({@code [{"c1": "v"}, {"c2": null}]}) as an image; null if not a list. */
    private static Image image(JsonParser p, long id) throws IOException {
        if (p.currentToken() != JsonToken.START_ARRAY) {
            p.skipChildren();
            return null;
        }
        Image image = new Image();
        while (p.nextToken() != JsonToken.END_ARRAY) {
            if (p.currentToken() != JsonToken.START_OBJECT) {
                throw new IOException("Row " + id + " of transfer_data has an image cell that is not a JSON object "
                    + "({\"column\": value}): " + text(p));
            }
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                image.keys.add(UTF8String.fromString(p.currentName()));
                p.nextToken();
                image.values.add(string(p));
            }
        }
        return image;
    }

    /** The value at the parser as a string: a JSON string's text, null for null, else its JSON text. */
    private static UTF8String string(JsonParser p) throws IOException {
        JsonToken token = p.currentToken();
        if (token == JsonToken.VALUE_STRING) {
            return UTF8String.fromString(p.getText());
        }
        return token == JsonToken.VALUE_NULL ? null : UTF8String.fromString(text(p));
    }

    /** The JSON text of the value at the parser, compact (what Python's json.dumps gives with separators , :). */
    private static String text(JsonParser p) throws IOException {
        StringWriter out = new StringWriter();
        try (JsonGenerator g = JSON.createGenerator(out)) {
            g.copyCurrentStructure(p);
        }
        return out.toString();
    }

    private static int index(StructField[] fields, String name) {
        for (int i = 0; i < fields.length; i++) {
            if (fields[i].name().equals(name)) {
                return i;
            }
        }
        return -1;
    }

    /** The value at the parser as from_json gives it for {@code kind} (spark_readers.rows.conform). */
    static Object conform(JsonParser p, DataType kind) throws IOException {
        JsonToken token = p.currentToken();
        if (token == JsonToken.VALUE_NULL || token == null) {
            return null;
        }
        if (kind instanceof StringType) {
            return string(p);
        }
        if (kind instanceof StructType && token == JsonToken.START_OBJECT) {
            StructType struct = (StructType) kind;
            StructField[] fields = struct.fields();
            Object[] values = new Object[fields.length];
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String name = p.currentName();
                p.nextToken();
                int index = index(fields, name);
                if (index >= 0) {
                    values[index] = conform(p, fields[index].dataType());
                } else {
                    p.skipChildren();
                }
            }
            return new GenericInternalRow(values);
        }
        if (kind instanceof ArrayType && token == JsonToken.START_ARRAY) {
            DataType element = ((ArrayType) kind).elementType();
            List<Object> values = new ArrayList<>();
            while (p.nextToken() != JsonToken.END_ARRAY) {
                values.add(conform(p, element));
            }
            return new GenericArrayData(values);
        }
        if (kind instanceof MapType && token == JsonToken.START_OBJECT) {
            DataType valueType = ((MapType) kind).valueType();
            List<Object> keys = new ArrayList<>();
            List<Object> values = new ArrayList<>();
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                keys.add(UTF8String.fromString(p.currentName()));
                p.nextToken();
                values.add(conform(p, valueType));
            }
            return new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values));
        }
        if (kind instanceof BooleanType && (token == JsonToken.VALUE_TRUE || token == JsonToken.VALUE_FALSE)) {
            return token == JsonToken.VALUE_TRUE;
        }
        if (kind instanceof LongType && token == JsonToken.VALUE_NUMBER_INT
                && p.getNumberType() != JsonParser.NumberType.BIG_INTEGER) {
            return p.getLongValue();
        }
        p.skipChildren();
        return null;
    }
}
