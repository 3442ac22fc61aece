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

import contextlib
import errno
import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.ifinfmsg import IFF_UP
from pyroute2.netlink.rtnl.rtmsg import RTNH_F_ONLINK

from netbay.dataplane import netns
from netbay.dataplane.rtnl.sockets import LinkError, Sockets, open_in

__all__ = [
    "LinkError", "Link", "Route", "Port", "SOCKETS", "ipr", "close", "bridge", "veth_pair",
    "set_master", "set_up", "set_mac", "set_mtu", "add_address", "del_address",
    "addresses", "replace_route", "del_route", "routes", "delete_link", "links",
    "get_link", "index", "sysctl", "read_sysctl", "wire_port", "unwire_port",
]

IFNAMSIZ = 15  # usable characters in an interface name
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.@:+-]{1,15}$")
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
RT_TABLE_MAIN = 254


def _fail(exc: NetlinkError, what: str, ns: str) -> LinkError:
    code = exc.code or errno.EIO
    return LinkError(code, f"{what} in namespace {ns!r}: {os.strerror(code)}"
                           + (f" ({exc.args[1]})" if len(exc.args) > 1
                              and exc.args[1] != os.strerror(code) else ""))


# --- sockets ---------------------------------------------------------------------


@dataclass(eq=False)
class _Handle:
    """pyroute2 over a socket of :func:`rtnl.open_in`, as :data:`SOCKETS` caches it."""

    ipr: IPRoute
    sock: socket.socket
    ns_inode: int
    closed: bool = False

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self.ipr.close()
        # pyroute2 closes only what the calling thread set up; the socket itself must
        # go, or it keeps the namespace (and everything in it) alive.
        with contextlib.suppress(Exception):
            self.sock.close()


def _open(ns: str) -> _Handle:
    sock, inode = open_in(ns)
    try:
        # nlm_echo: the kernel answers RTM_NEWLINK with the new link (its ifindex),
        # saving a lookup round trip.
        return _Handle(IPRoute(use_socket=sock, ext_ack=True, nlm_echo=True), sock, inode)
    except BaseException:
        sock.close()
        raise


SOCKETS: Sockets[_Handle] = Sockets(_open)


def ipr(ns: str) -> IPRoute:
    """The calling thread's IPRoute bound to namespace ``ns`` (cached per thread).

    Its socket is opened inside ``ns`` and handed to pyroute2 with ``use_socket``:
    pyroute2 then refuses (RuntimeError) to be used from another thread, instead of
    silently opening a new socket in whatever namespace that thread is in. Don't pass
    it between threads; call ``ipr`` there.
    """
    return SOCKETS.get(ns).ipr


def close(ns: str) -> None:
    """Close every cached socket of namespace ``ns`` (all threads)."""
    SOCKETS.close(ns)


# --- records ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Link:
    ns: str
    index: int
    ifname: str
    kind: str | None
    address: str | None
    mtu: int
    up: bool
    master: int | None
    operstate: str | None


@dataclass(frozen=True, slots=True)
class Route:
    dst: str               # CIDR, "0.0.0.0/0" for the default route
    gateway: str | None
    oif: int | None
    table: int
    metric: int | None
    onlink: bool


@dataclass(frozen=True, slots=True)
class Port:
    """The result of :func:`wire_port`."""
    fabric_ns: str
    host_ifname: str
    sandbox_ns: str
    ifname: str
    index: int             # ifindex inside the sandbox
    cidrs: tuple[str, ...] = field(default=())


def _link(ns: str, msg: Any) -> Link:
    return Link(ns=ns, index=msg["index"], ifname=msg.get("ifname"),
                kind=msg.get(("linkinfo", "kind")), address=msg.get("address"),
                mtu=msg.get("mtu"), up=bool(msg["flags"] & IFF_UP),
                master=msg.get("master") or None, operstate=msg.get("operstate"))


def _echoed_index(msgs: Any, ifname: str) -> int | None:
    for m in msgs or ():
        if m.get("ifname") == ifname and m.get("index"):
            return m["index"]
    return None


def _check_ifname(name: str) -> str:
    if not isinstance(name, str) or not _IFNAME_RE.match(name) or name in (".", ".."):
        raise ValueError(f"invalid interface name {name!r} (1-{IFNAMSIZ} characters)")
    return name


def _check_mac(mac: str) -> str:
    if not isinstance(mac, str) or not _MAC_RE.match(mac):
        raise ValueError(f"invalid MAC address {mac!r}")
    return mac.lower()


# --- queries ---------------------------------------------------------------------


def get_link(ns: str, ifname: str) -> Link | None:
    """The link named ``ifname`` in ``ns``, or None."""
    try:
        msgs = ipr(ns).link("get", ifname=_check_ifname(ifname))
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            return None
        raise _fail(exc, f"get link {ifname}", ns) from None
    return _link(ns, msgs[0]) if msgs else None


def index(ns: str, ifname: str | int) -> int:
    """ifindex of ``ifname`` in ``ns`` (an int passes through); LinkError ENODEV if absent."""
    if isinstance(ifname, int):
        return ifname
    link = get_link(ns, ifname)
    if link is None:
        raise LinkError(errno.ENODEV, f"no link {ifname!r} in namespace {ns!r}")
    return link.index


def links(ns: str) -> list[Link]:
    """All links of ``ns``."""
    try:
        return [_link(ns, m) for m in ipr(ns).link("dump")]
    except NetlinkError as exc:
        raise _fail(exc, "dump links", ns) from None


# --- links -----------------------------------------------------------------------


