package gate.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * format("gate") in the JVM, found by Spark's ServiceLoader (META-INF/services). A read with the option table (a
 * typed change stream of one table, spark_readers.typed) goes to the Python data source registered as
 * "gate_python" by spark_readers.register; every other read is a {@link GateTable}.
 */
public final class GateProvider implements TableProvider, DataSourceRegister {
    static final String PYTHON = "gate_python";
    private TableProvider typed; // with the option table: the Python source, once asked

    @Override
    public String shortName() {
        return "gate";
    }

    private TableProvider typed(Map<String, String> options) {
        if (typed == null && new CaseInsensitiveStringMap(options).containsKey("table")) {
            PythonDataSourceV2 python = new PythonDataSourceV2();
            python.setShortName(PYTHON);
            typed = python;
        }
        return typed;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        TableProvider python = typed(options);
        return python != null ? python.inferSchema(options) : Rows.SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        TableProvider python = typed(properties);
        if (python != null) {
            return python.getTable(schema, partitioning, properties);
        }
        return new GateTable(Settings.of(new CaseInsensitiveStringMap(properties)));
    }
}
