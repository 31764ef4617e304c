package gate.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The DC section of gate's config file (host, port, user, password, tls), as gate.common.config reads it:
 * {@code ${NAME}} and {@code ${NAME:-default}} references expanded, relative TLS paths taken from the file's
 * folder. gate itself checks the rest of the file.
 */
final class DcConfig {
    private static final Pattern REFERENCE = Pattern.compile("\\$\\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\\}");

    String host = "127.0.0.1";
    int port = 3306;
    String user = "root";
    String password = "";
    String mode = "preferred";
    String ca;
    String cert;

    /** The file {@code path}, else $GATE_CONFIG, else ./config.yaml; built-in defaults if none exists. */
    static DcConfig load(String path) {
        String env = System.getenv("GATE_CONFIG");
        String given = path != null ? path : (env != null && !env.isEmpty() ? env : null);
        Path chosen = Paths.get(given != null ? given : "config.yaml").toAbsolutePath();
        DcConfig config = new DcConfig();
        if (!Files.exists(chosen)) {
            if (given != null) {
                throw new Errors.ConfigError("config file " + given + " does not exist. Pass the option config "
                    + "with the path of your config.yaml.");
            }
            return config;
        }
        JsonNode dc;
        try {
            JsonNode root = new ObjectMapper(new YAMLFactory()).readTree(chosen.toFile());
            dc = root == null ? null : root.get("dc");
        } catch (IOException e) {
            throw new Errors.ConfigError(chosen + " is not a YAML file gate can read: " + e.getMessage()
                + ". Check it with 'gate --config " + chosen + " channel list'.");
        }
        if (dc == null || dc.isNull()) {
            return config;
        }
        config.host = text(dc, "host", config.host);
        config.port = Integer.parseInt(text(dc, "port", String.valueOf(config.port)));
        config.user = text(dc, "user", config.user);
        config.password = text(dc, "password", config.password);
        JsonNode tls = dc.get("tls");
        if (tls != null && !tls.isNull()) {
            Path base = chosen.getParent();
            config.mode = text(tls, "mode", config.mode);
            config.ca = file(base, text(tls, "ca", null));
            config.cert = file(base, text(tls, "cert", null));
        }
        return config;
    }

    private static String text(JsonNode section, String key, String fallback) {
        JsonNode value = section.get(key);
        return value == null || value.isNull() ? fallback : expand(value.asText(), key);
    }

    private static String file(Path base, String value) {
        return value == null || value.isBlank() ? null : base.resolve(value).toAbsolutePath().toString();
    }

    /** {@code ${NAME}} / {@code ${NAME:-default}} replaced as gate.common.config.expand_env does. */
    static String expand(String text, String where) {
        Matcher m = REFERENCE.matcher(text);
        StringBuilder out = new StringBuilder();
        while (m.find()) {
            String value = System.getenv(m.group(1));
            if (value == null || value.isEmpty()) {
                if (m.group(2) == null) {
                    throw new Errors.ConfigError("dc." + where + " refers to the environment variable " + m.group(1)
                        + ", which is " + (value == null ? "not set" : "set but empty") + ". Export " + m.group(1)
                        + "=... in the driver's environment or give a default as ${" + m.group(1) + ":-value}.");
                }
                value = m.group(2);
            }
            m.appendReplacement(out, Matcher.quoteReplacement(value));
        }
        m.appendTail(out);
        return out.toString();
    }

    /** Connector/J 2.7's properties for the TLS settings, as gate.common.tls.TlsSettings.jdbc_properties. */
    Map<String, String> jdbcTls() {
        Map<String, String> properties = new LinkedHashMap<>();
        boolean encrypting = mode.equals("required") || mode.equals("verify-ca") || mode.equals("verify-identity");
        if (!encrypting) {
            properties.put("useSsl", "false");
            return properties;
        }
        if (cert != null) {
            throw new Errors.InvalidValue("The JVM format(\"gate\") reads with MariaDB Connector/J 2.7, which cannot "
                + "use a PEM client certificate and key (dc.tls.cert). Read with format(\"gate_python\"), which "
                + "uses them, or give the DC account no REQUIRE X509.");
        }
        properties.put("useSsl", "true");
        if (mode.equals("required")) {
            properties.put("trustServerCertificate", "true");
            return properties;
        }
        if (ca != null) {
            properties.put("serverSslCert", ca);
        }
        if (mode.equals("verify-ca")) {
            properties.put("disableSslHostnameVerification", "true");
        }
        return properties;
    }
}
