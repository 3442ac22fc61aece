"""Routes the container-network drivers program, carrying netbay's protocol mark
(:data:`RTPROT_NETBAY`), so that a driver can find — and remove — exactly the routes
it made, and converge a table's routes to a wanted set."""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from dataclasses import dataclass

from netbay.dataplane.rtnl.codec import ip_family, packed_ip
from netbay.dataplane.rtnl.core import (
    NLM_F_ACK, NLM_F_CREATE, NLM_F_REPLACE, RT_SCOPE_NOWHERE, RT_SCOPE_UNIVERSE, RT_TABLE_MAIN, RTA_DST,
    RTA_GATEWAY, RTA_OIF, RTM_DELROUTE, RTM_NEWROUTE, RTMSG, RTN_UNICAST, RTNH_F_ONLINK, attr, rtnl, u32_attr,
)
from netbay.dataplane.rtnl.sockets import LinkError

RTPROT_NETBAY = 78          # rtm_protocol of the routes the drivers program (ours to remove)
RTN_BLACKHOLE = 6
RT_SCOPE_LINK = 253


@dataclass(frozen=True)
class KRoute:
    """A main-table route (the family is ``dst``'s): ``dst`` via ``gateway`` out of ``oif``."""
    dst: str
    gateway: str | None = None
    oif: int | None = None
    onlink: bool = False
    blackhole: bool = False
    proto: int = RTPROT_NETBAY

    @property
    def key(self) -> tuple:
        return (self.dst, self.gateway, self.oif, self.onlink, self.blackhole)


def _route_body(rt: KRoute, *, delete: bool = False) -> bytes:
    net = ipaddress.ip_network(rt.dst)
    if delete:
        scope = RT_SCOPE_NOWHERE
    elif rt.gateway is None and not rt.blackhole:
        scope = RT_SCOPE_LINK
    else:
        scope = RT_SCOPE_UNIVERSE
    body = RTMSG.pack(ip_family(rt.dst), net.prefixlen, 0, 0, RT_TABLE_MAIN, rt.proto, scope,
                     RTN_BLACKHOLE if rt.blackhole else RTN_UNICAST,
                     RTNH_F_ONLINK if rt.onlink else 0)
    if net.prefixlen:
        body += attr(RTA_DST, net.network_address.packed)
    if rt.gateway is not None:
        body += attr(RTA_GATEWAY, packed_ip(rt.gateway))
    if rt.oif is not None:
        body += u32_attr(RTA_OIF, rt.oif)
    return body


def routes(ns: str, proto: int | None = RTPROT_NETBAY, family: int = socket.AF_INET) -> list[KRoute]:
    """Main-table unicast and blackhole routes of ``family`` (IPv4 unless told; with
    protocol ``proto``, or all)."""
    out = []
    for (_fam, dst_len, _s, _tos, _table, rproto, _scope, rtype, flags), a in rtnl(ns).main_routes(family):
        if rtype not in (RTN_UNICAST, RTN_BLACKHOLE):
            continue
        if proto is not None and rproto != proto:
            continue
        dst = str(ipaddress.ip_address(a[RTA_DST])) if RTA_DST in a else ("::" if family == socket.AF_INET6
                                                                          else "0.0.0.0")
        out.append(KRoute(
            dst=f"{dst}/{dst_len}",
            gateway=str(ipaddress.ip_address(a[RTA_GATEWAY])) if RTA_GATEWAY in a else None,
            oif=struct.unpack("=I", a[RTA_OIF])[0] if RTA_OIF in a else None,
            onlink=bool(flags & RTNH_F_ONLINK), blackhole=rtype == RTN_BLACKHOLE, proto=rproto))
    return out


def add_route(ns: str, rt: KRoute) -> None:
    """Create or replace the route to ``rt.dst``."""
    rtnl(ns).request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK, _route_body(rt),
                   f"replace route {rt.dst}")


def del_route(ns: str, rt: KRoute) -> bool:
    try:
        rtnl(ns).request(RTM_DELROUTE, NLM_F_ACK, _route_body(rt, delete=True), f"delete route {rt.dst}")
    except LinkError as exc:
        if exc.errno in (errno.ESRCH, errno.ENOENT):
            return False
        raise
    return True


def sync_routes(ns: str, desired: list[KRoute], family: int = socket.AF_INET) -> tuple[int, int]:
    """Make the routes of ``family`` with protocol :data:`RTPROT_NETBAY` in ``ns`` exactly
    ``desired`` (those of ``desired`` in that family): add the missing, replace the changed,
    delete the rest. Returns (added, deleted)."""
    have = {rt.dst: rt for rt in routes(ns, family=family)}
    want = {rt.dst: rt for rt in desired if ip_family(rt.dst) == family}
    added = deleted = 0
    for dst, rt in have.items():
        if dst not in want:
            deleted += del_route(ns, rt)
    for dst, rt in want.items():
        old = have.get(dst)
        if old is None or old.key != rt.key:
            add_route(ns, rt)
            added += 1
    return added, deleted
