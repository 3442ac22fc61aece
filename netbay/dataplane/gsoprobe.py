"""Measure what BIG TCP does for each of netbay's paths on this host (for :mod:`.bigtcp`).

Each path is built in throwaway namespaces ``nb-gso<pid>…`` with the devices the
product puts on it, twice: one copy with the veths (and the pod bridge) at the
kernel's 64 KiB GSO limit, one at BIG TCP's. A TCP stream between two threads of this
process (a socket opened in each end's namespace) runs through each copy at the same
time for :data:`SECONDS`, :data:`ROUNDS` times; nothing forks. Reported per path:
both throughputs and the mean size of the packets the receiver got (a 192 KiB
packet cut up on the way arrives as 1.5 KiB ones). The size does not depend on how
busy the machine is; the throughput does (on 2 shared CPUs at load 10+, sequential
0.1 s samples were 2x apart either way). The namespaces are deleted afterwards, also
on error.

* ``fabric``: sandbox A —veth— bridge (fabric namespace) —veth— sandbox B;
* ``pod-bridged``: pod —veth— ``cni0`` (gateway address) in node 1, routed out of
  node 1's ``eth0`` (a veth on an underlay bridge, with the GSO limit the fabric
  gives it: a cluster node's ``eth0`` is a fabric port) to node 2, routed to its
  ``cni0`` and pod. Whether BIG TCP helps a pod depends on that limit: a 192 KiB
  packet leaving through a 64 KiB ``eth0`` is cut into MSS-sized segments in
  software (issue 15: a quarter of the speed); through a 192 KiB one it passes whole;
* ``pod-routed``: the same nodes, pods on ``cali…`` veths with a /32 route each and
  a permanent neighbour 169.254.1.1 (as :mod:`netbay.drivers.pods` makes them), no
  bridge.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from netbay.dataplane import links, netns
from netbay.dataplane.rtnl.core import rtnl

__all__ = ["Figures", "measure", "stream"]

SECONDS = 0.1       # one sample (both settings at once)
WARMUP = 0.02       # not counted (slow start)
ROUNDS = 3          # samples per path (both settings at once); the medians count
MTU = 1500
KERNEL_DEFAULT = 65536
ROUTED_MAC = "ee:ee:ee:ee:ee:ee"   # calico's host end; the pod's permanent neighbour 169.254.1.1
NUD_PERMANENT = 0x80


def stream(client_ns: str, server_ns: str, server_ip: str, seconds: float = SECONDS) -> float:
    """Gbit/s of one TCP stream from ``client_ns`` to ``server_ip`` in ``server_ns``,
    bounded by ``seconds`` (+ 2 s of timeouts at most)."""
    with netns.entered(server_ns):
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with netns.entered(client_ns):
        cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    got = {"bytes": 0, "t0": 0.0, "t1": 0.0}
    try:
        srv.settimeout(2)
        srv.bind((server_ip, 0))
        srv.listen(1)
        cli.settimeout(2)
        cli.connect((server_ip, srv.getsockname()[1]))
        conn, _ = srv.accept()
        start = time.monotonic()
        warm, end = start + WARMUP, start + WARMUP + seconds

        def receive() -> None:
            buf = memoryview(bytearray(1 << 20))
            with conn:
                conn.settimeout(2)
                for _ in range(10_000_000):
                    n = conn.recv_into(buf)
                    if not n:
                        return
                    now = time.monotonic()
                    if now < warm:
                        continue
                    if not got["t0"]:
                        got["t0"] = now
                        continue
                    got["bytes"] += n
                    got["t1"] = now

        reader = threading.Thread(target=receive, name="nb-gso-probe", daemon=True)
        reader.start()
        chunk = memoryview(bytes(1 << 18))
        while time.monotonic() < end:
            cli.sendall(chunk)
        cli.shutdown(socket.SHUT_WR)
        reader.join(timeout=3)
    finally:
        cli.close()
        srv.close()
    span = got["t1"] - got["t0"]
    return got["bytes"] * 8 / span / 1e9 if span > 0 else 0.0


class _Chain:
    """One path's namespaces and the links whose GSO limit the setting changes."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.made: list[str] = []
        self.gso_links: list[tuple[str, str]] = []   # (namespace, ifname)
        self.ends: tuple[str, str, str] = ("", "", "")  # client ns, server ns, server ip

    def ns(self, tag: str) -> str:
        name = self.prefix + tag
        netns.create(name)
        self.made.append(name)
        rtnl(name).set_link(1, up=True)
        return name

    def set_gso(self, size: int) -> None:
        for ns, ifname in self.gso_links:
            r = rtnl(ns)
            link = r.link(ifname)
            if link is not None and link.gso_max_size != size:
                r.set_link(link.index, gso_max_size=size)

    def wait_up(self, limit: float = 2.0) -> None:
        """Until every veth is operationally up (bounded): a first ARP sent before is
        lost, and its retry comes a second later."""
        deadline = time.monotonic() + limit
        for ns, ifname in self.gso_links:
            r = rtnl(ns)
            for _ in range(100_000):
                link = r.link(ifname)
                if link is None or link.operstate in ("UP", "UNKNOWN") or time.monotonic() > deadline:
                    break
                time.sleep(0.0005)

    def close(self) -> None:
        for name in self.made:
            netns.delete(name)


