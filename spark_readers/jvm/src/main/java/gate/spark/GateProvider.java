package gate.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * format("gate") in the JVM, found by Spark's ServiceLoader (META-INF/services): every read is a {@link GateTable},
 * of the channel's rows or, with the option table, of one table's changes typed ({@link TypedTable}).
 */
public final class GateProvider implements TableProvider, DataSourceRegister {
    private TypedTable typed; // with the option table: its columns where the query starts, once known

    @Override
    public String shortName() {
        return "gate";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        if (!options.containsKey("table")) {
            return Rows.SCHEMA;
        }
        typed = TypedTable.plan(Settings.of(options));
        return typed.schema();
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        Settings settings = Settings.of(new CaseInsensitiveStringMap(properties));
        if (settings.table == null) {
            return new GateTable(settings, null);
        }
        TypedTable table = typed != null ? typed : TypedTable.plan(settings); // planned in another instance
        if (!table.schema().equals(schema)) {
            throw new Errors.TableSchemaChanged("The columns of " + table.table() + " changed between load() and the "
                + "start of the query (now " + table.names() + "): call load() again.");
        }
        return new GateTable(settings, table);
    }
}
