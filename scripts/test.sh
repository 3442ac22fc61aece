#!/usr/bin/env bash
# The whole test suite, on SQLite and on PostgreSQL; installs what it needs first.
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/test_ports.py --db=sqlite`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
exec python -m pytest -q "$@"
