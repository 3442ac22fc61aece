"""TCP throughput between two sandboxes through netbay's fabric, against a bare veth pair.

    sudo python bench/throughput.py [--reps 5] [--seconds 5] [--json /tmp/throughput.json]

Issue 3's target: throughput between two sandboxes through the bridge and the
security groups is at least 90% of a bare veth pair measured in the same run.

Paths measured (each a pair of namespaces named ``nbb<hex>-…``, all deleted at the
end, also on error or Ctrl-C):

* ``veth``        baseline: two namespaces joined by one veth pair (MTU of the
                  networks below, 1500), nothing else.
* ``bridge``      diagnostic: two namespaces, each with a veth to one Linux bridge in a
                  third namespace where br_netfilter is off (the fabric's topology
                  without netfilter); built with :mod:`netbay.dataplane.links`.
* ``netbay``      the product: a real ``netbay up --no-agent`` server (SQLite, in a
                  temporary directory, bench/harness.py) and the real dataplane agent
                  (:class:`netbay.agent.Agent`, in this process, namespace
                  prefix ``nbb<hex>-``). Through the API: a network (default MTU) and
                  subnet, a group ``iperf`` with one rule (ingress TCP 5201 from
                  0.0.0.0/0), a server port in ``default`` + ``iperf``, a client port in
                  ``default`` (Neutron's default rules: ingress from the group, egress
                  any), each handed to a sandbox. The agent wires them — fabric bridge,
                  veths, br_netfilter on, nb_sg / nb_sg_zone tables — and reports the
                  ports ACTIVE; only then is anything measured.
* ``netbay-alt``  the same as ``netbay`` on its own network, then its port veths
                  (both ends) set to the GSO limit the product did *not* choose for
                  the fabric path (64 KiB where its probe chose BIG TCP, else 192 KiB):
                  both settings of the product's chain in the same run.
* ``netbay-nosg`` the same on a second network with ``port_security_enabled=false``
                  ports (no groups): the ports bypass the rules, as in the product —
                  the fabric's br_netfilter/conntrack path is still there.

``iperf3 -s`` runs in each server namespace for the whole run, ``iperf3 -c … -J``
in the client namespace (both launched with ``ip netns exec``, stopped by PID). Each
repetition runs every path once, the order rotating from one repetition to the next
so that drift of a shared machine spreads evenly; the table gives medians of the
received rate (first ``--omit`` second excluded, TCP slow start), and each path's
ratio to ``veth``. The JSON output has every sample, the load averages and the
ruleset the agent installed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))
sys.path.insert(0, HERE)

from iperf import PORT, Iperf  # noqa: E402
from iperf import IperfError as IperfError, parse_iperf as parse_iperf  # noqa: E402  (its tests read them here)
from netbay.dataplane import bigtcp, links, netns, rtnl  # noqa: E402

PREFIX = f"nbb{secrets.token_hex(3)}-"
MTU = 1500  # the product's default network MTU (netbay.network.networks.DEFAULT_MTU)
PATHS = ("veth", "veth-gso", "bridge", "netbay", "netbay-alt", "netbay-nosg")


# --- topologies -----------------------------------------------------------------------------


@dataclass
class Pair:
    """One measured path: iperf3 client in ``client_ns`` to ``server_ip`` in ``server_ns``."""
    name: str
    client_ns: str
    server_ns: str
    server_ip: str
    client_ip: str
    details: dict[str, Any] = field(default_factory=dict)


def product_gso() -> int | None:
    """The GSO limit the fabric gives port veths on this host (None: kernel default):
    this host's BIG TCP decision for the fabric path (netbay.dataplane.bigtcp)."""
    return bigtcp.gso_max_size("fabric")


def alt_gso() -> int:
    """The GSO limit the product did not choose for the fabric path."""
    return 65536 if product_gso() else bigtcp.GSO_MAX_SIZE