def _set(ns: str, ifname: str | int, what: str, **kw: Any) -> None:
    idx = index(ns, ifname)
    try:
        ipr(ns).link("set", index=idx, **kw)
    except NetlinkError as exc:
        raise _fail(exc, f"{what} on {ifname}", ns) from None


def set_up(ns: str, ifname: str | int, up: bool = True) -> None:
    _set(ns, ifname, "set up" if up else "set down", state="up" if up else "down")


def set_master(ns: str, ifname: str | int, master: str | int | None) -> None:
    """Enslave ``ifname`` to bridge ``master`` (None: release it)."""
    _set(ns, ifname, "set master", master=0 if master is None else index(ns, master))


def set_mac(ns: str, ifname: str | int, mac: str) -> None:
    _set(ns, ifname, "set address", address=_check_mac(mac))


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
    _check_ifname(name)
    mac = _check_mac(mac) if mac else None
    kw: dict[str, Any] = {"ifname": name, "kind": "bridge"}
    if mtu is not None:
        kw["mtu"] = int(mtu)
    if mac:
        kw["address"] = mac
    if up:
        kw["state"] = "up"
    try:
        idx = _echoed_index(ipr(ns).link("add", **kw), name)
        if idx is not None:
            return idx
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise _fail(exc, f"add bridge {name}", ns) from None
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
    _check_ifname(name_a)
    _check_ifname(name_b)
    mac_a = _check_mac(mac_a) if mac_a else None
    mac_b = _check_mac(mac_b) if mac_b else None
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
        idx = _echoed_index(ipr(ns_a).link("add", **kw), name_a)
    except FileNotFoundError:
        raise LinkError(errno.ENOENT, f"network namespace {ns_b!r} does not exist") from None
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise _fail(exc, f"add veth {name_a}/{ns_b}:{name_b}", ns_a) from None
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
        ipr(ns).link("del", ifname=_check_ifname(ifname))
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            return False
        raise _fail(exc, f"delete link {ifname}", ns) from None
    return True


# --- addresses and routes ----------------------------------------------------------


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
        raise _fail(exc, f"add address {cidr} to {ifname}", ns) from None
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
        raise _fail(exc, f"delete address {cidr} from {ifname}", ns) from None
    return True


def addresses(ns: str, ifname: str | int | None = None) -> list[str]:
    """CIDRs on ``ifname`` (or on every link) in ``ns``."""
    kw: dict[str, Any] = {}
    if ifname is not None:
        kw["index"] = index(ns, ifname)
    try:
        return [f"{m.get('address')}/{m['prefixlen']}" for m in ipr(ns).addr("dump", **kw)]
    except NetlinkError as exc:
        raise _fail(exc, "dump addresses", ns) from None


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
        raise _fail(exc, f"replace route {dst}", ns) from None


def replace_multipath_route(ns: str, dst: str, gateways: Sequence[str]) -> None:
    """Create or replace the route to ``dst`` as one multipath (ECMP) route over
    ``gateways``, each reached through the link its address is on."""
    kw = _route_kw(ns, dst, None, None, False, None, None)
    kw["multipath"] = [{"gateway": str(ipaddress.ip_address(g))} for g in gateways]
    try:
        ipr(ns).route("replace", **kw)
    except NetlinkError as exc:
        raise _fail(exc, f"replace multipath route {dst}", ns) from None


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
        raise _fail(exc, f"delete route {dst}", ns) from None
    return True


def routes(ns: str, table: int = RT_TABLE_MAIN, family: int = 2) -> list[Route]:
    """Unicast routes of ``table`` (IPv4 by default; ``family=10`` for IPv6)."""
    out = []
    try:
        msgs = ipr(ns).route("dump", family=family)
    except NetlinkError as exc:
        raise _fail(exc, "dump routes", ns) from None
    for m in msgs:
        t = m.get("table")
        if t != table or m["type"] != 1:  # RTN_UNICAST
            continue
        dst = m.get("dst") or ("0.0.0.0" if family == 2 else "::")
        out.append(Route(dst=f"{dst}/{m['dst_len']}", gateway=m.get("gateway"),
                         oif=m.get("oif"), table=t, metric=m.get("priority"),
                         onlink=bool(m["flags"] & RTNH_F_ONLINK)))
    return out


# --- sysctl ----------------------------------------------------------------------


def _sysctl_path(key: str) -> str:
    rel = key if "/" in key else key.replace(".", "/")
    rel = rel.strip("/")
    parts = rel.split("/")
    # Only the network subtree is per namespace; everything else is the host's.
    if parts[0] != "net" or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"refusing sysctl {key!r}: only net.* is per network namespace")
    return "/proc/sys/" + rel


def sysctl(ns: str, key: str, value: str | int) -> None:
    """Write sysctl ``key`` (``net.ipv4.ip_forward`` or ``net/ipv4/conf/eth0.1/...``)
    inside ``ns``. /proc/sys/net follows the writing thread's namespace."""
    p = _sysctl_path(key)
    with netns.entered(ns):
        if netns.in_home():
            raise LinkError(errno.EPERM, f"namespace {ns!r} is the host's namespace")
        try:
            with open(p, "w") as f:
                f.write(f"{value}\n")
        except FileNotFoundError:
            raise LinkError(errno.ENOENT, f"sysctl {key} does not exist in namespace "
                                          f"{ns!r} (feature missing or not per-namespace)") from None


def read_sysctl(ns: str, key: str) -> str:
    """Read sysctl ``key`` inside ``ns``."""
    p = _sysctl_path(key)
    with netns.entered(ns):
        try:
            with open(p) as f:
                return f.read().strip()
        except FileNotFoundError:
            raise LinkError(errno.ENOENT, f"sysctl {key} does not exist in namespace "
                                          f"{ns!r}") from None


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
