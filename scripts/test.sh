#!/usr/bin/env bash
# The whole test suite, on SQLite and on PostgreSQL; installs what it needs first.
# Extra arguments go to pytest (e.g. `scripts/test.sh tests/test_ports.py --db=sqlite`,
# `scripts/test.sh -m quick -n 3`).
#
# With no arguments the suite runs on NETBAY_TEST_WORKERS pytest-xdist workers (default
# 5: on two cores most tests wait on servers and subprocesses, not the CPU). The tests
# against the real OpenStack peers (marker ``peers``: Keystone, Neutron, Octavia, Heat
# from PyPI) go to the first NETBAY_TEST_PEER_WORKERS of them (default 2), first: each
# starts its own cloud once, a session fixture; the peers' virtualenvs are built once per
# machine, under a file lock. Once those are handed out, every worker takes the rest
# (tests/scheduling.py says how). `--dist loadfile` keeps a module on one worker, so its
# module-scoped servers start once. Nothing is shared: each netbay server and peer binds
# its own free port on 127.0.0.1, each worker has its own temp dir, PostgreSQL cluster and
# dataplane namespace prefix. The run lists its 20 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
if [ "$#" -gt 0 ]; then
  exec python -m pytest -q "$@"
fi
# A fresh tree has no bytecode caches (tests/bytecode.py): a collection first writes them
# (21 CPU s), so each of the five workers below collects in 7 instead of 21. Two halves
# side by side, one per core: 14 s instead of 21 (errors: shown by the run).
if ! compgen -G "tests/__pycache__/test_*-pytest-*.pyc" >/dev/null; then
  python -m pytest -q -p no:cacheprovider --collect-only tests/dataplane tests/ovn tests/both >/dev/null 2>&1 &
  python -m pytest -q -p no:cacheprovider --collect-only tests \
    --ignore=tests/dataplane --ignore=tests/ovn --ignore=tests/both >/dev/null 2>&1 || true
  wait || true
fi
exec python -m pytest -q -p no:cacheprovider -n "${NETBAY_TEST_WORKERS:-5}" \
  --dist loadfile --no-loadscope-reorder --durations=20
