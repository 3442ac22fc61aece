"""The rtnetlink messages the container-network drivers send, beside the fabric's.

Built on :mod:`netbay.dataplane.rtnl.core` (its socket per namespace and thread,
its request/ack loop and attribute packers), in-process, no ``ip``/``bridge``
forks: bridge and VXLAN links with a fixed MAC, neighbour entries (``ip neigh``),
VXLAN forwarding-database entries (``bridge fdb … self dst``: ``RTM_NEWNEIGH`` on
``AF_BRIDGE`` with ``NDA_LLADDR``/``NDA_DST``) and routes carrying a protocol mark,
so that a driver can find — and remove — exactly the routes it made. The links are
made here; neighbours and FDB entries are :mod:`.neigh`'s, routes :mod:`.kroutes`'s,
re-exported here: this module's ``__all__`` is the drivers' surface.

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
from netbay.dataplane.rtnl.codec import mac_str, packed_ip
from netbay.dataplane.rtnl.core import (
    IFF_UP, IFINFOMSG, IFLA_ADDRESS, IFLA_IFNAME, IFLA_INFO_DATA, IFLA_INFO_KIND, IFLA_LINKINFO, IFLA_MTU,
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, RTM_DELLINK, RTM_NEWLINK, LinkInfo, Rtnl, attr, link_info, mac_attr,
    parse_attrs, rtnl, str_attr, u32_attr,
)
from netbay.dataplane.rtnl.kroutes import RTPROT_NETBAY, KRoute, add_route, del_route, routes, sync_routes
from netbay.dataplane.rtnl.neigh import (
    Fdb, Neigh, add_fdb, add_neighbour, append_fdb, del_fdb, del_neighbour, fdb, neighbours,
)
from netbay.dataplane.rtnl.sockets import LinkError

__all__ = [
    "RTPROT_NETBAY", "Neigh", "Fdb", "KRoute", "VxlanInfo", "ensure_bridge", "ensure_vxlan",
    "vxlan_info", "neighbours", "add_neighbour", "del_neighbour", "fdb", "add_fdb", "append_fdb", "del_fdb",
    "routes", "add_route", "del_route", "sync_routes", "delete_link", "link_index", "allow_big_packets",
    "ensure_ipip",
]

# IFLA_VXLAN_*
VXLAN_ID, VXLAN_LINK, VXLAN_LOCAL, VXLAN_LEARNING, VXLAN_PORT = 1, 3, 4, 7, 15


def _r(ns: str) -> Rtnl:
    return rtnl(ns)


def link_index(ns: str, ifname: str) -> int | None:
    link = _r(ns).link(ifname)
    return link.index if link else None


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
        address=mac_str(a[IFLA_ADDRESS]) if IFLA_ADDRESS in a else None,
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
        data = (u32_attr(VXLAN_ID, vni) + u32_attr(VXLAN_LINK, uidx) + attr(VXLAN_LOCAL, packed_ip(local))
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
