#!/usr/bin/env bash
# The training report of a real run: ps_launch (LOCAL backend) starts a coordinator, 2 servers and
# 2 workers that train the quickstart's model on a little synthetic data, the workers writing a
# metrics line every 0.2 s; report.py then draws the run, and report_check.py checks every image
# (a well-formed PNG, not tiny, one line per worker in both panels), that the page shows them, and
# that its RESULT table has worker 0's figures. Then, on copies of the run folder: a worker with a
# single line still plots, and a broken line and a folder without metrics files each fail with
# exit status 1 and a message naming the file and line. Runs from the runfiles root, where the
# daemons lie as in bazel-bin.
set -euo pipefail

root=$PWD
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/report_real_run.XXXXXX")
export MPLCONFIGDIR=$work/mpl
report=$root/deploy/report/report.py
check=$root/deploy/report/report_check.py
fail() { echo "FAIL: $*" >&2; exit 1; }

# The data: 80k training rows from ps_datagen's teacher, 8k held out.
mkdir -p "$work/data"
"$root/worker/tools/ps_datagen" --rows=80000 --heldout_rows=8000 --cardinalities=1000 \
  --out="$work/data/train.tsv" --heldout_out="$work/data/heldout.tsv"
# The quickstart's job on it: 1 epoch of batches of 256 (about 156 steps per worker).
sed -e "s|out/data/|$work/data/|" -e 's/batch_size: 512/batch_size: 256/' -e 's/epochs: 2/epochs: 1/' \
  "$root/deploy/jobs/quickstart.pbtxt" >"$work/job.pbtxt"
grep -q "$work/data/train.tsv" "$work/job.pbtxt" || fail "the job's data paths were not replaced"
cat >"$work/cluster.pbtxt" <<PB
backend: LOCAL
bin_dir: "$root"
worker_flags: "--progress_s=0.2"
PB

run=$work/run
"$root/deploy/launch/ps_launch" run --job="$work/job.pbtxt" --cluster="$work/cluster.pbtxt" \
  --run_dir="$run" >"$work/launch.out" 2>"$work/launch.err" || {
  cat "$work/launch.err" >&2
  tail -n 20 "$run"/logs/*.log >&2 || true
  fail "ps_launch run failed"
}
grep -q '^RESULT {' "$work/launch.out" || fail "the launcher printed no RESULT line"
for rank in 0 1; do
  lines=$(wc -l <"$run/metrics$rank.jsonl")
  echo "worker $rank: $lines metrics lines"
  ((lines >= 4)) || fail "worker $rank wrote $lines metrics lines, want at least 4"
done

# The report, into the run folder (the default), as the quickstart makes it.
out=$(/usr/bin/python3 "$report" "$run") || fail "report.py failed"
[[ $out == "$run/report.html" ]] || fail "report.py printed '$out', want $run/report.html"
/usr/bin/python3 "$check" "$run/report.html" --ranks=0,1 --result
grep -q '^name: &quot;quickstart&quot;$' "$run/report.html" || fail "the page has no job text"

# A worker with a single line (a short run) still plots: its point is drawn in every panel.
cp -r "$run" "$work/one_line"
head -n 1 "$run/metrics1.jsonl" >"$work/one_line/metrics1.jsonl"
/usr/bin/python3 "$report" "$work/one_line" -o "$work/one_line/out/r.html" >/dev/null
/usr/bin/python3 "$check" "$work/one_line/out/r.html" --ranks=0,1 >/dev/null
echo "ok: a worker with a single metrics line is drawn"

# expect_failure DIR TEXT: report.py exits 1, prints TEXT, writes no page.
expect_failure() {
  local rc=0 err
  err=$(/usr/bin/python3 "$report" "$1" 2>&1 >/dev/null) || rc=$?
  [[ $rc == 1 ]] || fail "report.py on $1: exit status $rc, want 1 ($err)"
  grep -qF -- "$2" <<<"$err" || fail "report.py on $1 said '$err', want '$2'"
  [[ ! -e $1/report.html ]] || fail "report.py on $1 wrote a page"
  echo "ok: refused: $err"
}
cp -r "$run" "$work/broken"
rm "$work/broken/report"*
sed -i '3s/.*/{"rank":1,"step":/' "$work/broken/metrics1.jsonl"
expect_failure "$work/broken" "$work/broken/metrics1.jsonl:3: not a JSON line"
mkdir "$work/empty"
expect_failure "$work/empty" "no metrics files"
cp -r "$run" "$work/no_metrics"
rm "$work/no_metrics"/metrics*.jsonl "$work/no_metrics/report"*
expect_failure "$work/no_metrics" "no metrics files"
echo PASS
