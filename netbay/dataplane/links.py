"""Links, addresses, routes and sysctls inside netbay's network namespaces.

A small typed layer over :class:`pyroute2.IPRoute`. Every function takes the name
of a namespace made by :mod:`netbay.dataplane.netns`; its socket is opened inside
that namespace and cached as every netlink socket of netbay's is
(:mod:`netbay.dataplane.rtnl.sockets`: one per namespace and thread — pyroute2 keeps
per-thread state; handed a socket of ours it refuses use from another thread, where
it would otherwise silently open a new socket in whatever namespace that thread is
in — closed with the namespace). Nothing forks ``ip``. Its errors are
:class:`~netbay.dataplane.rtnl.sockets.LinkError`.

Functions that create things are idempotent where a reconciler needs it
("ensure" semantics): creating what exists with the same kind succeeds, and a
conflicting object raises :class:`LinkError`.
"""

from __future__ import annotations

import errno
import ipaddress
import os
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from netbay.dataplane import netns
from netbay.dataplane.iproutes import (
    add_address, addresses, del_address, del_route, replace_multipath_route, replace_route, routes,
)
from netbay.dataplane.linkbase import (
    SOCKETS, Link, Port, Route, check_ifname, check_mac, close, echoed_index, fail, get_link, index, ipr, links,
)
from netbay.dataplane.rtnl.sockets import LinkError
from netbay.dataplane.sysctl import read_sysctl, sysctl

__all__ = [
    "LinkError", "Link", "Route", "Port", "SOCKETS", "ipr", "close", "bridge", "veth_pair",
    "set_master", "set_up", "set_mac", "set_mtu", "add_address", "del_address",
    "addresses", "replace_route", "replace_multipath_route", "del_route", "routes", "delete_link", "links",
    "get_link", "index", "sysctl", "read_sysctl", "wire_port", "unwire_port",
]


# --- links -----------------------------------------------------------------------


def _set(ns: str, ifname: str | int, what: str, **kw: Any) -> None:
    idx = index(ns, ifname)
    try:
        ipr(ns).link("set", index=idx, **kw)
    except NetlinkError as exc:
        raise fail(exc, f"{what} on {ifname}", ns) from None


def set_up(ns: str, ifname: str | int, up: bool = True) -> None:
    _set(ns, ifname, "set up" if up else "set down", state="up" if up else "down")


def set_master(ns: str, ifname: str | int, master: str | int | None) -> None:
    """Enslave ``ifname`` to bridge ``master`` (None: release it)."""
    _set(ns, ifname, "set master", master=0 if master is None else index(ns, master))


def set_mac(ns: str, ifname: str | int, mac: str) -> None:
    _set(ns, ifname, "set address", address=check_mac(mac))


def set_mtu(ns: str, ifname: str | int, mtu: int) -> None:
    _set(ns, ifname, "set mtu", mtu=int(mtu))


def _ensure_attrs(ns: str, link: Link, *, mtu: int | None = None, mac: str | None = None,
                  master: int | None = None, up: bool | None = None) -> None:
    kw: dict[str, Any] = {}
    if mtu is not None and link.mtu != mtu:
        kw["mtu"] = mtu
    if mac is not None and (link.address or "").lower() != mac:
        kw["address"] = mac
    if master is not None and link.master != master:
        kw["master"] = master
    if up is not None and link.up != up:
        kw["state"] = "up" if up else "down"
    if kw:
        _set(ns, link.index, "update", **kw)


def bridge(ns: str, name: str, mtu: int | None = None, *, mac: str | None = None,
           up: bool = True) -> int:
    """Ensure a Linux bridge ``name`` in ``ns`` (STP off, the kernel default); return
    its ifindex. Give ``mac`` to keep the bridge's address from following its ports."""
    check_ifname(name)
    mac = check_mac(mac) if mac else None
    kw: dict[str, Any] = {"ifname": name, "kind": "bridge"}
    if mtu is not None:
        kw["mtu"] = int(mtu)
    if mac:
        kw["address"] = mac
    if up:
        kw["state"] = "up"
    try:
        idx = echoed_index(ipr(ns).link("add", **kw), name)
        if idx is not None:
            return idx
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise fail(exc, f"add bridge {name}", ns) from None
    link = get_link(ns, name)
    if link is None:
        raise LinkError(errno.ENODEV, f"bridge {name!r} vanished in namespace {ns!r}")
    if link.kind != "bridge":
        raise LinkError(errno.EEXIST, f"{name!r} in namespace {ns!r} exists and is a "
                                      f"{link.kind or 'non-bridge'} link, not a bridge")
    _ensure_attrs(ns, link, mtu=mtu, mac=mac, up=True if up else None)
    return link.index


