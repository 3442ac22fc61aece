#!/usr/bin/env bash
# Install what netbay and its tests need on a fresh Debian machine (idempotent):
# Debian packages (PostgreSQL server for the test suite, iperf3 for bench/throughput.py,
# Open vSwitch and OVN for the OVN lab tests in tests/ovn) and a virtualenv in .venv.
# Source it: `source scripts/setup.sh` leaves the virtualenv active.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

apt_packages=(postgresql iproute2 nftables iperf3 haproxy docker.io busybox-static podman containernetworking-plugins tcpdump
              openvswitch-switch ovn-central ovn-host
              gcc libc6-dev)  # gcc, libc6-dev: `netbay cni-install` compiles the netbay-cni launcher
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "netbay setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # docker.io must not start the system dockerd (its default bridge and iptables rules
  # would land in the host's namespace), nor openvswitch-switch/ovn-* their daemons
  # (ovs-vswitchd would make ovs-system and br-int there; the tests run their own, in
  # namespaces): no service starts during this install.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -z "$policy" ] || rm -f "$policy"
  # Checked, not assumed: a postinst that started a daemon anyway is reported by PID.
  for daemon in ovsdb-server ovs-vswitchd ovn-northd ovn-controller; do
    if pids="$(pgrep -x "$daemon")"; then
      echo "netbay setup: WARNING: the install started $daemon (pid $pids); stop it by that pid" >&2
    fi
  done
fi

if [ ! -x "$root/.venv/bin/python" ]; then
  python3 -m venv "$root/.venv"
fi
stamp="$root/.venv/.netbay-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "netbay setup: installing Python dependencies into .venv" >&2
  "$root/.venv/bin/pip" install -q --upgrade pip >/dev/null
  "$root/.venv/bin/pip" install -q -e "$root[test]"
  touch "$stamp"
fi
# shellcheck disable=SC1091
source "$root/.venv/bin/activate"
