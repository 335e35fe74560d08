#!/usr/bin/env bash
# ps_launch (LOCAL) with `coordinators: 3`: it starts an etcd cluster of three members on loopback,
# then three coordinators with --etcd (the first leads), and gives every member all their
# addresses. A small SYNC job like the quickstart's runs once with `coordinators: 1`; then with
# `coordinators: 3`, where the leading coordinator is killed (SIGKILL) while the workers train. A
# standby takes the lead, the launcher starts the dead one again as a standby, and the run ends
# with exit status 0 and the single coordinator's result (SYNC is deterministic: the same steps,
# samples, held-out AUC and log-loss). Runs from the runfiles root, where the daemons lie as in
# bazel-bin; etcd is Debian's (/usr/bin/etcd, deploy/setup.sh).
set -euo pipefail

LAUNCH_TEST=ha_launch
source "$PWD/deploy/launch/launch_test_lib.sh"
command -v etcd >/dev/null || fail "no etcd in PATH: run deploy/setup.sh (etcd-server)"

# The data: 40k training rows from ps_datagen's teacher, 4k held out.
mkdir -p "$work/data"
"$root/worker/tools/ps_datagen" --rows=40000 --heldout_rows=4000 --cardinalities=1000 \
  --out="$work/data/train.tsv" --heldout_out="$work/data/heldout.tsv" >/dev/null
# The quickstart's job on it: 4 epochs of batches of 128 (about 625 steps per worker, so that a
# standby takes over well before the end).
sed -e "s|out/data/|$work/data/|" -e 's/batch_size: 512/batch_size: 128/' -e 's/epochs: 2/epochs: 4/' \
  "$root/deploy/jobs/quickstart.pbtxt" >"$work/job.pbtxt"
grep -q "$work/data/train.tsv" "$work/job.pbtxt" || fail "the job's data paths were not replaced"
grep -q 'epochs: 4' "$work/job.pbtxt" || fail "the job's epochs were not replaced"
# cluster FILE COORDINATORS
cluster() {
  cat >"$1" <<PB
backend: LOCAL
bin_dir: "$root"
coordinators: $2
worker_flags: "--progress_s=0.2"
PB
}
cluster "$work/one.pbtxt" 1
cluster "$work/three.pbtxt" 3

# run NAME CLUSTER: ps_launch run in the background; $launcher is its pid.
run() {
  "$launch" run --job="$work/job.pbtxt" --cluster="$2" --run_dir="$work/$1" \
    >"$work/$1.out" 2>"$work/$1.err" &
  launcher=$!
}
# finish: waits for the launcher; $rc is its exit status.
finish() {
  rc=0
  wait "$launcher" || rc=$?
  launcher=""
}
worker0_step() {  # the step of worker 0's latest progress line in run $1, or 0
  local step
  step=$(sed -n 's|^worker 0: step \([0-9]*\)/.*|\1|p' "$work/$1/logs/worker0.log" 2>/dev/null |
    tail -n 1)
  echo "${step:-0}"
}
past_step() { (($(worker0_step "$1") > $2)); }
# leads RUN I TERM: coordinator I of RUN has said it leads in term TERM.
leads() { grep -q " leads (term $3 " "$work/$1/logs/coordinator$2.log" 2>/dev/null; }
# new_leader RUN TERM: a coordinator leads in term TERM (a standby, or the dead one started again
# as a standby, whichever wins the election); records which in $work/new_leader.
new_leader() {
  local i
  for i in 0 1 2; do
    if leads "$1" "$i" "$2"; then
      echo "$i" >"$work/new_leader"
      return 0
    fi
  done
  return 1
}
answers() { "$launch" status "$work/$1" 2>/dev/null | grep -q 'members alive'; }

# --- One coordinator: the reference result.
run one "$work/one.pbtxt"
finish
((rc == 0)) || fail "the run with one coordinator failed with status $rc"
one=$(grep '^RESULT ' "$work/one.out" | tail -n 1)
[[ -n $one ]] || fail "the run with one coordinator printed no RESULT line"
echo "one coordinator: $one"

# --- Three coordinators; the leader killed while the workers train.
run three "$work/three.pbtxt"
wait_for "three: worker 0 is past step 20" 120 past_step three 20
grep -q '^ps_launch: etcd: 3 member(s) serving at 127\.0\.0\.1:' "$work/three.err" ||
  fail "the launcher did not start 3 etcd members"
leads three 0 1 || fail "coordinator 0 does not lead term 1 (the launcher waits for it to lead)"
for i in 1 2; do
  grep -q ' stands by (etcd ' "$work/three/logs/coordinator$i.log" ||
    fail "coordinator $i does not stand by"
done
members=$(grep -o -- '--coordinator=[^ ]*' "$work/three/logs/worker0.log" 2>/dev/null || true)
coordinators=$(grep -o '^coordinator: "[^"]*"' "$work/three/run.pbtxt" | cut -d'"' -f2)
[[ $(tr ',' '\n' <<<"$coordinators" | grep -c '^127\.0\.0\.1:[0-9]*$') == 3 ]] ||
  fail "run.pbtxt does not list 3 coordinators: '$coordinators' $members"
wait_for "three: the coordinators answer" 60 answers three
status=$("$launch" status "$work/three")
echo "$status"
grep -q '^coordinator  0 .*running; at 127\.0\.0\.1:[0-9]*; leads (term 1 ' <<<"$status" ||
  fail "status does not show coordinator 0 leading"
grep -q '^etcd         2 .*running; at 127\.0\.0\.1:' <<<"$status" ||
  fail "status does not show etcd member 2"
pid=$(sed -n 's/^ps_launch: pid //p' "$work/three/logs/coordinator0.log" | tail -n 1)
[[ -n $pid ]] || fail "no pid in coordinator 0's log"
echo "three: kill -9 the leading coordinator 0 (pid $pid) at worker 0's step $(worker0_step three)"
kill -9 "$pid"
wait_for "three: another coordinator leads term 2" 60 new_leader three 2
echo "coordinator $(cat "$work/new_leader") took the lead"
finish
grep '^ps_launch: ' "$work/three.err"
((rc == 0)) || fail "the run with its leading coordinator killed failed with status $rc"
three=$(grep '^RESULT ' "$work/three.out" | tail -n 1)
echo "three coordinators: $three"
grep -q "^ps_launch: coordinator 0 on localhost exited with status 137 (killed by signal 9): restarting it as a standby with the same flags and port (restart 1; at most 5 in 300 s)" \
  "$work/three.err" || fail "the launcher did not say it restarted coordinator 0 as a standby"
sed -n '/^ps_launch: restart 1: /,$p' "$work/three/logs/coordinator0.log" | grep -q ' stands by (etcd ' ||
  fail "the restarted coordinator 0 did not stand by"
# final_loss is left out: the mean loss since worker 0's last progress line, which depends on
# when that line came (every 0.2 s), not on what was learnt.
for f in steps samples heldout_auc heldout_logloss heldout_samples best_heldout_auc; do
  [[ -n $(field "$f" "$one") && $(field "$f" "$one") == $(field "$f" "$three") ]] ||
    fail "$f: $(field "$f" "$three") with three coordinators, $(field "$f" "$one") with one"
done
echo "ok: the same result as with one coordinator"
for i in 0 1 2; do
  grep -q '^ps_launch: exit: ' "$work/three/logs/etcd$i.log" || fail "etcd $i was not stopped"
done
if pgrep -f -- "--data-dir=$work/three/etcd_data" >/dev/null; then fail "an etcd member still runs"; fi
echo PASS
