#!/usr/bin/env bash
# The main job. For now (until the worker lands): set up, build optimised, and check the
# quickstart job file with ps_ctl.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/setup.sh
echo "quickstart: building (bazel build -c opt //...)"
bazel build -c opt //... 2>&1 | tail -n 3
./bazel-bin/client/ps_ctl validate deploy/jobs/quickstart.pbtxt
