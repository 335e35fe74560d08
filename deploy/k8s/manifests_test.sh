#!/usr/bin/env bash
# Runs manifests_test.py (the offline checks of the Kubernetes manifests and the Dockerfile) on
# the daemons Bazel built, which lie in the runfiles as in bazel-bin: server/ps_server, ...
# Debian's python3-yaml is needed, with Debian's /usr/bin/python3 (not a pyenv shim).
set -euo pipefail
exec /usr/bin/python3 deploy/k8s/manifests_test.py --bin_dir="$PWD"
