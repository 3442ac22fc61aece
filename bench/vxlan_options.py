"""Can a VXLAN pod path reach 90% of host-gw with BIG TCP? Every candidate, one run.

    sudo python bench/vxlan_options.py [--reps 3] [--seconds 3] [--only hg192,vx64,...] [--capture]

Issue 15's open check: vxlan ≥ 90% of host-gw *as shipped*, where a node's ``eth0``
is a fabric port with BIG TCP and host-gw therefore carries 192 KiB GSO packets end
to end. This builds the pod chain both backends use, as bare kernel devices (no
netbay code in the path, so an option's effect is the kernel's, not netbay's
wiring): a fabric namespace with bridge ``ul0``; two node namespaces, each with
``eth0`` (a veth into ``ul0``, 10.9.0.1x/24, ip_forward on), ``cni0`` (10.244.x.1/24)
and one pod (veth into ``cni0``, 10.244.x.2/24). ``hg*`` variants route the peer's
/24 via its ``eth0`` address (flannel host-gw); ``vx*`` variants route it through
``flannel.1`` (VXLAN VNI 1, UDP 8472, nolearning, onlink route, permanent
neighbour + FDB: flannel's vxlan backend). Each variant is its own copy of the
chain; every repetition runs all of them in a rotating order (iperf3, one TCP
stream pod 0 → pod 1), so ratios are paired within one repetition.

``--capture`` shows why VXLAN cannot carry BIG TCP on this kernel: with 192 KiB
on the VXLAN device, a raw packet socket in the receiving node reads the outer
headers of one encapsulated packet above 64 KiB: the outer IPv4 length is 0 (as
BIG TCP marks it) but the 16-bit UDP length is the true length modulo 65536,
so the receiver's UDP layer trims the packet to that length (``udp_rcv`` →
``pskb_trim_rcsum``) and TCP retransmits the rest.

Namespaces ``nbx<hex>-…``; all deleted at the end, also on error; iperf3 stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))

from pyroute2.ethtool import Ethtool  # noqa: E402

from netbay.dataplane import netns  # noqa: E402
from netbay.dataplane.rtnl import rtnl  # noqa: E402

PREFIX = f"nbx{secrets.token_hex(3)}-"
BIG, STD = 196608, 65536
PORT = 5299
TNL_SEG = ("tx-udp_tnl-segmentation", "tx-udp_tnl-csum-segmentation")

# name -> (what it tries, backend, chain options)
VARIANTS: dict[str, tuple[str, str, dict]] = {
    "hg192": ("host-gw as shipped: BIG TCP on pods, cni0, eth0", "hostgw", dict(ul=BIG, pod=BIG)),
    "hg64": ("host-gw, kernel default 64 KiB everywhere", "hostgw", dict()),
    "vx64": ("vxlan as shipped: eth0 192 KiB, pods/cni0/flannel.1 64 KiB", "vxlan", dict(ul=BIG)),
    "vx64-ul64": ("vxlan, eth0 64 KiB too (issue 15's topology)", "vxlan", dict()),
    "vx192": ("vxlan, BIG TCP on pods, cni0, flannel.1, eth0", "vxlan", dict(ul=BIG, pod=BIG, vx=BIG)),
    "vx192-udpcsum": ("vx192 + outer UDP checksum (udpcsum)", "vxlan",
                      dict(ul=BIG, pod=BIG, vx=BIG, vxopts=("udpcsum",))),
    "vx192-swseg": ("vx192, eth0 without UDP-tunnel GSO (sender segments the outer "
                    "packet, receiver's VXLAN GRO rebuilds 192 KiB)", "vxlan",
                    dict(ul=BIG, pod=BIG, vx=BIG, off=TNL_SEG, vx_gro=BIG)),
    "vx-pod192": ("pods/cni0 192 KiB over flannel.1 64 KiB (issue 15's collapse)", "vxlan",
                  dict(ul=BIG, pod=BIG)),
    "vx64-gro": ("vx64 + GRO on both veth ends of eth0 (veth NAPI, UDP tunnel GRO)", "vxlan",
                 dict(ul=BIG, gro=True)),
    "vx64-udpcsum": ("vx64 + udpcsum", "vxlan", dict(ul=BIG, vxopts=("udpcsum",))),
    "vx64-df": ("vx64 + df set, ttl 64", "vxlan", dict(ul=BIG, vxopts=("df", "set", "ttl", "64"))),
    "vx64-mtu9000": ("vx64 on a 9000-byte underlay (pods 8950)", "vxlan", dict(ul=BIG, mtu=9000)),
}
DEFAULT = "hg192,hg64,vx64,vx64-ul64,vx192,vx192-swseg,vx-pod192,vx64-gro,vx64-udpcsum,vx64-mtu9000"


def ip(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], check=True)


def features(ns: str, ifname: str, wanted: dict[str, bool]) -> None:
    """``ethtool -K`` through pyroute2's ioctl, inside ``ns``."""
    with netns.entered(ns):
        et = Ethtool()
    try:
        with netns.entered(ns):
            f = et.get_features(ifname)
            for name, on in wanted.items():
                f.features[name].enable = on
            et.set_features(ifname, f)
    finally:
        et.close()


