#!/usr/bin/env bash
# The checks that need a lent GPU machine, as one prepared run. Two halves:
#
#   deploy/device_check.sh                 # here: builds the bundle into .device/bundle
#   deploy/device_check.sh --dry_run       # here: builds it, then checks the tarball is complete
#   deploy/device_check.sh --on_device     # there, from the repository root, the bundle carried
#
# The dry run unpacks the tarball as the device does and checks that every binary the checks run
# is in it, executable, and finds every shared library it needs in the bundle or the base system
# (the CUDA toolkit's from /usr/local/cuda, as on the device), that the job file is there, and
# that every benchmark accepts the flags its step gives it (the step's command with --helpshort:
# Abseil refuses an unknown flag or a bad value before it prints the help), so that a renamed flag
# is found here and not on the device's few minutes.
#
# Here it builds (`bazel build -c opt`) the daemons, the benchmarks and the GPU tests, and packs
# them with their shared libraries, the CUDA toolkit's left out (the device has CUDA installed),
# into .device/bundle and .device/bundle.tar.gz (ignored by git; the tarball is under the device
# tool's 64 MiB), then prints the call to make: the device tool's `run` with carry
# [".device/bundle.tar.gz"], command `deploy/device_check.sh --on_device`, timeout_s 600.
#
# There it prints one JSON line per figure, in the order of what matters most, each step under a
# time limit of its own so that the whole stays under 8 minutes (--budget_s); a step that fails or
# runs out of time prints {"check":...,"ok":false,...} and the next one runs. Lines go to stdout
# and, when $OUT is set (the device tool's folder of files to bring back), to
# $OUT/device_check.jsonl, with every step's full output in $OUT/device_check.log.
#
#   machine      GPU, driver, cores
#   gpu_test     the GPU tests (kernels, the CUDA model against the CPU one, NCCL) and
#                step_compute_test, whose GPU route (rows pooled and scattered on the device)
#                runs where there is a device
#   train        train_bench, the quickstart's model on 1M rows, 2 epochs, 2 servers, 2 workers,
#                SYNC, with --backend=gpu and --backend=cpu (--collective=gloo: the two workers
#                share the one GPU, which NCCL does not allow), and their ratio (target >= 5x,
#                AUC within 0.001; issue 38), each with its step breakdown (step_ms)
#   row_cache    train_bench in ASYNC on the GPU without and with a 20,000-row cache refreshed
#                every 2 steps: hit rate, bytes from the cache and the servers, held-out AUC
#   tls          ps_bench --security=compare through the sockets with the levers that scale with
#                cores (issue 16's target, 0.85x)
#   failover     failover_bench: 3 kills, and the SYNC replication push ratio against the
#                unreplicated server with and without shared memory (issue 11's target, 0.6x)
#   checkpoint   checkpoint_bench's restore against the disk, 2M rows, one server
set -uo pipefail
cd "$(dirname "$0")/.."

bundle=.device/bundle
binaries=(
  server/ps_server server/coordinator/ps_coordinator worker/ps_worker worker/tools/ps_datagen
  tests/bench/train_bench tests/bench/ps_bench tests/bench/failover_bench
  tests/bench/checkpoint_bench
  cuda_kernels/kernels_gpu_test worker/model/gpu_model_test
  worker/collective/nccl_allreduce_gpu_test worker/step_compute_test
)

