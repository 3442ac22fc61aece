"""A router's extra routes (Neutron's ``routes`` attribute) in its namespace's main table.

Every route with a gateway other than the default ones is an extra route: the
connected routes of the legs have none, and the default routes are kept by
:func:`netbay.dataplane.router.ensure_router`. So the set present is read back from
the kernel and diffed against the wanted one; nothing else needs remembering.

Several nexthops for one destination make one multipath (ECMP) route, as Neutron's
L3 agent makes it (``ip route replace DST nexthop via A nexthop via B``): the kernel
spreads flows over the nexthops by a hash of their addresses.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from collections.abc import Iterable

from netbay.dataplane import links
from netbay.dataplane.rtnl import rtnl
from netbay.dataplane.rtnl.core import RTA_DST, RTA_GATEWAY, RTN_UNICAST, parse_attrs

RTA_MULTIPATH = 9
RTNEXTHOP = struct.Struct("=HBBi")   # rtnh_len, rtnh_flags, rtnh_hops, rtnh_ifindex


def wanted(routes: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """{destination CIDR: its nexthops, sorted}: one (multipath) route per destination."""
    out: dict[str, set[ipaddress.IPv4Address | ipaddress.IPv6Address]] = {}
    for destination, nexthop in routes:
        dst = str(ipaddress.ip_network(destination, strict=False))
        out.setdefault(dst, set()).add(ipaddress.ip_address(nexthop))
    return {dst: tuple(str(h) for h in sorted(hops, key=_order)) for dst, hops in out.items()}


def _order(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[int, int]:
    return address.version, int(address)


def _nexthops(multipath: bytes) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The gateways of an ``RTA_MULTIPATH`` attribute (its ``rtnexthop`` entries)."""
    out = []
    offset = 0
    while offset + RTNEXTHOP.size <= len(multipath):
        length = RTNEXTHOP.unpack_from(multipath, offset)[0]
        if length < RTNEXTHOP.size:
            break
        attrs = parse_attrs(multipath[offset + RTNEXTHOP.size: offset + length])
        if RTA_GATEWAY in attrs:
            out.append(ipaddress.ip_address(attrs[RTA_GATEWAY]))
        offset += (length + 3) & ~3
    return out


def present(ns: str) -> dict[str, tuple[str, ...]]:
    """{destination: its gateways, sorted} of the non-default routes via gateways in ``ns``."""
    out: dict[str, tuple[str, ...]] = {}
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            table = rtnl(ns).main_routes(family)
        except OSError:
            if family == socket.AF_INET6:
                continue  # no IPv6 in this kernel
            raise
        for (_fam, dst_len, _s, _tos, _table, _proto, _scope, rtype, _flags), attrs in table:
            if rtype != RTN_UNICAST or not dst_len or RTA_DST not in attrs:
                continue
            hops = ([ipaddress.ip_address(attrs[RTA_GATEWAY])] if RTA_GATEWAY in attrs
                    else _nexthops(attrs.get(RTA_MULTIPATH, b"")))
            if hops:
                dst = f"{ipaddress.ip_address(attrs[RTA_DST])}/{dst_len}"
                out[dst] = tuple(str(h) for h in sorted(set(hops), key=_order))
    return out


def sync_extra_routes(ns: str, routes: Iterable[tuple[str, str]]) -> list[str]:
    """Make the extra routes of ``ns`` exactly ``routes``; the destinations with a nexthop
    not reachable yet (its leg not wired) are returned, to be tried again."""
    want, have = wanted(routes), present(ns)
    for dst in have:
        if dst not in want:
            links.del_route(ns, dst)   # the whole route, all its nexthops
    unreachable = []
    for dst, nexthops in want.items():
        if have.get(dst) == nexthops:
            continue
        try:
            if len(nexthops) == 1:
                links.replace_route(ns, dst, gateway=nexthops[0])
            else:
                links.replace_multipath_route(ns, dst, nexthops)
        except links.LinkError as exc:
            if exc.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENODEV):
                raise
            unreachable.append(dst)
    return unreachable
