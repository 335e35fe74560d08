#!/usr/bin/env bash
# Runs a Python test of deploy/report with Debian's /usr/bin/python3, which sees Debian's
# python3-matplotlib and python3-numpy (a pyenv `python3` first on PATH would not), from the
# runfiles root. Matplotlib's cache goes to the test's temporary folder.
set -euo pipefail
export MPLCONFIGDIR="${TEST_TMPDIR:-$(mktemp -d)}/mpl"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 "$@"
