#!/usr/bin/env bash
# Builds the whole tree and runs every test, then a short run of every fuzz target
# (tests/fuzz/run.sh). Prints Bazel's results and the fuzz targets', then, as its last line,
# `N passed, M failed, K skipped` counted over the test targets and the fuzz targets: K is the
# tests that need a GPU (tagged "gpu"), which run only with --gpu, on a machine that has one. Exits non-zero when
# anything failed or nothing was tested.
#
#   ./deploy/test.sh          every test that runs without a GPU
#   ./deploy/test.sh --gpu    those and the GPU tests (they fail, saying so, without a GPU)
set -uo pipefail
cd "$(dirname "$0")/.."

gpu=0
for arg in "$@"; do
  case "$arg" in
    --gpu) gpu=1 ;;
    *) echo "usage: $0 [--gpu]" >&2; exit 2 ;;
  esac
done

./deploy/setup.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

log=$(mktemp)
fuzz_log=$(mktemp)
trap 'rm -f "$log" "$fuzz_log"' EXIT

# The GPU tests are tagged "gpu" and "manual": `//...` leaves them out, naming them adds them.
gpu_tests=$(bazel query 'attr(tags, "[\[ ]gpu[,\]]", tests(//...))' 2>/dev/null)
if [[ -z "$gpu_tests" ]]; then
  echo "bazel query for the GPU tests failed or found none" >&2
fi
if ((gpu)); then
  # shellcheck disable=SC2086
  bazel test --keep_going //... $gpu_tests 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  skipped=0
else
  bazel test --keep_going //... 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  skipped=$(printf '%s\n' "$gpu_tests" | grep -c '^//')
fi

# Bazel's summary has one line per test target: `//pkg:name   (cached) PASSED in 0.1s`.
passed=$(grep -cE '^//[^ ]+ +(\(cached\) +)?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) +)?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log")

if ((rc != 0 && failed == 0)); then
  echo "bazel exited with $rc although no test failed: the build of a non-test target broke"
  failed=1
fi

# The fuzz targets (tests/fuzz, built by clang with ASan and UBSan): a short run of each over its
# corpus, counted as one test each.
./tests/fuzz/run.sh 2>&1 | tee "$fuzz_log"
fuzz_rc=${PIPESTATUS[0]}
fuzz_passed=$(grep -cE '^fuzz [^ ]+: PASSED' "$fuzz_log")
fuzz_failed=$(grep -cE '^fuzz [^ ]+: FAILED' "$fuzz_log")
if ((fuzz_rc != 0 && fuzz_failed == 0)); then
  fuzz_failed=1  # the fuzz targets did not build
fi
passed=$((passed + fuzz_passed))
failed=$((failed + fuzz_failed))
if ((skipped > 0)); then
  echo "skipped (they need a GPU; ./deploy/test.sh --gpu on a machine with one):" $gpu_tests
fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
if ((failed > 0 || passed == 0)); then
  exit 1
fi
exit 0
