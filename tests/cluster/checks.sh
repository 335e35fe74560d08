# Assertions for the shell tests of tests/cluster, sourced by them. A failed check is counted and
# the test goes on; `checks_done` ends the test with the verdict.

failures=0

# fail MESSAGE: counts a failure.
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# check DESCRIPTION COMMAND...: runs COMMAND; ok when it succeeds, a failure otherwise.
check() {
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else fail "$what"; fi
}

# field NAME JSON: the value of "NAME" in a one-line JSON object.
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -n 1 | cut -d: -f2; }

# checks_done: exits 1 when a check failed, 0 otherwise.
checks_done() {
  if ((failures > 0)); then
    echo "$failures check(s) failed"
    exit 1
  fi
  echo "all checks passed"
}
