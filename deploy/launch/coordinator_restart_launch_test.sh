#!/usr/bin/env bash
# ps_launch (LOCAL) restarts a coordinator that dies mid-training. A small SYNC job like the
# quickstart's (ps_datagen data, 2 servers, 2 workers) runs once undisturbed; then again, with the
# coordinator killed (SIGKILL) twice while the workers train: once worker 0 is past step 20, and
# again once the restarted coordinator answers. The launcher restarts it each time on its port and
# data_dir, says so, and the run ends with exit status 0 and the undisturbed run's result (the same
# steps, samples, held-out AUC and log-loss). Then a run allowed one restart
# (--coordinator_restarts=1) fails on the second kill, saying why. Runs from the runfiles root,
# where the daemons lie as in bazel-bin.
set -euo pipefail

LAUNCH_TEST=coordinator_restart_launch
source "$PWD/deploy/launch/launch_test_lib.sh"
# The data: 40k training rows from ps_datagen's teacher, 4k held out.
mkdir -p "$work/data"
"$root/worker/tools/ps_datagen" --rows=40000 --heldout_rows=4000 --cardinalities=1000 \
  --out="$work/data/train.tsv" --heldout_out="$work/data/heldout.tsv" >/dev/null
# The quickstart's job on it: 2 epochs of batches of 128 (about 312 steps per worker).
sed -e "s|out/data/|$work/data/|" -e 's/batch_size: 512/batch_size: 128/' \
  "$root/deploy/jobs/quickstart.pbtxt" >"$work/job.pbtxt"
grep -q "$work/data/train.tsv" "$work/job.pbtxt" || fail "the job's data paths were not replaced"
cat >"$work/cluster.pbtxt" <<PB
backend: LOCAL
bin_dir: "$root"
worker_flags: "--progress_s=0.2"
PB

# run NAME [FLAGS...]: ps_launch run in the background; $launcher is its pid.
run() {
  local name=$1
  shift
  "$launch" run --job="$work/job.pbtxt" --cluster="$work/cluster.pbtxt" \
    --run_dir="$work/$name" "$@" >"$work/$name.out" 2>"$work/$name.err" &
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
coordinator_pid() {  # the coordinator's pid in run $1 (its script says each one it starts)
  sed -n 's/^ps_launch: pid //p' "$work/$1/logs/coordinator.log" | tail -n 1
}
past_step() { (($(worker0_step "$1") > $2)); }
listening() {  # listening RUN N: the coordinator of RUN has said it listens N times
  (($(grep -c '^ps_coordinator listening on ' "$work/$1/logs/coordinator.log") >= $2))
}
answers() { "$launch" status "$work/$1" 2>/dev/null | grep -q 'members alive'; }
# kill_coordinator RUN N: waits until its coordinator has listened N times and answers, then
# kills it with SIGKILL.
kill_coordinator() {
  wait_for "$1: coordinator start $2 listens" 60 listening "$1" "$2"
  wait_for "$1: coordinator start $2 answers" 60 answers "$1"
  local pid
  pid=$(coordinator_pid "$1")
  [[ -n $pid ]] || fail "$1: no coordinator pid in its log"
  echo "$1: kill -9 coordinator (pid $pid) at worker 0's step $(worker0_step "$1")"
  kill -9 "$pid"
}

# --- The undisturbed run.
run plain
finish
((rc == 0)) || fail "the undisturbed run failed with status $rc"
plain=$(grep '^RESULT ' "$work/plain.out" | tail -n 1)
[[ -n $plain ]] || fail "the undisturbed run printed no RESULT line"
echo "undisturbed: $plain"

# --- The coordinator killed twice while the workers train.
run restarted
wait_for "restarted: worker 0 is past step 20" 120 past_step restarted 20
kill_coordinator restarted 1
kill_coordinator restarted 2
finish
grep '^ps_launch: ' "$work/restarted.err"
((rc == 0)) || fail "the run with two coordinator restarts failed with status $rc"
restarted=$(grep '^RESULT ' "$work/restarted.out" | tail -n 1)
echo "restarted: $restarted"
for n in 1 2; do
  grep -q "^ps_launch: coordinator on localhost exited with status 137 (killed by signal 9): restarting it .*(restart $n; at most 5 in 300 s)" \
    "$work/restarted.err" || fail "the launcher did not say restart $n"
done
(($(grep -c 'carrying on job' "$work/restarted/logs/coordinator.log") == 2)) ||
  fail "the restarted coordinators did not both carry the job on from their data_dir"
# final_loss is left out: the mean loss since worker 0's last progress line, which depends on
# when that line came (every 0.2 s), not on what was learnt.
for f in steps samples heldout_auc heldout_logloss heldout_samples best_heldout_auc; do
  [[ -n $(field "$f" "$plain") && $(field "$f" "$plain") == $(field "$f" "$restarted") ]] ||
    fail "$f: $(field "$f" "$restarted") after the restarts, $(field "$f" "$plain") undisturbed"
done
echo "ok: the same result as the undisturbed run"
"$launch" status "$work/restarted" | grep -q '^coordinator .*restarted 2 time(s)' ||
  fail "ps_launch status does not count the coordinator's 2 restarts"

# --- One restart allowed: the second death fails the run, saying why.
run limited --coordinator_restarts=1
wait_for "limited: worker 0 is past step 20" 120 past_step limited 20
kill_coordinator limited 1
kill_coordinator limited 2
finish
grep '^ps_launch: ' "$work/limited.err"
((rc == 1)) || fail "the run over its restart limit ended with status $rc, want 1"
grep -q "the coordinator on localhost exited with status 137 (killed by signal 9) after 1 restart(s) in the last .* s (at most 1 in 300 s: .*): not restarting it; stopping the job" \
  "$work/limited.err" || fail "the launcher did not say why it stopped"
echo PASS
