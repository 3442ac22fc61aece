#!/usr/bin/env bash
# The main job on the embedded default: start netbay (as root with its dataplane agent,
# so the cluster is really wired in the kernel; otherwise API only), then
#   1. walk through a network, subnet, router with an external gateway, ports and a
#      floating IP, printed as tables (`netbay demo`);
#   2. create a Kubernetes cluster template (flannel, vxlan) and a 1-master/2-minion
#      cluster, followed live until CREATE_COMPLETE; put a pod on each minion (waiting
#      until the agent has plugged it in); with dockerd, run two real Docker containers
#      beside them on a private dockerd off the host's network (one on minion 1 through
#      `-o netbay.cluster=k8s`, one on the cluster's private network); print the
#      connectivity matrix — ICMP from
#      every pod and node to every pod and node address, each cell reachable — and the
#      cluster's topology, also drawn as an SVG picture kept after the run;
#   3. delete the containers (dockerd and the Docker driver stopped by PID), the pods and
#      the cluster (waiting until it is gone), stop netbay, clean up.
# Without the agent (not root) the pods are only placed (BUILD) and the matrix is
# skipped: it is probed from the agent's namespaces.
# Installs what it needs first (NETBAY_SKIP_SETUP=1 to skip: uses .venv as it is).
#
# Everything the agent makes lives in network namespaces named with a prefix of this
# run's own (nbd<hex>-); nothing is added to the root namespace. On exit the script
# runs `netbay down`: it stops the server it started and deletes the namespaces with
# that prefix (and only those).
#
# Environment: NETBAY_DATA_DIR (default: a fresh /tmp/netbay-demo-XXXX, removed at the
# end), NETBAY_PORT (default: a free port), NETBAY_DEMO_AGENT=0 to run without the agent,
# NETBAY_DEMO_DOCKER=0 to skip the Docker containers,
# NETBAY_DEMO_TIMEOUT (seconds for each wait, default 120), NETBAY_KEEP=1 to leave the
# cluster and netbay running, NETBAY_DEMO_SVG (where to write the topology picture;
# default a new /tmp/netbay-demo-topology-XXXX.svg, never removed by the script).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${NETBAY_SKIP_SETUP:-}" ]; then
  # shellcheck disable=SC1091
  [ -f .venv/bin/activate ] && source .venv/bin/activate
else
  source scripts/setup.sh
fi

timeout_s="${NETBAY_DEMO_TIMEOUT:-120}"
made_dir=""
if [ -z "${NETBAY_DATA_DIR:-}" ]; then made_dir="$(mktemp -d /tmp/netbay-demo-XXXX)"; fi
data_dir="${NETBAY_DATA_DIR:-$made_dir}"
mkdir -p "$data_dir"
port="${NETBAY_PORT:-$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
log="$data_dir/netbay.log"
prefix="nbd$(python -c 'import secrets; print(secrets.token_hex(3))')-"
plugin_name="${prefix%-}dk"   # this run's Docker driver name (-d): several runs never share a socket
svg="${NETBAY_DEMO_SVG:-$(mktemp --suffix=.svg /tmp/netbay-demo-topology-XXXX)}"

agent_args=(--no-agent)
if [ "$(id -u)" = 0 ] && [ "${NETBAY_DEMO_AGENT:-1}" != 0 ]; then
  agent_args=(--agent --agent-prefix "$prefix")
fi

