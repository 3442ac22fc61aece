"""Dual-stack flannel: pod create → first packet over IPv6 against IPv4, in one run.

    sudo python bench/flannel_dual.py [--samples 30] [--backend vxlan|host-gw] [--json FILE]

Issue 28's speed target for item 5: an IPv6 pod's create → first packet within 1.1× of
the IPv4 figure in the same run. Topology (namespaces ``nbb<hex>-…``, all deleted at the
end, also on error): two flannel clusters on their own underlays as in
``bench/pod_network.py`` (a bridge ``ul0`` in a fabric namespace, node namespaces with
``eth0``) — a dual-stack one (``flannel_ipv6_network_cidr=fd00:10::/56``) and an
IPv4-only one — each with an anchor pod on node 1 listening on TCP over both families.

Each sample: a namespace made and plugged into node 0 by ``Flannel.attach_pod`` (both
addresses on the dual-stack cluster), then a TCP connect to the anchor until it is
answered. Samples rotate over ``IPv4`` and ``IPv6`` on the dual-stack cluster and
``IPv4-only`` on the other: the IPv6/IPv4 ratio is the target's; IPv4/IPv4-only is what
being dual-stack costs the IPv4 path (the second address and route at attach).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))

from netbay.dataplane import links, netns  # noqa: E402
from netbay.drivers import leases  # noqa: E402
from netbay.drivers.flannel import FlannelConfig  # noqa: E402
from netbay.drivers.flannel.driver import Flannel  # noqa: E402
from netbay.drivers.node import Node  # noqa: E402

PREFIX = f"nbb{secrets.token_hex(3)}-"
PORT = 8080


class Cluster:
    """Two nodes on one underlay, an anchor pod on node 1 listening on both families."""

    def __init__(self, tag: str, subnet: str, config: FlannelConfig) -> None:
        fabric = PREFIX + f"{tag}fab"
        netns.create(fabric)
        links.bridge(fabric, "ul0", 1500)
        self.fl = Flannel(config)
        lease = self.fl.allocate(["n0", "n1"], {})
        self.nodes = []
        for i in range(2):
            ns = PREFIX + f"{tag}n{i}"
            links.wire_port(fabric, "ul0", ns, host_ifname=f"u{tag}{i}{PREFIX[3:9]}"[:15],
                            cidrs=[f"{subnet}.{10 + i}/24"], mtu=1500)
            self.nodes.append(Node(ns, f"{subnet}.{10 + i}/24", lease[f"n{i}"]))
        for node in self.nodes:
            self.fl.setup_node(node)
        time.sleep(2.5)   # the underlay's IPv6 link-local addresses out of DAD (host-gw's next hops)
        for node in self.nodes:
            self.fl.sync_peers(node, self.nodes)
        self.anchor = PREFIX + f"{tag}a"
        link = self.fl.attach_pod(self.nodes[1], self.anchor, leases.host(self.nodes[1].lease, 2))
        self.ips = {"IPv4": link.address.split("/")[0]}
        if link.address6:
            self.ips["IPv6"] = link.address6.split("/")[0]
        with netns.entered(self.anchor):
            self.server = socket.socket(socket.AF_INET6)
        self.server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)   # both families
        self.server.bind(("::", PORT))
        self.server.listen(4096)   # connects complete in the backlog; nothing accepts


def first_tcp(ns: str, ip: str, timeout: float = 3.0) -> float:
    """Seconds until a TCP connect from ``ns`` to ``ip`` succeeds (retried every 2 ms)."""
    t0 = time.monotonic()
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    while time.monotonic() - t0 < timeout:
        with netns.entered(ns):
            s = socket.socket(family)
        try:
            s.settimeout(1.0)
            s.connect((ip, PORT))
            return time.monotonic() - t0
        except OSError:
            time.sleep(0.002)
        finally:
            s.close()
    raise RuntimeError(f"no TCP answer from {ip} in {ns} within {timeout}s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--backend", choices=("vxlan", "host-gw"), default="vxlan")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not 1 <= args.samples <= 500:
        ap.error("out of range")
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    out: dict[str, list[float]] = {"IPv4": [], "IPv6": [], "IPv4-only": []}
    load_before = os.getloadavg()
    try:
        dual = Cluster("d", "10.9.4", FlannelConfig(backend=args.backend, network6="fd00:10::/56"))
        single = Cluster("s", "10.9.5", FlannelConfig(backend=args.backend))
        kinds = list(out)
        for i in range(args.samples):
            for k in range(len(kinds)):
                kind = kinds[(i + k) % len(kinds)]
                cluster = single if kind == "IPv4-only" else dual
                pod = PREFIX + f"p{kind[-1]}{i}"
                t0 = time.monotonic()
                netns.create(pod)
                cluster.fl.attach_pod(cluster.nodes[0], pod, leases.host(cluster.nodes[0].lease, 10 + i))
                first_tcp(pod, cluster.ips["IPv6" if kind == "IPv6" else "IPv4"])
                out[kind].append(time.monotonic() - t0)
    finally:
        for ns in netns.list(PREFIX):
            netns.delete(ns)
    p50 = {k: statistics.median(v) * 1e3 for k, v in out.items()}
    p90 = {k: sorted(v)[int(0.9 * (len(v) - 1))] * 1e3 for k, v in out.items()}
    result: dict[str, Any] = {"args": vars(args), "load": [load_before, os.getloadavg()],
                              "p50_ms": p50, "p90_ms": p90, "ipv6_over_ipv4": p50["IPv6"] / p50["IPv4"],
                              "samples_ms": {k: [round(x * 1e3, 3) for x in v] for k, v in out.items()}}
    print(f"flannel {args.backend}, {args.samples} samples each; load {load_before[0]:.2f} → "
          f"{result['load'][1][0]:.2f} ({os.cpu_count()} CPUs)")
    print("| pod create → first TCP answer | p50 ms | p90 ms |")
    print("|---|---|---|")
    for k in out:
        print(f"| {k} | {p50[k]:.1f} | {p90[k]:.1f} |")
    print(f"IPv6 / IPv4 (p50): {result['ipv6_over_ipv4']:.2f} (target ≤ 1.10)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
