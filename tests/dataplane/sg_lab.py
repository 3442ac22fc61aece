"""A security-group lab: a fabric namespace with one bridge per network, sandboxes wired
to it, :class:`netbay.dataplane.secgroups.SecurityGroups` filtering them, and the TCP/UDP
probes that tell "allowed" (the connection completes) from "denied" (it does not within
:data:`DENY_TIMEOUT`: a drop, not a refusal). Shared by the security-group, network
extension, address-group and TaaS tests.
"""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from netbay.dataplane import links, netns
from netbay.dataplane.names import Names
from netbay.dataplane.secgroups import SecurityGroups

DENY_TIMEOUT = 0.4


def uid() -> str:
    return str(uuid.uuid4())


# --- traffic ---------------------------------------------------------------------------

def netns_socket(ns: str, family: int, kind: int) -> socket.socket:
    with netns.entered(ns):
        return socket.socket(family, kind)


def tcp(client: str, server: str, dst: str, port: int = 80, *, src: str | None = None,
        timeout: float = DENY_TIMEOUT) -> bool:
    """True if a TCP connection from namespace ``client`` to ``dst:port`` (a listener in
    ``server``) is accepted within ``timeout``."""
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    srv, cli = netns_socket(server, fam, socket.SOCK_STREAM), netns_socket(client, fam, socket.SOCK_STREAM)
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((dst, port))
        srv.listen(4)
        if src:
            cli.bind((src, 0))
        cli.settimeout(timeout)
        try:
            cli.connect((dst, port))
        except OSError:
            return False
        srv.settimeout(timeout)
        conn, _ = srv.accept()
        conn.close()
        return True
    finally:
        cli.close()
        srv.close()


def add_address(ns: str, cidr: str) -> None:
    """Add an address in a sandbox and wait until it can be bound (IPv6 leaves its
    tentative state from a kernel work queue, even without DAD): bounded polling."""
    links.add_address(ns, "eth0", cidr)
    addr = cidr.split("/")[0]
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    for _ in range(200):
        s = netns_socket(ns, fam, socket.SOCK_DGRAM)
        try:
            s.bind((addr, 0))
            return
        except OSError:
            time.sleep(0.01)
        finally:
            s.close()
    raise AssertionError(f"{cidr} never became usable in {ns}")


def eventually(check: Callable[[], bool], tries: int = 5) -> bool:
    """An allowed path may need a neighbour resolution first: a few bounded attempts."""
    return any(check() for _ in range(tries))


@contextlib.contextmanager
def open_tcp(client: str, server: str, dst: str,
             port: int) -> Iterator[tuple[socket.socket, socket.socket]]:
    fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
    srv, cli = netns_socket(server, fam, socket.SOCK_STREAM), netns_socket(client, fam, socket.SOCK_STREAM)
    conn = None
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((dst, port))
        srv.listen(1)
        srv.settimeout(2)
        cli.settimeout(2)
        cli.connect((dst, port))
        conn, _ = srv.accept()
        conn.settimeout(DENY_TIMEOUT)
        yield cli, conn
    finally:
        for s in (conn, cli, srv):
            if s is not None:
                s.close()


def delivered(conn: socket.socket, cli: socket.socket, payload: bytes) -> bool:
    cli.sendall(payload)
    try:
        return conn.recv(64) == payload
    except OSError:
        return False


# --- topology --------------------------------------------------------------------------

@dataclass
class Port:
    id: str
    ns: str
    ip: str
    mac: str
    net: str
    mark: int
    zone: int
    ip6: str | None = None
    groups: list[str] = field(default_factory=list)
    pairs: list[dict] = field(default_factory=list)
    secured: bool = True

    def json(self) -> dict:
        ips = [{"ip_address": self.ip}] + ([{"ip_address": self.ip6}] if self.ip6 else [])
        return {"id": self.id, "network_id": self.net, "mac_address": self.mac,
                "device_owner": "compute:nova", "fixed_ips": ips,
                "allowed_address_pairs": self.pairs, "port_security_enabled": self.secured,
                "security_groups": list(self.groups) if self.secured else []}


class Lab:
    """A fabric namespace, bridges per network, sandboxes, and the realizer."""

    def __init__(self, make_ns: Callable[[str], str]) -> None:
        self.make_ns = make_ns
        self.fabric = make_ns("sgfab")
        self.sg = SecurityGroups(self.fabric)
        self.ports: dict[str, Port] = {}
        self.groups: dict[str, dict] = {}
        self.zones: dict[str, int] = {}
        self._n = 0

    def network(self) -> str:
        net = uid()
        links.bridge(self.fabric, Names.bridge(net), 1450)
        self.zones[net] = len(self.zones) + 1
        return net

    def port(self, net: str, ip: str, *, ip6: str | None = None, groups: list[str] = (),
             mac: str | None = None, secured: bool = True) -> Port:
        self._n += 1
        n = self._n
        ns = self.make_ns(f"sgs{n}")
        p = Port(uid(), ns, ip, mac or f"fa:16:3e:00:{n // 256:02x}:{n % 256:02x}", net, n,
                 self.zones[net], ip6, list(groups), secured=secured)
        links.wire_port(self.fabric, Names.bridge(net), ns, host_ifname=Names.tap(p.id),
                        mac=p.mac, cidrs=[f"{ip}/24"], mtu=1450)
        if ip6:  # no duplicate address detection: usable at once
            for dev in ("all", "eth0"):  # DAD is skipped only if both say so
                links.sysctl(ns, f"net.ipv6.conf.{dev}.accept_dad", 0)
            add_address(ns, f"{ip6}/64")
        self.ports[p.id] = p
        return p

    def group(self, *rules: dict, default: bool = False) -> str:
        gid = uid()
        self.groups[gid] = {"id": gid, "name": "default" if default else "g",
                            "security_group_rules": []}
        if default:  # Neutron's default group
            rules = (rule(gid, "ingress", remote_group_id=gid),
                     rule(gid, "ingress", "IPv6", remote_group_id=gid),
                     rule(gid, "egress"), rule(gid, "egress", "IPv6"), *rules)
        self.groups[gid]["security_group_rules"] = [dict(r, security_group_id=gid) for r in rules]
        return gid

    def apply(self) -> None:
        self.sg.sync([(p.json(), p.mark, p.zone) for p in self.ports.values()],
                     list(self.groups.values()))

    def update(self, p: Port) -> None:
        self.sg.ensure_port(p.json(), p.mark, p.zone)


def rule(gid: str | None, direction: str, ethertype: str = "IPv4", **kw) -> dict:
    r = {"id": uid(), "direction": direction, "ethertype": ethertype, "protocol": None,
         "port_range_min": None, "port_range_max": None, "remote_ip_prefix": None,
         "remote_group_id": None}
    if gid:
        r["security_group_id"] = gid
    r.update(kw)
    return r
