#!/usr/bin/env bash
# ps_launch's SSH backend with `coordinators: 3` across three hosts, each a network namespace with
# its own sshd and no loopback address (tests/cluster/netns_hosts.sh). The launcher starts an etcd
# member on each host, then a coordinator on each (the one on host 1 first: it leads), and the
# job's servers and workers on hosts 2 and 3 only. While the workers train, host 1 is cut off the
# network (its eth0 set down in its namespace: its etcd member and its coordinator lose every
# peer); a standby on host 2 or 3 takes the lead, the members follow it, and the job runs to its
# RESULT with exit status 0. Also: a description asking for more coordinators than it has hosts is
# refused before anything starts, saying why. Runs as root, outside Bazel's sandbox (tags local,
# exclusive), from the runfiles root; etcd is Debian's (deploy/setup.sh).
set -euo pipefail

root=$PWD
# shellcheck source=tests/cluster/checks.sh
source "$root/tests/cluster/checks.sh"
launch=$root/deploy/launch/ps_launch
datagen=$root/worker/tools/ps_datagen
hosts_sh=$root/tests/cluster/netns_hosts.sh
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/ssh_ha_launch.XXXXXX")
state=$work/hosts
launcher=""

cleanup() {
  if [[ -n $launcher ]] && kill -0 "$launcher" 2>/dev/null; then
    kill -TERM "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
  # Whatever is still running (the cut-off host's daemons, a failed check) goes with the hosts.
  "$hosts_sh" down "$state" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# give_up WHAT: a check the rest of the test depends on failed: prints the logs and ends.
give_up() {
  fail "$*"
  for f in "$work"/*.err "$work"/run*/logs/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}

# wait_for WHAT SECONDS COMMAND...: polls COMMAND until it succeeds; gives up after SECONDS, or
# when the launcher has ended.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || give_up "$what: not within $seconds s"
    if [[ -n $launcher ]] && ! kill -0 "$launcher" 2>/dev/null; then
      give_up "$what: the launcher ended first"
    fi
    sleep 0.1
  done
  echo "ok: $what"
}

