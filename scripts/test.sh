#!/usr/bin/env bash
# The whole test suite, on SQLite and on PostgreSQL; installs what it needs first.
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/test_ports.py --db=sqlite`).
#
# With no arguments the suite runs as two pytest processes side by side: the tests
# against the real OpenStack peers (`-m peers`: Keystone, Neutron, Octavia, Heat from
# PyPI — mostly waiting on those servers) and everything else. They share nothing
# (each peer and each netbay server binds its own free port on 127.0.0.1; the
# dataplane tests' namespaces carry a per-run prefix). The peers' output is printed
# after the rest; the exit code is the first failure's.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
if [ "$#" -gt 0 ]; then
  exec python -m pytest -q "$@"
fi
log=$(mktemp -t netbay-peers.XXXXXX.log)
python -m pytest -q -m peers -p no:cacheprovider >"$log" 2>&1 &
peers=$!
trap 'kill "$peers" 2>/dev/null || true' INT TERM
rest=0
NETBAY_TEST_ALONGSIDE=peers python -m pytest -q -m "not peers" || rest=$?
others=0
wait "$peers" || others=$?
echo "---- tests against the OpenStack peers (pytest -m peers) ----"
cat "$log"
rm -f "$log"
if [ "$rest" -ne 0 ]; then exit "$rest"; fi
exit "$others"
