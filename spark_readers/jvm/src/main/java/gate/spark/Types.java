package gate.spark;

import java.io.Serializable;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.net.Inet4Address;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.time.DateTimeException;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.DayTimeIntervalType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The Spark type of every MySQL/MariaDB column type and the conversion of the DC's text to Spark's internal value:
 * spark_readers.types in Java (the same mapping, documented in docs/consumers/spark.md, "Typed change streams"). A
 * text the type cannot hold raises {@link Unrepresentable}; the reader stores NULL and keeps the text aside.
 */
final class Types {
    private Types() {
    }

    /** The DC's text of a value has no value of the column's Spark type. */
    static final class Unrepresentable extends Exception {
        private static final long serialVersionUID = 1L;

        Unrepresentable() {
            super(null, null, false, false); // thrown per bad value: no stack trace
        }
    }

    /** The DC's (non-null) text to Spark's internal value. */
    interface Converter extends Serializable {
        Object convert(String text) throws Unrepresentable;
    }

    /** Text as it is (a reader may take its UTF-8 bytes straight instead). */
    static final Converter TEXT = UTF8String::fromString;

    /** A column's Spark type, its converter, and for integers the range the source type holds. */
    static final class ColumnType implements Serializable {
        private static final long serialVersionUID = 1L;
        final DataType spark;
        final Converter convert;
        final String bounds; // "[lo,hi]" for integers, else ""

        ColumnType(DataType spark, Converter convert, String bounds) {
            this.spark = spark;
            this.convert = convert;
            this.bounds = bounds;
        }

        /** Equal for two column types whose values convert alike (spark_readers.types.ColumnType.identity). */
        String identity() {
            return spark.simpleString() + bounds;
        }
    }

