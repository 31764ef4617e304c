#!/usr/bin/env bash
# The demo: start the sandbox servers, allocate channel "demo" for the sandbox source and standby on
# the sandbox DC, run gate on it while a workload writes on the source, and show what arrives.
set -euo pipefail
cd "$(dirname "$0")/.."
gate=.venv/bin/gate
dc_sql() { mariadb -h 127.0.0.1 -P 33063 -u root demo --table -e "$1"; }

$gate sandbox up
echo
if $gate channel show demo >/dev/null 2>&1; then
    $gate channel drop demo --yes
fi
mariadb -h 127.0.0.1 -P 33061 -u root -e 'DROP DATABASE IF EXISTS shop'
$gate channel create demo --source 127.0.0.1:33061 --standby 127.0.0.1:33062
$gate channel set-position demo --now >/dev/null

mkdir -p .state
echo
echo "== gate run demo (log: .state/demo-gate.log)"
$gate run demo >.state/demo-gate.log 2>&1 &
gate_pid=$!
trap 'kill -TERM $gate_pid 2>/dev/null || true' EXIT
sleep 2

echo "== a workload on the source: 300 random transactions in database shop"
$gate sandbox load --db shop --transactions 300 &
load_pid=$!
for _ in 1 2 3; do
    sleep 0.7
    dc_sql 'SELECT id AS checkpoint_id, tid AS checkpoint_tid FROM transfer_checkpoint'
done
wait $load_pid
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
cat <<'NEXT'

Try next:
  .venv/bin/gate run demo                         (Ctrl-C stops it cleanly)
  .venv/bin/gate sandbox load --transactions 1000 (in another terminal)
  .venv/bin/gate status demo
  .venv/bin/gate --json channel show demo
  .venv/bin/gate sandbox down                     (stops the servers; --remove also deletes them)
NEXT
