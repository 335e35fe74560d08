#!/usr/bin/env bash
# Builds the libFuzzer targets (bazel --config=fuzz: clang-14, ASan, UBSan) and runs each over
# its seed corpus, tests/fuzz/corpus/<name>/ (read only: new inputs go to a scratch folder).
# Prints `fuzz <name>: PASSED|FAILED ...` per target (deploy/test.sh counts these lines), then
# `fuzz: P of N targets passed`; exits non-zero
# when a target found a crash, a leak or a timeout, or did not build.
#
#   tests/fuzz/run.sh                          every target, 20000 runs or 10 s each, whichever
#                                              ends first, from a fixed seed (what CI runs)
#   tests/fuzz/run.sh --runs=1000000 NAME...   longer runs of some targets
#   tests/fuzz/run.sh --seconds=600 NAME       run for a time; findings stay in the scratch folder
#
# A crashing input is written to the scratch folder (printed); fix the bug, then add the input
# to the target's corpus, which every run replays first.
set -uo pipefail
cd "$(dirname "$0")/../.."

TARGETS=(job_config_fuzz criteo_reader_fuzz server_request_fuzz coordinator_request_fuzz
         client_response_fuzz replicate_request_fuzz)
limit=(-runs=20000 -max_total_time=10 -seed=1)
names=()
for arg in "$@"; do
  case "$arg" in
    --runs=*) limit=("-runs=${arg#--runs=}") ;;
    --seconds=*) limit=("-max_total_time=${arg#--seconds=}") ;;
    -*) echo "usage: $0 [--runs=N | --seconds=S] [NAME...]" >&2; exit 2 ;;
    *) names+=("${arg%_fuzz}_fuzz") ;;
  esac
done
((${#names[@]} > 0)) || names=("${TARGETS[@]}")

labels=()
for name in "${names[@]}"; do labels+=("//tests/fuzz:$name"); done
if ! bazel build --config=fuzz "${labels[@]}"; then
  echo "fuzz: the targets did not build"
  echo "fuzz: 0 of ${#names[@]} targets passed"
  exit 1
fi
bin=$(bazel info --config=fuzz bazel-bin 2>/dev/null)

scratch=$(mktemp -d "${TMPDIR:-/tmp}/fuzz.XXXXXX")
passed=0
failed=0
for name in "${names[@]}"; do
  mkdir -p "$scratch/$name/new"
  log="$scratch/$name/log"
  corpus="tests/fuzz/corpus/${name%_fuzz}"
  # -timeout: one input slower than 10 s is a finding; -rss_limit_mb: so is a leak past 2 GiB.
  if "$bin/tests/fuzz/$name" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$scratch/$name/" "$scratch/$name/new" "$corpus" >"$log" 2>&1; then
    passed=$((passed + 1))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    took=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | grep -oE '[0-9]+ second' | cut -d' ' -f1)
    echo "fuzz $name: PASSED ($runs runs in ${took:-?} s, $rate/s, $cov)"
  else
    failed=$((failed + 1))
    echo "fuzz $name: FAILED; its log follows, the input is in $scratch/$name/"
    grep -vE '^#[0-9]+|^\[libprotobuf' "$log" | tail -60
  fi
done
if ((failed == 0)); then rm -rf "$scratch"; fi
echo "fuzz: ${passed} of $((passed + failed)) targets passed"
((failed == 0))
