package gate.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeArrayWriter;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.unsafe.Platform;

/**
 * transfer_data rows as Spark's own row format, written straight from the query's bytes: a row change of the plain
 * shape ({@link Images}) has its keys and values copied once from the payload into the row, with no object per
 * value, and Spark's projection then copies its maps and arrays whole. Every other row is parsed by {@link Rows}.
 * The row returned is reused by the next call, as Spark allows a partition reader to do.
 */
final class UnsafeRows {
    private static final byte[][] ROW_OPTYPES = Rows.ROW_OPTYPES.stream()
        .map(optype -> optype.getBytes(StandardCharsets.UTF_8)).toArray(byte[][]::new);
    private static final int STRING = 8; // the size of an array element that is a string (its offset and size)

    private final Images images = new Images();
    private final UnsafeRowWriter row = new UnsafeRowWriter(Rows.SCHEMA.size(), 1024);
    private final UnsafeArrayWriter array = new UnsafeArrayWriter(row, STRING);

    private static boolean rowChange(byte[] optype) {
        for (byte[] known : ROW_OPTYPES) {
            if (Arrays.equals(known, optype)) {
                return true;
            }
        }
        return false;
    }

    /** The row in ROW_SCHEMA's order (see {@link Rows#row}); {@code optype} as UTF-8 bytes. */
    InternalRow row(long id, long tid, byte[] dbname, byte[] tablename, long seconds, byte[] instance, byte[] optype,
                    byte[] data) throws IOException {
        if (data == null || data.length == 0 || !rowChange(optype) || !images.read(data)) {
            return Rows.row(id, tid, dbname, tablename, seconds, instance, new String(optype, StandardCharsets.UTF_8),
                data);
        }
        row.reset();
        row.zeroOutNullBytes();
        row.write(0, optype);
        text(1, dbname);
        text(2, tablename);
        row.write(3, id);
        row.write(4, tid);
        row.write(5, seconds * 1_000_000L);
        text(6, instance);
        int newKeys = map(8, Images.NEW);
        int oldKeys = map(9, Images.OLD);
        copy(7, newKeys >= 0 ? newKeys : oldKeys); // the columns: the keys of the new image, else of the old
        row.setNullAt(10);
        return row.getRow();
    }

    private void text(int field, byte[] value) {
        if (value == null) {
            row.setNullAt(field);
        } else {
            row.write(field, value);
        }
    }

    /** A map<string,string> as Spark lays one out: the key array's size in bytes, the key array, the values.
     * Returns where its key array starts (-1: no such image, the field is null). */
    private int map(int field, int image) {
        if (!images.present[image]) {
            row.setNullAt(field);
            return -1;
        }
        int start = row.cursor();
        row.grow(8);
        row.increaseCursor(8);
        int keys = row.cursor();
        strings(image, 0);
        Platform.putLong(row.getBuffer(), keys - 8, row.cursor() - keys);
        strings(image, 2);
        row.setOffsetAndSizeFromPreviousCursor(field, start);
        return keys;
    }

    /** Field {@code field}: a copy of the array written at {@code from} (-1: null). An array holds its
     * elements' offsets from its own start, so its bytes can move whole. */
    private void copy(int field, int from) {
        if (from < 0) {
            row.setNullAt(field);
            return;
        }
        int size = (int) Platform.getLong(row.getBuffer(), from - 8);
        int start = row.cursor();
        row.grow(size);
        byte[] buffer = row.getBuffer(); // after grow, which may have replaced it
        System.arraycopy(buffer, from - Platform.BYTE_ARRAY_OFFSET, buffer, start - Platform.BYTE_ARRAY_OFFSET, size);
        row.increaseCursor(size);
        row.setOffsetAndSizeFromPreviousCursor(field, start);
    }

    /** An array<string> of the image's keys ({@code at} 0) or values (2). */
    private void strings(int image, int at) {
        int count = images.count[image];
        int[] slices = images.cells[image];
        byte[] payload = images.bytes();
        array.initialize(count);
        for (int i = 0; i < count; i++) {
            int length = slices[i * 4 + at + 1];
            if (length < 0) {
                array.setNull8Bytes(i);
            } else {
                array.write(i, payload, slices[i * 4 + at], length);
            }
        }
    }
}