def product_choice() -> str:
    """What the product chose for the fabric path, and the probe's figures behind it."""
    d = bigtcp.decide().paths["fabric"]
    figures = f"; probe 64 KiB {d.default_gbps} / 192 KiB {d.big_gbps} Gbit/s" if d.big_gbps is not None else ""
    return f"BIG TCP {'on' if d.big else 'off'} ({d.source}{figures})"


def link_gso(ns: str, ifname: str) -> dict[str, int]:
    """gso_max_size and gso_ipv4_max_size of a link, read with rtnetlink."""
    r = rtnl.rtnl(ns)
    body = rtnl.IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + rtnl.str_attr(rtnl.IFLA_IFNAME, ifname)
    msgs = r.request(rtnl.RTM_GETLINK, 0, body, f"get link {ifname}")
    a = rtnl.parse_attrs(msgs[0][1], rtnl.IFINFOMSG.size)
    return {k: struct.unpack("=I", a[n])[0] for k, n in (("gso_max_size", rtnl.IFLA_GSO_MAX_SIZE),
                                                          ("gso_ipv4_max_size", rtnl.IFLA_GSO_IPV4_MAX_SIZE))
            if n in a}


def bare_veth(prefix: str, name: str = "veth", gso: int | None = None) -> Pair:
    """Two namespaces joined by one veth pair: kernel defaults, or ``gso`` as the fabric's."""
    a, b = prefix + name + "-c", prefix + name + "-s"
    for ns in (a, b):
        netns.create(ns)
        links.set_up(ns, 1)
    rtnl.rtnl(a).add_veth("eth0", "eth0", b, mtu=MTU, gso_max_size=gso)
    net = "10.77" if gso is None else "10.75"
    for ns, ip in ((a, f"{net}.0.1"), (b, f"{net}.0.2")):
        links.add_address(ns, "eth0", f"{ip}/24")
        links.set_up(ns, "eth0")
    return Pair(name, a, b, f"{net}.0.2", f"{net}.0.1", {"mtu": MTU, "gso": link_gso(a, "eth0")})


def bare_bridge(prefix: str) -> Pair:
    """The fabric's topology (bridge, a veth per port, the fabric's GSO limit) with no
    netfilter on the bridge: what the bridge and the second veth hop cost alone."""
    fab, a, b = prefix + "br-fab", prefix + "br-c", prefix + "br-s"
    netns.create(fab)
    links.set_up(fab, 1)
    brnf = {}
    for key in ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables"):
        try:
            links.sysctl(fab, key, 0)
            brnf[key] = 0
        except links.LinkError:
            brnf[key] = "absent"
    br = links.bridge(fab, "brqbench", MTU)
    for ns, tap, ip, mac in ((a, "tapbenchc", "10.76.0.1", "fa:16:3e:76:00:01"),
                             (b, "tapbenchs", "10.76.0.2", "fa:16:3e:76:00:02")):
        netns.create(ns)
        links.set_up(ns, 1)
        rtnl.rtnl(fab).add_veth(tap, "eth0", ns, mtu=MTU, peer_mac=mac, master=br, up=True,
                                gso_max_size=product_gso())
        links.add_address(ns, "eth0", f"{ip}/24")
        links.set_up(ns, "eth0")
    return Pair("bridge", a, b, "10.76.0.2", "10.76.0.1",
                {"mtu": MTU, "bridge-nf": brnf, "gso": link_gso(a, "eth0")})


