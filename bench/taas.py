"""What port mirroring costs the mirrored port: iperf3 throughput of a source port with
a tap flow (``BOTH``) against the same pair without one, alternated in the same run.

    sudo python bench/taas.py [--reps 3] [--seconds 4] [--capture]

A fabric namespace ``nbb<hex>-fabric`` with one bridge and three ports wired as the
product wires them (``links.wire_port``): ``src`` (10.93.0.1, iperf3 client), ``peer``
(10.93.0.2, iperf3 server) and ``tap`` (10.93.0.3, the tap service's port). The flow is
the product's mirror (``netbay.dataplane.mirror.set_mirrors``: u32 + mirred on both
clsact hooks of src's fabric tap). ``--capture`` also runs tcpdump on the tap port
(writing to /dev/null), as ``netbay tap capture`` would; without it the copies are
delivered to the tap port and dropped there. Everything is deleted at the end, also
on error; daemons are stopped by PID.
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

from netbay.dataplane import links, mirror, netns

PREFIX = f"nbb{secrets.token_hex(3)}-"
FABRIC, SRC, PEER, TAP = (f"{PREFIX}{n}" for n in ("fabric", "src", "peer", "tap"))


def iperf(seconds: int) -> float:
    r = subprocess.run(["ip", "netns", "exec", SRC, "iperf3", "-c", "10.93.0.2", "-t", str(seconds), "-J"],
                       capture_output=True, text=True, timeout=seconds + 30)
    return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--capture", action="store_true", help="run tcpdump on the tap service's port")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    daemons: list[subprocess.Popen] = []
    try:
        netns.create(FABRIC)
        links.bridge(FABRIC, "br0")
        links.set_up(FABRIC, "br0")
        for ns, tap, ip in ((SRC, "tapsrc", "10.93.0.1/24"), (PEER, "tappeer", "10.93.0.2/24"),
                            (TAP, "taptap", "10.93.0.3/24")):
            links.wire_port(FABRIC, "br0", ns, host_ifname=tap, cidrs=[ip])
        daemons.append(subprocess.Popen(["ip", "netns", "exec", PEER, "iperf3", "-s"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if args.capture:
            daemons.append(subprocess.Popen(["ip", "netns", "exec", TAP, "tcpdump", "-i", "eth0", "-w", "/dev/null",
                                             "-Z", "root"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)
        flow = [mirror.Mirror(mirror.BOTH, "taptap")]
        results: dict[str, list[float]] = {"with a tap flow (BOTH)": [], "baseline: no tap flow": []}
        for _ in range(args.reps):
            for name, mirrors in (("with a tap flow (BOTH)", flow), ("baseline: no tap flow", [])):
                mirror.set_mirrors(FABRIC, "tapsrc", mirrors)
                assert len(mirror.mirrors_of(FABRIC, "tapsrc")) == 2 * len(mirrors)
                results[name].append(iperf(args.seconds))
        load = os.getloadavg()
        for name, values in results.items():
            print(f"{name}: median {statistics.median(values):.2f} Gbit/s over {args.reps} x {args.seconds} s "
                  f"({', '.join(f'{v:.2f}' for v in values)})")
        ratio = statistics.median(results["with a tap flow (BOTH)"]) / statistics.median(
            results["baseline: no tap flow"])
        print(f"ratio {ratio:.3f} (cost {100 * (1 - ratio):.1f}%); capture {'on' if args.capture else 'off'}; "
              f"load {load[0]:.2f}")
    finally:
        for d in daemons:
            d.terminate()
            try:
                d.wait(10)
            except subprocess.TimeoutExpired:
                d.kill()
        for ns in (SRC, PEER, TAP, FABRIC):
            netns.delete(ns)


if __name__ == "__main__":
    main()