def _veth(chain: _Chain, ns: str, name: str, peer_ns: str, address: str, *, master: int | None = None,
          gso: bool = True) -> int:
    """A veth ``name`` in ``ns`` (port of ``master``) with ``eth0`` in ``peer_ns`` at ``address``."""
    idx = rtnl(ns).add_veth(name, "eth0", peer_ns, mtu=MTU, master=master, up=True)
    peer = rtnl(peer_ns)
    pidx = peer.link("eth0").index  # type: ignore[union-attr]
    peer.add_address(pidx, address)
    peer.set_link(pidx, up=True)
    if gso:
        chain.gso_links += [(ns, name), (peer_ns, "eth0")]
    return idx


def _fabric(chain: _Chain) -> None:
    fab, a, b = chain.ns("f"), chain.ns("fa"), chain.ns("fb")
    br = links.bridge(fab, "br0", MTU)
    _veth(chain, fab, "tapa", a, "10.253.0.1/24", master=br)
    _veth(chain, fab, "tapb", b, "10.253.0.2/24", master=br)
    chain.ends = (a, b, "10.253.0.2")


def _nodes(chain: _Chain, underlay_gso: int | None) -> tuple[str, str]:
    """Two nodes on an underlay bridge, forwarding, each with a cni0 bridge; their
    ``eth0`` at ``underlay_gso`` (None: the kernel's default), as the fabric wires them."""
    ul = chain.ns("u")
    br = links.bridge(ul, "ul0", MTU)
    nodes = []
    for i in (1, 2):
        node = chain.ns(f"n{i}")
        _veth(chain, ul, f"u{i}", node, f"10.254.0.{i}/24", master=br, gso=False)
        if underlay_gso:
            for ns, ifname in ((ul, f"u{i}"), (node, "eth0")):
                r = rtnl(ns)
                r.set_link(r.link(ifname).index, gso_max_size=underlay_gso)  # type: ignore[union-attr]
        links.sysctl(node, "net.ipv4.ip_forward", 1)
        cni = links.bridge(node, "cni0", MTU)
        rtnl(node).add_address(cni, f"10.254.{10 + i}.1/24")
        nodes.append(node)
    for i, node in enumerate(nodes, 1):
        peer = f"10.254.0.{3 - i}"
        links.replace_route(node, f"10.254.{13 - i}.0/24", gateway=peer)   # the other's cni0 lease
        links.replace_route(node, f"10.254.{23 - i}.0/24", gateway=peer)   # the other's routed pods
    return nodes[0], nodes[1]


def _pod_bridged(chain: _Chain, nodes: tuple[str, str]) -> None:
    pods = []
    for i, node in enumerate(nodes, 1):
        pod = chain.ns(f"b{i}")
        cni = rtnl(node).link("cni0").index  # type: ignore[union-attr]
        _veth(chain, node, f"veth{i}", pod, f"10.254.{10 + i}.2/24", master=cni)
        chain.gso_links.append((node, "cni0"))
        links.replace_route(pod, "default", gateway=f"10.254.{10 + i}.1")
        pods.append(pod)
    chain.ends = (pods[0], pods[1], "10.254.12.2")


