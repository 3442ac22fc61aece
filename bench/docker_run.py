"""``docker run`` on a netbay network against Docker's own bridge driver, one run.

    sudo python bench/docker_run.py [--runs 15] [--concurrent 50] [--cycles 200] [--rate 200]
                                    [--load-connections 32] [--baseline-tree DIR] [--skip-docker-run]
                                    [--json /tmp/docker_run.json]

Issue 11's targets:

* ``docker run --net <netbay network>`` → first packet answered: p50 within 1.5× of
  Docker's bridge driver measured in the same run;
* ``--concurrent`` ``docker run``s at once: all networked, 0 errors, total time within
  1.5× of the bridge driver's;
* plugin call latency (CreateEndpoint, Join) p99 ≤ 20 ms while netbay serves
  ``--rate`` port creates/s from another client.

Set-up (everything named ``nbb<hex>…``, removed at the end, also on error): a
``netbay up --no-agent`` server (SQLite), ``netbay agent`` and ``netbay libnetwork``
as child processes, and two private dockerds (:mod:`netbay.runtime.dockerd`):

* netbay — off the host's network; a network ``-d <plugin> --subnet 10.93.0.0/24``
  and a netbay sandbox on it, which sends the probes;
* bridge — the baseline, inside a network namespace of its own (``nsenter --net``):
  a user-defined bridge network 10.94.0.0/24 there; probes from that namespace
  (the bridge holds the gateway address). Nothing of it reaches the root namespace.

First packet: a container with a fixed address is created and started through the
Engine API (docker SDK, no CLI fork), then ICMP echo every 2 ms from the prober until
answered; time from the create call to the reply. Runs alternate netbay/bridge.
Plugin call latency: the plugin socket is driven directly with the calls Docker makes
for one endpoint (RequestAddress, CreateEndpoint, Join, Leave, DeleteEndpoint,
ReleaseAddress) on the netbay Docker network, ``--cycles`` times, while
``bench/port_load.py`` (a process of its own, an open loop on ``--load-connections``
keep-alive connections) offers ``--rate`` port creates/s on another network; its
achieved rate and latency are in the output. ``--baseline-tree``: a second plugin,
run from another source tree, on a Docker network of its own, cycles alternating.
Environment: ``BENCH_LOG_LEVEL=DEBUG`` (the plugins log each call's time inside the
handler), ``BENCH_KEEP_LOGS=PREFIX`` (the plugins' logs are copied to ``PREFIX-<label>.log``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))
sys.path.insert(0, HERE)

import httpx  # noqa: E402

import harness  # noqa: E402
from netbay.dataplane import links, netns, probe  # noqa: E402
from netbay.runtime import dockerd  # noqa: E402

TAG = secrets.token_hex(3)
PREFIX = f"nbb{TAG}-"
PLUGIN = f"nbb{TAG}dk"
NETBAY_CIDR, BRIDGE_CIDR, BASELINE_CIDR = "10.93.0.0/24", "10.94.0.0/24", "10.96.0.0/24"


def os_env(srv: harness.Server) -> dict[str, str]:
    return {**os.environ, "OS_AUTH_URL": f"{srv.url}/identity/v3", "OS_USERNAME": "admin",
            "OS_PASSWORD": harness.ADMIN_PASSWORD, "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default",
            "OS_PROJECT_DOMAIN_NAME": "Default", "NETBAY_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}


def child(args: list[str], env: dict[str, str], log: str, cwd: str | None = None) -> subprocess.Popen:
    """``cwd``: a source tree to run from (``-m`` puts it first on the path)."""
    return subprocess.Popen([sys.executable, "-m", "netbay.cli.main", *args], env=env, cwd=cwd,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def wait(cond: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    for _ in range(int(seconds / 0.01) + 1):
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def first_packet(client: Any, net: str, ip: str, prober_ns: str, limit: float = 10.0) -> float:
    """Seconds from the create call to the first ICMP reply from ``ip``."""
    api = client.api
    t0 = time.perf_counter()
    host_config = api.create_host_config(network_mode=net)
    netcfg = api.create_networking_config({net: api.create_endpoint_config(ipv4_address=ip)})
    cid = api.create_container(dockerd.IMAGE, ["sleep", "600"], host_config=host_config,
                               networking_config=netcfg)["Id"]
    api.start(cid)
    for _ in range(int(limit / 0.002)):
        if probe.ping(prober_ns, ip, timeout=0.002):
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > limit:
            break
    raise SystemExit(f"{ip} on {net}: no reply within {limit}s")


def concurrent(d: dockerd.Dockerd, net: str, base: str, n: int, prober_ns: str) -> tuple[float, int]:
    """Wall time until ``n`` containers started at once all answer; errors."""
    errors = 0
    ips = [f"{base}.{100 + i}" for i in range(n)]

    def one(ip: str) -> None:
        import docker

        c = docker.APIClient(base_url=d.host, version="1.41", timeout=120)
        try:
            cid = c.create_container(dockerd.IMAGE, ["sleep", "600"], host_config=c.create_host_config(
                network_mode=net), networking_config=c.create_networking_config(
                {net: c.create_endpoint_config(ipv4_address=ip)}))["Id"]
            c.start(cid)
        finally:
            c.close()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        for f in [pool.submit(one, ip) for ip in ips]:
            try:
                f.result(timeout=300)
            except Exception as exc:  # noqa: BLE001 - counted
                errors += 1
                print("  error:", exc, file=sys.stderr)
    pending = set(ips)
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline:
        got = probe.run([probe.Probe(prober_ns, ip) for ip in sorted(pending)], timeout=0.05)
        pending -= {ip for ip, ok in zip(sorted(pending), got) if ok}
    return time.perf_counter() - t0, errors + len(pending)


def remove_all(d: dockerd.Dockerd) -> None:
    for c in d.client.containers.list(all=True):
        c.remove(force=True)


def plugin_latency(targets: dict[str, tuple[str, str, str]], cycles: int) -> dict[str, dict[str, list[float]]]:
    """``cycles`` of Docker's calls for one endpoint on each plugin (label -> plugin name,
    Docker network id, pool id), alternating between the plugins cycle by cycle."""
    out: dict[str, dict[str, list[float]]] = {
        label: {k: [] for k in ("RequestAddress", "CreateEndpoint", "Join", "DeleteEndpoint")} for label in targets}
    clients = {label: httpx.Client(transport=httpx.HTTPTransport(uds=f"/run/docker/plugins/{name}.sock"),
                                   base_url="http://plugin", timeout=30) for label, (name, _, _) in targets.items()}
    try:
        for _ in range(cycles):
            for label, (_, network_id, pool_id) in targets.items():
                one_cycle(clients[label], out[label], network_id, pool_id)
    finally:
        for c in clients.values():
            c.close()
    return out


def one_cycle(c: httpx.Client, out: dict[str, list[float]], network_id: str, pool_id: str) -> None:
    def call(method: str, body: dict) -> dict:
        t0 = time.perf_counter()
        r = c.post(f"/{method}", json=body)
        dt = time.perf_counter() - t0
        key = method.split(".")[1]
        if key in out:
            out[key].append(dt)
        if r.status_code != 200:
            raise SystemExit(f"{method}: {r.status_code} {r.text}")
        return r.json()

    eid = secrets.token_hex(32)
    mac = "02:42:%02x:%02x:%02x:%02x" % tuple(secrets.token_bytes(4))
    addr = call("IpamDriver.RequestAddress", {"PoolID": pool_id, "Address": "",
                                              "Options": {"com.docker.network.endpoint.macaddress": mac}})
    call("NetworkDriver.CreateEndpoint", {"NetworkID": network_id, "EndpointID": eid, "Interface": {
        "Address": addr["Address"], "AddressIPv6": "", "MacAddress": mac}, "Options": {}})
    call("NetworkDriver.Join", {"NetworkID": network_id, "EndpointID": eid, "SandboxKey": "", "Options": {}})
    call("NetworkDriver.Leave", {"NetworkID": network_id, "EndpointID": eid})
    call("NetworkDriver.DeleteEndpoint", {"NetworkID": network_id, "EndpointID": eid})
    call("IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": addr["Address"].split("/")[0]})


@contextlib.contextmanager
def port_load(srv: harness.Server, rate: float, connections: int, out: Path) -> Iterator[subprocess.Popen]:
    """``bench/port_load.py`` offering ``rate`` port creates/s on a network of its own, in a
    process of its own (its client must not share this process's interpreter); the
    project's port quota is lifted first (-1) so it never starves the plugin's creates.
    Stopped by SIGTERM when the block ends; its figures land in ``out``."""
    client = httpx.Client(base_url=srv.network, headers={"X-Auth-Token": srv.token()}, timeout=30)
    net, _ = harness.make_network(client, "load", "10.95.0.0/16")
    project = client.get(f"/networks/{net}").json()["network"]["project_id"]
    client.put(f"/quotas/{project}", json={"quota": {"port": -1}}).raise_for_status()
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "port_load.py"), "--network-url", srv.network,
                             "--token", srv.token(), "--network", net, "--rate", str(rate),
                             "--connections", str(connections), "--seconds", "600", "--json", str(out)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("the port load did not start")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        client.close()  # its ports and network go with the server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--concurrent", type=int, default=50)
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--rate", type=float, default=200.0, help="background port creates/s (0: none)")
    ap.add_argument("--load-connections", type=int, default=32, help="the load's keep-alive connections")
    ap.add_argument("--baseline-tree", help="also drive a plugin run from this source tree (e.g. the commit "
                    "before a change, unpacked), alternating cycles with this tree's plugin")
    ap.add_argument("--skip-docker-run", action="store_true",
                    help="only the plugin-latency phase (first packet and concurrent runs skipped)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (namespaces, veths, dockerd)")
    results: dict[str, Any] = {"machine": harness.machine()}
    if args.baseline_tree:   # which code the baseline plugin ran (bench/report.py names it)
        rev = subprocess.run(["git", "-C", args.baseline_tree, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=False).stdout.strip()
        results["baseline_tree"] = rev or os.path.abspath(args.baseline_tree)
    base_ns = f"{PREFIX}bl"
    procs: list[subprocess.Popen] = []
    daemons: list[dockerd.Dockerd] = []
    with harness.netbay("sqlite") as srv:
        try:
            env = os_env(srv)
            procs.append(child(["agent", "--url", srv.url, "--prefix", PREFIX, "--wait", "5"], env,
                               str(srv.data_dir / "agent.log")))
            nb = dockerd.start()
            daemons.append(nb)
            plugins = {"netbay": PLUGIN, **({"baseline": f"{PLUGIN}0"} if args.baseline_tree else {})}
            for label, name in plugins.items():
                procs.append(child(["libnetwork", "--name", name, "--url", srv.url, "--prefix", PREFIX,
                                    "--docker-host", nb.host],
                                   env, str(srv.data_dir / f"plugin-{label}.log"),
                                   os.path.abspath(args.baseline_tree) if label == "baseline" else None))
                wait(lambda name=name: os.path.exists(f"/run/docker/plugins/{name}.sock"), 30, f"plugin {name}")
            netns.create(base_ns)
            links.set_up(base_ns, 1)
            bl = dockerd.start(netns=base_ns)
            daemons.append(bl)
            from docker.types import IPAMConfig, IPAMPool

            nb_net = nb.client.networks.create("nbnet", driver=PLUGIN, ipam=IPAMConfig(
                driver=PLUGIN, pool_configs=[IPAMPool(subnet=NETBAY_CIDR)]))
            bl.client.networks.create("blnet", driver="bridge", ipam=IPAMConfig(
                pool_configs=[IPAMPool(subnet=BRIDGE_CIDR, gateway="10.94.0.1")]))
            http = httpx.Client(base_url=srv.url, headers={"X-Auth-Token": srv.token()}, timeout=30)
            nbnet = http.get("/network/v2.0/networks",
                             params={"tags": f"netbay.docker.net:{nb_net.id}"}).json()["networks"][0]
            sb = http.post("/netbay/v1/sandboxes", json={"sandbox": {"name": "prober",
                                                                     "networks": [nbnet["id"]]}}).json()["sandbox"]
            wait(lambda: http.get(f"/netbay/v1/sandboxes/{sb['id']}").json()["sandbox"]["status"] == "ACTIVE",
                 30, "the prober sandbox")
            prober = f"{PREFIX}s-{sb['id']}"
            if not args.skip_docker_run:
                # warm-up (first container start pays for image layers and containerd)
                first_packet(nb.client, "nbnet", "10.93.0.250", prober)
                first_packet(bl.client, "blnet", "10.94.0.250", base_ns)
                remove_all(nb), remove_all(bl)

                fp: dict[str, list[float]] = {"netbay": [], "bridge": []}
                for i in range(args.runs):
                    fp["netbay"].append(first_packet(nb.client, "nbnet", f"10.93.0.{10 + i}", prober))
                    fp["bridge"].append(first_packet(bl.client, "blnet", f"10.94.0.{10 + i}", base_ns))
                remove_all(nb), remove_all(bl)
                results["first_packet_ms"] = {k: harness.summary(v) for k, v in fp.items()}
                print("first packet", results["first_packet_ms"])

                conc = {"netbay": concurrent(nb, "nbnet", "10.93.0", args.concurrent, prober)}
                remove_all(nb)
                conc["bridge"] = concurrent(bl, "blnet", "10.94.0", args.concurrent, base_ns)
                remove_all(bl)
                results["concurrent"] = {k: {"seconds": v[0], "errors": v[1]} for k, v in conc.items()}
                print("concurrent", results["concurrent"])

            targets = {"netbay": (PLUGIN, nb_net.id, f"cidr:{NETBAY_CIDR}")}
            if args.baseline_tree:
                base_net = nb.client.networks.create("nbbase", driver=f"{PLUGIN}0", ipam=IPAMConfig(
                    driver=f"{PLUGIN}0", pool_configs=[IPAMPool(subnet=BASELINE_CIDR)]))
                targets["baseline"] = (f"{PLUGIN}0", base_net.id, f"cidr:{BASELINE_CIDR}")
            load_out = srv.data_dir / "port_load.json"
            results["load_average_before"] = os.getloadavg()
            loading = port_load(srv, args.rate, args.load_connections, load_out) if args.rate > 0 \
                else contextlib.nullcontext(None)
            with loading as loader:
                time.sleep(1.0)
                who = {"server": srv.proc.pid, "agent": procs[0].pid,
                       **({"load generator": loader.pid} if loader else {}),
                       **{f"plugin ({label})": p.pid for label, p in zip(plugins, procs[1:])}}
                cpu0, t0 = {k: harness.proc_cpu_seconds(pid) for k, pid in who.items()}, time.perf_counter()
                lat = plugin_latency(targets, args.cycles)
                wall = time.perf_counter() - t0
                results["cpu_cores_used"] = {k: round((harness.proc_cpu_seconds(pid) - cpu0[k]) / wall, 3)
                                             for k, pid in who.items()}
            results["load_average_after"] = os.getloadavg()
            if os.environ.get("BENCH_KEEP_LOGS"):
                for label in plugins:
                    shutil.copy(srv.data_dir / f"plugin-{label}.log", os.environ["BENCH_KEEP_LOGS"] + f"-{label}.log")
            load = json.loads(load_out.read_text()) if args.rate > 0 else {
                "achieved_per_s": 0, "offered_per_s": 0, "p50": 0, "p99": 0, "errors": 0}
            results["background_load"] = load
            results["plugin_calls_ms"] = {label: {k: harness.summary(v) for k, v in calls.items()}
                                          for label, calls in lat.items()}
            print("cores used in the window", results["cpu_cores_used"])
            print("plugin calls", json.dumps(results["plugin_calls_ms"], indent=1),
                  f"\nunder {load['achieved_per_s']:.0f} port creates/s offered {load['offered_per_s']:.0f}/s "
                  f"(p50 {load['p50']:.1f} ms, p99 {load['p99']:.1f} ms, {load['errors']} errors)")
            if args.baseline_tree:
                base_net.remove()
            http.delete(f"/netbay/v1/sandboxes/{sb['id']}")
            nb_net.remove()
        finally:
            for d in daemons:
                dockerd.stop(d)
            for p in reversed(procs):
                stop(p)
            if netns.exists(base_ns):
                netns.delete(base_ns)
            for name in netns.list(PREFIX):
                netns.delete(name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
