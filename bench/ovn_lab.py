"""What OVN on OVS's userspace datapath costs here: two containers on one logical
switch on two chassis (tests/ovn/lab.py), against a bare veth pair in the same run.

    sudo python bench/ovn_lab.py [--reps 3] [--seconds 5] [--pings 50] [--json /tmp/ovn_lab.json]

Figures: the lab's start (NB/SB, northd, two chassis registered with br-int made),
plug → first echo reply (logical port, veth into br-int, ``ovn-nbctl --wait=hv sync``,
first ping), ICMP round trip (busybox ping, ``-A``: the next request as soon as the
reply is in), TCP throughput (iperf3, one stream) and the CPU the two ovs-vswitchd
spent per GB carried. Every namespace carries the tests' run prefix and is deleted at
the end; every process is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from iperf import Iperf
from throughput import bare_veth, cleanup

from tests.dataplane.dp_helpers import PREFIX, ping
from tests.ovn.lab import OvnLab, plug_pair


def rtt_ms(ns: str, dst: str, count: int) -> dict[str, float]:
    """busybox ping's min/avg/max (ms) of ``count`` echoes, back to back."""
    p = subprocess.run(["ip", "netns", "exec", ns, "busybox", "ping", "-A", "-q", "-c", str(count),
                        "-W", "5", dst], capture_output=True, text=True, timeout=60)
    m = re.search(r"min/avg/max = ([\d.]+)/([\d.]+)/([\d.]+)", p.stdout)
    if not m:
        raise RuntimeError(f"busybox ping: {p.stdout} {p.stderr}")
    lost = re.search(r"(\d+)% packet loss", p.stdout)
    return {"min": float(m[1]), "avg": float(m[2]), "max": float(m[3]),
            "loss_pct": float(lost[1]) if lost else -1}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--pings", type=int, default=50)
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (namespaces, OVS daemons)")
    out: dict = {"load1_start": os.getloadavg()[0], "versions": versions()}
    lab, iperf = OvnLab(hypervisors=2), Iperf()
    try:
        t0 = time.monotonic()
        lab.start()
        out["lab_start_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        pair = plug_pair(lab)
        while not ping(pair.a.ns, pair.b.ip, timeout=0.2):
            if time.monotonic() - t0 > 30:
                raise SystemExit("no echo reply across chassis in 30 s")
        out["plug_to_first_reply_s"] = time.monotonic() - t0
        veth = bare_veth(PREFIX, "bveth")
        paths = {"veth": (veth.client_ns, veth.server_ns, veth.server_ip),
                 "ovn-geneve": (pair.a.ns, pair.b.ns, pair.b.ip)}
        vswitchds = [d for hv in lab.hvs for d in hv.daemons if d.name == "ovs-vswitchd"]
        for name, (client, server, ip) in paths.items():
            out.setdefault(name, {})["rtt_ms"] = rtt_ms(client, ip, args.pings)
            iperf.serve(server, ip)
        for rep in range(args.reps):
            for name, (client, _server, ip) in paths.items():
                cpu0 = sum(cpu_seconds(d.pid) for d in vswitchds)
                r = iperf.run(client, ip, args.seconds, omit=1)
                r["vswitchd_cpu_s"] = sum(cpu_seconds(d.pid) for d in vswitchds) - cpu0
                r["load1"] = os.getloadavg()[0]
                out[name].setdefault("tcp", []).append(r)
                print(f"rep {rep + 1} {name:10s} {r['gbps'] * 1000:8.1f} Mbit/s retr {r['retransmits']}"
                      f" vswitchd cpu {r['vswitchd_cpu_s']:.2f}s load {r['load1']:.1f}", flush=True)
    finally:
        iperf.close()
        problems = lab.stop()
        cleanup(PREFIX + "bveth")
        if problems:
            print("\n".join(problems), file=sys.stderr)
    report(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


def versions() -> dict[str, str]:
    def first_line(*cmd: str) -> str:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
    return {"ovs": first_line("ovs-vswitchd", "--version"), "ovn": first_line("ovn-controller", "--version"),
            "kernel": os.uname().release}


def report(out: dict) -> None:
    print(f"\n{out['versions']}\nlab start {out['lab_start_s']:.2f} s; plug -> first reply "
          f"{out['plug_to_first_reply_s']:.2f} s; load1 at start {out['load1_start']:.1f}")
    for name in ("veth", "ovn-geneve"):
        tcp = out[name].get("tcp", [])
        rtt = out[name]["rtt_ms"]
        med = statistics.median(r["gbps"] for r in tcp) * 1000 if tcp else float("nan")
        cpu = [r["vswitchd_cpu_s"] / max(r["bytes"] / 1e9, 1e-9) for r in tcp]
        print(f"{name:10s} rtt avg {rtt['avg']:.3f} ms (min {rtt['min']:.3f}, loss {rtt['loss_pct']:g}%)"
              f"  tcp median {med:.1f} Mbit/s"
              + (f"  vswitchd {statistics.median(cpu):.1f} CPU-s/GB" if name != "veth" else ""))


if __name__ == "__main__":
    main()
