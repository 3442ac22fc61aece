"""Addresses and routes inside netbay's namespaces, over netlink (nothing forks ``ip``)."""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Sequence
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.rtmsg import RTNH_F_ONLINK

from netbay.dataplane.linkbase import RT_TABLE_MAIN, Route, fail, index, ipr


def add_address(ns: str, ifname: str | int, cidr: str) -> bool:
    """Add ``cidr`` (e.g. ``10.0.0.5/24``) to ``ifname``; False if it was there."""
    iface = ipaddress.ip_interface(cidr)
    idx = index(ns, ifname)
    kw: dict[str, Any] = {}
    if iface.version == 4 and iface.network.prefixlen < 31:
        kw["broadcast"] = str(iface.network.broadcast_address)
    try:
        ipr(ns).addr("add", index=idx, address=str(iface.ip),
                     prefixlen=iface.network.prefixlen, **kw)
    except NetlinkError as exc:
        if exc.code == errno.EEXIST:
            return False
        raise fail(exc, f"add address {cidr} to {ifname}", ns) from None
    return True


def del_address(ns: str, ifname: str | int, cidr: str) -> bool:
    """Remove ``cidr`` from ``ifname``; False if it was not there."""
    iface = ipaddress.ip_interface(cidr)
    idx = index(ns, ifname)
    try:
        ipr(ns).addr("del", index=idx, address=str(iface.ip),
                     prefixlen=iface.network.prefixlen)
    except NetlinkError as exc:
        if exc.code in (errno.EADDRNOTAVAIL, errno.ENOENT, errno.ESRCH):
            return False
        raise fail(exc, f"delete address {cidr} from {ifname}", ns) from None
    return True


def addresses(ns: str, ifname: str | int | None = None) -> list[str]:
    """CIDRs on ``ifname`` (or on every link) in ``ns``."""
    kw: dict[str, Any] = {}
    if ifname is not None:
        kw["index"] = index(ns, ifname)
    try:
        return [f"{m.get('address')}/{m['prefixlen']}" for m in ipr(ns).addr("dump", **kw)]
    except NetlinkError as exc:
        raise fail(exc, "dump addresses", ns) from None


def _route_dst(dst: str, gateway: str | None) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if dst == "default":
        v6 = gateway is not None and ipaddress.ip_address(gateway).version == 6
        return ipaddress.ip_network("::/0" if v6 else "0.0.0.0/0")
    return ipaddress.ip_network(dst, strict=True)


def _route_kw(ns: str, dst: str, gateway: str | None, dev: str | int | None,
              onlink: bool, table: int | None, metric: int | None) -> dict[str, Any]:
    net = _route_dst(dst, gateway)
    kw: dict[str, Any] = {"dst": str(net.network_address), "dst_len": net.prefixlen,
                          "family": 10 if net.version == 6 else 2}
    if gateway is not None:
        kw["gateway"] = str(ipaddress.ip_address(gateway))
    if dev is not None:
        kw["oif"] = index(ns, dev)
    if onlink:
        kw["flags"] = RTNH_F_ONLINK
    if table is not None:
        kw["table"] = int(table)
    if metric is not None:
        kw["priority"] = int(metric)
    return kw


def replace_route(ns: str, dst: str, *, gateway: str | None = None,
                  dev: str | int | None = None, onlink: bool = False,
                  table: int | None = None, metric: int | None = None) -> None:
    """Create or replace the route to ``dst`` (a CIDR or ``"default"``) via ``gateway``
    and/or out of ``dev``; ``onlink`` lets the gateway be outside the link's subnets."""
    if gateway is None and dev is None:
        raise ValueError("a route needs a gateway or a device")
    if onlink and dev is None:
        raise ValueError("an onlink route needs a device")
    kw = _route_kw(ns, dst, gateway, dev, onlink, table, metric)
    try:
        ipr(ns).route("replace", **kw)
    except NetlinkError as exc:
        raise fail(exc, f"replace route {dst}", ns) from None


def replace_multipath_route(ns: str, dst: str, gateways: Sequence[str]) -> None:
    """Create or replace the route to ``dst`` as one multipath (ECMP) route over
    ``gateways``, each reached through the link its address is on."""
    kw = _route_kw(ns, dst, None, None, False, None, None)
    kw["multipath"] = [{"gateway": str(ipaddress.ip_address(g))} for g in gateways]
    try:
        ipr(ns).route("replace", **kw)
    except NetlinkError as exc:
        raise fail(exc, f"replace multipath route {dst}", ns) from None


def del_route(ns: str, dst: str, *, gateway: str | None = None,
              dev: str | int | None = None, table: int | None = None,
              metric: int | None = None) -> bool:
    """Delete the route to ``dst``; False if there was none."""
    kw = _route_kw(ns, dst, gateway, dev, False, table, metric)
    try:
        ipr(ns).route("del", **kw)
    except NetlinkError as exc:
        if exc.code == errno.ESRCH:
            return False
        raise fail(exc, f"delete route {dst}", ns) from None
    return True


def routes(ns: str, table: int = RT_TABLE_MAIN, family: int = 2) -> list[Route]:
    """Unicast routes of ``table`` (IPv4 by default; ``family=10`` for IPv6)."""
    out = []
    try:
        msgs = ipr(ns).route("dump", family=family)
    except NetlinkError as exc:
        raise fail(exc, "dump routes", ns) from None
    for m in msgs:
        t = m.get("table")
        if t != table or m["type"] != 1:  # RTN_UNICAST
            continue
        dst = m.get("dst") or ("0.0.0.0" if family == 2 else "::")
        out.append(Route(dst=f"{dst}/{m['dst_len']}", gateway=m.get("gateway"),
                         oif=m.get("oif"), table=t, metric=m.get("priority"),
                         onlink=bool(m["flags"] & RTNH_F_ONLINK)))
    return out
