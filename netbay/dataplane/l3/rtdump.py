"""A router namespace's links, addresses and default routes, read with the one netlink codec.

Reads go through :mod:`netbay.dataplane.rtnl` (its struct codec, its socket per
namespace and thread): pyroute2 parses ~1 ms per message here, and a router with 100
floating IPs has 100 addresses and 200 local routes, so a no-change ensure cost
~60 ms in dumps alone; the codec takes well under 1 ms. Writes (rare) stay with
:mod:`netbay.dataplane.links`.
"""

from __future__ import annotations

import socket

from netbay.dataplane.rtnl import rtnl


def link_table(ns: str) -> dict[str, tuple[int, bool]]:
    """{ifname: (ifindex, up)} of every link in ``ns``."""
    return {link.ifname: (link.index, link.up) for link in rtnl(ns).links() if link.ifname}


def v4_addresses(ns: str, index: int) -> set[str]:
    """IPv4 CIDRs on link ``index``."""
    return {cidr for cidr in rtnl(ns).addresses(index) if ":" not in cidr}


def default_routes(ns: str, family: int) -> list[tuple[str | None, int | None, int]]:
    """[(gateway, oif, metric)] of the main table's default routes of ``family``."""
    zero = "0.0.0.0/0" if family == socket.AF_INET else "::/0"
    return [(gateway, oif, metric or 0) for dst, gateway, oif, metric in rtnl(ns).routes(family) if dst == zero]
