#!/usr/bin/env bash
# The main job: a local cluster trains a recommender model.
#
# Sets up and builds (optimised), generates about 1M rows of synthetic click data from a known
# teacher model (plus a held-out file), and runs the job with the launcher's LOCAL backend
# (deploy/clusters/local.pbtxt: a coordinator, 2 servers and 2 workers on loopback), which trains
# in sync mode; prints the held-out AUC beside the teacher's. Everything it starts is stopped on
# exit, Ctrl-C or failure. Run folder: out/quickstart/ (logs/, run.pbtxt, the workers' metrics
# every second, and the training report deploy/report/report.py draws from them: report.html and
# its plots). The last line is
#   RESULT {"heldout_auc":...,"teacher_auc":...,"samples_per_s":...,"workers":2,"servers":2,...}
#
# Environment: JOB (default deploy/jobs/quickstart.pbtxt), ROWS (default 1000000), DATAGEN_FLAGS
# (ps_datagen flags; default "--cardinalities=1000": 1000 distinct ids per field, each seen often
# enough in 1M rows to be learnt; with 10000 the rare ids cost the learner about 0.02 of AUC).
# The data goes to the job's first train_paths and eval_paths; a job with a data.schema (the
# model families' jobs in deploy/jobs/) gets data of its schema from a teacher of its own model
# (ps_datagen --job), e.g. JOB=deploy/jobs/deepfm.pbtxt ./deploy/quickstart.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

job=${JOB:-deploy/jobs/quickstart.pbtxt}
rows=${ROWS:-1000000}
out=out/quickstart

./deploy/setup.sh
echo "quickstart: building optimised binaries"
bazel build -c opt //client:ps_ctl //server:ps_server //server/coordinator:ps_coordinator \
  //worker:ps_worker //worker/tools:ps_datagen //deploy/launch:ps_launch 2>&1 | tail -n 1
bin=bazel-out/k8-opt/bin

path_of() { sed -n "s/^ *$1: \"\(.*\)\"/\1/p" "$job" | head -n 1; }
train=$(path_of train_paths)
heldout=$(path_of eval_paths)
[[ -n "$train" && -n "$heldout" ]] || { echo "quickstart: $job names no train_paths or eval_paths" >&2; exit 1; }
schema_flags=()
if grep -q '^ *schema *{' "$job"; then schema_flags=(--job="$job"); fi
echo "quickstart: generating $rows training rows and $((rows / 10)) held-out rows"
mkdir -p "$(dirname "$train")" "$(dirname "$heldout")"
teacher=$("$bin/worker/tools/ps_datagen" --rows="$rows" --heldout_rows=$((rows / 10)) \
  --out="$train" --heldout_out="$heldout" "${schema_flags[@]}" ${DATAGEN_FLAGS:---cardinalities=1000})
echo "quickstart: teacher $teacher"
# The job and its data files (ps_ctl reads them to count the job's steps).
"$bin/client/ps_ctl" validate "$job"

# The launcher checks the machine, starts the coordinator, 2 servers and 2 workers on loopback,
# waits for the workers and stops everything (also on Ctrl-C or when a worker fails).
rm -rf "$out"
echo "quickstart: ps_launch run --job=$job --cluster=deploy/clusters/local.pbtxt --run_dir=$out"
launched=$("$bin/deploy/launch/ps_launch" run --job="$job" --cluster=deploy/clusters/local.pbtxt \
  --run_dir="$out") || { echo "quickstart: the run failed (logs in $out/logs/)" >&2; exit 1; }
result=$(grep '^RESULT ' <<<"$launched" | tail -n 1 | sed 's/^RESULT //')
[[ -n "$result" ]] || { echo "quickstart: worker 0 printed no result (logs in $out/logs/)" >&2; exit 1; }
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -n 1; }
echo "quickstart: logs in $out/logs/, metrics in $out/"
# The training report: loss, AUC, samples/s and latencies per worker, over steps and time. A
# report that fails says why and leaves the run's result as it is.
if report=$(/usr/bin/python3 deploy/report/report.py "$out" -o "$out/report.html"); then
  echo "quickstart: report in $report"
else
  echo "quickstart: the training report failed (see above); the run itself succeeded" >&2
fi
echo "RESULT {$(field heldout_auc "$result"),$(field teacher_auc "$teacher"),$(field heldout_logloss "$result"),$(field teacher_logloss "$teacher"),$(field samples_per_s "$result"),$(field steps "$result"),$(field workers "$result"),$(field servers "$result")}"