def build(tag: str, backend: str, ul: int = STD, pod: int = STD, vx: int = STD, mtu: int = 1500,
          vxopts: tuple[str, ...] = (), gro: bool = False, off: tuple[str, ...] = (),
          vx_gro: int | None = None) -> list[str]:
    """One copy of the chain (see the module docstring); returns the two pod namespaces."""
    fab = PREFIX + tag + "f"
    netns.create(fab)
    ip(fab, "link", "add", "ul0", "mtu", str(mtu), "type", "bridge")
    ip(fab, "link", "set", "ul0", "up")
    pod_mtu = mtu if backend == "hostgw" else mtu - 50
    nodes, pods = [], []
    for i in (0, 1):
        n, p = PREFIX + f"{tag}n{i}", PREFIX + f"{tag}p{i}"
        netns.create(n)
        netns.create(p)
        fr = rtnl(fab)
        fr.add_veth(f"u{tag}{i}", "eth0", n, mtu=mtu, master=fr.link("ul0").index, up=True, gso_max_size=ul)
        ip(n, "link", "set", "lo", "up")
        ip(n, "addr", "add", f"10.9.0.{10 + i}/24", "dev", "eth0")
        ip(n, "link", "set", "eth0", "up")
        subprocess.run(["ip", "netns", "exec", n, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
        ip(n, "link", "add", "cni0", "mtu", str(pod_mtu), "type", "bridge")
        ip(n, "addr", "add", f"10.244.{i}.1/24", "dev", "cni0")
        ip(n, "link", "set", "cni0", "up")
        nr = rtnl(n)
        nr.add_veth(f"v{tag}{i}", "eth0", p, mtu=pod_mtu, master=nr.link("cni0").index, up=True,
                    gso_max_size=pod)
        nr.set_link(nr.link("cni0").index, gso_max_size=pod)   # a bridge takes it once it has a port
        ip(p, "link", "set", "lo", "up")
        ip(p, "addr", "add", f"10.244.{i}.2/24", "dev", "eth0")
        ip(p, "link", "set", "eth0", "up")
        ip(p, "route", "add", "default", "via", f"10.244.{i}.1")
        nodes.append(n)
        pods.append(p)
    for i, n in enumerate(nodes):
        o = 1 - i
        if backend == "hostgw":
            ip(n, "route", "add", f"10.244.{o}.0/24", "via", f"10.9.0.{10 + o}", "dev", "eth0")
        else:
            ip(n, "link", "add", "flannel.1", "address", f"02:00:00:00:00:0{i + 1}", "type", "vxlan", "id", "1",
               "dstport", "8472", "local", f"10.9.0.{10 + i}", "dev", "eth0", "nolearning", *vxopts)
            nr = rtnl(n)
            nr.set_link(nr.link("flannel.1").index, mtu=mtu - 50, gso_max_size=vx)
            if vx_gro:
                ip(n, "link", "set", "flannel.1", "gro_max_size", str(vx_gro))
            ip(n, "addr", "add", f"10.244.{i}.0/32", "dev", "flannel.1")
            ip(n, "link", "set", "flannel.1", "up")
            ip(n, "neigh", "add", f"10.244.{o}.0", "lladdr", f"02:00:00:00:00:0{o + 1}", "dev", "flannel.1",
               "nud", "permanent")
            subprocess.run(["bridge", "-n", n, "fdb", "append", f"02:00:00:00:00:0{o + 1}", "dev", "flannel.1",
                            "dst", f"10.9.0.{10 + o}", "self", "permanent"], check=True)
            ip(n, "route", "add", f"10.244.{o}.0/24", "via", f"10.244.{o}.0", "dev", "flannel.1", "onlink")
        if gro:
            features(n, "eth0", {"rx-gro": True})
            features(fab, f"u{tag}{i}", {"rx-gro": True})
        if off:
            features(n, "eth0", dict.fromkeys(off, False))
    return pods


def iperf(src: str, dst: str, addr: str, seconds: float) -> tuple[float, int]:
    """Gbit/s received and the sender's retransmissions, one TCP stream."""
    srv = subprocess.Popen(["ip", "netns", "exec", dst, "iperf3", "-s", "-1", "-B", addr, "-p", str(PORT)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run(["ip", "netns", "exec", src, "iperf3", "-c", addr, "-p", str(PORT), "-J", "-t",
                              f"{seconds:g}", "-O", "1", "--connect-timeout", "3000"],
                             capture_output=True, text=True, timeout=seconds + 30).stdout
        end = json.loads(out)["end"]
        return end["sum_received"]["bits_per_second"] / 1e9, int(end["sum_sent"].get("retransmits") or 0)
    finally:
        if srv.poll() is None:
            srv.terminate()
        srv.wait(5)


def capture_big(node: str, pods: list[str], seconds: float = 1.0) -> dict | None:
    """Outer headers of one encapsulated packet above 64 KiB arriving at ``node``'s eth0."""
    with netns.entered(node):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    try:
        s.bind(("eth0", 0))
        s.settimeout(0.5)
        server = subprocess.Popen(["ip", "netns", "exec", pods[1], "iperf3", "-s", "-1", "-B", "10.244.1.2",
                                   "-p", str(PORT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        sender = subprocess.Popen(["ip", "netns", "exec", pods[0], "iperf3", "-c", "10.244.1.2", "-p", str(PORT),
                                   "-t", f"{seconds:g}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        found = None
        try:
            deadline = time.monotonic() + seconds + 3
            while found is None and time.monotonic() < deadline:
                try:
                    frame = s.recv(1 << 18)   # the whole GSO packet
                except TimeoutError:
                    continue
                if len(frame) > 65600 and frame[23] == 17:   # IPv4 / UDP above 64 KiB
                    ihl = (frame[14] & 0xF) * 4
                    found = {"frame_bytes": len(frame),
                             "ipv4_tot_len": struct.unpack_from("!H", frame, 16)[0],
                             "udp_len_field": struct.unpack_from("!H", frame, 14 + ihl + 4)[0],
                             "udp_len_true": len(frame) - 14 - ihl}
        finally:
            for proc in (sender, server):
                if proc.poll() is None:
                    proc.terminate()
                proc.wait(5)
        return found
    finally:
        s.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--only", default=DEFAULT, help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--capture", action="store_true", help="show the outer UDP length of a >64 KiB packet")
    ap.add_argument("--json")
    args = ap.parse_args()
    names = args.only.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not (1 <= args.reps <= 20 and 1 <= args.seconds <= 30):
        ap.error(f"unknown variants {unknown}" if unknown else "out of range")
    if os.geteuid() != 0:
        raise SystemExit("run as root: it makes namespaces")
    base = names[0]
    load_before = os.getloadavg()[0]
    samples: dict[str, list[tuple[float, int]]] = {n: [] for n in names}
    result: dict = {"kernel": os.uname().release, "load_before": load_before, "args": vars(args)}
    try:
        if args.capture:
            pods = build("c", "vxlan", ul=BIG, pod=BIG, vx=BIG)
            result["capture"] = capture_big(PREFIX + "cn1", pods)
            print(f"vx192, one outer packet above 64 KiB at the receiver: {result['capture']}", flush=True)
        chains = {n: build(str(k), VARIANTS[n][1], **VARIANTS[n][2]) for k, n in enumerate(names)}
        for rep in range(args.reps):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for n in order:
                samples[n].append(iperf(chains[n][0], chains[n][1], "10.244.1.2", args.seconds))
            print(f"  rep {rep + 1}: " + ", ".join(f"{n} {samples[n][-1][0]:.1f}" for n in names), flush=True)
    finally:
        for ns in netns.list(PREFIX):
            netns.delete(ns)
    result["load_after"] = os.getloadavg()[0]
    result["samples"] = samples
    print(f"\nkernel {os.uname().release}; {args.reps} x {args.seconds:g} s; load {load_before:.2f} → "
          f"{result['load_after']:.2f} (1-min, {os.cpu_count()} CPUs)")
    print(f"| variant | what it tries | median Gbit/s | retransmits (median) | paired ratio to {base} |")
    print("|---|---|---|---|---|")
    for n in names:
        gbps = statistics.median(g for g, _ in samples[n])
        retr = statistics.median(r for _, r in samples[n])
        ratio = statistics.median(a[0] / b[0] for a, b in zip(samples[n], samples[base]))
        print(f"| {n} | {VARIANTS[n][0]} | {gbps:.2f} | {retr:.0f} | {ratio:.0%} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
