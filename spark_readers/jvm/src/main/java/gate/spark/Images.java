package gate.spark;

import java.util.Arrays;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The fast path of {@link Rows}: a row change's payload as gate writes it, {@code {"NEW": [{"c1": "v"},
 * {"c2": null}], "OLD": [...]}} with strings free of escapes, read straight from its UTF-8 bytes: keys and
 * values become slices of the payload (no copy, no String). Any other shape (escapes, values that are not
 * strings, other keys, images that are not lists) returns false and is left to the JSON parser.
 */
final class Images {
    private final byte[] d;
    private int pos;
    Object[] newKeys;
    Object[] newValues;
    Object[] oldKeys;
    Object[] oldValues;
    private Object[] keys = new Object[16];
    private Object[] values = new Object[16];
    private int count;

    private Images(byte[] data) {
        this.d = data;
    }

    /** The images of {@code data}, or null if it is not of the plain shape. */
    static Images read(byte[] data) {
        Images images = new Images(data);
        return images.payload() ? images : null;
    }

    private boolean payload() {
        if (next() != '{') {
            return false;
        }
        int c = next();
        if (c == '}') {
            return next() == -1;
        }
        pos--;
        while (true) {
            int start = string();
            if (start < 0) {
                return false;
            }
            boolean added = is(start, 'N', 'E', 'W');
            if (!added && !is(start, 'O', 'L', 'D') || next() != ':' || !image()) {
                return false;
            }
            Object[] k = Arrays.copyOf(keys, count);
            Object[] v = Arrays.copyOf(values, count);
            if (added) {
                newKeys = k;
                newValues = v;
            } else {
                oldKeys = k;
                oldValues = v;
            }
            c = next();
            if (c == '}') {
                return next() == -1;
            }
            if (c != ',') {
                return false;
            }
        }
    }

    /** Whether the string just read (from {@code start} to pos - 1) is the three letters a, b, c. */
    private boolean is(int start, char a, char b, char c) {
        return pos - 1 - start == 3 && d[start] == a && d[start + 1] == b && d[start + 2] == c;
    }

    /** A list of objects of string or null values into keys/values (count). */
    private boolean image() {
        count = 0;
        if (next() != '[') {
            return false;
        }
        int c = next();
        if (c == ']') {
            return true;
        }
        pos--;
        while (true) {
            if (next() != '{') {
                return false;
            }
            while (true) {
                int start = string();
                if (start < 0) {
                    return false;
                }
                UTF8String key = UTF8String.fromBytes(d, start, pos - 1 - start);
                if (next() != ':') {
                    return false;
                }
                c = next();
                UTF8String value;
                if (c == '"') {
                    pos--;
                    int from = string();
                    if (from < 0) {
                        return false;
                    }
                    value = UTF8String.fromBytes(d, from, pos - 1 - from);
                } else if (c == 'n' && pos + 2 < d.length && d[pos] == 'u' && d[pos + 1] == 'l' && d[pos + 2] == 'l') {
                    pos += 3;
                    value = null;
                } else {
                    return false;
                }
                add(key, value);
                c = next();
                if (c == '}') {
                    break;
                }
                if (c != ',') {
                    return false;
                }
            }
            c = next();
            if (c == ']') {
                return true;
            }
            if (c != ',') {
                return false;
            }
        }
    }

    private void add(UTF8String key, UTF8String value) {
        if (count == keys.length) {
            keys = Arrays.copyOf(keys, count * 2);
            values = Arrays.copyOf(values, count * 2);
        }
        keys[count] = key;
        values[count++] = value;
    }

    /** Past a string without escapes at the next non-space byte: its first byte's index (pos after the closing
     * quote), or -1. */
    private int string() {
        if (next() != '"') {
            return -1;
        }
        int start = pos;
        for (int i = start; i < d.length; i++) {
            byte b = d[i];
            if (b == '"') {
                pos = i + 1;
                return start;
            }
            if (b == '\\') {
                return -1;
            }
        }
        return -1;
    }

    /** The next byte that is not JSON white space (pos past it), or -1 at the end. */
    private int next() {
        while (pos < d.length) {
            byte b = d[pos++];
            if (b != ' ' && b != '\n' && b != '\r' && b != '\t') {
                return b;
            }
        }
        pos++;
        return -1;
    }
}
