"""Container networking on cluster nodes: throughput per flannel backend, pod create speed.

    sudo python bench/pod_network.py [--reps 5] [--seconds 5] [--samples 30] [--pods 100]
                                     [--json /tmp/pod_network.json]

Issue 5's targets, all measured in one run:

* iperf3 TCP between pods on two nodes: ``host-gw`` ≥ 90% of the node-to-node
  ``underlay``; ``vxlan`` ≥ 75% of ``host-gw``;
* pod create → first packet p50 ≤ 30 ms; 100 pods across 4 nodes ≤ 3 s.

Topology (every namespace named ``nbb<hex>-…``, all deleted at the end, also on
error or Ctrl-C; iperf3 processes stopped by PID): per backend a cluster's private
network as netbay builds it — a bridge ``ul0`` in a fabric namespace, node
namespaces with ``eth0`` (MTU 1500; GSO limit: the fabric's, as a node's ``eth0`` is a
fabric port, or with ``--underlay kernel`` the kernel's 64 KiB) on 10.9.x.0/24 — and the flannel driver
(:mod:`netbay.drivers.flannel`) on the nodes: ``host-gw`` on 10.9.1.0/24, ``vxlan``
on 10.9.2.0/24 (4 nodes), one pod per node. Paths, each repetition running all
three in a rotating order (medians over repetitions, ratios also paired per
repetition):

* ``underlay`` — iperf3 from node 0's namespace to node 1's eth0 address (the host-gw cluster's nodes);
* ``host-gw``  — pod on node 0 → pod on node 1 (cni0, routing, underlay, routing, cni0),
  wired as shipped: BIG TCP where this host's probe chose it (:mod:`netbay.dataplane.bigtcp`;
  the choice and its figures are printed);
* ``host-gw-alt`` — the same on a second host-gw cluster (10.9.3.0/24), wired as
  shipped, then its pod veths (both ends) and cni0 set to the GSO limit the product
  did *not* choose: both settings of the same chain in one run;
* ``vxlan``    — the same through ``flannel.1`` (MTU 1450).
* with ``--bare``, ``host-gw-bare`` and ``vxlan-bare``: the same two chains as bare
  kernel devices built by ``bench/vxlan_options.py`` (two nodes, no netbay code, no
  masquerade rules), with the shipped paths' GSO limits: whether a gap between
  ``vxlan`` and ``host-gw`` is netbay's wiring or the kernel's.

Pod create → first packet (on the vxlan cluster, alternating with the baseline):
namespace created, :meth:`Flannel.attach_pod` (``pods.attach``), then ICMP to a pod
on another node answered. Baseline: the same wiring as bare :mod:`netbay.dataplane.rtnl`
requests (veth into cni0, up, the product's bounded wait for carrier, address, default
route — no checks, no idempotence); see :func:`raw_attach` for why the wait belongs to
the work.
100 pods: created back to back round-robin over the 4 nodes, then every pod must
answer ICMP from a pod on another node; wall time to the last answer (baseline
alike).
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

from iperf import Iperf  # noqa: E402
from netbay.dataplane import bigtcp, links, netns, probe  # noqa: E402
from netbay.dataplane.rtnl import rtnl  # noqa: E402
from netbay.drivers import leases  # noqa: E402
from netbay.drivers.flannel import FlannelConfig  # noqa: E402
from netbay.drivers.flannel.driver import Flannel  # noqa: E402
from netbay.drivers.node import Node  # noqa: E402

PREFIX = f"nbb{secrets.token_hex(3)}-"
PATHS = ("underlay", "host-gw", "host-gw-alt", "vxlan")
BARE = ("host-gw-bare", "vxlan-bare")


# --- in-process ICMP ------------------------------------------------------------------------


def first_answer(ns: str, dst: str, timeout: float = 3.0, every: float = 0.002) -> float:
    """Seconds until an ICMP echo from ``ns`` to ``dst`` is answered (one request every
    ``every`` s, bounded by ``timeout``)."""
    import select
    t0 = time.monotonic()
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    try:
        ident = secrets.randbits(16)
        for seq in range(1, int(timeout / every) + 2):
            try:
                s.sendto(probe.echo_request(ident, seq, b"nb"), (dst, 0))
            except OSError:
                pass  # e.g. ENETUNREACH while the route is not there yet
            end = time.monotonic() + every
            for _ in range(50):
                left = end - time.monotonic()
                if left <= 0:
                    break
                r, _, _ = select.select([s], [], [], left)
                if not r:
                    break
                data, addr = s.recvfrom(2048)
                got = probe.parse_reply(data)
                if got is not None and got[0] == ident and addr[0] == dst:
                    return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                break
        raise RuntimeError(f"no ICMP answer from {dst} in {ns} within {timeout}s")
    finally:
        s.close()


# --- clusters -------------------------------------------------------------------------------


class Cluster:
    def __init__(self, tag: str, backend: str, subnet: str, n: int, underlay: str = "fabric") -> None:
        self.tag, self.subnet = tag, subnet
        self.fabric = PREFIX + f"{tag}fab"
        netns.create(self.fabric)
        links.bridge(self.fabric, "ul0", 1500)
        self.fl = Flannel(FlannelConfig(backend=backend))
        ids = [f"n{i}" for i in range(n)]
        self.leases = self.fl.allocate(ids, {})
        self.nodes: list[Node] = []
        for i in range(n):
            ns = PREFIX + f"{tag}n{i}"
            underlay_port(self.fabric, ns, f"u{tag}{i}{PREFIX[3:9]}"[:15], f"{subnet}.{10 + i}/24",
                          bigtcp.gso_max_size("fabric") if underlay == "fabric" else None)
            self.nodes.append(Node(ns, f"{subnet}.{10 + i}/24", self.leases[f"n{i}"]))
        for node in self.nodes:
            self.fl.setup_node(node)
        for node in self.nodes:
            self.fl.sync_peers(node, self.nodes)
        self.pods = []
        for i, node in enumerate(self.nodes):
            pod = PREFIX + f"{tag}p{i}"
            self.fl.attach_pod(node, pod, leases.host(node.lease, 2))
            self.pods.append(pod)

    def pod_ip(self, i: int) -> str:
        return leases.host(self.nodes[i].lease, 2)


def underlay_port(fabric: str, ns: str, host_if: str, cidr: str, gso: int | None) -> None:
    """A node's ``eth0``: a veth into ``ul0`` with GSO limit ``gso`` (the product's
    node ``eth0`` is a fabric port, with the fabric path's limit)."""
    netns.create(ns)
    fr = rtnl(fabric)
    fr.add_veth(host_if, "eth0", ns, mtu=1500, master=fr.link("ul0").index, up=True,
                gso_max_size=gso)
    nr = rtnl(ns)
    nr.set_link(1, up=True)
    idx = nr.link("eth0").index
    nr.add_address(idx, cidr)
    nr.set_link(idx, up=True)


