#!/usr/bin/env bash
# Runs a Python test of deploy/grafana with Debian's /usr/bin/python3 (not a pyenv `python3`
# first on PATH), from the runfiles root.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 "$@"
