"""Can VXLAN carry BIG TCP on this kernel? Why netbay's VXLAN pods keep 64 KiB GSO packets.

    sudo python bench/vxlan_big_tcp.py [--reps 3] [--seconds 4]

Two namespaces ``nbv<hex>-a``/``-b`` joined by one veth pair (``eth0``, 10.200.0.x/24)
and a VXLAN device on each (VNI 1, UDP 8472, MTU 1450, 10.201.0.x/24), nothing else: no
bridge, no conntrack, no netbay. iperf3 TCP (one stream, ``--seconds`` after 1 s
omitted) over the veth (``underlay``) and through the VXLAN devices (``vxlan``), for
three GSO limits: 64 KiB everywhere; 192 KiB (BIG TCP) on the veth only; 192 KiB on
the veth and the VXLAN device. Medians over ``--reps``, with the sender's
retransmissions. Everything is deleted at the end, also on error.

If the third line collapses (this 6.18 kernel: ~0.2 Gbit/s and tens of thousands of
retransmissions), the kernel cannot carry packets above 64 KiB through UDP
encapsulation, and a VXLAN pod must stay at 64 KiB (``big_packets=False`` in
:func:`netbay.drivers.pods.attach`). Why (``bench/vxlan_options.py --capture``): the
outer IPv4 length is 0 as BIG TCP marks it, but the 16-bit UDP length is written
modulo 65536, and the receiving UDP layer trims the packet to that length.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))

from netbay.dataplane import netns  # noqa: E402
from netbay.dataplane.rtnl import rtnl  # noqa: E402

sys.path.insert(0, HERE)
from pod_network import Iperf  # noqa: E402

PREFIX = f"nbv{secrets.token_hex(3)}-"
CASES = (("64 KiB everywhere", 65536, 65536), ("BIG TCP on the veth", 196608, 65536),
         ("BIG TCP on the veth and VXLAN", 196608, 196608))


def build(veth_gso: int, vxlan_gso: int) -> tuple[str, str]:
    a, b = PREFIX + "a", PREFIX + "b"
    for ns in (a, b):
        netns.create(ns)
    rtnl(a).add_veth("eth0", "eth0", b, gso_max_size=veth_gso)
    for ns, me, peer in ((a, 1, 2), (b, 2, 1)):
        r = rtnl(ns)
        r.set_link(1, up=True)
        eth0 = r.link("eth0")
        r.add_address(eth0.index, f"10.200.0.{me}/24")
        r.set_link(eth0.index, up=True)
        subprocess.run(["ip", "-n", ns, "link", "add", "vx", "type", "vxlan", "id", "1", "dstport", "8472",
                        "local", f"10.200.0.{me}", "remote", f"10.200.0.{peer}", "dev", "eth0", "nolearning"],
                       check=True)
        vx = r.link("vx")
        r.add_address(vx.index, f"10.201.0.{me}/24")
        r.set_link(vx.index, mtu=1450, gso_max_size=vxlan_gso, up=True)
    return a, b


def measure(iperf: Iperf, a: str, b: str, ip: str, seconds: float) -> tuple[float, int]:
    iperf.serve(b, ip)
    try:
        proc = subprocess.run(["ip", "netns", "exec", a, iperf.exe, "-c", ip, "-p", "5201", "-J", "-t",
                               f"{seconds:g}", "-O", "1", "--connect-timeout", "3000"],
                              check=False, capture_output=True, text=True, timeout=seconds + 30)
        end = json.loads(proc.stdout)["end"]
        return end["sum_received"]["bits_per_second"] / 1e9, int(end["sum_sent"].get("retransmits") or 0)
    finally:
        iperf.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: it makes namespaces")
    iperf = Iperf()
    print(f"kernel {os.uname().release}; {args.reps} x {args.seconds:g} s per path; medians (retransmissions)")
    try:
        for label, veth_gso, vxlan_gso in CASES:
            got: dict[str, list[tuple[float, int]]] = {"underlay": [], "vxlan": []}
            for _ in range(args.reps):
                a, b = build(veth_gso, vxlan_gso)
                try:
                    got["underlay"].append(measure(iperf, a, b, "10.200.0.2", args.seconds))
                    got["vxlan"].append(measure(iperf, a, b, "10.201.0.2", args.seconds))
                finally:
                    for ns in (a, b):
                        netns.delete(ns)
            cells = [f"{path} {statistics.median(g for g, _ in v):.2f} Gbit/s "
                     f"({int(statistics.median(r for _, r in v))})" for path, v in got.items()]
            print(f"{label:32s} " + "   ".join(cells), flush=True)
    finally:
        iperf.close()
        for ns in netns.list(PREFIX):
            netns.delete(ns)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