def raw_attach(node: Node, pod_ns: str, host_if: str, address: str, mtu: int) -> None:
    """Baseline: the same wiring as bare rtnetlink requests (no checks, no idempotence),
    including what the product waits for: both ends of the veth operationally up
    before the address (bounded by 0.2 s, as ``pods.attach``). Without that wait the
    first ARP of a pod is lost whenever the kernel's linkwatch has not yet enabled
    the new bridge port, and the neighbour code resends it only after
    ``retrans_time`` (1 s): issue 15's baseline, p50 505 ms, was the median of a
    sample split between ~4 ms and ~1,005 ms."""
    netns.create(pod_ns)
    nr = rtnl(node.ns)
    br = nr.link("cni0").index
    nr.add_veth(host_if, "eth0", pod_ns, mtu=mtu, master=br, up=True)
    pr = rtnl(pod_ns)
    pr.set_link(1, up=True)
    idx = pr.link("eth0").index
    pr.set_link(idx, up=True)
    deadline = time.monotonic() + 0.2
    for _ in range(10_000):
        a, b = pr.link(index=idx), nr.link(host_if)
        if (a.operstate == b.operstate == "UP") or time.monotonic() > deadline:
            break
        time.sleep(0.0002)
    pr.add_address(idx, address)
    pr.replace_route("0.0.0.0/0", gateway=node.gateway, oif=idx)


