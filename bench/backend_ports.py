"""Port creates through netbay's Docker driver → a real Neutron, against openstacksdk → the same Neutron.

    sudo python bench/backend_ports.py              # 200 ports per path, ~3 min
    sudo python bench/backend_ports.py --ports 200 --reps 3 --seam

One run starts Keystone and Neutron's API server from PyPI (``tests/peers/openstack_cloud.py``:
SQLite, uWSGI, no agents), a ``netbay up`` server (SQLite, no agent), and two
``netbay libnetwork`` plugins — one with ``--backend openstack``, one on netbay's own
(embedded) backend. Then, per repetition, ``--ports`` times, one port on each path in
turn (the order rotates every port, so drift in the machine's load hits every path alike):

* ``sdk``: ``conn.network.create_port`` → Neutron directly, the baseline: the same port the
  plugin makes (subnet, Docker's MAC, owner ``kuryr:container``, name, the plugin's two tags);
* ``docker→openstack``: Docker's ``IpamDriver.RequestAddress`` (the exact body dockerd
  sends) on the plugin's Unix socket → the plugin → the backend seam → the same Neutron, on
  the same network (``-o netbay.network=`` / ``--ipam-opt netbay.subnet=``). This is what a
  ``docker run`` asks for its address: the port (kuryr's ``kuryr:container`` owner, tagged as
  the plugin's, in one request) and its veth pair;
* ``docker→embedded``: the same call on the other plugin → netbay's own network service —
  what one machine buys, side by side;
* ``seam→openstack`` (``--seam``): ``NetworkBackend("openstack").create("port", …)`` alone.

Each plugin call's veth end is moved at once into a namespace of this bench (as Docker moves
it into the container at Join): nothing stays in the host's namespace. Ports are not deleted
between creates (both peers are thrown away at the end).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import harness  # noqa: E402
from netbay.backends import open_backend  # noqa: E402
from netbay.dataplane import netns  # noqa: E402
from tests.peers.openstack_cloud import openstack_cloud  # noqa: E402

TAG = secrets.token_hex(3)
CIDR, GATEWAY = "10.80.0.0/16", "10.80.0.1/16"
MAC_OPTION = "com.docker.network.endpoint.macaddress"


class Plugin:
    """``netbay libnetwork`` in a process of its own, one Docker network made on it."""

    def __init__(self, label: str, extra: list[str], env: dict[str, str], work: Path) -> None:
        self.name, self.prefix = f"nbb{TAG}{label}", f"nbb{TAG}{label}-"
        self.sock = work / f"{self.name}.sock"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "netbay.cli.main", "libnetwork", "--name", self.name, "--prefix", self.prefix,
             "--plugin-dir", str(work), "--host", "bench", "--orphan-grace", "3600", *extra],
            env=env, stdout=open(work / f"{self.name}.log", "w"), stderr=subprocess.STDOUT)  # noqa: SIM115 - the child process writes it while it runs
        self.http = httpx.Client(transport=httpx.HTTPTransport(uds=str(self.sock)), base_url="http://p", timeout=30)
        deadline = time.monotonic() + 60
        while not self.sock.is_socket():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"plugin {self.name} did not start: {(work / f'{self.name}.log').read_text()}")
            time.sleep(0.05)
        self.pool = ""

    def call(self, method: str, body: dict) -> dict:
        r = self.http.post(f"/{method}", json=body)
        if r.status_code != 200:
            raise SystemExit(f"{self.name} {method}: {r.text}")
        return r.json()

    def network_on(self, network_id: str, subnet_id: str) -> None:
        """``docker network create -d … --ipam-opt netbay.subnet=S -o netbay.network=N``, as Docker calls it."""
        self.pool = self.call("IpamDriver.RequestPool", {"AddressSpace": "netbay", "Pool": CIDR, "SubPool": "",
                                                         "Options": {"netbay.subnet": subnet_id}, "V6": False})["PoolID"]
        self.call("IpamDriver.RequestAddress", {"PoolID": self.pool, "Address": "", "Options": {
            "RequestAddressType": "com.docker.network.gateway"}})
        self.call("NetworkDriver.CreateNetwork", {
            "NetworkID": secrets.token_hex(32), "Options": {"com.docker.network.generic": {"netbay.network": network_id}},
            "IPv4Data": [{"AddressSpace": "netbay", "Pool": CIDR, "Gateway": GATEWAY}], "IPv6Data": []})

    def request_address(self, mac: str) -> str:
        return self.call("IpamDriver.RequestAddress", {"PoolID": self.pool, "Address": "",
                                                       "Options": {MAC_OPTION: mac}})["Address"]

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        netns.delete(f"{self.prefix}fabric")


class Sink:
    """Where each veth end goes once made (Docker's Join moves it into the container)."""

    def __init__(self) -> None:
        from pyroute2 import IPRoute

        self.ns = f"nbb{TAG}-sink"
        netns.create(self.ns)
        self.ipr = IPRoute()

    def take(self, mac: str) -> None:
        for link in self.ipr.get_links():
            if (link.get_attr("IFLA_IFNAME") or "").startswith("nbc") and link.get_attr("IFLA_ADDRESS") == mac:
                self.ipr.link("set", index=link["index"], net_ns_fd=self.ns)
                return
        raise SystemExit(f"no veth end with MAC {mac} in the host namespace")

    def close(self) -> None:
        self.ipr.close()
        netns.delete(self.ns)


def macs() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: "02:42:%02x:%02x:%02x:%02x" % (0x0a, 0x50, *divmod(next(counter), 256))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=200)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--seam", action="store_true", help="also the seam alone (NetworkBackend → Neutron)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (the plugins make veth pairs in namespaces of their own)")
    load, started = [os.getloadavg()[0]], time.monotonic()
    plugins: list[Plugin] = []
    sink = None
    with (tempfile.TemporaryDirectory(prefix="nb-bench-peers-") as tmp, openstack_cloud(Path(tmp) / "cloud") as cloud,
          harness.netbay("sqlite") as srv):
        try:
            work = Path(tmp)
            clouds = work / "clouds.yaml"
            clouds.write_text(json.dumps({"clouds": {"bench": {"auth": cloud.auth(), "region_name": "RegionOne",
                                                               "identity_api_version": 3}}}))
            conn = cloud.connection()
            net = conn.network.create_network(name="bench")
            subnet = conn.network.create_subnet(network_id=net.id, cidr=CIDR, ip_version=4, gateway_ip="10.80.0.1")
            on_cloud = Plugin("os", ["--backend", "openstack", "--os-cloud", "bench", "--plug", "fabric"],
                              {**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds)}, work)
            plugins.append(on_cloud)
            on_cloud.network_on(net.id, subnet.id)
            local = httpx.Client(base_url=srv.network, headers={"X-Auth-Token": srv.token()}, timeout=30)
            lnet = local.post("/networks", json={"network": {"name": "bench"}}).json()["network"]
            lsub = local.post("/subnets", json={"subnet": {"network_id": lnet["id"], "cidr": CIDR,
                                                           "ip_version": 4}}).json()["subnet"]
            embedded = Plugin("em", ["--url", srv.url], {
                **os.environ, "OS_AUTH_URL": f"{srv.url}/identity/v3", "OS_USERNAME": "admin",
                "OS_PASSWORD": harness.ADMIN_PASSWORD, "OS_PROJECT_NAME": "admin", "NETBAY_LOG_LEVEL": "WARNING"}, work)
            plugins.append(embedded)
            embedded.network_on(lnet["id"], lsub["id"])
            sink, mac = Sink(), macs()

            def docker(plugin: Plugin) -> Callable[[], str | None]:
                def create() -> str:
                    m = mac()
                    plugin.request_address(m)
                    return m   # its veth end, for the sink (untimed: Docker's Join)
                return create

            owner = f"netbay.docker.by:{on_cloud.name}@bench"

            def sdk() -> None:  # the port the plugin makes, made directly
                conn.network.create_port(network_id=net.id, fixed_ips=[{"subnet_id": subnet.id}], mac_address=mac(),
                                         device_owner="kuryr:container", name="docker",
                                         tags=["netbay.docker.made", owner])

            def seam_alone() -> None:
                seam.create("port", {"network_id": net.id})

            seam = open_backend("openstack", connection=conn)
            ways: dict[str, Callable[[], str | None]] = {"sdk": sdk, "docker→openstack": docker(on_cloud),
                                                          "docker→embedded": docker(embedded)}
            if args.seam:
                ways["seam→openstack"] = seam_alone
            for create in ways.values():  # warm every path once (connections, tokens, caches)
                if moved := create():
                    sink.take(moved)
            times: dict[str, list[float]] = {w: [] for w in ways}
            order = list(ways)
            for rep in range(args.reps):
                spent = dict.fromkeys(ways, 0.0)
                for i in range(args.ports):
                    for way in order[i % len(order):] + order[:i % len(order)]:
                        t0 = time.perf_counter()
                        moved = ways[way]()
                        spent[way] += time.perf_counter() - t0
                        if moved:
                            sink.take(moved)
                for way, seconds in spent.items():
                    times[way].append(seconds)
                print(f"rep {rep + 1}: " + ", ".join(f"{w} {s:.2f} s" for w, s in spent.items()), flush=True)
            conn.close()
        finally:
            for plugin in plugins:
                plugin.stop()
            if sink is not None:
                sink.close()
    load.append(os.getloadavg()[0])
    med = {w: statistics.median(v) for w, v in times.items()}
    paired = statistics.median(d / s for d, s in zip(times["docker→openstack"], times["sdk"], strict=True))
    print(f"\n{args.ports} port creates per path, alternating port by port, median of {args.reps}; "
          f"load {load[0]:.2f} → {load[1]:.2f}; {harness.machine()}; run took {time.monotonic() - started:.0f} s")
    print("| path | wall s | ms/port | vs sdk → Neutron |\n|---|---|---|---|")
    for way, seconds in med.items():
        print(f"| {way} | {seconds:.2f} | {1000 * seconds / args.ports:.1f} | {seconds / med['sdk']:.1%} |")
    print(f"netbay's Docker driver over openstacksdk (paired): {paired - 1:+.1%} (target ≤ +10%)")
    if args.json:
        args.json.write_text(json.dumps({"times": times, "paired": paired, "load": load}))


if __name__ == "__main__":
    main()