def veth_pair(ns_a: str, name_a: str, ns_b: str, name_b: str, mtu: int | None = None, *,
              mac_a: str | None = None, mac_b: str | None = None,
              master_a: str | int | None = None, up_a: bool = False) -> int:
    """Ensure a veth pair: ``name_a`` in ``ns_a``, its peer ``name_b`` created directly in
    ``ns_b`` — one RTM_NEWLINK carrying the peer's namespace fd, MAC and MTU, and the
    ``a`` end's master and up flag. Returns the ifindex of ``name_a``.

    The peer cannot be brought up in the same message (the kernel opens it before the
    pair is linked: ENOTCONN); use :func:`set_up` in ``ns_b``.
    """
    check_ifname(name_a)
    check_ifname(name_b)
    mac_a = check_mac(mac_a) if mac_a else None
    mac_b = check_mac(mac_b) if mac_b else None
    master_idx = index(ns_a, master_a) if master_a is not None else None
    peer: dict[str, Any] = {"ifname": name_b}
    if mtu is not None:
        peer["mtu"] = int(mtu)
    if mac_b:
        peer["address"] = mac_b
    kw: dict[str, Any] = {"ifname": name_a, "kind": "veth", "peer": peer}
    if mtu is not None:
        kw["mtu"] = int(mtu)
    if mac_a:
        kw["address"] = mac_a
    if master_idx is not None:
        kw["master"] = master_idx
    if up_a:
        kw["state"] = "up"
    fd = None
    try:
        if ns_b != ns_a:
            fd = os.open(netns.path(ns_b), os.O_RDONLY | os.O_CLOEXEC)
            peer["net_ns_fd"] = fd
        idx = echoed_index(ipr(ns_a).link("add", **kw), name_a)
    except FileNotFoundError:
        raise LinkError(errno.ENOENT, f"network namespace {ns_b!r} does not exist") from None
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise fail(exc, f"add veth {name_a}/{ns_b}:{name_b}", ns_a) from None
        # Exists already: fine if it is the same pair.
        a, b = get_link(ns_a, name_a), get_link(ns_b, name_b)
        if a is None or b is None or a.kind != "veth" or b.kind != "veth":
            raise LinkError(errno.EEXIST,
                            f"cannot create veth {ns_a}:{name_a} <-> {ns_b}:{name_b}: "
                            f"{'an' if a else 'no'} {ns_a}:{name_a} "
                            f"({a.kind if a else '-'}), {'a' if b else 'no'} {ns_b}:{name_b} "
                            f"({b.kind if b else '-'}) already") from None
        _ensure_attrs(ns_a, a, mtu=mtu, mac=mac_a, master=master_idx,
                      up=True if up_a else None)
        _ensure_attrs(ns_b, b, mtu=mtu, mac=mac_b)
        return a.index
    finally:
        if fd is not None:
            os.close(fd)
    return idx if idx is not None else index(ns_a, name_a)


def delete_link(ns: str, ifname: str) -> bool:
    """Delete link ``ifname`` (a veth takes its peer along); False if it was absent."""
    try:
        ipr(ns).link("del", ifname=check_ifname(ifname))
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            return False
        raise fail(exc, f"delete link {ifname}", ns) from None
    return True


# --- a port, end to end -------------------------------------------------------------


def wire_port(fabric_ns: str, bridge_name: str | int, sandbox_ns: str, *, host_ifname: str,
              ifname: str = "eth0", mac: str | None = None, cidrs: tuple[str, ...] | list[str] = (),
              gateway: str | None = None, mtu: int | None = None,
              host_routes: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()) -> Port:
    """Plug a sandbox into a network: what a port is in the embedded dataplane.

    Ensures namespace ``sandbox_ns``; a veth whose ``host_ifname`` end is enslaved to
    ``bridge_name`` in ``fabric_ns`` (up) and whose ``ifname`` end is in the sandbox
    with ``mac`` and ``mtu``; then, in the sandbox, ``lo`` up, the ``cidrs``, the link
    up, a default route via ``gateway`` (``onlink`` when no cidr covers it) and the
    ``host_routes`` (``(destination, nexthop)``). Idempotent.

    Netlink round trips: 1 in the fabric (plus the bridge lookup when given by name),
    about 4 + one per address/route in the sandbox.
    """
    fresh = netns.create(sandbox_ns)
    br = index(fabric_ns, bridge_name)
    veth_pair(fabric_ns, host_ifname, sandbox_ns, ifname, mtu, mac_b=mac, master_a=br, up_a=True)
    idx = index(sandbox_ns, ifname)
    if fresh:
        set_up(sandbox_ns, 1)  # lo is always ifindex 1 in a new namespace
    else:
        lo = get_link(sandbox_ns, "lo")
        if lo is not None and not lo.up:
            set_up(sandbox_ns, lo.index)
    nets = []
    for cidr in cidrs:
        add_address(sandbox_ns, idx, cidr)
        nets.append(ipaddress.ip_interface(cidr).network)
    set_up(sandbox_ns, idx)
    if gateway is not None:
        gw = ipaddress.ip_address(gateway)
        onlink = not any(gw in n for n in nets)
        replace_route(sandbox_ns, "default", gateway=str(gw), dev=idx, onlink=onlink)
    for dst, nexthop in host_routes:
        replace_route(sandbox_ns, dst, gateway=nexthop, dev=idx)
    return Port(fabric_ns=fabric_ns, host_ifname=host_ifname, sandbox_ns=sandbox_ns,
                ifname=ifname, index=idx, cidrs=tuple(cidrs))


def unwire_port(fabric_ns: str, host_ifname: str, *, sandbox_ns: str | None = None,
                delete_sandbox: bool = False) -> None:
    """Undo :func:`wire_port`: delete the veth (both ends) and, if asked, the sandbox."""
    delete_link(fabric_ns, host_ifname)
    if delete_sandbox and sandbox_ns is not None:
        netns.delete(sandbox_ns)
