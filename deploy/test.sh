#!/usr/bin/env bash
# Builds the whole tree and runs every test. Prints Bazel's results, then, as its last line,
# `N passed, M failed` counted over the test targets. Exits non-zero when anything failed or
# nothing was tested.
set -uo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT

bazel test --keep_going //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# Bazel's summary has one line per test target: `//pkg:name   (cached) PASSED in 0.1s`.
passed=$(grep -cE '^//[^ ]+ +(\(cached\) +)?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) +)?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log")

if ((rc != 0 && failed == 0)); then
  echo "bazel exited with $rc although no test failed: the build of a non-test target broke"
  failed=1
fi
echo "${passed} passed, ${failed} failed"
if ((failed > 0 || passed == 0)); then
  exit 1
fi
exit 0
