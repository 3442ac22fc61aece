"""The load balancer's namespace around its VIP leg: forwarding sysctls, the routes to
the members (the VIP subnet's gateway and host routes), the VIP's gratuitous ARP, and
which load balancer namespaces exist."""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable

from netbay.dataplane import links, netns
from netbay.dataplane.garp import announce
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import rtnl

log = logging.getLogger("netbay.dataplane.loadbalancer")   # its messages are the realizer's

VIP_IFNAME = "vip"
# Forward between the VIP and the members; never redirect a client to a member (the
# forwarded packet goes back out of the interface it came in by).
SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.send_redirects": "0",
    f"net.ipv4.conf.{VIP_IFNAME}.send_redirects": "0",
}
SYSCTLS_V6 = {   # an IPv6 VIP's namespace, beside those
    "net.ipv6.conf.all.forwarding": "1",
}


def sysctls(ns: str, v6: bool = False) -> None:
    for key, value in {**SYSCTLS, **(SYSCTLS_V6 if v6 else {})}.items():
        if links.read_sysctl(ns, key) != value:
            links.sysctl(ns, key, value)


def sync_routes(ns: str, index: int, routes: Iterable[tuple[str, str]]) -> None:
    """Exactly ``routes`` (via a gateway) on the VIP leg."""
    r = rtnl(ns)
    want = {(str(ipaddress.ip_network(d)), str(ipaddress.ip_address(g))) for d, g in routes}
    have = set()
    for af in (socket.AF_INET, socket.AF_INET6) if any(":" in g for _, g in want) else (socket.AF_INET,):
        for dst, gw, oif, metric in r.routes(af):
            if oif != index or gw is None:
                continue
            key = (str(ipaddress.ip_network(dst)), gw)
            if key in want:
                have.add(key)
            else:
                r.del_route(dst, gateway=gw, oif=index, metric=metric)
    for dst, gw in sorted(want - have):
        r.replace_route(dst, gateway=gw, oif=index)


def announce_quietly(ns: str, mac: str, address: str) -> None:
    """:func:`announce`, off the agent's thread (closing a packet socket waits for an
    RCU grace period, ~10 ms); best effort: neighbours also re-resolve in time."""
    try:
        announce(ns, VIP_IFNAME, mac, address)
    except OSError as exc:
        log.debug("load balancer namespace %s: gratuitous ARP for %s: %s", ns, address, exc)


def observed(names: Names) -> set[str]:
    """Ids of the load balancers whose namespaces exist (``<prefix>lb-<id>``)."""
    head = names.loadbalancer("")
    return {n[len(head):] for n in netns.list(head) if len(n) > len(head)}


__all__ = ["SYSCTLS", "SYSCTLS_V6", "VIP_IFNAME", "announce_quietly", "observed", "sync_routes", "sysctls"]