def _pod_routed(chain: _Chain, nodes: tuple[str, str]) -> None:
    pods = []
    for i, node in enumerate(nodes, 1):
        pod = chain.ns(f"r{i}")
        host = f"cali{i}"
        idx = _veth(chain, node, host, pod, f"10.254.{20 + i}.2/32")
        links.set_mac(node, idx, ROUTED_MAC)
        links.replace_route(node, f"10.254.{20 + i}.2/32", dev=idx)
        links.replace_route(pod, "169.254.1.1/32", dev="eth0")
        links.ipr(pod).neigh("replace", dst="169.254.1.1", lladdr=ROUTED_MAC,
                             ifindex=links.index(pod, "eth0"), state=NUD_PERMANENT)
        links.replace_route(pod, "default", gateway="169.254.1.1", dev="eth0", onlink=True)
        pods.append(pod)
    chain.ends = (pods[0], pods[1], "10.254.22.2")


@contextlib.contextmanager
def _built(path: str, tag: str, underlay_gso: int | None = None) -> Iterator[_Chain]:
    chain = _Chain(f"nb-gso{os.getpid() % 100000}{tag}-")
    try:
        if path == "fabric":
            _fabric(chain)
        else:
            nodes = _nodes(chain, underlay_gso)
            (_pod_bridged if path == "pod-bridged" else _pod_routed)(chain, nodes)
        yield chain
    finally:
        chain.close()


@dataclass(frozen=True)
class Figures:
    """One path's probe: throughput and the mean size of the packets the receiving
    end got, with the veths at the kernel's 64 KiB and at BIG TCP's limit."""
    default_gbps: float
    big_gbps: float
    default_packet: int
    big_packet: int

    @property
    def whole(self) -> bool:
        """Whether BIG TCP's packets arrive larger than 64 KiB ones (nothing on the way
        cuts them up in software): what makes them cheaper per byte, measured without
        depending on how busy the machine is."""
        return self.big_packet > 1.5 * max(self.default_packet, 1)


def _rx(ns: str) -> tuple[int, int]:
    """(bytes, packets) received on ``eth0`` in ``ns``."""
    (msg,) = links.ipr(ns).get_links(ifname="eth0")
    stats = msg.get_attr("IFLA_STATS64") or {}
    return stats.get("rx_bytes", 0), stats.get("rx_packets", 0)


def measure(paths: list[str], big: int, seconds: float = SECONDS, rounds: int = ROUNDS,
            underlay_gso: int | None = None) -> dict[str, Figures]:
    """Path -> :class:`Figures`. The two settings run at the same time on two copies of
    the chain, so whatever else loads the machine loads both alike; the Gbit/s are
    the median of the default's ``rounds`` samples and that times the median
    per-round ratio. The pod paths' nodes have their ``eth0`` at ``underlay_gso``
    (the fabric's decision: a node's ``eth0`` is a fabric port)."""
    out = {}
    for n, path in enumerate(paths):
        with _built(path, f"{n}d", underlay_gso) as small, _built(path, f"{n}b", underlay_gso) as large:
            small.set_gso(KERNEL_DEFAULT)
            large.set_gso(big)
            small.wait_up()
            large.wait_up()
            chains = {"d": small, "b": large}
            rates: dict[str, list[float]] = {"d": [], "b": []}
            before = {k: _rx(c.ends[1]) for k, c in chains.items()}
            for _ in range(rounds):
                got: dict[str, float] = {}

                def measure(k: str, c: _Chain) -> None:
                    got[k] = stream(*c.ends, seconds=seconds)
                runs = [threading.Thread(target=measure, args=(k, c), name="nb-gso-stream", daemon=True)
                        for k, c in chains.items()]
                for t in runs:
                    t.start()
                for t in runs:
                    t.join(timeout=seconds + 5)
                for k in rates:
                    rates[k].append(got.get(k, 0.0))
            packet = {}
            for k, c in chains.items():
                nbytes, npackets = (a - b for a, b in zip(_rx(c.ends[1]), before[k]))
                packet[k] = nbytes // max(npackets, 1)
            ratio = statistics.median(b / d if d > 0 else (2.0 if b > 0 else 1.0)
                                      for d, b in zip(rates["d"], rates["b"]))
            base = statistics.median(rates["d"])
            out[path] = Figures(round(base, 2), round(base * ratio, 2), packet["d"], packet["b"])
    return out
