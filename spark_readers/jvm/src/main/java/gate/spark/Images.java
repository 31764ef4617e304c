package gate.spark;

import java.util.Arrays;

/**
 * The fast path of {@link Rows}: a row change's payload as gate writes it, {@code {"NEW": [{"c1": "v"},
 * {"c2": null}], "OLD": [...]}} with strings free of escapes, read straight from its UTF-8 bytes: each key and
 * value is found as a slice of the payload (no copy, no object), which {@link UnsafeRows} copies once into Spark's
 * row. Any other shape (escapes, values that are not strings, other keys, images that are not lists) makes
 * {@link #read} return false and is left to the JSON parser. One instance serves one task, payload after payload.
 */
final class Images {
    static final int NEW = 0;
    static final int OLD = 1;

    private byte[] d;
    private int pos;
    /** Per image (NEW, OLD): whether the payload has it. */
    final boolean[] present = new boolean[2];
    /** Per image: its cells. */
    final int[] count = new int[2];
    /** Per image, four ints per cell: the key's start and length, the value's start and length (-1: null). */
    final int[][] cells = {new int[64], new int[64]};

    /** Whether {@code data} is of the plain shape; if so, its images are in present, count and cells. */
    boolean read(byte[] data) {
        d = data;
        pos = 0;
        present[NEW] = false;
        present[OLD] = false;
        return payload();
    }

    /** The payload's bytes: what the slices index. */
    byte[] bytes() {
        return d;
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
            int image = is(start, 'N', 'E', 'W') ? NEW : is(start, 'O', 'L', 'D') ? OLD : -1;
            if (image < 0 || next() != ':' || !image(image)) {
                return false;
            }
            present[image] = true;
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

    /** A list of objects of string or null values into the cells of {@code image}. */
    private boolean image(int image) {
        count[image] = 0;
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
                int key = string();
                if (key < 0) {
                    return false;
                }
                int keyLength = pos - 1 - key;
                if (next() != ':') {
                    return false;
                }
                c = next();
                int value;
                int valueLength;
                if (c == '"') {
                    pos--;
                    value = string();
                    if (value < 0) {
                        return false;
                    }
                    valueLength = pos - 1 - value;
                } else if (c == 'n' && pos + 2 < d.length && d[pos] == 'u' && d[pos + 1] == 'l' && d[pos + 2] == 'l') {
                    pos += 3;
                    value = 0;
                    valueLength = -1;
                } else {
                    return false;
                }
                add(image, key, keyLength, value, valueLength);
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

    private void add(int image, int key, int keyLength, int value, int valueLength) {
        int at = count[image]++ * 4;
        int[] slices = cells[image];
        if (at + 4 > slices.length) {
            slices = Arrays.copyOf(slices, slices.length * 2);
            cells[image] = slices;
        }
        slices[at] = key;
        slices[at + 1] = keyLength;
        slices[at + 2] = value;
        slices[at + 3] = valueLength;
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
