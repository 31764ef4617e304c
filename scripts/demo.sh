#!/usr/bin/env bash
# The demo: start the sandbox servers, fill database shop on the source with a workload, allocate
# channel "demo" for the sandbox source and standby on the sandbox DC, run gate on it, snapshot shop's
# tables while changes stream, and show what arrives.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${GATE_VENV:-.venv}  # the environment gate is installed in (scripts/setup.sh makes .venv)
gate=$venv/bin/gate
dc_sql() { mariadb -h 127.0.0.1 -P 33063 -u root demo --table -e "$1"; }

$gate sandbox up
echo
if $gate channel show demo >/dev/null 2>&1; then
    $gate channel drop demo --yes
fi
mariadb -h 127.0.0.1 -P 33061 -u root -e 'DROP DATABASE IF EXISTS shop'
echo "== a workload on the source before the channel exists: 300 random transactions in database shop"
$gate sandbox load --db shop --transactions 300
# --snapshot: the rows shop already holds reach the channel through an initial snapshot of each table.
$gate channel create demo --source 127.0.0.1:33061 --standby 127.0.0.1:33062 --snapshot
$gate channel set-position demo --now >/dev/null

mkdir -p .state
echo
echo "== gate run demo (log: .state/demo-gate.log)"
$gate run demo >.state/demo-gate.log 2>&1 &
gate_pid=$!
trap 'kill -TERM $gate_pid 2>/dev/null || true' EXIT
sleep 2

