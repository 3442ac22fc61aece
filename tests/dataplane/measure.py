"""Per-operation costs of netbay.dataplane, with a fork-based baseline in the same run.

    sudo python tests/dataplane/measure.py [--pods 50] [--reps 200]

Not a test (pytest does not collect it). Everything happens in namespaces named
``nbm<hex>-…`` that are deleted at the end, also on error. Prints medians in ms and
the ratio against the baseline (``ip``/``nft`` CLI) measured alongside; the machine
is shared and noisy, so compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from netbay.dataplane import links, netns
from netbay.dataplane.nft import Nft

PREFIX = f"nbm{secrets.token_hex(3)}-"
rows: list[tuple[str, float, str, float | None]] = []


def med(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


def row(name: str, ours: float, base_name: str = "", base: float | None = None) -> None:
    rows.append((name, ours, base_name, base))
    ratio = f"{base / ours:6.1f}x" if base else ""
    print(f"{name:42s} {ours:9.3f} ms   {base_name:34s} "
          f"{'' if base is None else f'{base:9.3f} ms'} {ratio}", flush=True)


def bench_netns(reps: int) -> None:
    c, d, ipc, ipd = [], [], [], []
    for i in range(reps):
        n = f"{PREFIX}n{i}"
        c.append(timed(lambda: netns.create(n)))
        d.append(timed(lambda: netns.delete(n)))
        m = f"{PREFIX}i{i}"
        ipc.append(timed(lambda: sh("ip", "netns", "add", m)))
        ipd.append(timed(lambda: sh("ip", "netns", "del", m)))
    row("netns create", med(c), "ip netns add", med(ipc))
    row("netns delete", med(d), "ip netns del", med(ipd))
    n = f"{PREFIX}enter"
    netns.create(n)
    e = []
    for _ in range(reps * 10):
        def enter() -> None:
            with netns.entered(n):
                pass
        e.append(timed(enter))
    row("entered() enter+leave", med(e))


def bench_ports(pods: int) -> None:
    fab = f"{PREFIX}fab"
    netns.create(fab)
    br = links.bridge(fab, "br0", 1450)
    per, base = [], []
    for i in range(pods):
        sb = f"{PREFIX}s{i}"
        ip = ipaddress.IPv4Address(0x0A000002 + i)
        per.append(timed(lambda: links.wire_port(
            fab, br, sb, host_ifname=f"t{i}", mac=f"fa:16:3e:00:{i // 256:02x}:{i % 256:02x}",
            cidrs=[f"{ip}/16"], gateway="10.0.0.1", mtu=1450)))
        # Baseline: the same with the ip CLI (ip netns add + 7 execs).
        sbi = f"{PREFIX}c{i}"

        def cli() -> None:
            sh("ip", "netns", "add", sbi)
            sh("ip", "-n", fab, "link", "add", f"c{i}", "mtu", "1450", "type", "veth",
               "peer", "name", "eth0", "netns", sbi, "mtu", "1450")
            sh("ip", "-n", fab, "link", "set", f"c{i}", "master", "br0", "up")
            sh("ip", "-n", sbi, "link", "set", "eth0", "address",
               f"fa:16:3e:01:{i // 256:02x}:{i % 256:02x}")
            sh("ip", "-n", sbi, "link", "set", "lo", "up")
            sh("ip", "-n", sbi, "addr", "add", f"{ipaddress.IPv4Address(0x0A010002 + i)}/16",
               "dev", "eth0")
            sh("ip", "-n", sbi, "link", "set", "eth0", "up")
            sh("ip", "-n", sbi, "route", "replace", "default", "via", "10.1.0.1")
        base.append(timed(cli))
    row(f"wire_port ({pods} pods, sandbox netns incl.)", med(per),
        "ip CLI: netns add + 7 execs", med(base))
    row(f"  total for {pods} pods", sum(per) * 1e3, "  ip CLI total", sum(base) * 1e3)
    names = netns.list(f"{PREFIX}s") + netns.list(f"{PREFIX}c")
    t = timed(lambda: [netns.delete(n) for n in names])
    row(f"delete {len(names)} sandbox namespaces", t * 1e3)


def bench_nft(reps: int) -> None:
    ns = f"{PREFIX}nft"
    netns.create(ns)
    nft = Nft(ns)

    def ip(i: int) -> str:
        return str(ipaddress.IPv4Address(0x0A000000 + i))

    t_ctx = timed(lambda: Nft(ns).close())
    row("Nft(ns) context create+free", t_ctx * 1e3)
    for size in (1_000, 100_000):
        tbl = f"t{size}"
        nft.run(f"add table inet {tbl}; add set inet {tbl} s {{ type ipv4_addr; }}; "
                f"add chain inet {tbl} c {{ type filter hook forward priority 0; }}; "
                f"add rule inet {tbl} c ip saddr @s drop")
        load = timed(lambda: nft.add_elements("inet", tbl, "s", [ip(i) for i in range(size)]))
        row(f"load {size} elements (JSON, one transaction)", load * 1e3)
        add, dele, cli = [], [], []
        for j in range(reps):
            e = ip(size + 1000 + j)
            add.append(timed(lambda: nft.add_elements("inet", tbl, "s", [e])))
            dele.append(timed(lambda: nft.delete_elements("inet", tbl, "s", [e])))
        for j in range(min(reps, 30)):
            e = ip(size + 5000 + j)
            cli.append(timed(lambda: sh("ip", "netns", "exec", ns, "nft", "add", "element",
                                        "inet", tbl, "s", "{", e, "}")))
        row(f"add 1 element, set of {size}", med(add), "ip netns exec … nft add element", med(cli))
        row(f"delete 1 element, set of {size}", med(dele))
        batch = [ip(size + 20000 + j) for j in range(1000)]
        row(f"add 1000 elements in one call, set of {size}",
            timed(lambda: nft.add_elements("inet", tbl, "s", batch)) * 1e3)
    nft.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=50)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root")
    print(f"# netbay.dataplane per-op costs (medians); load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs, kernel {os.uname().release}")
    print(f"{'operation':42s} {'netbay':>12s}   {'baseline':34s} {'':>12s} ratio")
    try:
        bench_netns(args.reps)
        bench_ports(args.pods)
        bench_nft(args.reps)
    finally:
        for n in netns.list(PREFIX):
            netns.delete(n)
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
