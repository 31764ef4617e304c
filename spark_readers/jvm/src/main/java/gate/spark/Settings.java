package gate.spark;

import java.io.Serializable;
import java.util.Map;
import java.util.regex.Pattern;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The checked options of one format("gate") read, as spark_readers.source.settings checks them. */
final class Settings implements Serializable {
    private static final long serialVersionUID = 1L;
    private static final Pattern IDENTIFIER = Pattern.compile("[A-Za-z_][A-Za-z0-9_]{0,63}");

    final Login login;
    final int partitions;
    final Long startingId; // first id to read; null: the oldest kept row
    final Long endingId; // batch: last id to read; null: the checkpoint
    final Long maxRows; // streaming: rows per micro-batch, at most (a larger transaction is kept whole)
    final String consumer; // streaming: the gate_consumer name the committed offset is registered under
    final String table; // "db.table": that table's changes, typed (TypedTable); null: every row

    private Settings(Login login, int partitions, Long startingId, Long endingId, Long maxRows, String consumer,
                     String table) {
        this.login = login;
        this.partitions = partitions;
        this.startingId = startingId;
        this.endingId = endingId;
        this.maxRows = maxRows;
        this.consumer = consumer;
        this.table = table;
    }

    private static Long number(Map<String, String> options, String name, long least) {
        String text = options.get(name);
        if (text == null) {
            return null;
        }
        String digits = text.strip();
        if (!digits.matches("[0-9]{1,18}") || Long.parseLong(digits) < least) {
            throw new Errors.InvalidValue("Option " + name + "='" + text + "' of format(\"gate\") must be a whole "
                + "number of at least " + least + ".");
        }
        return Long.parseLong(digits);
    }

    /** Check the options: channel; the DC from gate's config file or host/port/user; passwordEnv; startingId,
     * endingId, maxRowsPerTrigger, partitions, consumer, table. */
    static Settings of(CaseInsensitiveStringMap options) {
        String channel = options.get("channel");
        if (channel == null) {
            throw new Errors.InvalidValue("format(\"gate\") needs the option channel, e.g. .option(\"channel\", "
                + "\"shop\").");
        }
        if (!IDENTIFIER.matcher(channel).matches()) {
            throw new Errors.InvalidValue("Channel name '" + channel + "' is not a safe identifier. Use 1 to 64 "
                + "letters, digits or underscores, starting with a letter or underscore (no dots, spaces, quotes, "
                + "backticks or semicolons).");
        }
        if (options.containsKey("password")) {
            throw new Errors.InvalidValue("format(\"gate\") takes no password option: options show up in plans and "
                + "logs. Put the password in an environment variable and give its name: .option(\"passwordEnv\", "
                + "\"DC_PW\"), or use gate's config file with a ${ENV} reference.");
        }
        String host = options.get("host");
        DcConfig dc = host == null || options.containsKey("config") ? DcConfig.load(options.get("config"))
            : new DcConfig();
        String password = dc.password;
        String variable = options.get("passwordEnv");
        if (variable != null) {
            password = System.getenv(variable);
            if (password == null) {
                throw new Errors.InvalidValue("format(\"gate\") option passwordEnv names the environment variable "
                    + variable + ", which is not set. Export " + variable + "=... in the driver's environment.");
            }
        }
        Long port = number(options, "port", 1);
        String user = options.get("user");
        Login login = new Login(host != null ? host : dc.host, port != null ? port.intValue() : dc.port,
            user != null ? user : dc.user, channel, password, dc.jdbcTls());
        String consumer = options.get("consumer");
        if (consumer != null && (consumer.isEmpty() || consumer.length() > 64)) {
            throw new Errors.InvalidValue("Consumer name '" + consumer + "' must have 1 to 64 characters.");
        }
        Long partitions = number(options, "partitions", 1);
        return new Settings(login, partitions == null ? 4 : partitions.intValue(), number(options, "startingId", 1),
            number(options, "endingId", 0), number(options, "maxRowsPerTrigger", 1), consumer, options.get("table"));
    }
}
