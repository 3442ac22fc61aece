"""Masqueraded pod → outside throughput against pod → pod on the same nodes (issue 13, item 2).

    sudo python bench/pod_masq.py [--reps 5] [--seconds 5] [--json /tmp/pod_masq.json]

Target: iperf3 TCP from a pod to a sandbox on another network behind the cluster's
router (masqueraded in the node by flannel's ip-masq table, :mod:`netbay.drivers.masq`,
then forwarded by the product's router namespace, :mod:`netbay.dataplane.router`)
≥ 90% of pod → pod across the same two nodes, measured in one run.

Topology (namespaces ``nbb<hex>-…``, all deleted at the end, also on error; iperf3
stopped by PID), built with bench/pod_network.py's pieces: a fabric namespace with
``ul0`` (the cluster's private network, 10.9.5.0/24) and ``ul1`` (another network,
10.77.0.0/24); two flannel ``host-gw`` nodes on ``ul0`` with one pod each, ip-masq
on (the default), default route via the router; a router namespace with a leg on
each bridge (``ensure_router``: forwarding, its nft table with both subnets
internal, no gateway); an "outside" sandbox namespace on ``ul1``. Every veth has the
fabric path's GSO limit, as the product wires ports. host-gw because both paths
then cross two forwarding namespaces without encapsulation: pod → node 0 → node 1 →
pod, and pod → node 0 (masquerade) → router → sandbox.

Paths run alternately in a rotating order; medians over repetitions and the paired
per-repetition ratio. The node's masquerade counter is read after the run (it must
have counted the outside path's packets, and the sandbox saw node 0's address).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))

from iperf import Iperf  # noqa: E402
from pod_network import PREFIX, Cluster  # noqa: E402

from netbay.dataplane import bigtcp, links, netns, router  # noqa: E402
from netbay.dataplane.nft import Nft  # noqa: E402
from netbay.dataplane.rtnl import rtnl  # noqa: E402
from netbay.drivers import masq  # noqa: E402

PATHS = ("pod-pod", "pod-outside")
SUBNET, OTHER = "10.9.5", "10.77.0"


def leg(fabric: str, bridge: str, ns: str, host_if: str, ifname: str, cidr: str, gso: int) -> None:
    """A veth from ``bridge`` in the fabric to ``ifname`` in ``ns`` with ``cidr``."""
    fr = rtnl(fabric)
    fr.add_veth(host_if, ifname, ns, mtu=1500, master=fr.link(bridge).index, up=True, gso_max_size=gso)
    nr = rtnl(ns)
    nr.set_link(1, up=True)
    idx = nr.link(ifname).index
    nr.add_address(idx, cidr)
    nr.set_link(idx, up=True)


def build() -> tuple[Cluster, str, str]:
    """The cluster, the router namespace and the outside sandbox's namespace."""
    cl = Cluster("m", "host-gw", SUBNET, 2)
    gso = bigtcp.gso_max_size("fabric")
    links.bridge(cl.fabric, "ul1", 1500)
    r_ns, out_ns = PREFIX + "mr", PREFIX + "mo"
    netns.create(r_ns)
    netns.create(out_ns)
    tag = PREFIX[3:9]
    leg(cl.fabric, "ul0", r_ns, f"ra{tag}", "qr-a", f"{SUBNET}.1/24", gso)
    leg(cl.fabric, "ul1", r_ns, f"rb{tag}", "qr-b", f"{OTHER}.1/24", gso)
    router.ensure_router(r_ns, gateway=None, floating_ips=[], enable_snat=False, interfaces=[
        router.Leg("qr-a", addresses=[f"{SUBNET}.1/24"]), router.Leg("qr-b", addresses=[f"{OTHER}.1/24"])])
    leg(cl.fabric, "ul1", out_ns, f"o{tag}", "eth0", f"{OTHER}.10/24", gso)
    rtnl(out_ns).replace_route("0.0.0.0/0", gateway=f"{OTHER}.1", oif=rtnl(out_ns).link("eth0").index)
    for node in cl.nodes:
        nr = rtnl(node.ns)
        nr.replace_route("0.0.0.0/0", gateway=f"{SUBNET}.1", oif=nr.link("eth0").index)
    return cl, r_ns, out_ns


def masq_packets(ns: str) -> int:
    with Nft(ns) as nft:
        for obj in nft.list_ruleset():
            rule = obj.get("rule")
            if rule and rule.get("table") == masq.TABLE:
                return next((e["counter"]["packets"] for e in rule["expr"] if "counter" in e), 0)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--omit", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not (1 <= args.reps <= 50 and 1 <= args.seconds <= 60):
        ap.error("out of range")
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    load_before = os.getloadavg()
    iperf = Iperf()
    result: dict[str, Any] = {"load_before": load_before, "args": vars(args)}
    try:
        cl, _r_ns, out_ns = build()
        outside_ip = f"{OTHER}.10"
        assert masq.networks(cl.nodes[0].ns) == {"10.100.0.0/16"}, "ip-masq table missing"
        iperf.serve(cl.pods[1], cl.pod_ip(1))
        iperf.serve(out_ns, outside_ip)
        targets = {"pod-pod": cl.pod_ip(1), "pod-outside": outside_ip}
        before = masq_packets(cl.nodes[0].ns)
        samples: dict[str, list[float]] = {p: [] for p in PATHS}
        print("throughput (iperf3 TCP from pod 0, Gbit/s):", flush=True)
        for rep in range(args.reps):
            order = PATHS if rep % 2 == 0 else PATHS[::-1]
            for p in order:
                samples[p].append(iperf.run(cl.pods[0], targets[p], args.seconds, args.omit)["gbps"])
            print(f"  rep {rep + 1}: " + ", ".join(f"{p} {samples[p][-1]:.1f}" for p in PATHS), flush=True)
        result["masqueraded_packets"] = masq_packets(cl.nodes[0].ns) - before
        result["pod_gso"] = rtnl(cl.pods[0]).link("eth0").gso_max_size
    finally:
        iperf.close()
        for ns in netns.list(PREFIX):
            netns.delete(ns)
    result["load_after"] = os.getloadavg()
    med = {p: statistics.median(v) for p, v in samples.items()}
    paired = statistics.median(o / p for o, p in zip(samples["pod-outside"], samples["pod-pod"]))
    result.update(samples=samples, median_gbps=med, ratio=med["pod-outside"] / med["pod-pod"], ratio_paired=paired)
    print(f"\nload {load_before[0]:.2f} → {result['load_after'][0]:.2f}  (1-min averages, {os.cpu_count()} CPUs); "
          f"pod eth0 GSO {result['pod_gso']}; packets masqueraded in node 0: {result['masqueraded_packets']}")
    print("| path (host-gw nodes) | median Gbit/s | ratio (paired) |")
    print("|---|---|---|")
    print(f"| pod → pod (node 0 → node 1), baseline | {med['pod-pod']:.1f} | |")
    print(f"| pod → sandbox behind the router, masqueraded | {med['pod-outside']:.1f} | "
          f"{result['ratio']:.0%} of pod → pod ({paired:.0%}) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if result["masqueraded_packets"] > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
