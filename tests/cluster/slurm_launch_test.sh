#!/usr/bin/env bash
# ps_launch's SLURM backend on a real Slurm cluster (slurmctld, two slurmd nodes each in its own
# network namespace, munge: tests/cluster/slurm_cluster.sh): one sbatch job runs the coordinator,
# 2 servers and 2 workers of the quickstart's job as srun steps, to its RESULT line. Then `status`
# and `stop` of a running Slurm run. Runs as root, outside Bazel's sandbox, from the runfiles root.
set -euo pipefail

root=$PWD
# shellcheck source=tests/cluster/checks.sh
source "$root/tests/cluster/checks.sh"
launch=$root/deploy/launch/ps_launch
datagen=$root/worker/tools/ps_datagen
slurm_sh=$root/tests/cluster/slurm_cluster.sh
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/slurm_launch.XXXXXX")
# munged's socket path must be short (108 bytes) and reachable by every user.
state=$(mktemp -d /tmp/slurm.XXXXXX)
chmod 755 "$state"

trap '"$slurm_sh" down "$state" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT

"$slurm_sh" up "$state" 2
# shellcheck disable=SC1091
source "$state/env"
sinfo

rows=${SLURM_LAUNCH_ROWS:-100000}
mkdir -p "$work/out/data"
teacher=$("$datagen" --rows="$rows" --heldout_rows=$((rows / 10)) --cardinalities=1000 \
  --out="$work/out/data/train.tsv" --heldout_out="$work/out/data/heldout.tsv")
cp "$root/deploy/jobs/quickstart.pbtxt" "$work/job.pbtxt"
cat >"$work/cluster.pbtxt" <<PB
backend: SLURM
bin_dir: "$root"
work_dir: "$work"
slurm { nodes: 2 partition: "$SLURM_CLUSTER_PARTITION" time: "10:00" }
worker_flags: "--progress_s=1"
PB

check "check accepts the description" "$launch" check --job="$work/job.pbtxt" \
  --cluster="$work/cluster.pbtxt"
out=$("$launch" run --job="$work/job.pbtxt" --cluster="$work/cluster.pbtxt" \
  --run_dir="$work/run") && rc=0 || rc=$?
echo "$out"
check "the Slurm job ran to its end" test "$rc" = 0
result=$(grep '^RESULT ' <<<"$out" | tail -n 1)
auc=$(field heldout_auc "$result")
teacher_auc=$(field teacher_auc "$teacher")
echo "held-out AUC $auc (teacher $teacher_auc)"
check "worker 0 reports 2 workers and 2 servers" grep -q '"workers":2,"servers":2' <<<"$result"
# 100k rows: about 0.06 under the teacher; a model that learnt nothing sits at 0.5.
check "the model learnt (held-out AUC >= teacher - 0.1)" \
  awk -v a="$auc" -v t="$teacher_auc" 'BEGIN { exit !(a != "" && a >= t - 0.1) }'
logs=$work/run/logs
for f in coordinator server0 server1 worker0 worker1; do
  check "$f wrote its log" test -s "$logs/$f.log"
done
cat "$logs/sbatch.log"
check "the sbatch script recorded the workers' status" test "$(cat "$work/run/exit_status")" = 0
# The servers advertised addresses of the nodes' own namespaces, not loopback.
check "the servers advertised the nodes' addresses" \
  bash -c "! grep -h 'ps_server .* listening on' $logs/server*.log | grep -q '127\\.'"
grep -h "listening on" "$logs"/*.log

# status and stop of a running Slurm run.
sed 's/epochs: 2/epochs: 100/' "$work/job.pbtxt" >"$work/long.job.pbtxt"
"$launch" run --job="$work/long.job.pbtxt" --cluster="$work/cluster.pbtxt" \
  --run_dir="$work/run_long" >"$work/long.out" 2>"$work/long.err" &
launcher=$!
status=""
for _ in $(seq 1 600); do
  status=$("$launch" status "$work/run_long" 2>&1 || true)
  grep -q "RUNNING" <<<"$status" && grep -qs "step " "$work/run_long/logs/worker1.log" && break
  sleep 0.1
done
echo "$status"
check "status shows the Slurm job running" grep -q "slurm job [0-9]*: RUNNING" <<<"$status"
check "status shows the workers' step on both nodes" grep -q "ps_worker .*node\[1-2\]" <<<"$status"
if ! grep -q "slurm job [0-9]*: RUNNING" <<<"$status"; then  # why the run ended early
  tail -n 20 "$work/long.err"
  for log in "$work"/run_long/logs/*.log; do echo "--- $log" && tail -n 8 "$log"; done
fi
check "stop succeeds" "$launch" stop "$work/run_long"
wait "$launcher" && rc=0 || rc=$?
check "the launcher ended on stop (status $rc)" test "$rc" = 143
for _ in $(seq 1 300); do
  [[ -z "$(squeue -h)" ]] && break
  sleep 0.1
done
check "the Slurm job was cancelled" test -z "$(squeue -h)"

checks_done