def pod_gso(cluster: Cluster) -> int:
    """The GSO limit of pod 0's eth0 (read back from the kernel)."""
    return rtnl(cluster.pods[0]).link("eth0").gso_max_size


def choice(decision: bigtcp.Decision) -> str:
    return "; ".join(f"{p} {'on' if d.big else 'off'} ({d.source}"
                     + (f" {d.default_gbps}/{d.big_gbps} Gbit/s at 64/192 KiB" if d.big_gbps is not None else "")
                     + ")" for p, d in decision.paths.items() if p != "fabric")


def set_pod_gso(cluster: Cluster, size: int) -> None:
    """Every pod veth of ``cluster`` (both ends) and its nodes' cni0 at ``size``: the
    same chain with the other setting (a TCP connection takes the limit it connects with)."""
    for node, pod in zip(cluster.nodes, cluster.pods):
        nr, pr = rtnl(node.ns), rtnl(pod)
        eth0 = pr.link("eth0")
        host = nr.link(index=eth0.peer)
        for r, link in ((pr, eth0), (nr, host), (nr, nr.link("cni0"))):
            r.set_link(link.index, gso_max_size=size)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


# --- measurements ---------------------------------------------------------------------------


def bare_chains(args, hg: Cluster) -> dict[str, tuple[str, str]]:
    """``--bare``: host-gw and vxlan as bare kernel chains (bench/vxlan_options.py) with
    the shipped GSO limits; path -> (client pod, server pod)."""
    import vxlan_options as vo
    vo.PREFIX = PREFIX + "x"   # swept with everything else
    ul = rtnl(hg.nodes[0].ns).link("eth0").gso_max_size
    return {"host-gw-bare": tuple(vo.build("g", "hostgw", ul=ul, pod=pod_gso(hg))),
            "vxlan-bare": tuple(vo.build("v", "vxlan", ul=ul))}


def throughput(args, hg: Cluster, alt: Cluster, vx: Cluster, iperf: Iperf,
               bare: dict[str, tuple[str, str]]) -> dict[str, Any]:
    iperf.serve(hg.nodes[1].ns, hg.nodes[1].ip)
    iperf.serve(hg.pods[1], hg.pod_ip(1))
    iperf.serve(alt.pods[1], alt.pod_ip(1))
    iperf.serve(vx.pods[1], vx.pod_ip(1))
    targets = {"underlay": (hg.nodes[0].ns, hg.nodes[1].ip), "host-gw": (hg.pods[0], hg.pod_ip(1)),
               "host-gw-alt": (alt.pods[0], alt.pod_ip(1)), "vxlan": (vx.pods[0], vx.pod_ip(1))}
    for path, (client, server) in bare.items():
        iperf.serve(server, "10.244.1.2")
        targets[path] = (client, "10.244.1.2")
    paths = PATHS + tuple(bare)
    samples: dict[str, list[float]] = {p: [] for p in paths}
    for rep in range(args.reps):
        order = paths[rep % len(paths):] + paths[:rep % len(paths)]
        for p in order:
            ns, ip = targets[p]
            samples[p].append(iperf.run(ns, ip, args.seconds, args.omit)["gbps"])
        print(f"  rep {rep + 1}: " + ", ".join(f"{p} {samples[p][-1]:.1f}" for p in paths), flush=True)
    med = {p: statistics.median(v) for p, v in samples.items()}
    paired_hg = statistics.median(h / u for h, u in zip(samples["host-gw"], samples["underlay"]))
    paired_vx = statistics.median(v / h for v, h in zip(samples["vxlan"], samples["host-gw"]))
    paired_alt = statistics.median(h / a for h, a in zip(samples["host-gw"], samples["host-gw-alt"]))
    paired_bare = statistics.median(v / h for v, h in zip(samples["vxlan-bare"], samples["host-gw-bare"])) \
        if bare else None
    return {"samples": samples, "median_gbps": med, "hostgw_over_alt_paired": paired_alt,
            "vxlan_bare_over_hostgw_bare_paired": paired_bare,
            "hostgw_over_underlay": med["host-gw"] / med["underlay"], "hostgw_over_underlay_paired": paired_hg,
            "vxlan_over_hostgw": med["vxlan"] / med["host-gw"], "vxlan_over_hostgw_paired": paired_vx}


