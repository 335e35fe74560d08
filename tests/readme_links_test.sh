#!/usr/bin/env bash
# Runs tests/readme_links_test.py with Debian's /usr/bin/python3 (not a pyenv `python3` first on
# PATH), from the runfiles root, where the `readmes` filegroup puts every README.md.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 tests/readme_links_test.py "$@"