pid=""
docker_root=""; dockerd_pid=""; plugin_pid=""
docker_stop() {  # the demo's own dockerd and plugin, by PID; dockerd's root with them
  if [ -n "$dockerd_pid" ]; then
    docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1 || true
    for n in $(docker network ls -q --filter driver="$plugin_name"); do docker network rm "$n" >/dev/null 2>&1 || true; done
    kill "$dockerd_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 -- "-$dockerd_pid" 2>/dev/null || true   # its process group: dockerd and its containerd
    dockerd_pid=""
  fi
  if [ -n "$plugin_pid" ]; then
    kill "$plugin_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$plugin_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$plugin_pid" 2>/dev/null || true
    rm -f "/run/docker/plugins/$plugin_name.sock"
    plugin_pid=""
  fi
  if [ -n "$docker_root" ]; then
    { grep -o " $docker_root[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$docker_root"; docker_root=""
  fi
}
cleanup() {
  local rc=$?
  set +e   # every step below runs, whatever fails
  if [ -n "${NETBAY_KEEP:-}" ] && [ -n "$pid" ]; then
    echo "netbay keeps running (pid $pid, data in $data_dir, namespaces ${prefix}*); stop it with:"
    echo "  netbay down --data-dir $data_dir"
    if [ -n "$dockerd_pid" ]; then
      echo "dockerd (pid $dockerd_pid, $docker_root) and the Docker driver (pid $plugin_pid) keep running too: kill them by PID"
    fi
    return
  fi
  # `netbay down` stops the server of this data dir and deletes exactly its agent's
  # namespaces (this run's prefix); killing by PID is only the fallback.
  docker_stop
  if [ -n "$pid" ]; then
    netbay down --data-dir "$data_dir" >/dev/null 2>&1 || true
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    # Once more, the server surely gone: what its agent made in its last moments goes too.
    netbay down --data-dir "$data_dir" >/dev/null 2>&1 || true
    left="$(ls /run/netns 2>/dev/null | grep "^${prefix}" || true)"
    if [ -n "$left" ]; then echo "warning: namespaces left behind: $left" >&2; fi
  fi
  if [ -n "$made_dir" ]; then rm -rf "$made_dir"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Killed without its cleanup (SIGKILL), the demo takes netbay with it (SIGTERM: it stops
# its processes), rather than leave it running with its agent (NETBAY_KEEP: it stays).
with_us=()
if [ -z "${NETBAY_KEEP:-}" ] && command -v setpriv >/dev/null; then with_us=(setpriv --pdeathsig TERM); fi
NETBAY_LOG_LEVEL="${NETBAY_LOG_LEVEL:-WARNING}" \
  "${with_us[@]}" netbay up "${agent_args[@]}" --port "$port" --data-dir "$data_dir" >"$log" 2>&1 &
pid=$!

up=""
for _ in $(seq 1 300); do
  if python -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
      "http://127.0.0.1:$port/identity/v3" 2>/dev/null; then up=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if [ -z "$up" ]; then echo "netbay did not start:"; cat "$log"; exit 1; fi

with_agent=""
if grep -q "with the dataplane agent" "$log"; then with_agent=1; fi
echo "netbay is up on http://127.0.0.1:$port (pid $pid, data in $data_dir, log in $log)"
if [ -n "$with_agent" ]; then
  echo "dataplane agent: on, namespaces ${prefix}*"
else
  echo "dataplane agent: off (not root, NETBAY_DEMO_AGENT=0, or the kernel lacks a feature): API only, no master load balancer"
fi
echo "credentials: source $data_dir/openrc"
[ -t 1 ] || export COLUMNS="${COLUMNS:-160}"  # tables and trees in logs: not cut at 80
# shellcheck disable=SC1091
source "$data_dir/openrc"

run() {  # show the command, then run it
  echo
  echo "\$ $*"
  "$@"
}

echo
echo "== 1. networks, a router to the outside, ports and a floating IP =="
run netbay demo

echo
echo "== 2. a Kubernetes cluster on flannel (vxlan) =="
lb_args=()
if [ -n "$with_agent" ]; then lb_args=(--master-lb-enabled); fi
run netbay cluster-template create k8s-flannel --coe kubernetes --network-driver flannel \
  --labels flannel_backend=vxlan,flannel_network_subnetlen=24 \
  --external-network public --floating-ip-enabled "${lb_args[@]}"
run netbay cluster create k8s --cluster-template k8s-flannel --master-count 1 --node-count 2 \
  --timeout "$timeout_s"
run netbay cluster list

echo
echo "== pods: one on each minion =="
if [ -n "$with_agent" ]; then
  run netbay pod create web-0 --cluster k8s --node kube_minion_0 --timeout "$timeout_s" | tee "$data_dir/web-0.out"
  run netbay pod create web-1 --cluster k8s --node kube_minion_1 --timeout "$timeout_s"
  run netbay pod exec web-0 -- ip -4 -brief addr show eth0   # the prefix comes from the openrc
else
  run netbay pod create web-0 --cluster k8s --node kube_minion_0 --no-wait
  run netbay pod create web-1 --cluster k8s --node kube_minion_1 --no-wait
fi
run netbay pod list --cluster k8s

with_docker=""
if [ -n "$with_agent" ] && [ "${NETBAY_DEMO_DOCKER:-1}" != 0 ] && \
   python -c 'import sys; from netbay.runtime.dockerd import available; sys.exit(available() is not None)'; then
  with_docker=1
fi
echo
echo "== Docker containers on netbay networks: one on minion 1, one on the cluster's private network =="
if [ -n "$with_docker" ]; then
  # dockerd off the host's network (netbay.runtime.dockerd's flags: no bridge, no
  # iptables, no forwarding), with its own root, socket and pidfile; stopped by PID.
  docker_root="$(mktemp -d /tmp/nbd-docker-XXXX)"
  echo '{}' >"$docker_root/daemon.json"
  # shellcheck disable=SC2046
  setsid dockerd --config-file="$docker_root/daemon.json" \
    $(python -c 'from netbay.runtime.dockerd import FLAGS; print(" ".join(FLAGS))') \
    --data-root="$docker_root/data" --exec-root="$docker_root/exec" --pidfile="$docker_root/docker.pid" \
    -H "unix://$docker_root/docker.sock" >"$docker_root/dockerd.log" 2>&1 &
  dockerd_pid=$!
  export DOCKER_HOST="unix://$docker_root/docker.sock"
  for _ in $(seq 1 $((timeout_s * 10))); do docker version >/dev/null 2>&1 && break; sleep 0.1; done
  python -c 'import sys; from netbay.runtime.dockerd import busybox_tar; sys.stdout.buffer.write(busybox_tar())' \
    | docker import - busybox:netbay >/dev/null
  echo "dockerd: pid $dockerd_pid, $DOCKER_HOST, off the host's network (--bridge=none --iptables=false --ip-forward=false --ip-masq=false); image busybox:netbay from Debian's busybox-static"
  netbay libnetwork --name "$plugin_name" --url "http://127.0.0.1:$port" --prefix "$prefix" \
    --openrc "$data_dir/openrc" --docker-host "$DOCKER_HOST" >"$data_dir/libnetwork.log" 2>&1 &
  plugin_pid=$!
  for _ in $(seq 1 $((timeout_s * 10))); do [ -S "/run/docker/plugins/$plugin_name.sock" ] && break; sleep 0.1; done
  echo "Docker driver: $plugin_name (pid $plugin_pid), /run/docker/plugins/$plugin_name.sock"
  run docker network create -d "$plugin_name" --ipam-driver null \
    -o netbay.cluster=k8s -o netbay.node=kube_minion_1 k8s-minion-1
  run docker run -d --name web-c1 --net k8s-minion-1 busybox:netbay sleep 600
  run docker exec web-c1 ip -4 addr show eth0     # an address of minion 1's lease, on its cni0
  run docker network create -d "$plugin_name" --ipam-driver "$plugin_name" \
    -o netbay.network=k8s-fixed_network --ipam-opt netbay.subnet=k8s-fixed_subnet k8s-private
  run docker run -d --name plain-c --net k8s-private busybox:netbay sleep 600
  run docker exec plain-c ip -4 addr show eth0    # a port of the private network (compute:netbay)
  # Security groups apply to a container's port as to any port: let the nodes ping it.
  run openstack security group rule create --protocol icmp --ingress default -f value -c id
  # The plugin names each container's namespace after it started (off Docker's call path);
  # the matrix enters them: wait (bounded) for both names.
  for _ in $(seq 1 $((timeout_s * 10))); do
    [ "$(ls /run/netns | grep -c "^${prefix}[dp]-")" -ge 4 ] && break; sleep 0.1
  done
  web0="$(grep -o 'address [0-9.]*' "$data_dir/web-0.out" | head -1 | cut -d' ' -f2)"
  run docker exec web-c1 ping -c 1 -W 2 "$web0"   # container on minion 1 -> pod web-0 on minion 0
else
  echo "skipped: needs the dataplane agent and dockerd (Debian docker.io; NETBAY_DEMO_DOCKER=0 skips it)"
fi

echo
echo "== connectivity: ICMP from every pod and node to every pod and node address =="
if [ -n "$with_agent" ]; then
  # Exits non-zero (and so ends the demo) if any cell is unreachable.
  run netbay cluster connectivity k8s
  echo "every cell reachable: pods on different minions and every node reach each other over flannel vxlan"
else
  echo "connectivity matrix skipped: it is probed from the dataplane agent's namespaces (run the demo as root, without NETBAY_DEMO_AGENT=0)"
fi

echo
echo "== topology =="
run netbay cluster topology k8s --svg "$svg"
echo "the picture stays after the demo: $svg"

if [ -n "${NETBAY_KEEP:-}" ]; then
  exit 0
fi
echo
echo "== 3. delete the containers, the pods and the cluster =="
if [ -n "$with_docker" ]; then
  run docker rm -f web-c1 plain-c
  run docker network rm k8s-minion-1 k8s-private
  docker_stop
  echo "dockerd and the Docker driver stopped (by PID)"
fi
run netbay pod delete web-0 web-1 --cluster k8s
run netbay cluster delete k8s --timeout "$timeout_s"
run netbay cluster-template delete k8s-flannel