def create_to_first_packet(args, vx: Cluster) -> dict[str, Any]:
    node, peer_ip = vx.nodes[0], vx.pod_ip(1)
    mtu = vx.fl.pod_mtu(node)
    out: dict[str, list[float]] = {"attach": [], "baseline": []}
    made: list[str] = []
    try:
        for i in range(args.samples):
            for kind in (("attach", "baseline") if i % 2 == 0 else ("baseline", "attach")):
                pod = PREFIX + f"f{kind[0]}{i}"
                made.append(pod)
                addr = leases.host(node.lease, 10 + 2 * i + (kind == "baseline"))
                t0 = time.monotonic()
                if kind == "attach":
                    netns.create(pod)
                    vx.fl.attach_pod(node, pod, addr, mtu=mtu)
                else:
                    raw_attach(node, pod, f"vb{i}{PREFIX[3:9]}", f"{addr}/24", mtu)
                first_answer(pod, peer_ip)
                out[kind].append(time.monotonic() - t0)
    finally:
        for pod in made:
            netns.delete(pod)
    return {k: {"p50_ms": statistics.median(v) * 1e3, "p90_ms": pct(v, 0.9) * 1e3, "samples_ms":
                [round(x * 1e3, 3) for x in v]} for k, v in out.items()}


def hundred_pods(args, vx: Cluster) -> dict[str, Any]:
    res: dict[str, Any] = {}
    n = len(vx.nodes)
    for kind in ("attach", "baseline"):
        pods: list[tuple[str, int]] = []
        try:
            t0 = time.monotonic()
            for i in range(args.pods):
                k = i % n
                node = vx.nodes[k]
                pod = PREFIX + f"h{kind[0]}{i}"
                addr = leases.host(node.lease, 100 + i // n)
                pods.append((pod, k))
                if kind == "attach":
                    netns.create(pod)
                    vx.fl.attach_pod(node, pod, addr)
                else:
                    raw_attach(node, pod, f"hb{i}{PREFIX[3:9]}"[:15], f"{addr}/24", vx.fl.pod_mtu(node))
            t_wired = time.monotonic() - t0
            for pod, k in pods:   # every pod reaches the pod on the next node
                first_answer(pod, vx.pod_ip((k + 1) % n))
            res[kind] = {"wired_s": t_wired, "all_answer_s": time.monotonic() - t0}
        finally:
            for pod, _k in pods:
                netns.delete(pod)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--omit", type=int, default=1)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--underlay", choices=("fabric", "kernel"), default="fabric",
                    help="node eth0 GSO limit: the fabric's (as the product wires a node's eth0, "
                         "a fabric port) or the kernel's default (issue 15's topology)")
    ap.add_argument("--bare", action="store_true",
                    help="also host-gw and vxlan as bare kernel chains (bench/vxlan_options.py)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not (1 <= args.reps <= 50 and 1 <= args.seconds <= 60 and 1 <= args.samples <= 500
            and 4 <= args.pods <= 500):
        ap.error("out of range")
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    load_before = os.getloadavg()
    iperf = Iperf()
    result: dict[str, Any] = {"load_before": load_before, "args": vars(args)}
    try:
        chosen = bigtcp.decide()   # what the agent decides at its start (cache, else probe)
        result["big_tcp"] = chosen.as_dict()
        hg = Cluster("g", "host-gw", "10.9.1", 2, args.underlay)
        alt = Cluster("a", "host-gw", "10.9.3", 2, args.underlay)
        set_pod_gso(alt, 65536 if pod_gso(hg) > 65536 else bigtcp.GSO_MAX_SIZE)
        vx = Cluster("v", "vxlan", "10.9.2", 4, args.underlay)
        result["pod_gso"] = {"host-gw": pod_gso(hg), "host-gw-alt": pod_gso(alt), "vxlan": pod_gso(vx),
                             "node eth0": rtnl(hg.nodes[0].ns).link("eth0").gso_max_size}
        print(f"BIG TCP as the product chose it: {choice(chosen)}; pod eth0 GSO limits {result['pod_gso']}")
        print("throughput (iperf3 TCP, Gbit/s):", flush=True)
        bare = bare_chains(args, hg) if args.bare else {}
        result["throughput"] = throughput(args, hg, alt, vx, iperf, bare)
        iperf.close()
        result["first_packet"] = create_to_first_packet(args, vx)
        result["hundred_pods"] = hundred_pods(args, vx)
    finally:
        iperf.close()
        for ns in netns.list(PREFIX):
            netns.delete(ns)
    result["load_after"] = os.getloadavg()
    t, f, h = result["throughput"], result["first_packet"], result["hundred_pods"]
    m = t["median_gbps"]
    print(f"\nunderlay GSO: {args.underlay}; the product's choice: {choice(bigtcp.decide())}")
    print(f"load {load_before[0]:.2f} → {result['load_after'][0]:.2f}  (1-min averages, {os.cpu_count()} CPUs)")
    g = result["pod_gso"]
    print("| path | median Gbit/s | ratio (paired) |")
    print("|---|---|---|")
    print(f"| underlay (node → node), GSO {g['node eth0']} | {m['underlay']:.1f} | |")
    print(f"| host-gw (pod → pod), as shipped: GSO {g['host-gw']} | {m['host-gw']:.1f} | "
          f"{t['hostgw_over_underlay']:.0%} of underlay ({t['hostgw_over_underlay_paired']:.0%}) |")
    print(f"| host-gw-alt (the other setting: GSO {g['host-gw-alt']}) | {m['host-gw-alt']:.1f} | "
          f"{m['host-gw-alt'] / m['underlay']:.0%} of underlay; shipped/alt "
          f"{m['host-gw'] / m['host-gw-alt']:.0%} ({t['hostgw_over_alt_paired']:.0%}) |")
    print(f"| vxlan (pod → pod), GSO {g['vxlan']} | {m['vxlan']:.1f} | {t['vxlan_over_hostgw']:.0%} of host-gw "
          f"({t['vxlan_over_hostgw_paired']:.0%}) |")
    if args.bare:
        print(f"| host-gw-bare (bare kernel chain, GSO {g['host-gw']}) | {m['host-gw-bare']:.1f} | "
              f"{m['host-gw-bare'] / m['host-gw']:.0%} of host-gw |")
        print(f"| vxlan-bare (bare kernel chain, GSO {g['vxlan']}) | {m['vxlan-bare']:.1f} | "
              f"{m['vxlan-bare'] / m['host-gw-bare']:.0%} of host-gw-bare "
              f"({t['vxlan_bare_over_hostgw_bare_paired']:.0%}); {m['vxlan-bare'] / m['vxlan']:.0%} of vxlan |")
    print("\n| pod create → first packet | p50 ms | p90 ms | samples > 500 ms |")
    print("|---|---|---|---|")
    for k in ("attach", "baseline"):
        slow = sum(x > 500 for x in f[k]["samples_ms"])
        print(f"| {k} | {f[k]['p50_ms']:.1f} | {f[k]['p90_ms']:.1f} | {slow} of {len(f[k]['samples_ms'])} |")
    print(f"\n| {args.pods} pods across 4 nodes | wired s | all answer s |")
    print("|---|---|---|")
    for k in ("attach", "baseline"):
        print(f"| {k} | {h[k]['wired_s']:.2f} | {h[k]['all_answer_s']:.2f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
