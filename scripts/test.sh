#!/usr/bin/env bash
# The whole test suite, on SQLite and on PostgreSQL; installs what it needs first.
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/test_ports.py --db=sqlite`,
# `scripts/test.sh -m quick -n 3`).
#
# With no arguments the suite runs as two pytest runs side by side: the tests against
# the real OpenStack peers (`-m peers`: Keystone, Neutron, Octavia, Heat from PyPI) on
# NETBAY_TEST_PEER_WORKERS pytest-xdist workers (default 2; each worker starts its own
# cloud once, a session fixture, so no worker sees another's objects in the cloud-wide
# "left as it was" snapshots; the peers' virtualenvs are built once per machine, under
# a file lock; the modules on the OVN lab are one work unit, handed out first, so one
# worker starts the lab: tests/conftest.py `pytest_xdist_make_scheduler`) and everything else on NETBAY_TEST_WORKERS workers (default 3: on two
# cores most tests wait on servers and subprocesses, not the CPU). `--dist loadfile`
# keeps a module on one worker, so its module-scoped servers start once. Nothing is
# shared: each netbay server and peer binds its own free port on 127.0.0.1, each
# worker has its own temp dir, PostgreSQL cluster and dataplane namespace prefix.
# Each run lists its 20 slowest tests; the peers' output is printed after the rest;
# the exit code is the first failure's.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
if [ "$#" -gt 0 ]; then
  exec python -m pytest -q "$@"
fi
# A fresh tree has no bytecode caches (tests/bytecode.py): one collection first writes them
# (21 CPU s), so each of the five workers below collects in 7 instead of 21.
if ! compgen -G "tests/__pycache__/test_*-pytest-*.pyc" >/dev/null; then
  python -m pytest -q -p no:cacheprovider --collect-only >/dev/null 2>&1 || true   # errors: shown by the runs
fi
log=$(mktemp -t netbay-peers.XXXXXX.log)
python -m pytest -q -p no:cacheprovider -m peers \
  -n "${NETBAY_TEST_PEER_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=20 >"$log" 2>&1 &
peers=$!
trap 'kill "$peers" 2>/dev/null || true' INT TERM
rest=0
NETBAY_TEST_ALONGSIDE=peers python -m pytest -q -p no:cacheprovider -m "not peers" \
  -n "${NETBAY_TEST_WORKERS:-3}" --dist loadfile --durations=20 || rest=$?
others=0
wait "$peers" || others=$?
echo "---- tests against the OpenStack peers (pytest -m peers) ----"
cat "$log"
rm -f "$log"
if [ "$rest" -ne 0 ]; then exit "$rest"; fi
exit "$others"