    private static final Pattern TYPE = Pattern.compile(
        "^([a-z0-9_]+)(?:\\s+(?:precision|varying|byte))?\\s*(?:\\((.*)\\))?(.*)$", Pattern.DOTALL);
    private static final Pattern NUMBER = Pattern.compile("\\d+");
    private static final Pattern DATE = Pattern.compile("^(\\d{4})-(\\d{2})-(\\d{2})$");
    private static final Pattern DATETIME = Pattern.compile(
        "^(\\d{4})-(\\d{2})-(\\d{2}) (\\d{2}):(\\d{2}):(\\d{2})(?:\\.(\\d{1,6}))?$");
    private static final Pattern TIME = Pattern.compile("^(-?)(\\d{1,3}):(\\d{2}):(\\d{2})(?:\\.(\\d{1,6}))?$");
    private static final int MAX_PRECISION = 38;
    private static final BigInteger U64 = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);
    private static final Map<String, Object[]> INTEGERS = Map.ofEntries( // name -> bits, signed, unsigned type
        Map.entry("tinyint", new Object[] {8, DataTypes.ByteType, DataTypes.ShortType}),
        Map.entry("int1", new Object[] {8, DataTypes.ByteType, DataTypes.ShortType}),
        Map.entry("bool", new Object[] {8, DataTypes.ByteType, DataTypes.ShortType}),
        Map.entry("boolean", new Object[] {8, DataTypes.ByteType, DataTypes.ShortType}),
        Map.entry("smallint", new Object[] {16, DataTypes.ShortType, DataTypes.IntegerType}),
        Map.entry("int2", new Object[] {16, DataTypes.ShortType, DataTypes.IntegerType}),
        Map.entry("mediumint", new Object[] {24, DataTypes.IntegerType, DataTypes.IntegerType}),
        Map.entry("middleint", new Object[] {24, DataTypes.IntegerType, DataTypes.IntegerType}),
        Map.entry("int3", new Object[] {24, DataTypes.IntegerType, DataTypes.IntegerType}),
        Map.entry("int", new Object[] {32, DataTypes.IntegerType, DataTypes.LongType}),
        Map.entry("integer", new Object[] {32, DataTypes.IntegerType, DataTypes.LongType}),
        Map.entry("int4", new Object[] {32, DataTypes.IntegerType, DataTypes.LongType}),
        Map.entry("bigint", new Object[] {64, DataTypes.LongType, DataTypes.LongType}),
        Map.entry("int8", new Object[] {64, DataTypes.LongType, DataTypes.LongType}));
    private static final Set<String> DECIMALS = Set.of("decimal", "numeric", "dec", "fixed");
    private static final Set<String> BINARIES = Set.of("binary", "varbinary", "tinyblob", "blob", "mediumblob",
        "longblob", "raw", "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
        "multipolygon", "geometrycollection");

    /** The Spark type of a column of {@code dataType} (as gate's DDL payloads carry it) and its converter; {@code tz}
     * and {@code binaryFormat} are the channel's settings timezone and binary_format. */
    static ColumnType of(String dataType, ZoneId tz, String binaryFormat) {
        Matcher m = TYPE.matcher(dataType.strip().toLowerCase(Locale.ROOT));
        String name = m.matches() ? m.group(1) : "";
        String args = m.matches() ? m.group(2) : null;
        String rest = m.matches() ? m.group(3) : "";
        List<Integer> numbers = new ArrayList<>();
        if (args != null && !name.equals("enum") && !name.equals("set")) {
            Matcher n = NUMBER.matcher(args);
            while (n.find()) {
                numbers.add(Integer.parseInt(n.group()));
            }
        }
        if (name.equals("serial")) {
            return unsigned64();
        }
        if (INTEGERS.containsKey(name)) {
            Object[] kind = INTEGERS.get(name);
            int bits = (Integer) kind[0];
            if (rest.contains("unsigned")) {
                return bits == 64 ? unsigned64() : integer((DataType) kind[2], 0, (1L << bits) - 1);
            }
            return integer((DataType) kind[1], -(1L << (bits - 1)), bits == 64 ? Long.MAX_VALUE : (1L << (bits - 1)) - 1);
        }
        if (DECIMALS.contains(name)) {
            int precision = numbers.isEmpty() ? 10 : numbers.get(0);
            int scale = numbers.size() < 2 ? 0 : numbers.get(1);
            if (precision > MAX_PRECISION) {
                return new ColumnType(DataTypes.StringType, TEXT, "");
            }
            return new ColumnType(DataTypes.createDecimalType(precision, scale), decimal(precision, scale), "");
        }
        if (Set.of("float", "real", "double", "float4", "float8").contains(name)) {
            boolean single = (name.equals("float") || name.equals("float4"))
                && !(numbers.size() == 1 && numbers.get(0) > 24);
            return single ? new ColumnType(DataTypes.FloatType, text -> (float) toDouble(text), "")
                : new ColumnType(DataTypes.DoubleType, Types::toDouble, "");
        }
        switch (name) {
            case "date":
                return new ColumnType(DataTypes.DateType, text -> (int) toDate(text).toEpochDay(), "");
            case "datetime":
                return new ColumnType(DataTypes.TimestampNTZType, text -> micros(toDateTime(text), ZoneOffset.UTC), "");
            case "timestamp":
                return new ColumnType(DataTypes.TimestampType, timestamp(tz), "");
            case "time":
                return new ColumnType(DataTypes.createDayTimeIntervalType(DayTimeIntervalType.DAY(), DayTimeIntervalType.SECOND()),
                    Types::toTime, "");
            case "year":
                return integer(DataTypes.ShortType, 0, 2155);
            case "bit":
                return bit(numbers.isEmpty() ? 1 : numbers.get(0));
            case "set":
                return new ColumnType(DataTypes.createArrayType(DataTypes.StringType), Types::set, "");
            case "uuid":
                return new ColumnType(DataTypes.StringType, sized(bytes(binaryFormat), 16, Types::uuid), "");
            case "inet6":
                return new ColumnType(DataTypes.StringType, sized(bytes(binaryFormat), 16, Types::inet6), "");
            case "inet4":
                return new ColumnType(DataTypes.StringType, sized(bytes(binaryFormat), 4, Types::inet4), "");
            default:
                break;
        }
        if (BINARIES.contains(name) || name.endsWith("blob")) {
            return new ColumnType(DataTypes.BinaryType, bytes(binaryFormat), "");
        }
        return new ColumnType(DataTypes.StringType, TEXT, ""); // text, ENUM, JSON, any other
    }

    private static BigInteger parseInteger(String text) throws Unrepresentable {
        try {
            return new BigInteger(text.strip());
        } catch (NumberFormatException e) {
            throw new Unrepresentable();
        }
    }

    private static long ranged(String text, long lo, long hi) throws Unrepresentable {
        long value;
        try {
            value = Long.parseLong(text);
        } catch (NumberFormatException e) {
            BigInteger big = parseInteger(text); // spaces around it, or beyond a long: out of range below if so
            if (big.bitLength() > 63) {
                throw new Unrepresentable();
            }
            value = big.longValue();
        }
        if (value < lo || value > hi) {
            throw new Unrepresentable();
        }
        return value;
    }

    private static ColumnType integer(DataType spark, long lo, long hi) {
        Converter convert;
        if (spark == DataTypes.ByteType) {
            convert = text -> (byte) ranged(text, lo, hi);
        } else if (spark == DataTypes.ShortType) {
            convert = text -> (short) ranged(text, lo, hi);
        } else if (spark == DataTypes.IntegerType) {
            convert = text -> (int) ranged(text, lo, hi);
        } else {
            convert = text -> ranged(text, lo, hi);
        }
        return new ColumnType(spark, convert, "[" + lo + "," + hi + "]");
    }

    private static ColumnType unsigned64() {
        return new ColumnType(DataTypes.createDecimalType(20, 0), text -> {
            BigInteger value = parseInteger(text);
            if (value.signum() < 0 || value.compareTo(U64) > 0) {
                throw new Unrepresentable();
            }
            return Decimal.apply(new BigDecimal(value), 20, 0);
        }, "[0," + U64 + "]");
    }

    private static ColumnType bit(int width) {
        if (width == 1) {
            return new ColumnType(DataTypes.BooleanType, text -> ranged(text, 0, 1) == 1, "");
        }
        return width < 64 ? integer(DataTypes.LongType, 0, (1L << width) - 1) : unsigned64();
    }

    private static Converter decimal(int precision, int scale) {
        BigDecimal limit = BigDecimal.TEN.pow(precision - scale);
        return text -> {
            BigDecimal value;
            try {
                value = new BigDecimal(text.strip()).setScale(scale);
            } catch (NumberFormatException | ArithmeticException e) { // not a number, or more digits than the scale
                throw new Unrepresentable();
            }
            if (value.abs().compareTo(limit) >= 0) {
                throw new Unrepresentable();
            }
            return Decimal.apply(value, precision, scale);
        };
    }

    private static double toDouble(String text) throws Unrepresentable {
        try {
            return Double.parseDouble(text);
        } catch (NumberFormatException e) {
            throw new Unrepresentable();
        }
    }

    private static LocalDate toDate(String text) throws Unrepresentable {
        Matcher m = DATE.matcher(text);
        if (!m.matches()) {
            throw new Unrepresentable();
        }
        int year = Integer.parseInt(m.group(1));
        try {
            if (year < 1) {
                throw new Unrepresentable(); // Python's dates start at year 1
            }
            return LocalDate.of(year, Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)));
        } catch (DateTimeException e) {
            throw new Unrepresentable();
        }
    }

    private static int fraction(String digits) {
        return digits == null ? 0 : Integer.parseInt((digits + "00000").substring(0, 6));
    }

    private static LocalDateTime toDateTime(String text) throws Unrepresentable {
        Matcher m = DATETIME.matcher(text);
        if (!m.matches() || Integer.parseInt(m.group(1)) < 1) {
            throw new Unrepresentable();
        }
        try {
            return LocalDateTime.of(Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2)),
                Integer.parseInt(m.group(3)), Integer.parseInt(m.group(4)), Integer.parseInt(m.group(5)),
                Integer.parseInt(m.group(6)), fraction(m.group(7)) * 1000);
        } catch (DateTimeException e) {
            throw new Unrepresentable();
        }
    }

    private static long micros(LocalDateTime wall, ZoneOffset offset) {
        return wall.toEpochSecond(offset) * 1_000_000L + wall.getNano() / 1000;
    }

    /** TIMESTAMP: the DC's text is the wall time in the channel's zone; a wall time the zone shows twice, or never
     * (the hour skipped), names no single instant. */
    private static Converter timestamp(ZoneId tz) {
        return text -> {
            LocalDateTime wall = toDateTime(text);
            List<ZoneOffset> offsets = tz.getRules().getValidOffsets(wall);
            if (offsets.size() != 1) {
                throw new Unrepresentable();
            }
            return micros(wall, offsets.get(0));
        };
    }

    private static Object toTime(String text) throws Unrepresentable {
        Matcher m = TIME.matcher(text);
        if (!m.matches()) {
            throw new Unrepresentable();
        }
        long us = ((Long.parseLong(m.group(2)) * 60 + Long.parseLong(m.group(3))) * 60 + Long.parseLong(m.group(4)))
            * 1_000_000L + fraction(m.group(5));
        return m.group(1).isEmpty() ? us : -us;
    }

    private static Object set(String text) {
        String[] labels = text.isEmpty() ? new String[0] : text.split(",", -1);
        Object[] values = new Object[labels.length];
        for (int i = 0; i < labels.length; i++) {
            values[i] = UTF8String.fromString(labels[i]);
        }
        return new GenericArrayData(values);
    }

    /** A binary decoder that gives the bytes (a converter of its own: binary columns). */
    private interface Decoder extends Converter {
        @Override
        byte[] convert(String text) throws Unrepresentable;
    }

    private static Decoder bytes(String binaryFormat) {
        if (binaryFormat.equals("base64")) {
            return text -> {
                if (text.length() % 4 != 0) { // Python's b64decode(validate=True) wants the padding
                    throw new Unrepresentable();
                }
                try {
                    return Base64.getDecoder().decode(text);
                } catch (IllegalArgumentException e) {
                    throw new Unrepresentable();
                }
            };
        }
        return text -> {
            if (text.length() % 2 != 0) {
                throw new Unrepresentable();
            }
            byte[] out = new byte[text.length() / 2];
            for (int i = 0; i < out.length; i++) {
                int high = Character.digit(text.charAt(2 * i), 16);
                int low = Character.digit(text.charAt(2 * i + 1), 16);
                if (high < 0 || low < 0) {
                    throw new Unrepresentable();
                }
                out[i] = (byte) (high << 4 | low);
            }
            return out;
        };
    }

    /** Text of a fixed number of bytes, shown by {@code show}. */
    private interface Show extends Serializable {
        String show(byte[] raw);
    }

    private static Converter sized(Decoder decode, int size, Show show) {
        return text -> {
            byte[] raw = decode.convert(text);
            if (raw.length != size) {
                throw new Unrepresentable();
            }
            return UTF8String.fromString(show.show(raw));
        };
    }

    private static String uuid(byte[] raw) {
        ByteBuffer buffer = ByteBuffer.wrap(raw);
        return new UUID(buffer.getLong(), buffer.getLong()).toString();
    }

    private static String inet4(byte[] raw) {
        try {
            return ((Inet4Address) InetAddress.getByAddress(raw)).getHostAddress();
        } catch (UnknownHostException e) {
            throw new IllegalStateException(e); // four bytes are always an address
        }
    }

    /** INET6 as MariaDB shows it (spark_readers.types.inet6_text): RFC 5952, IPv4-mapped and IPv4-compatible
     * addresses dotted. */
    static String inet6(byte[] raw) {
        boolean zeros10 = true;
        for (int i = 0; i < 10; i++) {
            zeros10 &= raw[i] == 0;
        }
        boolean mapped = (raw[10] & 0xff) == 0xff && (raw[11] & 0xff) == 0xff;
        boolean compatible = raw[10] == 0 && raw[11] == 0;
        if (zeros10 && (mapped || compatible) && (mapped || raw[12] != 0 || raw[13] != 0)) {
            byte[] v4 = {raw[12], raw[13], raw[14], raw[15]};
            return "::" + (mapped ? "ffff:" : "") + inet4(v4);
        }
        int[] groups = new int[8];
        for (int i = 0; i < 8; i++) {
            groups[i] = (raw[2 * i] & 0xff) << 8 | (raw[2 * i + 1] & 0xff);
        }
        int bestStart = -1;
        int bestLength = 0;
        for (int i = 0; i < 8; ) {
            int j = i;
            while (j < 8 && groups[j] == 0) {
                j++;
            }
            if (j - i > bestLength) {
                bestStart = i;
                bestLength = j - i;
            }
            i = j == i ? i + 1 : j;
        }
        if (bestLength < 2) {
            bestStart = -1;
        }
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < 8; i++) {
            if (i == bestStart) {
                out.append(i == 0 ? "::" : ":");
                i += bestLength - 1;
                continue;
            }
            out.append(Integer.toHexString(groups[i]));
            if (i < 7) {
                out.append(':');
            }
        }
        return out.toString();
    }
}