dry_run=0
if [[ "${1:-}" != "--on_device" ]]; then
  set -e
  [[ "${1:-}" == "--dry_run" ]] && dry_run=1
  ./deploy/bundle.sh -o="$bundle" --without_cuda_libs "${binaries[@]}"
  # The tarball travels (about a third of the folder's size, which is over the tool's limit).
  size_mb=$(du -sm "$bundle.tar.gz" | cut -f1)
  if ((size_mb > 60)); then
    echo "device_check: $bundle.tar.gz is $size_mb MiB, over what the device tool carries" >&2
    exit 1
  fi
  if ((dry_run)); then
    unpacked=$(mktemp -d)
    trap 'rm -rf "$unpacked"' EXIT
    tar -C "$unpacked" -xzf "$bundle.tar.gz"
    missing=0
    for b in "${binaries[@]}"; do
      path="$unpacked/bundle/bin/$b"
      if [[ ! -x "$path" ]]; then
        echo "device_check: dry run: $b is not in the bundle" >&2
        missing=$((missing + 1))
        continue
      fi
      unresolved=$(LD_LIBRARY_PATH="$unpacked/bundle/lib:/usr/local/cuda/lib64" ldd "$path" |
        grep "not found" || true)
      if [[ -n "$unresolved" ]]; then
        echo "device_check: dry run: $b needs libraries the bundle lacks: $unresolved" >&2
        missing=$((missing + 1))
      fi
    done
    if [[ ! -f "$unpacked/bundle/bin/deploy/jobs/quickstart.pbtxt" ]]; then
      echo "device_check: dry run: the bundle lacks deploy/jobs/quickstart.pbtxt" >&2
      missing=$((missing + 1))
    fi
    if ((missing > 0)); then
      echo "device_check: dry run: $missing problems" >&2
      exit 1
    fi
    echo "device_check: dry run: the ${#binaries[@]} binaries and the job are in" \
      "$bundle.tar.gz, with every library they need"
  fi
  if ((!dry_run)); then
    echo "device_check: $bundle.tar.gz ($size_mb MiB) is ready. With the device tool:"
    echo "  run(command=\"deploy/device_check.sh --on_device\", carry=[\"$bundle.tar.gz\"]," \
      "timeout_s=600)"
    exit 0
  fi
  # The dry run goes on through the steps below, checking each one's flags instead of running it.
  set +e
  root="$PWD"
  bundle_tarball="$bundle.tar.gz"
  bundle="$unpacked/bundle"
  out=$(mktemp -d)
  trap 'rm -rf "$unpacked" "$out"' EXIT
else
  shift
  budget_s=450
  for arg in "$@"; do
    case "$arg" in
      --budget_s=*) budget_s="${arg#--budget_s=}" ;;
      *) echo "device_check: unknown option $arg" >&2; exit 2 ;;
    esac
  done
  out="${OUT:-$(mktemp -d)}"
  root="$PWD"
  if [[ -d "$root/$bundle/bin" ]]; then
    bundle="$root/$bundle"
  elif [[ -f "$root/$bundle.tar.gz" ]]; then
    mkdir -p /tmp/device_check && tar -C /tmp/device_check -xzf "$root/$bundle.tar.gz"
    bundle=/tmp/device_check/bundle
  fi
fi

jsonl="$out/device_check.jsonl"
log="$out/device_check.log"
: >"$jsonl"
: >"$log"
start=$(date +%s)
export LD_LIBRARY_PATH="$bundle/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
flag_problems=0

emit() {  # a JSON line, to stdout and the file (none in the dry run)
  ((dry_run)) && return 0
  echo "$1" | tee -a "$jsonl"
}

# Seconds left of the budget, at most $1.
allow() {
  local left=$((budget_s - ($(date +%s) - start)))
  ((left < $1)) && echo "$left" || echo "$1"
}

# step NAME LIMIT_S COMMAND...: runs COMMAND from the bundle's bin/ under a time limit, its
# output into the log; echoes JSON lines the command printed; a failure becomes a line of its own.
# In the dry run, only asks COMMAND (a benchmark; the tests take no flags) for --helpshort.
step() {
  if ((dry_run)); then
    local name="$1"
    shift 2
    [[ "$1" == *_test ]] && return 0
    local refused
    refused=$(cd "$bundle/bin" && "$@" --helpshort 2>&1 >/dev/null | grep "^ERROR" | head -3)
    if [[ -n "$refused" ]]; then
      echo "device_check: dry run: step $name: $1 refuses its flags: $refused" >&2
      flag_problems=$((flag_problems + 1))
    fi
    return 0
  fi
  local name="$1" limit
  limit=$(allow "$2")
  shift 2
  if ((limit < 10)); then
    emit "{\"check\":\"$name\",\"ok\":false,\"why\":\"no time left of the ${budget_s} s budget\"}"
    return 1
  fi
  local t0 rc text
  t0=$(date +%s.%N)
  text=$(cd "$bundle/bin" && timeout -k 5 "$limit" "$@" 2>"$out/step.err")
  rc=$?
  {
    echo "=== $name (rc $rc): $*"
    echo "$text"
    tail -c 20000 "$out/step.err"
  } >>"$log"
  rm -f "$out/step.err"
  local seconds
  seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  STEP_TEXT="$text"
  while read -r line; do
    [[ "$line" == "{"* ]] && emit "{\"check\":\"$name\",${line#\{}"
  done <<<"$text"
  if ((rc != 0)); then
    local why="exit status $rc"
    ((rc == 124 || rc == 137)) && why="ran past its ${limit} s"
    emit "{\"check\":\"$name\",\"ok\":false,\"why\":\"$why\",\"seconds\":$seconds}"
    return 1
  fi
  emit "{\"check\":\"$name\",\"ok\":true,\"seconds\":$seconds}"
}

