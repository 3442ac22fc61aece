"""The rtnetlink messages the container-network drivers send, beside the fabric's.

Built on :mod:`netbay.dataplane.rtnl.core` (its socket per namespace and thread,
its request/ack loop and attribute packers), in-process, no ``ip``/``bridge``
forks: bridge and VXLAN links with a fixed MAC, neighbour entries (``ip neigh``),
VXLAN forwarding-database entries (``bridge fdb … self dst``: ``RTM_NEWNEIGH`` on
``AF_BRIDGE`` with ``NDA_LLADDR``/``NDA_DST``) and routes carrying a protocol mark,
so that a driver can find — and remove — exactly the routes it made.

Every "add" is create-or-replace; every "delete" answers False when there was
nothing to delete. Errors are :class:`netbay.dataplane.rtnl.sockets.LinkError`.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from dataclasses import dataclass
from typing import Any

from netbay.dataplane import bigtcp
from netbay.dataplane.rtnl.sockets import LinkError
from netbay.dataplane.rtnl.core import (
    IFF_UP, IFINFOMSG, IFLA_ADDRESS, IFLA_IFNAME, IFLA_INFO_DATA, IFLA_INFO_KIND, IFLA_LINKINFO, IFLA_MTU,
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, RT_SCOPE_NOWHERE, RT_SCOPE_UNIVERSE,
    RT_TABLE_MAIN, RTA_DST, RTA_GATEWAY, RTA_OIF, RTM_DELLINK, RTM_DELROUTE,
    RTM_NEWLINK, RTM_NEWROUTE, RTMSG, RTN_UNICAST, RTNH_F_ONLINK, LinkInfo, Rtnl, attr,
    link_info, mac_attr, parse_attrs, rtnl, str_attr, u32_attr,
)

__all__ = [
    "RTPROT_NETBAY", "Neigh", "Fdb", "KRoute", "VxlanInfo", "ensure_bridge", "ensure_vxlan",
    "vxlan_info", "neighbours", "add_neighbour", "del_neighbour", "fdb", "add_fdb", "append_fdb", "del_fdb",
    "routes", "add_route", "del_route", "sync_routes", "delete_link", "link_index", "allow_big_packets",
    "ensure_ipip",
]

RTPROT_NETBAY = 78          # rtm_protocol of the routes the drivers program (ours to remove)
RTM_NEWNEIGH, RTM_DELNEIGH, RTM_GETNEIGH = 28, 29, 30
NDA_DST, NDA_LLADDR = 1, 2
NUD_PERMANENT, NUD_NOARP = 0x80, 0x40
NTF_SELF = 0x02
NLM_F_APPEND = 0x800
AF_BRIDGE = 7
RTN_BLACKHOLE = 6
RT_SCOPE_LINK = 253
# IFLA_VXLAN_*
VXLAN_ID, VXLAN_LINK, VXLAN_LOCAL, VXLAN_LEARNING, VXLAN_PORT = 1, 3, 4, 7, 15

_NDM = struct.Struct("=B3xiHBB")  # ndmsg


def _r(ns: str) -> Rtnl:
    return rtnl(ns)


def link_index(ns: str, ifname: str) -> int | None:
    link = _r(ns).link(ifname)
    return link.index if link else None


def _ip(value: str) -> bytes:
    return ipaddress.ip_address(value).packed


def _family(ip: str) -> int:
    """``AF_INET`` or ``AF_INET6`` for an address or a CIDR."""
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def _fmt_mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


# --- links ---------------------------------------------------------------------------------


def _new_link(ns: str, name: str, kind: str, data: bytes, *, mtu: int | None, mac: str | None,
              extra: bytes = b"") -> None:
    info = str_attr(IFLA_INFO_KIND, kind) + (attr(IFLA_INFO_DATA, data) if data else b"")
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, IFF_UP, IFF_UP) + str_attr(IFLA_IFNAME, name)
    body += attr(IFLA_LINKINFO, info) + extra
    if mtu:
        body += u32_attr(IFLA_MTU, mtu)
    if mac:
        body += attr(IFLA_ADDRESS, mac_attr(mac))
    _r(ns).request(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, body, f"add {kind} {name}")


def _delete(ns: str, name: str) -> None:
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + str_attr(IFLA_IFNAME, name)
    try:
        _r(ns).request(RTM_DELLINK, NLM_F_ACK, body, f"delete link {name}")
    except LinkError as exc:
        if exc.errno not in (errno.ENODEV, errno.ENOENT):
            raise


def _converge(ns: str, link: LinkInfo | VxlanInfo, mtu: int | None, mac: str | None) -> None:
    """Up, ``mtu`` and ``mac`` on an existing link: only what differs."""
    change: dict[str, Any] = dict(up=None if link.up else True, mtu=mtu if mtu and mtu != link.mtu else None,
                                  mac=mac if mac and (link.address or "").lower() != mac.lower() else None)
    if any(v is not None for v in change.values()):
        _r(ns).set_link(link.index, **change)


def allow_big_packets(ns: str, link: LinkInfo | VxlanInfo, path: str = "pod-bridged") -> bool:
    """Give a bridge BIG TCP's GSO limit (:mod:`netbay.dataplane.bigtcp`, as decided for
    ``path``) once it can take it: a pod's large packets then pass the node's ``cni0``
    whole instead of being cut into MSS-sized segments in software there. A new bridge
    can take it only once it has a port (its limit is its ports' least). True if the
    link has the limit now."""
    gso = bigtcp.gso_max_size(path)
    if not gso or link.gso_max_size == gso:
        return bool(gso)
    if link.tso_max_size < gso:
        return False
    try:
        _r(ns).set_link(link.index, gso_max_size=gso)
    except LinkError as exc:   # an older kernel's limits: the kernel's default stays
        if exc.errno not in (errno.EINVAL, errno.ERANGE):
            raise
        return False
    return True


def ensure_bridge(ns: str, name: str, *, mtu: int | None = None, mac: str | None = None) -> int:
    """A Linux bridge ``name`` in ``ns``, up, with ``mtu`` and a fixed ``mac`` (so its
    address does not follow its ports). Returns its ifindex."""
    return _ensure_plain(ns, name, "bridge", mtu, mac)


@dataclass(frozen=True)
class VxlanInfo:
    index: int
    vni: int | None
    local: str | None
    port: int | None
    link: int | None
    learning: bool | None
    mtu: int
    address: str | None
    up: bool
    gso_max_size: int = 0
    tso_max_size: int = 0


def vxlan_info(ns: str, name: str) -> VxlanInfo | None:
    """The VXLAN link ``name`` as the kernel has it (None if absent or not VXLAN)."""
    payload = _r(ns).link_message(name)
    if payload is None:
        return None
    _f, _t, index, flags, _c = IFINFOMSG.unpack_from(payload)
    a = parse_attrs(payload, IFINFOMSG.size)
    info = parse_attrs(a.get(IFLA_LINKINFO, b""))
    if info.get(IFLA_INFO_KIND, b"").rstrip(b"\0") != b"vxlan":
        return None
    d = parse_attrs(info.get(IFLA_INFO_DATA, b""))
    return VxlanInfo(
        index=index,
        vni=struct.unpack("=I", d[VXLAN_ID])[0] if VXLAN_ID in d else None,
        local=str(ipaddress.ip_address(d[VXLAN_LOCAL])) if VXLAN_LOCAL in d else None,
        port=struct.unpack("!H", d[VXLAN_PORT])[0] if VXLAN_PORT in d else None,
        link=struct.unpack("=I", d[VXLAN_LINK])[0] if VXLAN_LINK in d else None,
        learning=bool(d[VXLAN_LEARNING][0]) if VXLAN_LEARNING in d else None,
        mtu=struct.unpack("=I", a[IFLA_MTU])[0] if IFLA_MTU in a else 0,
        address=_fmt_mac(a[IFLA_ADDRESS]) if IFLA_ADDRESS in a else None,
        up=bool(flags & IFF_UP), gso_max_size=link_info(payload).gso_max_size,
        tso_max_size=link_info(payload).tso_max_size)


def ensure_vxlan(ns: str, name: str, *, vni: int, port: int, local: str, underlay: str,
                 mtu: int, mac: str, learning: bool = False) -> int:
    """A VXLAN device ``name`` in ``ns`` (VNI ``vni``, UDP ``port``, source ``local``
    on link ``underlay``, learning off unless asked), up, with ``mtu`` and ``mac``. A device of that
    name with other VXLAN parameters is deleted and re-created (flannel does the same).
    Returns its ifindex."""
    uidx = link_index(ns, underlay)
    if uidx is None:
        raise LinkError(errno.ENODEV, f"underlay link {underlay!r} missing in namespace {ns!r}")
    have = vxlan_info(ns, name)
    if have is not None and (have.vni, have.local, have.port, have.link, have.learning) != (
            vni, local, port, uidx, learning):
        _delete(ns, name)
        have = None
    if have is None:
        if _r(ns).link(name) is not None:
            raise LinkError(errno.EEXIST, f"{name!r} in namespace {ns!r} exists and is not VXLAN")
        data = (u32_attr(VXLAN_ID, vni) + u32_attr(VXLAN_LINK, uidx) + attr(VXLAN_LOCAL, _ip(local))
                + attr(VXLAN_PORT, struct.pack("!H", port))
                + attr(VXLAN_LEARNING, b"\1" if learning else b"\0"))
        _new_link(ns, name, "vxlan", data, mtu=mtu, mac=mac)
        have = vxlan_info(ns, name)
        assert have is not None
    _converge(ns, have, mtu, mac)
    return have.index


def ensure_ipip(ns: str, name: str, *, mtu: int) -> int:
    """The namespace's catch-all IP-in-IP device ``name`` (``tunl0``: no local or remote
    address, as the kernel's fallback device and calico's), up, with ``mtu``. The
    kernel makes ``tunl0`` in every namespace once its ipip module is loaded (unless
    ``net.core.fb_tunnels_only_for_init_net`` says otherwise); made here if absent.
    Returns its ifindex."""
    return _ensure_plain(ns, name, "ipip", mtu, None)


def _ensure_plain(ns: str, name: str, kind: str, mtu: int | None, mac: str | None) -> int:
    """A link of ``kind`` that needs no kind-specific data: made if absent, converged."""
    r = _r(ns)
    link = r.link(name)
    if link is not None and link.kind != kind:
        raise LinkError(errno.EEXIST, f"{name!r} in namespace {ns!r} is a {link.kind} link, not a {kind} link")
    if link is None:
        _new_link(ns, name, kind, b"", mtu=mtu, mac=mac)
        link = r.link(name)
        assert link is not None
    _converge(ns, link, mtu, mac)
    return link.index


def delete_link(ns: str, name: str) -> None:
    _delete(ns, name)


# --- neighbours and the VXLAN FDB --------------------------------------------------------


@dataclass(frozen=True)
class Neigh:
    ifindex: int
    ip: str
    mac: str | None
    state: int

    @property
    def permanent(self) -> bool:
        return bool(self.state & NUD_PERMANENT)


@dataclass(frozen=True)
class Fdb:
    ifindex: int
    mac: str
    dst: str | None
    state: int
    flags: int


def _neigh_body(family: int, ifindex: int, state: int, flags: int, ip: str | None, mac: str | None) -> bytes:
    body = _NDM.pack(family, ifindex, state, flags, 0)
    if mac is not None:
        body += attr(NDA_LLADDR, mac_attr(mac))
    if ip is not None:
        body += attr(NDA_DST, _ip(ip))
    return body


def _dump_neigh(ns: str, family: int) -> list[tuple[int, int, int, dict[int, bytes]]]:
    msgs = _r(ns).request(RTM_GETNEIGH, NLM_F_DUMP, _NDM.pack(family, 0, 0, 0, 0), "dump neighbours")
    out = []
    for t, p in msgs:
        if t != RTM_NEWNEIGH or len(p) < _NDM.size:
            continue
        fam, idx, state, flags, _type = _NDM.unpack_from(p)
        if fam == family:
            out.append((idx, state, flags, parse_attrs(p, _NDM.size)))
    return out


def neighbours(ns: str, ifindex: int | None = None, family: int = socket.AF_INET) -> list[Neigh]:
    """Neighbour entries of ``family`` (IPv4's ARP, IPv6's ND; of link ``ifindex``, or all)."""
    out = []
    for idx, state, _flags, a in _dump_neigh(ns, family):
        if (ifindex is None or idx == ifindex) and NDA_DST in a:
            out.append(Neigh(idx, str(ipaddress.ip_address(a[NDA_DST])),
                             _fmt_mac(a[NDA_LLADDR]) if NDA_LLADDR in a else None, state))
    return out


def add_neighbour(ns: str, ifindex: int, ip: str, mac: str) -> None:
    """A permanent neighbour entry ``ip`` → ``mac`` on ``ifindex`` (``ip neigh replace``)."""
    _r(ns).request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK,
                   _neigh_body(_family(ip), ifindex, NUD_PERMANENT, 0, ip, mac),
                   f"replace neighbour {ip}")


def del_neighbour(ns: str, ifindex: int, ip: str) -> bool:
    try:
        _r(ns).request(RTM_DELNEIGH, NLM_F_ACK, _neigh_body(_family(ip), ifindex, 0, 0, ip, None),
                       f"delete neighbour {ip}")
    except LinkError as exc:
        if exc.errno in (errno.ENOENT, errno.ESRCH, errno.ENODEV):
            return False
        raise
    return True


def fdb(ns: str, ifindex: int) -> list[Fdb]:
    """The forwarding-database entries of device ``ifindex`` (a VXLAN device's remotes)."""
    out = []
    for idx, state, flags, a in _dump_neigh(ns, AF_BRIDGE):
        if idx == ifindex and NDA_LLADDR in a:
            out.append(Fdb(idx, _fmt_mac(a[NDA_LLADDR]),
                           str(ipaddress.ip_address(a[NDA_DST])) if NDA_DST in a else None, state, flags))
    return out


def add_fdb(ns: str, ifindex: int, mac: str, dst: str) -> None:
    """``bridge fdb replace MAC dev VXLAN self permanent dst DST``."""
    _r(ns).request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK,
                   _neigh_body(AF_BRIDGE, ifindex, NUD_PERMANENT | NUD_NOARP, NTF_SELF, dst, mac),
                   f"replace fdb {mac} dst {dst}")


