#!/usr/bin/env bash
# Our model families against the same models in PyTorch: forward+backward samples/s of each
# family, batch and pooling, model_bench's and tests/bench/torch_bench.py's, and their ratio.
#
# Installs Debian's PyTorch (./deploy/setup.sh --torch), builds model_bench optimised, checks
# that the PyTorch models compute what ours do (torch_models_check.py: same parameters and batch,
# same loss and gradients within float rounding; it stops here if not), runs model_bench, then
# torch_bench.py with the same threads, families and batches (one after the other, never
# together, so neither takes the other's cores), and prints both benches' JSON lines, then one
# line per (family, batch, pooled):
#   {"bench":"model_vs_torch","family":"dlrm","batch":4096,"pooled":false,"threads":1,
#    "samples_per_s":OURS,"torch_samples_per_s":TORCH,"ratio_vs_torch":OURS/TORCH}
# (target: ratio_vs_torch >= 1.0). Timings mean something only on an otherwise idle machine.
#
#   tests/bench/model_vs_torch.sh [--threads=1] [--reps=5] [--families=dlrm,...]
#       [--batches=512,4096]
set -euo pipefail
cd "$(dirname "$0")/../.."

threads=1
reps=5
families=dlrm,dlrm_dot,wide_deep,deepfm,dcn_v2,dcn_v2_r64
batches=512,4096
for arg in "$@"; do
  case "$arg" in
    --threads=*) threads=${arg#*=} ;;
    --reps=*) reps=${arg#*=} ;;
    --families=*) families=${arg#*=} ;;
    --batches=*) batches=${arg#*=} ;;
    *) echo "usage: $0 [--threads=N] [--reps=N] [--families=a,b] [--batches=a,b]" >&2; exit 2 ;;
  esac
done

./deploy/setup.sh --torch
echo "model_vs_torch: building model_bench" >&2
bazel build -c opt //tests/bench:model_bench 2>&1 | tail -n 1 >&2

echo "model_vs_torch: torch_models_check.py" >&2
/usr/bin/python3 tests/bench/torch_models_check.py --families="$families"

work=$(mktemp -d "${TMPDIR:-/tmp}/model_vs_torch.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "model_vs_torch: model_bench --threads=$threads --reps=$reps" >&2
bazel-out/k8-opt/bin/tests/bench/model_bench --threads="$threads" --reps="$reps" \
  --families="$families" --batches="$batches" | tee "$work/ours.jsonl"
echo "model_vs_torch: torch_bench.py --threads=$threads --reps=$reps" >&2
/usr/bin/python3 tests/bench/torch_bench.py --threads="$threads" --reps="$reps" \
  --families="$families" --batches="$batches" --ours="$work/ours.jsonl"
