"""Security groups: how long a rule or membership change takes to be enforced, as the
group grows from 10 to 10,000 rules or members.

    sudo python bench/secgroups.py [--sizes 10,1000,10000] [--reps 40]

Everything happens in namespaces named ``nbb<hex>-…`` (a fabric with one bridge, a
client and a server sandbox), deleted at the end, also on error. For each size N:

* rules: the server's group holds N varied rules (TCP/UDP, single ports and ranges,
  /32 and /24 prefixes, ICMP); one more rule "TCP 8080 from the client's /32" is
  added (``ensure_rule``) and removed (``remove_rule``) ``--reps`` times.
* members: the remote group the server admits (TCP 80 from group ``clients``) holds
  N ports (N-1 without interfaces: only their addresses matter); the client port is
  added to and removed from that group (``ensure_port``).

"call" is the time the verb takes (its nft transaction is committed when it returns);
"enforced" is from the call's start until the client's next TCP connection is
accepted (after an add) — the packet's round trip included. Removals are checked
once per size (the next connection must fail); "+conntrack" is the time the worker
then takes to delete the open flows' conntrack entries (one dump of the kernel's
global conntrack table), off the request path. The baseline is
one element add to a hash set in the same namespace (the floor of any change).
Medians; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from netbay.dataplane import links, netns
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft
from netbay.dataplane.secgroups import SecurityGroups

PREFIX = f"nbb{secrets.token_hex(3)}-"


def uid() -> str:
    return str(uuid.uuid4())


def med(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def connect(client: str, dst: str, port: int, timeout: float = 1.0) -> bool:
    with netns.entered(client):
        s = socket.socket()
    try:
        s.settimeout(timeout)
        s.connect((dst, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Bench:
    def __init__(self) -> None:
        self.fab = PREFIX + "fab"
        netns.create(self.fab)
        self.net = uid()
        links.bridge(self.fab, Names.bridge(self.net), 1500)
        self.client_id, self.server_id = uid(), uid()
        self.cli_ns, self.srv_ns = PREFIX + "cli", PREFIX + "srv"
        for pid, ns, ip, mac in ((self.client_id, self.cli_ns, "10.9.0.1", "fa:16:3e:aa:00:01"),
                                 (self.server_id, self.srv_ns, "10.9.0.2", "fa:16:3e:aa:00:02")):
            netns.create(ns)
            links.wire_port(self.fab, Names.bridge(self.net), ns, host_ifname=Names.tap(pid),
                            mac=mac, cidrs=[f"{ip}/16"])
        with netns.entered(self.srv_ns):
            self.listeners = [socket.socket() for _ in (80, 8080)]
        for s, port in zip(self.listeners, (80, 8080)):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("10.9.0.2", port))
            s.listen(1024)
        self.sg = SecurityGroups(self.fab)

    def close(self) -> None:
        for s in self.listeners:
            s.close()
        self.sg.close()

    def port(self, pid: str, ip: str, mac: str, mark: int,
             groups: list[str]) -> tuple[dict, int, int]:
        return ({"id": pid, "network_id": self.net, "mac_address": mac,
                 "fixed_ips": [{"ip_address": ip}], "security_groups": groups,
                 "port_security_enabled": True, "device_owner": "compute:bench"}, mark, 1)

    def drain(self) -> None:
        """Accept what the listeners got (keeps their backlog from filling)."""
        for s in self.listeners:
            s.setblocking(False)
            for _ in range(10_000):
                try:
                    s.accept()[0].close()
                except BlockingIOError:
                    break


def default_group() -> dict:
    gid = uid()
    rules = [{"id": uid(), "direction": "ingress", "ethertype": "IPv4", "remote_group_id": gid},
             {"id": uid(), "direction": "egress", "ethertype": "IPv4"}]
    return {"id": gid, "security_group_rules": rules}


def many_rules(n: int) -> list[dict]:
    out = []
    for i in range(n):
        kind = i % 4
        r = {"id": uid(), "direction": "ingress", "ethertype": "IPv4"}
        if kind == 0:
            port = 1024 + i % 60000
            r.update(protocol="tcp", port_range_min=port, port_range_max=port,
                     remote_ip_prefix=str(ipaddress.IPv4Address(0xAC100000 + i)) + "/32")
        elif kind == 1:
            r.update(protocol="udp", port_range_min=5000, port_range_max=5099,
                     remote_ip_prefix=str(ipaddress.IPv4Address(0xAC200000 + (i << 8))) + "/24")
        elif kind == 2:
            r.update(protocol="tcp", port_range_min=443, port_range_max=443,
                     remote_ip_prefix=str(ipaddress.IPv4Address(0x0B000000 + i)) + "/32")
        else:
            r.update(protocol="icmp", port_range_min=8, port_range_max=0,
                     remote_ip_prefix=str(ipaddress.IPv4Address(0xAC300000 + i)) + "/32")
        out.append(r)
    return out


def bench_rules(b: Bench, n: int, reps: int) -> dict:
    d, web = default_group(), {"id": uid(), "security_group_rules": many_rules(n)}
    ports = [b.port(b.client_id, "10.9.0.1", "fa:16:3e:aa:00:01", 1, [d["id"]]),
             b.port(b.server_id, "10.9.0.2", "fa:16:3e:aa:00:02", 2, [web["id"]])]
    t0 = time.perf_counter()
    b.sg.sync(ports, [d, web])
    sync_ms = (time.perf_counter() - t0) * 1e3
    assert not connect(b.cli_ns, "10.9.0.2", 8080, 0.3), "8080 open before the rule"
    add, rem, enf, ct = [], [], [], []
    for _ in range(reps):
        r = {"id": uid(), "security_group_id": web["id"], "direction": "ingress",
             "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 8080,
             "port_range_max": 8080, "remote_ip_prefix": "10.9.0.1/32"}
        t0 = time.perf_counter()
        b.sg.ensure_rule(r)
        t1 = time.perf_counter()
        ok = connect(b.cli_ns, "10.9.0.2", 8080)
        t2 = time.perf_counter()
        assert ok, "rule added but connection refused"
        add.append(t1 - t0)
        enf.append(t2 - t0)
        t0 = time.perf_counter()
        b.sg.remove_rule(r["id"])
        t1 = time.perf_counter()
        assert b.sg.wait_conntrack(10)
        rem.append(t1 - t0)
        ct.append(time.perf_counter() - t1)
        b.drain()
    assert not connect(b.cli_ns, "10.9.0.2", 8080, 0.3), "rule removed but connection accepted"
    return {"sync": sync_ms, "add": med(add), "enforced": med(enf), "remove": med(rem),
            "ct": med(ct)}


def bench_members(b: Bench, n: int, reps: int) -> dict:
    d, clients = default_group(), {"id": uid(), "security_group_rules": []}
    web = {"id": uid(), "security_group_rules": [
        {"id": uid(), "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
         "port_range_min": 80, "port_range_max": 80, "remote_group_id": clients["id"]}]}
    ports = [b.port(b.client_id, "10.9.0.1", "fa:16:3e:aa:00:01", 1, [d["id"]]),
             b.port(b.server_id, "10.9.0.2", "fa:16:3e:aa:00:02", 2, [web["id"]])]
    for i in range(n - 1):  # members without interfaces: 10.10.0.0/16 onwards
        ip = str(ipaddress.IPv4Address(0x0A0A0000 + i))
        mac = f"fa:16:3e:{(i >> 16) & 255:02x}:{(i >> 8) & 255:02x}:{i & 255:02x}"
        ports.append(b.port(uid(), ip, mac,
                            10 + i, [clients["id"]]))
    t0 = time.perf_counter()
    b.sg.sync(ports, [d, clients, web])
    sync_ms = (time.perf_counter() - t0) * 1e3
    assert not connect(b.cli_ns, "10.9.0.2", 80, 0.3), "80 open before membership"
    client_in, client_out = ports[0][0], dict(ports[0][0])
    client_in = dict(client_in, security_groups=[d["id"], clients["id"]])
    add, rem, enf, ct = [], [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        b.sg.ensure_port(client_in, 1, 1)
        t1 = time.perf_counter()
        ok = connect(b.cli_ns, "10.9.0.2", 80)
        t2 = time.perf_counter()
        assert ok, "member added but connection refused"
        add.append(t1 - t0)
        enf.append(t2 - t0)
        t0 = time.perf_counter()
        b.sg.ensure_port(client_out, 1, 1)
        t1 = time.perf_counter()
        assert b.sg.wait_conntrack(10)
        rem.append(t1 - t0)
        ct.append(time.perf_counter() - t1)
        b.drain()
    assert not connect(b.cli_ns, "10.9.0.2", 80, 0.3), "member removed but connection accepted"
    return {"sync": sync_ms, "add": med(add), "enforced": med(enf), "remove": med(rem),
            "ct": med(ct)}


def baseline(b: Bench, reps: int) -> float:
    nft = Nft(b.fab)
    try:
        nft.run("add table inet nbbase; add set inet nbbase s { type ipv4_addr; }")
        xs = []
        for i in range(reps):
            e = str(ipaddress.IPv4Address(0x0A000000 + i))
            t0 = time.perf_counter()
            nft.add_elements("inet", "nbbase", "s", [e])
            xs.append(time.perf_counter() - t0)
        nft.run("delete table inet nbbase")
        return med(xs)
    finally:
        nft.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,1000,10000")
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    if os.geteuid() != 0:
        sys.exit("needs root")
    if not all(1 <= s <= 60000 for s in sizes) or not 1 <= args.reps <= 1000:
        sys.exit("sizes must be 1..60000, reps 1..1000")
    print(f"# security group change -> enforced (medians of {args.reps}); load average "
          f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, kernel {os.uname().release}")
    b = Bench()
    try:
        b.sg.sync([], [])  # the realizer's tables present, as in the runs
        base = baseline(b, args.reps * 5)
        print(f"baseline: 1 element add to a hash set, same namespace: {base:.3f} ms")
        print(f"{'what':8s} {'N':>6s} {'sync(N) ms':>11s} {'add ms':>8s} {'enforced ms':>12s} "
              f"{'remove ms':>10s} {'+conntrack ms':>14s} {'add/base':>9s}")
        for what, fn in (("rules", bench_rules), ("members", bench_members)):
            for n in sizes:
                r = fn(b, n, args.reps)
                print(f"{what:8s} {n:6d} {r['sync']:11.1f} {r['add']:8.3f} {r['enforced']:12.3f} "
                      f"{r['remove']:10.3f} {r['ct']:14.3f} {r['add'] / base:8.1f}x", flush=True)
    finally:
        b.close()
        for n in netns.list(PREFIX):
            netns.delete(n)
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