def append_fdb(ns: str, ifindex: int, mac: str, dst: str) -> None:
    """``bridge fdb append MAC dev VXLAN self permanent dst DST``: one more remote for
    ``mac`` (all zeros: head-end replication of broadcast to every such remote)."""
    try:
        _r(ns).request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK,
                       _neigh_body(AF_BRIDGE, ifindex, NUD_PERMANENT | NUD_NOARP, NTF_SELF, dst, mac),
                       f"append fdb {mac} dst {dst}")
    except LinkError as exc:
        if exc.errno != errno.EEXIST:
            raise


def del_fdb(ns: str, ifindex: int, mac: str, dst: str | None = None) -> bool:
    try:
        _r(ns).request(RTM_DELNEIGH, NLM_F_ACK,
                       _neigh_body(AF_BRIDGE, ifindex, 0, NTF_SELF, dst, mac), f"delete fdb {mac}")
    except LinkError as exc:
        if exc.errno in (errno.ENOENT, errno.ESRCH, errno.ENODEV):
            return False
        raise
    return True


# --- routes with a protocol mark ------------------------------------------------------------


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
    body = RTMSG.pack(_family(rt.dst), net.prefixlen, 0, 0, RT_TABLE_MAIN, rt.proto, scope,
                     RTN_BLACKHOLE if rt.blackhole else RTN_UNICAST,
                     RTNH_F_ONLINK if rt.onlink else 0)
    if net.prefixlen:
        body += attr(RTA_DST, net.network_address.packed)
    if rt.gateway is not None:
        body += attr(RTA_GATEWAY, _ip(rt.gateway))
    if rt.oif is not None:
        body += u32_attr(RTA_OIF, rt.oif)
    return body


def routes(ns: str, proto: int | None = RTPROT_NETBAY, family: int = socket.AF_INET) -> list[KRoute]:
    """Main-table unicast and blackhole routes of ``family`` (IPv4 unless told; with
    protocol ``proto``, or all)."""
    out = []
    for (_fam, dst_len, _s, _tos, _table, rproto, _scope, rtype, flags), a in _r(ns).main_routes(family):
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
    _r(ns).request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK, _route_body(rt),
                   f"replace route {rt.dst}")


def del_route(ns: str, rt: KRoute) -> bool:
    try:
        _r(ns).request(RTM_DELROUTE, NLM_F_ACK, _route_body(rt, delete=True), f"delete route {rt.dst}")
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
    want = {rt.dst: rt for rt in desired if _family(rt.dst) == family}
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

