#!/usr/bin/env bash
# The main job on the embedded default: start netbay, then walk through creating a
# network, subnet, router with an external gateway, ports and a floating IP, printed
# as tables. Installs what it needs first. Set NETBAY_KEEP=1 to keep netbay running.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

made_dir=""
if [ -z "${NETBAY_DATA_DIR:-}" ]; then made_dir="$(mktemp -d /tmp/netbay-demo-XXXX)"; fi
data_dir="${NETBAY_DATA_DIR:-$made_dir}"
port="${NETBAY_PORT:-9696}"
log="$data_dir/netbay.log"
# The walk-through is API-only: no dataplane agent, so nothing is left in the kernel.
netbay up --no-agent --port "$port" --data-dir "$data_dir" >"$log" 2>&1 &
pid=$!
cleanup() {
  [ -n "${NETBAY_KEEP:-}" ] && return
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ -n "$made_dir" ]; then rm -rf "$made_dir"; fi
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  python -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
    "http://127.0.0.1:$port/identity/v3" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.2
done
echo "netbay is up on http://127.0.0.1:$port (data in $data_dir, log in $log)"
echo "credentials: source $data_dir/openrc"
# shellcheck disable=SC1091
source "$data_dir/openrc"
netbay demo --keep
if [ -n "${NETBAY_KEEP:-}" ]; then
  echo "netbay keeps running (pid $pid); stop it with: kill $pid"
fi
