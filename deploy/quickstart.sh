#!/usr/bin/env bash
# The main job. Until the worker lands it demonstrates the cluster end to end: it checks the
# quickstart job, then starts a real coordinator, 2 servers and 2 client processes on loopback
# (ps_bench) that pull and push 100k random keys per request, and prints the measured rates.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh
echo "quickstart: building optimised binaries"
bazel build -c opt //client:ps_ctl //server:ps_server //server/coordinator:ps_coordinator \
  //tests/bench:ps_bench 2>&1 | tail -n 1
bin=bazel-out/k8-opt/bin
"$bin/client/ps_ctl" validate deploy/jobs/quickstart.pbtxt
echo "quickstart: a coordinator, 2 servers and 2 clients on loopback (100k keys x dim 16 per request)"
"$bin/tests/bench/ps_bench" --bin_dir="$bin" --servers=2 --workers=2 --keys=100000 --dim=16 \
  --iters=10
