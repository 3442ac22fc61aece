"""A cluster's private network built by hand for the container-network driver tests.

An "underlay" is what a cluster's private network looks like to its nodes: a
bridge ``ul0`` in a fabric namespace, and per node a namespace with ``eth0`` (a veth
whose other end is a port of ``ul0``) on a 10.9.x.0/24 address. Every namespace
carries the run's test prefix and is made through ``make_ns`` (deleted after the
test, and by the package sweep).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from netbay.dataplane import links, netns
from netbay.drivers import leases
from netbay.drivers.node import Node

from .dp_helpers import ifname


@dataclass
class Underlay:
    make_ns: Callable[[str], str]
    tag: str                       # short, distinct per underlay in a test (≤ 3 chars)
    subnet: str = "10.9.0"         # /24 prefix
    mtu: int = 1500
    fabric: str = ""
    nodes: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fabric = self.make_ns(f"{self.tag}fab")
        links.bridge(self.fabric, "ul0", self.mtu)

    def address(self, i: int) -> str:
        return f"{self.subnet}.{i + 10}/24"

    def add_node(self, i: int) -> str:
        """Namespace ``<tag>n<i>`` with eth0 = ``<subnet>.<i+10>/24`` on the underlay."""
        ns = self.make_ns(f"{self.tag}n{i}")
        links.wire_port(self.fabric, "ul0", ns, host_ifname=ifname(f"{self.tag}{i}"),
                        cidrs=[self.address(i)], mtu=self.mtu)
        self.nodes[i] = ns
        return ns

    def remove_node(self, i: int) -> None:
        ns = self.nodes.pop(i)
        netns.delete(ns)


def node(u: Underlay, i: int, lease: str) -> Node:
    return Node(u.nodes[i], u.address(i), lease)


def tcp_exchange(client_ns: str, server_ns: str, server_ip: str, reply: bytes = b"pong",
                 timeout: float = 5.0) -> tuple[str, bytes]:
    """Connect from ``client_ns`` to a listener in ``server_ns`` on ``server_ip``; the
    server answers ``reply``. Returns (client address seen by the server, reply).
    IPv6 when ``server_ip`` is."""
    family = socket.AF_INET6 if ":" in server_ip else socket.AF_INET
    with netns.entered(server_ns):
        srv = socket.socket(family)
    with netns.entered(client_ns):
        cli = socket.socket(family)
    try:
        srv.bind((server_ip, 0))
        srv.listen(1)
        srv.settimeout(timeout)
        cli.settimeout(timeout)
        cli.connect((server_ip, srv.getsockname()[1]))
        conn, peer = srv.accept()
        with conn:
            conn.settimeout(timeout)
            cli.sendall(b"ping" * 1000)
            got = b""
            for _ in range(100):  # bounded
                got += conn.recv(65536)
                if len(got) >= 4000:
                    break
            assert got == b"ping" * 1000
            conn.sendall(reply)
            return peer[0], cli.recv(64)
    finally:
        cli.close()
        srv.close()


def _family(ip: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET


class Listener:
    """A TCP listener in ``ns`` on ``ip:port`` answering ``reply`` to every connection
    (a thread; :meth:`close` stops it, bounded). ``ip`` ``::``: both families."""

    def __init__(self, ns: str, ip: str, port: int, reply: bytes) -> None:
        with netns.entered(ns):
            self.sock = socket.socket(_family(ip))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if ip == "::":
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.sock.bind((ip, port))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.reply = reply
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def tcp_read(client_ns: str, ip: str, port: int, timeout: float = 2.0) -> bytes | None:
    """Connect from ``client_ns`` and read what the listener says (None on failure)."""
    with netns.entered(client_ns):
        s = socket.socket(_family(ip))
    try:
        s.settimeout(timeout)
        s.connect((ip, port))
        return s.recv(64)
    except OSError:
        return None
    finally:
        s.close()


class Lab:
    """Nodes on one underlay running one driver (any :class:`netbay.drivers.registry.Driver`),
    one pod ``<tag>p<i>`` per node at its lease's second host address. ``scale`` does what
    the agent does after a cluster's node list changed: tear down the nodes gone, set up
    the new ones, give every node the complete peer list, attach the new nodes' pods."""

    def __init__(self, make_ns: Callable[[str], str], tag: str, driver: Any, subnet: str = "10.9.0") -> None:
        self.make_ns = make_ns
        self.tag = tag
        self.u = Underlay(make_ns, tag, subnet)
        self.driver = driver
        self.leases: dict[str, str] = {}
        self.nodes: dict[int, Node] = {}
        self.pods: dict[int, str] = {}
        self.links: dict[int, Any] = {}     # pod -> what attach_pod answered (its PodLink)

    def scale(self, ids: list[int]) -> None:
        for i in [i for i in self.nodes if i not in ids]:
            self.driver.teardown(self.nodes.pop(i))
            self.u.remove_node(i)
            self.pods.pop(i, None)
            self.links.pop(i, None)
        for i in ids:
            if i not in self.u.nodes:
                self.u.add_node(i)
        self.leases = self.driver.allocate([f"n{i}" for i in ids], self.leases)
        for i in ids:
            if i not in self.nodes:
                self.nodes[i] = node(self.u, i, self.leases[f"n{i}"])
                self.driver.setup_node(self.nodes[i])
        peers = list(self.nodes.values())
        for n in peers:
            self.driver.sync_peers(n, peers)
        for i in ids:
            if i not in self.pods:
                self.pods[i] = self.make_ns(f"{self.tag}p{i}")
                self.links[i] = self.driver.attach_pod(self.nodes[i], self.pods[i], self.pod_ip(i))

    def pod_ip(self, i: int) -> str:
        return leases.host(self.nodes[i].lease, 2)

    def pod_ip6(self, i: int) -> str | None:
        """The pod's IPv6 address on a dual-stack network (its link's ``address6``), else None."""
        address6 = getattr(self.links.get(i), "address6", None)
        return address6.split("/")[0] if address6 else None
