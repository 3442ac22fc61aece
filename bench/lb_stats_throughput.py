"""What the load balancer's statistics cost per packet: TCP throughput through a load
balancer namespace whose table has the counters (product) against the same table
without them (baseline), in the same run.

    sudo python bench/lb_stats_throughput.py [--reps 3] [--seconds 4]

Three namespaces ``nbb<hex>-{client,lb,member}`` joined by two veth pairs (client
10.91.0.2 — lb 10.91.0.1 | lb 10.92.0.1 — member 10.92.0.2); the lb namespace
forwards and holds the realizer's own table (``table_commands`` for one listener on
VIP 10.91.0.1:80 → member:5201). ``iperf3 -s`` in the member, ``iperf3 -c VIP -p 80``
from the client. Baseline: the same commands with the ``stats`` chain, the named
counters and the DNAT rule's mark/counter left out. Everything is deleted at the end,
also on error; iperf3 servers are stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from netbay.dataplane import links, netns
from netbay.dataplane.loadbalancer import (
    ListenerSpec, LoadBalancerSpec, MemberSpec, PoolSpec, table_commands)
from netbay.dataplane.nft import Nft

PREFIX = f"nbb{secrets.token_hex(3)}-"
CLIENT, LBNS, MEMBER = (f"{PREFIX}{n}" for n in ("client", "lb", "member"))


def plain(cmds: list[dict]) -> list[dict]:
    """The table without statistics: no counters, no ``stats`` chain, no mark/count in DNAT."""
    out = []
    for c in cmds:
        body = next(iter(c.values()))
        if "counter" in body or body.get("chain", {}).get("name") == "stats" \
                or body.get("rule", {}).get("chain") == "stats":
            continue
        rule = body.get("rule")
        if rule is not None:
            rule = {**rule, "expr": [e for e in rule["expr"] if "mangle" not in e and "counter" not in e]}
            c = {next(iter(c)): {"rule": rule}}
        out.append(c)
    return out


def iperf(seconds: int) -> float:
    r = subprocess.run(["ip", "netns", "exec", CLIENT, "iperf3", "-c", "10.91.0.1", "-p", "80", "-t", str(seconds),
                        "-J"], capture_output=True, text=True, timeout=seconds + 30)
    return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    server = None
    try:
        for ns in (CLIENT, LBNS, MEMBER):
            netns.create(ns)
            links.set_up(ns, "lo")
        links.veth_pair(CLIENT, "eth0", LBNS, "vip")
        links.veth_pair(LBNS, "eth1", MEMBER, "eth0")
        for ns, dev, cidr in ((CLIENT, "eth0", "10.91.0.2/24"), (LBNS, "vip", "10.91.0.1/24"),
                              (LBNS, "eth1", "10.92.0.1/24"), (MEMBER, "eth0", "10.92.0.2/24")):
            links.add_address(ns, dev, cidr)
            links.set_up(ns, dev)
        links.replace_route(MEMBER, "0.0.0.0/0", gateway="10.92.0.1")
        links.sysctl(LBNS, "net.ipv4.ip_forward", "1")
        server = subprocess.Popen(["ip", "netns", "exec", MEMBER, "iperf3", "-s"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        spec = LoadBalancerSpec("bench", LBNS, "10.91.0.1", listeners=(ListenerSpec("l1", "tcp", 80, pool_id="p1"),),
                                pools=(PoolSpec("p1", members=(MemberSpec("m1", "10.92.0.2", 5201),)),))
        product = table_commands(spec, lambda p, m: True)
        results: dict[str, list[float]] = {"with statistics": [], "baseline: without": []}
        with Nft(LBNS) as nft:
            for _ in range(args.reps):
                for name, cmds in (("with statistics", product), ("baseline: without", plain(product))):
                    nft.run([{"flush": {"ruleset": None}}])
                    nft.run(cmds)
                    results[name].append(iperf(args.seconds))
        load = os.getloadavg()
        for name, values in results.items():
            print(f"{name}: median {statistics.median(values):.2f} Gbit/s over {args.reps} x {args.seconds} s "
                  f"({', '.join(f'{v:.2f}' for v in values)})")
        ratio = statistics.median(results["with statistics"]) / statistics.median(results["baseline: without"])
        print(f"ratio {ratio:.3f}; load {load[0]:.2f}")
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        for ns in (CLIENT, LBNS, MEMBER):
            netns.delete(ns)


if __name__ == "__main__":
    main()
