# What the shell tests of ps_launch on the local backend share, sourced by them from the runfiles
# root (coordinator_restart_launch_test.sh, ha_launch_test.sh): $root, $launch (ps_launch), a work
# folder $work named after $LAUNCH_TEST (set before sourcing), $launcher (the pid of a ps_launch
# run in the background, stopped with its daemons at exit), and fail, field and wait_for.
root=$PWD
launch=$root/deploy/launch/ps_launch
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/${LAUNCH_TEST}.XXXXXX")
launcher=""
cleanup() {
  # A failed check leaves the launcher running: its stop takes its daemons with it.
  if [[ -n $launcher ]] && kill -0 "$launcher" 2>/dev/null; then
    kill -TERM "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.err "$work"/run*/logs/*.log; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -n 1 | cut -d: -f2; }

# wait_for WHAT SECONDS COMMAND...: polls COMMAND until it succeeds; fails after SECONDS, or when
# the launcher has ended.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || fail "$what: not within $seconds s"
    if [[ -n $launcher ]] && ! kill -0 "$launcher" 2>/dev/null; then
      fail "$what: the launcher ended first"
    fi
    sleep 0.1
  done
  echo "ok: $what"
}

