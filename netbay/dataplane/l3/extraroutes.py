"""A router's extra routes (Neutron's ``routes`` attribute) in its namespace's main table.

Every route with a gateway other than the default ones is an extra route: the
connected routes of the legs have none, and the default routes are kept by
:func:`netbay.dataplane.router.ensure_router`. So the set present is read back from
the kernel and diffed against the wanted one; nothing else needs remembering.

Neutron's L3 agent makes one ECMP route of several nexthops to one destination;
here the lowest nexthop of a destination carries it (one path per destination).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterable

from netbay.dataplane import links
from netbay.dataplane.rtnl import rtnl


def wanted(routes: Iterable[tuple[str, str]]) -> dict[str, str]:
    """{destination CIDR: nexthop}: one nexthop per destination, the lowest address."""
    out: dict[str, str] = {}
    for destination, nexthop in routes:
        dst = str(ipaddress.ip_network(destination, strict=False))
        hop = ipaddress.ip_address(nexthop)
        if dst not in out or _order(hop) < _order(ipaddress.ip_address(out[dst])):
            out[dst] = str(hop)
    return out


def _order(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[int, int]:
    return address.version, int(address)


def present(ns: str) -> dict[str, str]:
    """{destination: gateway} of the non-default routes via a gateway in ``ns``."""
    out: dict[str, str] = {}
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            table = rtnl(ns).routes(family)
        except OSError:
            if family == socket.AF_INET6:
                continue  # no IPv6 in this kernel
            raise
        for dst, gateway, _oif, _metric in table:
            if gateway and ipaddress.ip_network(dst).prefixlen:
                out[dst] = gateway
    return out


def sync_extra_routes(ns: str, routes: Iterable[tuple[str, str]]) -> list[str]:
    """Make the extra routes of ``ns`` exactly ``routes``; the destinations whose nexthop
    is not reachable yet (its leg not wired) are returned, to be tried again."""
    want, have = wanted(routes), present(ns)
    for dst, gateway in have.items():
        if want.get(dst) != gateway:
            links.del_route(ns, dst, gateway=gateway)
    unreachable = []
    for dst, nexthop in want.items():
        if have.get(dst) == nexthop:
            continue
        try:
            links.replace_route(ns, dst, gateway=nexthop)
        except links.LinkError as exc:
            if exc.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENODEV):
                raise
            unreachable.append(dst)
    return unreachable