# machine
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
  head -1)
emit "{\"check\":\"machine\",\"gpu\":\"${gpu:-none}\",\"cpus\":$(nproc),\"date\":\"$(date -u +%FT%TZ)\"}"
if [[ ! -d "$bundle/bin" ]]; then
  emit "{\"check\":\"bundle\",\"ok\":false,\"why\":\"no bundle: run deploy/device_check.sh here first and carry .device/bundle.tar.gz\"}"
  exit 1
fi

# gpu_test: Catch2's summary line says how many assertions and test cases passed.
for t in cuda_kernels/kernels_gpu_test worker/model/gpu_model_test \
  worker/collective/nccl_allreduce_gpu_test worker/step_compute_test; do
  STEP_TEXT=""
  step "gpu_test" 120 "./$t"
  summary=$(grep -E "^(All tests passed|test cases:)" <<<"$STEP_TEXT" | tail -1 | tr -d '"')
  emit "{\"check\":\"gpu_test\",\"test\":\"$t\",\"summary\":\"$summary\"}"
done

# train: GPU, then CPU, then their ratio.
declare -A sps auc
for backend in gpu cpu; do
  STEP_TEXT=""
  step "train_$backend" 150 ./tests/bench/train_bench --bin_dir=. --setup=ps --servers=2 \
    --workers=2 --rows=1000000 --epochs=2 --batch=512 --mode=sync --backend="$backend" \
    --collective=gloo --job=deploy/jobs/quickstart.pbtxt
  line=$(grep '"setup":"ps"' <<<"$STEP_TEXT" | head -1)
  sps[$backend]=$(sed -n 's/.*"samples_per_s":\([0-9.e+-]*\).*/\1/p' <<<"$line")
  auc[$backend]=$(sed -n 's/.*"heldout_auc":\([0-9.e+-]*\).*/\1/p' <<<"$line")
done
if [[ -n "${sps[gpu]}" && -n "${sps[cpu]}" ]]; then
  emit "$(python3 -c "
import json
g, c, ag, ac = ${sps[gpu]}, ${sps[cpu]}, ${auc[gpu]:-0}, ${auc[cpu]:-0}
print(json.dumps({'check': 'train_ratio', 'gpu_samples_per_s': g, 'cpu_samples_per_s': c,
                  'gpu_over_cpu': round(g / c, 3), 'target': 5.0,
                  'auc_gpu': ag, 'auc_cpu': ac, 'auc_diff': round(abs(ag - ac), 6)}))")"
fi

# row_cache: ASYNC on the GPU without, then with, the workers' row cache (issue 38: its hit rate,
# bytes and effect on the held-out AUC; the lines carry train_bench's row_cache object).
for rows in 0 20000; do
  step "row_cache_$rows" 90 ./tests/bench/train_bench --bin_dir=. --setup=ps --servers=2 \
    --workers=2 --rows=1000000 --epochs=1 --batch=512 --mode=async --backend=gpu \
    --collective=gloo --job=deploy/jobs/quickstart.pbtxt --row_cache_rows="$rows" \
    --row_cache_refresh=2
done

# tls: the levers that scale with cores (tests/bench/README.md, TLS).
step "tls" 150 ./tests/bench/ps_bench --bin_dir=. --servers=1 --workers=1 --keys=100000 \
  --iters=100 --security=compare --rounds=3 --shared_memory=false --send_threads=8 \
  --channels=16 --max_keys_per_request=6250 \
  --credentials_script="$root/deploy/make_credentials.sh"

# failover: kills, then the throughput ratios with and without shared memory.
step "failover" 150 ./tests/bench/failover_bench --bin_dir=. --kills=3 --catchup_rows=0 \
  --runs=3

# checkpoint: the restore ratio.
step "checkpoint" 120 ./tests/bench/checkpoint_bench --bin_dir=. --servers=1 --runs=1 \
  --rows=2000000 --dd_mb=1024 --dir=/tmp/checkpoint_bench

if ((dry_run)); then
  if ((flag_problems > 0)); then
    echo "device_check: dry run: $flag_problems steps would fail on their flags" >&2
    exit 1
  fi
  echo "device_check: dry run: every step's benchmark accepts its flags"
  echo "device_check: $bundle_tarball ($size_mb MiB) is ready. With the device tool:"
  echo "  run(command=\"deploy/device_check.sh --on_device\", carry=[\"$bundle_tarball\"]," \
    "timeout_s=600)"
  exit 0
fi
emit "{\"check\":\"done\",\"seconds\":$(($(date +%s) - start))}"
