package gate.spark;

import java.io.Serializable;
import java.sql.Connection;
import java.sql.Driver;
import java.sql.SQLException;
import java.util.Map;
import java.util.Properties;

/**
 * Where the channel database is, with the password resolved on the driver. It travels to the executors inside
 * the reader factory; {@link #toString} leaves the password out, so it never reaches plans or logs.
 */
public final class Login implements Serializable {
    private static final long serialVersionUID = 1L;
    static final String DRIVER = "org.mariadb.jdbc.Driver"; // MariaDB Connector/J, as the JDBC reader uses

    final String host;
    final int port;
    final String user;
    final String channel;
    private final String password;
    private final Map<String, String> tls; // Connector/J's TLS properties (DcConfig.jdbcTls)

    Login(String host, int port, String user, String channel, String password, Map<String, String> tls) {
        this.host = host;
        this.port = port;
        this.user = user;
        this.channel = channel;
        this.password = password;
        this.tls = tls;
    }

    /** A connection to the channel database, autocommit, utf8mb4. */
    Connection connect() {
        Properties properties = new Properties();
        properties.putAll(tls);
        properties.setProperty("user", user);
        properties.setProperty("password", password);
        properties.setProperty("connectTimeout", "10000");
        // gate's read timeout (READ_TIMEOUT in gate/common/config.py, in ms): a silent DC link fails the task
        properties.setProperty("socketTimeout", "120000");
        String url = "jdbc:mariadb://" + host + ":" + port + "/" + channel;
        try {
            Driver driver = (Driver) Class.forName(DRIVER, true, Thread.currentThread().getContextClassLoader())
                .getDeclaredConstructor().newInstance();
            Connection conn = driver.connect(url, properties);
            conn.setAutoCommit(true);
            return conn;
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("format(\"gate\") needs MariaDB Connector/J (" + DRIVER + ") on the "
                + "classpath of the driver and the executors: add /usr/share/java/mariadb-java-client.jar to "
                + "--jars (spark_readers.session does).", e);
        } catch (SQLException e) {
            throw new Errors.DcFailed("Cannot connect to the DC " + host + ":" + port + " as " + user + " for "
                + "channel '" + channel + "': " + e.getMessage(), e);
        }
    }

    @Override
    public String toString() {
        return "Login(" + user + "@" + host + ":" + port + "/" + channel + ")";
    }
}
