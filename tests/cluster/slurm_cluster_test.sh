#!/usr/bin/env bash
# Self-test of slurm_cluster.sh: starts a real Slurm cluster of NODES nodes (default 1) in a
# temporary directory, checks what the launcher needs of it, stops it, and checks that no process of
# it is left. Needs root and Debian's slurmctld, slurmd, slurm-client and munge (deploy/setup.sh).
#
#   tests/cluster/slurm_cluster_test.sh [NODES]
#
# Checks, each with a deadline rather than a sleep:
#   - `srun -N1 -n2 hostname` runs two tasks;
#   - a batch job runs two `srun --exact -n1` steps at the same time (each waits for the other to
#     have started), then a third, writes a file, and `sbatch --wait` returns the job's exit code;
#   - the launcher's shape: one coordinator and S=2 servers as long-running `srun --overlap` steps
#     and W=2 workers that run to completion beside them, in one allocation of 1+2+2 = 5 tasks, and
#     the daemon steps end when their srun is sent SIGTERM;
#   - with NODES > 1, `srun -N NODES hostname` prints every node's name;
#   - `down` twice is fine, and leaves no process behind, not even a job that was still running.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/slurm_cluster.sh
nodes=${1:-1}
deadline_s=60

state=$(mktemp -d)
cleanup() {
  "$cluster" down "$state" || true
  rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*" >&2
  for f in "$state"/log/*.log "$state"/work/*.out; do
    [[ -s "$f" ]] && { echo "----- $f"; tail -n 20 "$f"; } >&2
  done
  exit 1
}
pass() { echo "ok: $*"; }

started=$(date +%s.%N)
"$cluster" up "$state" "$nodes"
up_s=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
pass "up with $nodes node(s) in ${up_s}s"
# shellcheck disable=SC1091
source "$state/env"
work=$state/work
mkdir -p "$work"
cd "$work"

# --- srun from outside any allocation.
out=$(timeout "$deadline_s" srun -N1 -n2 hostname) || fail "srun -N1 -n2 hostname failed"
[[ $(wc -l <<<"$out") -eq 2 ]] || fail "srun -N1 -n2 hostname printed '$out'"
pass "srun -N1 -n2 hostname: $(tr '\n' ' ' <<<"$out")"

# --- A batch job with two concurrent steps and a third after them.
# Each of the first two steps announces itself and waits for the other: they pass only if they run
# at the same time.
cat >"$work/concurrent.sh" <<'EOF'
#!/bin/bash
barrier() {  # barrier ME OTHER: announce ME, wait up to 30 s for OTHER
  touch "$1"
  for ((i = 0; i < 300; i++)); do [[ -e "$2" ]] && return 0; sleep 0.1; done
  echo "timed out waiting for $2" >&2
  return 1
}
export -f barrier
srun --exact --ntasks=1 bash -c 'barrier step.a step.b' &
a=$!
srun --exact --ntasks=1 bash -c 'barrier step.b step.a' &
b=$!
wait $a || exit 1
wait $b || exit 2
srun --exact --ntasks=1 bash -c 'echo third > step.c' || exit 3
echo "$SLURM_JOB_ID done" > result.txt
exit 7
EOF
rc=0
timeout "$deadline_s" sbatch --wait --ntasks=2 --output="$work/concurrent.out" \
  "$work/concurrent.sh" >/dev/null || rc=$?
[[ $rc -eq 7 ]] || fail "sbatch --wait returned $rc, not the job's exit code 7"
[[ -s result.txt && $(cat step.c) == third ]] || fail "the batch job did not write its files"
pass "sbatch --wait: two concurrent steps, then a third; exit code 7 returned"

# --- The launcher's shape: 1 coordinator + 2 servers running for the whole job, 2 workers that run
# to completion beside them, 5 tasks in all (more than this machine may have CPUs).
cat >"$work/launcher.sh" <<'EOF'
#!/bin/bash
# Daemon steps: announce themselves, then run until killed.
srun --overlap --ntasks=1 --job-name=coordinator \
  bash -c 'echo $$ > coordinator.$SLURM_PROCID.pid; exec sleep 1000' &
coordinator=$!
srun --overlap --ntasks=2 --job-name=server \
  bash -c 'echo $$ > server.$SLURM_PROCID.pid; exec sleep 1000' &
servers=$!
# Worker step: runs to completion once every daemon is up.
srun --overlap --ntasks=2 --job-name=worker bash -c '
  for ((i = 0; i < 300; i++)); do
    [[ -e coordinator.0.pid && -e server.0.pid && -e server.1.pid ]] && break
    sleep 0.1
  done
  [[ -e coordinator.0.pid && -e server.0.pid && -e server.1.pid ]] || exit 1
  echo "worker $SLURM_PROCID on $(hostname) saw the daemons" > worker.$SLURM_PROCID.out'
rc=$?
# SIGTERM to a daemon step's srun ends its tasks (and the step).
kill -TERM $coordinator $servers
wait $coordinator $servers
exit $rc
EOF
rc=0
timeout "$deadline_s" sbatch --wait --nodes="$nodes" --ntasks=5 --output="$work/launcher.out" \
  "$work/launcher.sh" >/dev/null || rc=$?
[[ $rc -eq 0 ]] || fail "launcher job returned $rc"
[[ -s worker.0.out && -s worker.1.out ]] || fail "a worker did not finish"
for f in coordinator.0.pid server.0.pid server.1.pid; do
  [[ -s $f ]] || fail "$f missing"
done
pass "launcher shape: coordinator + 2 servers (srun --overlap, killed at the end) + 2 workers"

# --- Several nodes, each its own host.
if ((nodes > 1)); then
  out=$(timeout "$deadline_s" srun -N "$nodes" --ntasks-per-node=1 hostname | sort | paste -sd,)
  [[ "$out" == "$(tr ',' '\n' <<<"$SLURM_CLUSTER_NODES" | sort | paste -sd,)" ]] ||
    fail "srun -N $nodes hostname printed '$out', expected $SLURM_CLUSTER_NODES"
  pass "srun -N $nodes hostname: $out"
fi

# --- A job still running at `down`: its batch script and its step must not outlive the cluster.
# Both the script and its sleep name STATE on their command lines, for the check after `down`.
# shellcheck disable=SC2016
printf '%s\n' '#!/bin/bash' '(exec -a "$0.sleep" sleep 1000) &' 'touch "sleeper.$SLURM_STEP_ID"' \
  'wait' >"$work/sleeper.sh"
chmod +x "$work/sleeper.sh"
sbatch --output="$work/sleeper.out" --wrap "srun $work/sleeper.sh" >/dev/null
for ((i = 0; i < 10 * deadline_s; i++)); do [[ -e sleeper.0 ]] && break; sleep 0.1; done
[[ -e sleeper.0 ]] || fail "the long-running job did not start"
pass "a long-running job is running"

# --- down, twice; then nothing of the cluster may be left.
cd /
namespaces=$(sed -n 's/^netns //p' "$state/netns" 2>/dev/null || true)
"$cluster" down "$state"
"$cluster" down "$state"
left=$(
  pgrep -af -- "$state" || true
  find /proc/[0-9]*/fd -maxdepth 1 -lname "$state/*" 2>/dev/null | cut -d/ -f3 | sort -u |
    while read -r pid; do ps -o pid=,cmd= -p "$pid" || true; done || true
)
[[ -z "$left" ]] || fail "processes left after down: $left"
for ns in $namespaces; do
  [[ ! -e /run/netns/$ns ]] || fail "network namespace $ns left after down"
done
pass "down (twice): no process left"
echo "PASS"