tables=$(mariadb -h 127.0.0.1 -P 33061 -u root -N -e \
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'shop' ORDER BY 1")
echo "== initial snapshot of shop's tables, taken up by gate run: $(echo $tables)"
for _ in $(seq 1 50); do  # gate takes requests up within 2 s
    waiting=$(mariadb -h 127.0.0.1 -P 33063 -u root demo -N -e "SELECT COUNT(*) FROM gate_snapshot WHERE state = 'requested'")
    [ "$waiting" = 0 ] && break
    sleep 0.1
done
echo "== changes on the source meanwhile"
for t in $tables; do
    mariadb -h 127.0.0.1 -P 33061 -u root shop -e "DELETE FROM \`$t\` WHERE id % 5 = 0; UPDATE \`$t\` SET id = id + 100000 WHERE id % 7 = 0"
done
for _ in $(seq 1 100); do
    left=$(mariadb -h 127.0.0.1 -P 33063 -u root demo -N -e "SELECT COUNT(*) FROM gate_snapshot WHERE state IN ('requested', 'running')")
    [ "$left" = 0 ] && break
    sleep 0.3
done
$gate snapshot demo --status
dc_sql 'SELECT id AS checkpoint_id, tid AS checkpoint_tid FROM transfer_checkpoint'
sleep 1

echo
echo "== gate status demo"
$gate status demo
echo
echo "== the first rows of demo.transfer_data"
dc_sql 'SELECT id, tid, dbname, tablename, create_time, instance_name, optype, LEFT(data, 90) AS data
        FROM transfer_data ORDER BY id LIMIT 8'
echo "== rows per optype"
dc_sql 'SELECT optype, COUNT(*) AS n_rows FROM transfer_data GROUP BY optype ORDER BY optype'

kill -TERM $gate_pid
wait $gate_pid || true
trap - EXIT
echo "== gate stopped (SIGTERM: drained and checkpointed); its log:"
tail -n 4 .state/demo-gate.log

# Load the channel into Parquet with Spark, materialise each table's current rows, and set one table
# next to the source's. Spark's start-up chatter on stderr goes to a log, shown if a command fails.
spark=.state/demo-spark
rm -rf $spark
mkdir -p $spark
spark_run() { "$@" 2>>$spark/spark.log || { cat $spark/spark.log >&2; return 1; }; }
echo
echo "== gate spark-load demo --out $spark/increments   (Spark's log: $spark/spark.log)"
spark_run $gate spark-load demo --out $spark/increments
echo "== gate spark-materialise demo --increments $spark/increments --out $spark/tables"
spark_run $gate spark-materialise demo --increments $spark/increments --out $spark/tables
grep '^skipped' $spark/spark.log || true

# The table: the workload's first table (t0, t1, t2; DDL may have renamed them) that has rows.
src_sql() { mariadb --default-character-set=utf8mb4 -h 127.0.0.1 -P 33061 -u root "$@"; }
# The image's tables are listed in its state, the one-row Delta table _gate (read here with delta-rs).
images=" $($venv/bin/python -c "import json, sys; from deltalake import DeltaTable
state = json.loads(DeltaTable(sys.argv[1]).to_pyarrow_table()['image'][0].as_py())
print(' '.join(n[5:] for n in state['tables'] if n.startswith('shop.')))" $spark/tables/_gate) "
table=""
for t in t0 t1 t2 $images; do
    if [[ "$images" == *" $t "* ]] && [ "$(src_sql -N -e "SELECT COUNT(*) > 0 FROM shop.\`$t\`")" = 1 ]; then
        table=$t
        break
    fi
done
[ -n "$table" ] || { echo "no materialised table of shop has rows on the source" >&2; exit 1; }
# Every column as text (binary ones in base64, as gate writes them), cut to 23 characters; by primary key.
as_text="IF(data_type LIKE '%binary' OR data_type LIKE '%blob', CONCAT('TO_BASE64(\`', column_name, '\`)'),
                CONCAT('CAST(\`', column_name, '\` AS CHAR)'))"
columns=$(src_sql -N -e "SELECT GROUP_CONCAT(CONCAT('LEFT(', $as_text, ', 23) AS \`', column_name, '\`')
                                              ORDER BY ordinal_position)
                         FROM information_schema.columns WHERE table_schema = 'shop' AND table_name = '$table'")
pk=$(src_sql -N -e "SELECT GROUP_CONCAT(CONCAT('\`$table\`.\`', column_name, '\`') ORDER BY seq_in_index)
                    FROM information_schema.statistics
                    WHERE table_schema = 'shop' AND table_name = '$table' AND index_name = 'PRIMARY'")
echo
echo "== shop.$table on the source (first 8 rows by primary key; values as text, cut to 23 characters)"
src_sql --table -e "SELECT $columns FROM shop.\`$table\` ORDER BY $pk LIMIT 8"
echo "== shop.$table materialised in $spark/tables/shop/$table (a Delta Lake table, typed columns), the same rows"
DEMO_SPARK=$spark DEMO_TABLE=$table spark_run $venv/bin/python - <<'PY'
import base64
import os
import unicodedata

import pymysql

from spark_readers.image import read_image
from spark_readers.session import spark_session

spark_dir, table = os.environ["DEMO_SPARK"], os.environ["DEMO_TABLE"]
source = pymysql.connect(host="127.0.0.1", port=33061, user="root", database="shop", charset="utf8mb4")
with source.cursor() as cur:
    cur.execute("SELECT column_name FROM information_schema.statistics WHERE table_schema = 'shop' "
                "AND table_name = %s AND index_name = 'PRIMARY' ORDER BY seq_in_index", (table,))
    pk = [row[0] for row in cur.fetchall()]
    cur.execute(f"SELECT * FROM `{table}`")  # PyMySQL's values: int, Decimal, float, datetime, bytes, str
    columns = [d[0] for d in cur.description]
    source_rows = {tuple(row[columns.index(c)] for c in pk): row for row in cur.fetchall()}

spark = spark_session("local[2]")
spark.sparkContext.setLogLevel("ERROR")
image = read_image(spark, f"{spark_dir}/tables")[f"shop.{table}"]
types = {f.name: f.dataType.simpleString() for f in image.schema.fields}
same_columns = [c.lower() for c in image.columns] == [c.lower() for c in columns] + ["_invalid"]
image_rows = {}
for row in (image.collect() if same_columns else []):
    values = tuple(bytes(v) if isinstance(v, bytearray) else v for v in row[:len(columns)])
    image_rows[tuple(values[columns.index(c)] for c in pk)] = values
spark.stop()

# The image's first rows by primary key, as an aligned table (values as text, cut to 23 characters).
def cells(text):
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
def text(value):  # binary values in base64, as the source listing above shows them
    return "NULL" if value is None else base64.b64encode(value).decode() if isinstance(value, bytes) else str(value)
shown = [[text(v)[:23] for v in image_rows[k]] for k in sorted(image_rows)[:8]]
header = [f"{c}: {types[c]}"[:23] for c in columns]
widths = [max([cells(h)] + [cells(row[i]) for row in shown]) for i, h in enumerate(header)]
rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
def line(values):
    return "| " + " | ".join(v + " " * (w - cells(v)) for v, w in zip(values, widths)) + " |"
print("\n".join([rule, line(header), rule, *map(line, shown), rule]))

if not same_columns:
    print(f"columns differ: source {columns}, materialised {image.columns}")
differ = [(k, c) for k in sorted(set(source_rows) | set(image_rows), key=repr) for i, c in enumerate(columns)
          if k not in source_rows or k not in image_rows or source_rows[k][i] != image_rows[k][i]]
for key, column in differ[:3]:
    print(f"differs: key {key} column {column}: source {source_rows.get(key, ('missing',) * len(columns))[columns.index(column)]!r}, "
          f"image {image_rows.get(key, ('missing',) * len(columns))[columns.index(column)]!r}")
print(f"shop.{table}: source rows: {len(source_rows)}, materialised rows: {len(image_rows)}, identical: "
      f"{'yes' if same_columns and not differ else 'no'} (all rows, every column compared by value, "
      f"PyMySQL's against Spark's: {', '.join(f'{c} {types.get(c)}' for c in columns)})")
PY
cat <<'NEXT'

Try next:
  .venv/bin/gate run demo                         (Ctrl-C stops it cleanly)
  .venv/bin/gate sandbox load --transactions 1000 (in another terminal)
  .venv/bin/gate status demo
  .venv/bin/gate --json channel show demo
  .venv/bin/gate sandbox down                     (stops the servers; --remove also deletes them)
NEXT
