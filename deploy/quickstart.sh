#!/usr/bin/env bash
# The main job: a local cluster trains a recommender model.
#
# Sets up and builds (optimised), generates about 1M rows of synthetic click data from a known
# teacher model (plus a held-out file), starts a coordinator, 2 servers and 2 workers on loopback,
# trains in sync mode, and prints the held-out AUC beside the teacher's. Everything it starts is
# stopped on exit, Ctrl-C or failure. Logs: out/quickstart/logs/. The last line is
#   RESULT {"heldout_auc":...,"teacher_auc":...,"samples_per_s":...,"workers":2,"servers":2,...}
#
# Environment: JOB (default deploy/jobs/quickstart.pbtxt), ROWS (default 1000000), DATAGEN_FLAGS
# (ps_datagen flags; default "--cardinalities=1000": 1000 distinct ids per field, each seen often
# enough in 1M rows to be learnt; with 10000 the rare ids cost the learner about 0.02 of AUC).
set -euo pipefail
cd "$(dirname "$0")/.."

job=${JOB:-deploy/jobs/quickstart.pbtxt}
rows=${ROWS:-1000000}
out=out/quickstart
logs=$out/logs

./deploy/setup.sh
echo "quickstart: building optimised binaries"
bazel build -c opt //client:ps_ctl //server:ps_server //server/coordinator:ps_coordinator \
  //worker:ps_worker //worker/tools:ps_datagen 2>&1 | tail -n 1
bin=bazel-out/k8-opt/bin

"$bin/client/ps_ctl" validate "$job"

rm -rf "$logs"
mkdir -p "$logs" out/data
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'echo "quickstart: interrupted"; exit 130' INT TERM
fail() {
  echo "quickstart: $1 (logs in $logs/)" >&2
  for f in "$logs"/*.log; do echo "--- $f"; tail -n 5 "$f"; done >&2
  exit 1
}

echo "quickstart: generating $rows training rows and $((rows / 10)) held-out rows"
teacher=$("$bin/worker/tools/ps_datagen" --rows="$rows" --heldout_rows=$((rows / 10)) \
  --out=out/data/train.tsv --heldout_out=out/data/heldout.tsv ${DATAGEN_FLAGS:---cardinalities=1000}) ||
  fail "ps_datagen failed"
echo "quickstart: teacher $teacher"

"$bin/server/coordinator/ps_coordinator" --job="$job" --port_file="$logs/coordinator.port" \
  >"$logs/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  [[ -s "$logs/coordinator.port" ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || fail "the coordinator exited"
  sleep 0.1
done
[[ -s "$logs/coordinator.port" ]] || fail "the coordinator did not start"
coordinator=127.0.0.1:$(cat "$logs/coordinator.port")
echo "quickstart: coordinator on $coordinator; starting 2 servers and 2 workers"

for i in 0 1; do
  "$bin/server/ps_server" --coordinator="$coordinator" >"$logs/server$i.log" 2>&1 &
  pids+=($!)
done
workers=()
# The workers share this machine's cores for their matrix products.
threads=$(( $(nproc) / 2 ))
(( threads >= 1 )) || threads=1
for i in 0 1; do
  "$bin/worker/ps_worker" --coordinator="$coordinator" --rank=$i --compute_threads=$threads \
    --metrics_file="$logs/metrics$i.jsonl" >"$logs/worker$i.out" 2> >(tee "$logs/worker$i.log" >&2) &
  workers+=($!)
  pids+=($!)
done
for pid in "${workers[@]}"; do
  wait "$pid" || fail "a worker failed"
done

result=$(grep '^RESULT ' "$logs/worker0.out" | tail -n 1 | sed 's/^RESULT //')
[[ -n "$result" ]] || fail "worker 0 printed no result"
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -n 1; }
echo "quickstart: logs and metrics in $logs/"
echo "RESULT {$(field heldout_auc "$result"),$(field teacher_auc "$teacher"),$(field heldout_logloss "$result"),$(field teacher_logloss "$teacher"),$(field samples_per_s "$result"),$(field steps "$result"),$(field workers "$result"),$(field servers "$result")}"
