#!/usr/bin/env bash
# Runs a Python test of the client with Debian's /usr/bin/python3 (which sees Debian's grpcio,
# protobuf, xxhash and numpy; a pyenv `python3` first on PATH would not). Bazel runs it in the
# runfiles, where client/python holds both the package (ps_client/) and the generated stubs
# (proto/), and the daemons lie as in bazel-bin.
set -euo pipefail
export PYTHONPATH="$PWD/client/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
export PS_BIN_DIR="$PWD"
exec /usr/bin/python3 "$@"