command -v etcd >/dev/null || give_up "no etcd in PATH: run deploy/setup.sh (etcd-server)"
mapfile -t addr < <("$hosts_sh" up "$state" 3)
[[ ${#addr[@]} == 3 ]] || give_up "netns_hosts.sh up gave ${#addr[@]} hosts"
mapfile -t netns <"$state/netns"
echo "hosts: ${addr[*]} (${netns[*]})"

# The quickstart's data and job, on the file system every host shares; 4 epochs so that the
# takeover happens well within training.
rows=${SSH_LAUNCH_ROWS:-100000}
mkdir -p "$work/out/data"
"$datagen" --rows="$rows" --heldout_rows=$((rows / 10)) --cardinalities=1000 \
  --out="$work/out/data/train.tsv" --heldout_out="$work/out/data/heldout.tsv" >/dev/null
sed 's/epochs: 2/epochs: 4/' "$root/deploy/jobs/quickstart.pbtxt" >"$work/job.pbtxt"

# cluster FILE HOST1_LINE: host 1 holds a coordinator (and an etcd member) only.
cluster() {
  cat >"$1" <<PB
backend: SSH
bin_dir: "$root"
work_dir: "$work"
connect_timeout_s: 45
stop_grace_s: 10
coordinators: 3
ssh { user: "root" options: ["-F", "$state/ssh_config"] connect_timeout_s: 3 }
$2
hosts { name: "${addr[1]}" coordinator: true servers: 1 workers: 1 }
hosts { name: "${addr[2]}" coordinator: true servers: 1 workers: 1 }
worker_flags: "--progress_s=1"
PB
}

# --- More coordinators than hosts: refused, naming the field and why.
cat >"$work/two_hosts.pbtxt" <<PB
backend: SSH
bin_dir: "$root"
coordinators: 3
hosts { name: "${addr[1]}" coordinator: true servers: 1 workers: 1 }
hosts { name: "${addr[2]}" coordinator: true servers: 1 workers: 1 }
PB
out=$("$launch" check --job="$work/job.pbtxt" --cluster="$work/two_hosts.pbtxt" 2>&1) && rc=0 || rc=$?
echo "$out"
check "more coordinators than hosts is refused (status $rc)" test "$rc" = 2
check "the message says each coordinator needs a host of its own" \
  grep -qF "two_hosts.pbtxt:3:1: coordinators: 3 coordinators need 3 hosts: each runs on a host of its own" <<<"$out"

# --- The job, with host 1 cut off mid-training.
cluster "$work/cluster.pbtxt" "hosts { name: \"${addr[0]}\" coordinator: true }"
"$launch" run --job="$work/job.pbtxt" --cluster="$work/cluster.pbtxt" --run_dir="$work/run" \
  >"$work/run.out" 2>"$work/run.err" &
launcher=$!
logs=$work/run/logs
training() { grep -q '^worker 0: step [0-9]' "$logs/worker0.log" 2>/dev/null; }
wait_for "worker 0 trains" 180 training
check "the launcher started 3 etcd members, one a host" \
  grep -q "^ps_launch: etcd: 3 member(s) serving at ${addr[0]}:2379,${addr[1]}:2379,${addr[2]}:2379\$" \
  "$work/run.err"
check "coordinator 0 on host 1 leads term 1" grep -q " leads (term 1 " "$logs/coordinator0.log"
check "coordinator 0 advertised host 1's address" \
  grep -q "^ps_coordinator listening on ${addr[0]}:" "$logs/coordinator0.log"
for i in 1 2; do
  check "coordinator $i stands by" grep -q ' stands by (etcd ' "$logs/coordinator$i.log"
done
check "no server or worker runs on host 1" \
  bash -c "! grep -q '^  host: \"${addr[0]}\"' <(grep -B2 -A1 'role: \"\(server\|worker\)\"' '$work/run/run.pbtxt')"
status=$("$launch" status "$work/run")
echo "$status"
check "status shows coordinator 0 leading" \
  grep -q "^coordinator  0 .*${addr[0]} .*running; at ${addr[0]}:[0-9]*; leads (term 1 " <<<"$status"

echo "cutting host 1 (${netns[0]}) off the network at $(sed -n 's|^worker 0: step \([0-9]*/[0-9]*\).*|\1|p' "$logs/worker0.log" | tail -n 1)"
ip -n "${netns[0]}" link set eth0 down
new_leader() { grep -q ' leads (term 2 ' "$logs/coordinator1.log" "$logs/coordinator2.log"; }
wait_for "a coordinator on host 2 or 3 leads term 2" 60 new_leader
# (What host 1's coordinator says now cannot be seen: its log comes through its ssh connection.)
rc=0
wait "$launcher" || rc=$?
launcher=""
grep '^ps_launch: ' "$work/run.err" | tail -n 20
check "the job ran to its end with host 1 cut off (status $rc)" test "$rc" = 0
result=$(grep '^RESULT ' "$work/run.out" | tail -n 1)
echo "$result"
check "worker 0 printed its RESULT with 2 workers and 2 servers" \
  grep -q '"workers":2,"servers":2' <<<"$result"
auc=$(field heldout_auc "$result")
check "the model learnt (held-out AUC $auc > 0.7)" awk -v a="$auc" 'BEGIN { exit !(a != "" && a > 0.7) }'
for log in "$logs"/worker*.log; do
  check "$(basename "$log" .log) exited cleanly" grep -q 'ps_launch: exit: exited with status 0' "$log"
done
# Not checked: the servers' exit. A worker's Leave (client/ps_client.cc, 1 s) goes first to the
# coordinator its client last used; when that is the cut-off one, the deadline is spent there, the
# worker ends without leaving, and the new leader may count it silent and fail the job just after
# the workers finished (the servers then exit 1). The run's status is the workers' (above).
for log in "$logs"/server*.log; do
  echo "note: $(basename "$log" .log): $(sed -n 's/^ps_launch: exit: //p' "$log" | tail -n 1)"
done

checks_done
