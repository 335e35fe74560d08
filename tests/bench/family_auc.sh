#!/usr/bin/env bash
# A model family's held-out AUC trained by our cluster and by PyTorch, on its teacher's data.
#
#   tests/bench/family_auc.sh FAMILY      FAMILY: dlrm, wide_deep, deepfm or dcn_v2 (or quickstart,
#                                         the Criteo-format DLRM job)
#
# Runs deploy/quickstart.sh with JOB=deploy/jobs/FAMILY.pbtxt: ps_datagen --job writes ROWS
# training rows (default 1000000) and ROWS/10 held-out rows labelled by a teacher of the family
# (to the job's out/data/FAMILY/ paths), and a local cluster of 2 servers and 2 workers trains
# the job in SYNC mode. Then tests/bench/torch_train.py trains the same family in PyTorch (Debian's
# python3-torch, installed by ./deploy/setup.sh --torch) on the same files with the same
# hyperparameters, batches and data order, and evaluates the same held-out file. Prints
#   {"bench":"family_auc","family":"deepfm","rows":1000000,"heldout_auc":OURS,
#    "torch_heldout_auc":TORCH,"teacher_auc":...,"delta_vs_torch":OURS-TORCH,...}
# (target: |delta_vs_torch| <= 0.005). Environment: ROWS, DATAGEN_FLAGS (as quickstart.sh),
# TORCH_THREADS (default 1: the AUC depends on it only through float rounding, and torch's
# spinning threads crawl when other work holds the cores).
set -euo pipefail
cd "$(dirname "$0")/../.."

family=${1:-}
job=deploy/jobs/$family.pbtxt
if [[ -z "$family" || ! -f "$job" ]]; then
  echo "usage: $0 FAMILY (dlrm, wide_deep, deepfm, dcn_v2 or quickstart; deploy/jobs/FAMILY.pbtxt)" \
    >&2
  exit 2
fi
rows=${ROWS:-1000000}

./deploy/setup.sh --torch
log=$(mktemp "${TMPDIR:-/tmp}/family_auc.XXXXXX")
trap 'rm -f "$log"' EXIT

echo "family_auc: our cluster trains $job ($rows rows, deploy/quickstart.sh)" >&2
JOB="$job" ROWS="$rows" ./deploy/quickstart.sh | tee "$log" >&2
ours=$(grep '^RESULT ' "$log" | tail -n 1 | sed 's/^RESULT //')
[[ -n "$ours" ]] || { echo "family_auc: quickstart printed no RESULT" >&2; exit 1; }

echo "family_auc: PyTorch trains $job on the same files" >&2
bazel build -c opt //client/python:py_proto_gen 2>&1 | tail -n 1 >&2
torch=$(PYTHONPATH=bazel-out/k8-opt/bin/client/python /usr/bin/python3 tests/bench/torch_train.py \
  --job="$job" --threads="${TORCH_THREADS:-1}")
echo "family_auc: torch $torch" >&2

value() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -n 1 | cut -d: -f2; }
auc=$(value heldout_auc "$ours")
torch_auc=$(value heldout_auc "$torch")
delta=$(awk -v a="$auc" -v b="$torch_auc" 'BEGIN { printf "%.6f", a - b }')
echo "{\"bench\":\"family_auc\",\"family\":\"$family\",\"rows\":$rows,\"heldout_auc\":$auc,\
\"torch_heldout_auc\":$torch_auc,\"teacher_auc\":$(value teacher_auc "$ours"),\
\"delta_vs_torch\":$delta,\"heldout_logloss\":$(value heldout_logloss "$ours"),\
\"torch_heldout_logloss\":$(value heldout_logloss "$torch"),\"steps\":$(value steps "$ours"),\
\"torch_steps\":$(value steps "$torch")}"