class Cloud:
    """A real server + in-process agent, and the two netbay paths built through the API."""

    def __init__(self, prefix: str) -> None:
        import httpx
        import harness
        from netbay.agent import Agent, Api, Credentials
        from netbay.dataplane.names import Names

        self.names = Names(prefix)
        self._ctx = harness.netbay("sqlite")
        self.server = self._ctx.__enter__()
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.agent = None
        try:
            self.http = httpx.Client(base_url=self.server.url,
                                     headers={"X-Auth-Token": self.server.token()}, timeout=30)
            creds = Credentials(f"{self.server.url}/identity/v3", "admin", harness.ADMIN_PASSWORD, "admin")
            self.agent = Agent(Api(self.server.url, creds.token), self.names, wait=2.0)
            self.thread = threading.Thread(target=self.agent.run, args=(self.stop_event,), daemon=True)
            self.thread.start()
            if not self.agent.ready.wait(30):
                raise RuntimeError("the agent did not finish its first resync in 30 s")
        except BaseException:
            self.close()
            raise

    def _ok(self, r: Any, status: int = 200) -> Any:
        if r.status_code != status:
            raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else None

    def _post(self, path: str, member: str, body: dict) -> dict:
        return self._ok(self.http.post(path, json={member: body}), 201)[member]

    def _network(self, name: str, cidr: str) -> str:
        net = self._post("/network/v2.0/networks", "network", {"name": name})
        self._post("/network/v2.0/subnets", "subnet",
                   {"network_id": net["id"], "cidr": cidr, "ip_version": 4})
        return net["id"]

    def _sandbox_pair(self, name: str, network: str, client: dict, server: dict) -> Pair:
        ports, sandboxes = {}, {}
        for role, extra in (("c", client), ("s", server)):
            ports[role] = self._post("/network/v2.0/ports", "port",
                                     {"network_id": network, "name": f"{name}-{role}", **extra})
            sandboxes[role] = self._post("/netbay/v1/sandboxes", "sandbox",
                                         {"name": f"{name}-{role}", "ports": [ports[role]["id"]]})
        for role in ports:
            self._wait_active(ports[role]["id"])
        ip = {r: p["fixed_ips"][0]["ip_address"] for r, p in ports.items()}
        return Pair(name, self.names.sandbox(sandboxes["c"]["id"]), self.names.sandbox(sandboxes["s"]["id"]),
                    ip["s"], ip["c"], {
                        "mtu": int(self._ok(self.http.get(f"/network/v2.0/networks/{network}"))["network"]["mtu"]),
                        "ports": {r: {k: p.get(k) for k in ("id", "security_groups", "port_security_enabled")}
                                  for r, p in ports.items()},
                        "taps": {r: self.names.tap(p["id"]) for r, p in ports.items()}})

    def _wait_active(self, port_id: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.05) + 1):
            port = self._ok(self.http.get(f"/network/v2.0/ports/{port_id}"))["port"]
            if port["status"] == "ACTIVE":
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise RuntimeError(f"port {port_id} not ACTIVE after {timeout}s (status {port['status']})")

    def build(self, which: tuple[str, ...] = ("netbay", "netbay-nosg")) -> dict[str, Pair]:
        out: dict[str, Pair] = {}
        if "netbay" in which or "netbay-alt" in which:
            iperf = self._post("/network/v2.0/security-groups", "security_group", {"name": "iperf"})
            self._post("/network/v2.0/security-group-rules", "security_group_rule", {
                "security_group_id": iperf["id"], "direction": "ingress", "ethertype": "IPv4",
                "protocol": "tcp", "port_range_min": PORT, "port_range_max": PORT,
                "remote_ip_prefix": "0.0.0.0/0"})
            groups = self._ok(self.http.get("/network/v2.0/security-groups", params={"name": "default"}))
            default = [g for g in groups["security_groups"] if g["name"] == "default"]
            if len(default) != 1:
                raise RuntimeError(f"expected one default group, got {len(default)}")
            for name, cidr in (("netbay", "10.78.0.0/24"), ("netbay-alt", "10.74.0.0/24")):
                if name not in which:
                    continue
                net = self._network(f"tp-{name}", cidr)
                out[name] = self._sandbox_pair(
                    name, net, {"security_groups": [default[0]["id"]]},
                    {"security_groups": [default[0]["id"], iperf["id"]]})
                out[name].details["groups"] = {
                    g["name"]: [{k: r.get(k) for k in ("direction", "ethertype", "protocol", "port_range_min",
                                                       "port_range_max", "remote_ip_prefix", "remote_group_id")}
                                for r in g["security_group_rules"]]
                    for g in (default[0], self._ok(self.http.get(
                        f"/network/v2.0/security-groups/{iperf['id']}"))["security_group"])}
            if "netbay-alt" in out:
                # The setting the product did not choose, on the same product chain: the
                # port veths (both ends) at the other GSO limit.
                pair = out["netbay-alt"]
                pair.details["alt_gso"] = alt_gso()
                for ns, ifname in [(pair.client_ns, "eth0"), (pair.server_ns, "eth0"),
                                   *((self.names.fabric, tap) for tap in pair.details["taps"].values())]:
                    r = rtnl.rtnl(ns)
                    r.set_link(r.link(ifname).index, gso_max_size=alt_gso())
        if "netbay-nosg" in which:
            net = self._network("tp-nosg", "10.79.0.0/24")
            off = {"port_security_enabled": False, "security_groups": []}
            out["netbay-nosg"] = self._sandbox_pair("netbay-nosg", net, off, off)
        for pair in out.values():
            pair.details["filtered"] = self.filtered(pair)
            pair.details["gso"] = link_gso(pair.client_ns, "eth0")
        return out

    def filtered(self, pair: Pair) -> dict[str, bool]:
        """Whether each port's tap is in the fabric's ``filtered`` set (the rules apply)."""
        r = subprocess.run(["ip", "netns", "exec", self.names.fabric, "nft", "-j", "list", "set",
                            "bridge", "nb_sg", "filtered"], capture_output=True, text=True, timeout=20)
        elems: set[str] = set()
        if r.returncode == 0:
            for item in json.loads(r.stdout).get("nftables", []):
                if "set" in item:
                    elems |= {e for e in item["set"].get("elem", []) if isinstance(e, str)}
        return {role: tap in elems for role, tap in pair.details["taps"].items()}

    def ruleset(self) -> str:
        r = subprocess.run(["ip", "netns", "exec", self.names.fabric, "nft", "list", "ruleset"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout

    def brnf(self) -> dict[str, str]:
        out = {}
        for key in ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables"):
            try:
                out[key] = links.read_sysctl(self.names.fabric, key)
            except links.LinkError:
                out[key] = "absent"
        return out

    def close(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=15)
        if self.agent is not None:
            self.agent.api.close()
        http = getattr(self, "http", None)
        if http is not None:
            http.close()
        self._ctx.__exit__(None, None, None)


def cleanup(prefix: str) -> list[str]:
    """Delete every namespace of this run (mounted or a stale mount point)."""
    gone = []
    if os.path.isdir(netns.NETNS_RUN_DIR):
        for name in sorted(os.listdir(netns.NETNS_RUN_DIR)):
            if name.startswith(prefix):
                netns.delete(name)
                gone.append(name)
    return gone


# --- the run ----------------------------------------------------------------------------------


def measure(iperf: Iperf, pairs: dict[str, Pair], reps: int, seconds: float, omit: int,
            streams: int, reverse: bool, log: Any = None) -> dict[str, list[dict]]:
    samples: dict[str, list[dict]] = {name: [] for name in pairs}
    order = list(pairs)
    for rep in range(reps):
        k = rep % len(order)
        for name in order[k:] + order[:k]:
            p = pairs[name]
            r = iperf.run(p.client_ns, p.server_ip, seconds, omit, reverse, streams)
            r["rep"], r["load1"] = rep, os.getloadavg()[0]
            samples[name].append(r)
            if log:
                log(f"  rep {rep + 1}/{reps} {name:12s} {r['gbps']:7.2f} Gbit/s  "
                    f"retr {r['retransmits']}  load {r['load1']:.2f}")
    return samples


def summarize(samples: dict[str, list[dict]], bases: tuple[str, ...] = ("veth", "veth-gso")) -> dict[str, dict]:
    """Per path: median/min/max Gbit/s and, for each baseline present, the ratio of
    medians and the median of the per-repetition ratios (less sensitive to drift)."""
    out: dict[str, dict] = {}
    for name, xs in samples.items():
        g = [s["gbps"] for s in xs]
        out[name] = {"median_gbps": statistics.median(g), "min_gbps": min(g), "max_gbps": max(g),
                     "median_retransmits": statistics.median(s["retransmits"] or 0 for s in xs),
                     "median_cpu_client": statistics.median(s["cpu_client"] or 0 for s in xs),
                     "median_cpu_server": statistics.median(s["cpu_server"] or 0 for s in xs)}
    for base in bases:
        if base not in samples:
            continue
        b = out[base]["median_gbps"]
        per_rep = {s["rep"]: s["gbps"] for s in samples[base]}
        for name, xs in samples.items():
            rs = [s["gbps"] / per_rep[s["rep"]] for s in xs if per_rep.get(s["rep"])]
            out[name][f"ratio_{base}"] = out[name]["median_gbps"] / b if b else None
            out[name][f"paired_{base}"] = statistics.median(rs) if rs else None
    return out


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:.0f}%"


def table(summary: dict[str, dict], target: float) -> str:
    bases = [b for b in ("veth", "veth-gso") if f"ratio_{b}" in next(iter(summary.values()))]
    head = f"{'path':12s} {'median Gbit/s':>14s} {'min-max':>13s}"
    for b in bases:
        head += f" {'/' + b:>10s} {'paired':>7s}"
    lines = [head + f" {'retr':>6s} {'cpu c/s %':>10s}"]
    for name, s in summary.items():
        line = f"{name:12s} {s['median_gbps']:14.2f} {s['min_gbps']:6.2f}-{s['max_gbps']:<6.2f}"
        for b in bases:
            line += f" {_pct(s[f'ratio_{b}']):>10s} {_pct(s[f'paired_{b}']):>7s}"
        lines.append(line + f" {s['median_retransmits']:6.0f} "
                            f"{s['median_cpu_client']:4.0f}/{s['median_cpu_server']:<4.0f}")
    nb = summary.get("netbay")
    for b in bases:
        if nb and nb.get(f"ratio_{b}") is not None:
            r = nb[f"ratio_{b}"]
            lines.append(f"target: netbay >= {target * 100:.0f}% of {b}: "
                         f"{'MET' if r >= target else 'MISSED'} ({r * 100:.1f}%, paired "
                         f"{nb[f'paired_{b}'] * 100:.1f}%)")
    return "\n".join(lines)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions of every path (alternating)")
    ap.add_argument("--seconds", type=float, default=5, help="iperf3 -t of each sample")
    ap.add_argument("--omit", type=int, default=1, help="iperf3 -O: first seconds not counted")
    ap.add_argument("--streams", type=int, default=1, help="iperf3 -P parallel streams")
    ap.add_argument("--reverse", action="store_true", help="iperf3 -R (server sends)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"subset of {','.join(PATHS)}")
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--json", help="write every sample and the conditions here")
    ap.add_argument("--kernel-gso", action="store_true",
                    help="wire the fabric's veths with the kernel's default GSO limit (64 KiB), "
                         "as before BIG TCP: the product's setting off, for comparison")
    args = ap.parse_args()
    if args.kernel_gso:
        bigtcp.disable()
    paths = tuple(p for p in args.paths.split(",") if p)
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    if not (1 <= args.reps <= 50 and 1 <= args.seconds <= 60 and 0 <= args.omit <= 10
            and 1 <= args.streams <= 16) or not paths or set(paths) - set(PATHS):
        sys.exit("reps 1..50, seconds 1..60, omit 0..10, streams 1..16, paths from " + ",".join(PATHS))

    # SIGTERM: unwind like Ctrl-C, so that the finally below cleans up.
    signal.signal(signal.SIGTERM, _interrupt)
    iperf = Iperf()
    started = time.time()
    load_before = os.getloadavg()
    cond = {"prefix": PREFIX, "cpus": os.cpu_count(), "kernel": os.uname().release,
            "iperf3": subprocess.run([iperf.exe, "--version"], capture_output=True, text=True).stdout.split("\n")[0],
            "reps": args.reps, "seconds": args.seconds, "omit": args.omit, "streams": args.streams,
            "reverse": args.reverse, "fabric_gso_max_size": product_gso() or "kernel default",
            "fabric_choice": product_choice(),
            "load_before": load_before}
    print(f"# TCP throughput, {args.reps} x {args.seconds:g} s per path (+{args.omit} s omitted), "
          f"{args.streams} stream(s){', reverse' if args.reverse else ''}; fabric GSO limit "
          f"{cond['fabric_gso_max_size']}; {os.cpu_count()} CPUs, "
          f"kernel {cond['kernel']}, {cond['iperf3']}; load average {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}", flush=True)
    cloud: Cloud | None = None
    pairs: dict[str, Pair] = {}
    result: dict[str, Any] = {"conditions": cond}
    try:
        if "veth" in paths:
            pairs["veth"] = bare_veth(PREFIX)
        if "veth-gso" in paths:
            pairs["veth-gso"] = bare_veth(PREFIX, "veth-gso", product_gso() or 65536)
        if "bridge" in paths:
            pairs["bridge"] = bare_bridge(PREFIX)
        wanted = tuple(p for p in paths if p.startswith("netbay"))
        if wanted:
            t0 = time.monotonic()
            cloud = Cloud(PREFIX)
            pairs.update(cloud.build(wanted))
            cond["netbay_setup_s"] = round(time.monotonic() - t0, 2)
            cond["fabric_bridge_nf"] = cloud.brnf()
            for name in wanted:
                want_filtered = name in ("netbay", "netbay-alt")
                if set(pairs[name].details["filtered"].values()) != {want_filtered}:
                    raise RuntimeError(f"{name}: ports filtered = {pairs[name].details['filtered']}, "
                                       f"expected {want_filtered}")
            result["fabric_ruleset"] = cloud.ruleset()
        pairs = {p: pairs[p] for p in paths}
        for p in pairs.values():
            iperf.serve(p.server_ns, p.server_ip)
        result["paths"] = {n: {"client_ns": p.client_ns, "server_ns": p.server_ns, "server_ip": p.server_ip,
                               **p.details} for n, p in pairs.items()}
        samples = measure(iperf, pairs, args.reps, args.seconds, args.omit, args.streams, args.reverse,
                          log=lambda s: print(s, flush=True))
        result["samples"] = samples
        result["summary"] = summary = summarize(samples)
    finally:
        iperf.close()
        try:
            if cloud is not None:
                cloud.close()
        finally:
            cleanup(PREFIX)
    cond["load_after"] = os.getloadavg()
    cond["wall_s"] = round(time.time() - started, 1)
    print(table(summary, args.target))
    nb, alt = summary.get("netbay"), summary.get("netbay-alt")
    print(f"# the product chose for the fabric path: {cond['fabric_choice']}")
    if nb and alt:
        print(f"# netbay (chosen, GSO {cond['fabric_gso_max_size']}) {nb['median_gbps']:.2f} Gbit/s vs "
              f"netbay-alt (GSO {alt_gso()}) {alt['median_gbps']:.2f}: "
              f"{nb['median_gbps'] / alt['median_gbps'] * 100:.0f}%")
    la = cond["load_after"]
    print(f"# load average at the end {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}; {cond['wall_s']:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
