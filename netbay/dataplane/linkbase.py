"""What every links module shares: the pyroute2 socket of a namespace (cached per
namespace and thread), the records links, routes and ports are read into, the checks
of names and MACs, and reading links."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.ifinfmsg import IFF_UP

from netbay.dataplane.rtnl.sockets import LinkError, Sockets, open_in

IFNAMSIZ = 15  # usable characters in an interface name
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.@:+-]{1,15}$")
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
RT_TABLE_MAIN = 254


def fail(exc: NetlinkError, what: str, ns: str) -> LinkError:
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


def link_record(ns: str, msg: Any) -> Link:
    return Link(ns=ns, index=msg["index"], ifname=msg.get("ifname"),
                kind=msg.get(("linkinfo", "kind")), address=msg.get("address"),
                mtu=msg.get("mtu"), up=bool(msg["flags"] & IFF_UP),
                master=msg.get("master") or None, operstate=msg.get("operstate"))


def echoed_index(msgs: Any, ifname: str) -> int | None:
    for m in msgs or ():
        if m.get("ifname") == ifname and m.get("index"):
            return m["index"]
    return None


def check_ifname(name: str) -> str:
    if not isinstance(name, str) or not _IFNAME_RE.match(name) or name in (".", ".."):
        raise ValueError(f"invalid interface name {name!r} (1-{IFNAMSIZ} characters)")
    return name


def check_mac(mac: str) -> str:
    if not isinstance(mac, str) or not _MAC_RE.match(mac):
        raise ValueError(f"invalid MAC address {mac!r}")
    return mac.lower()


# --- queries ---------------------------------------------------------------------


def get_link(ns: str, ifname: str) -> Link | None:
    """The link named ``ifname`` in ``ns``, or None."""
    try:
        msgs = ipr(ns).link("get", ifname=check_ifname(ifname))
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:
            return None
        raise fail(exc, f"get link {ifname}", ns) from None
    return link_record(ns, msgs[0]) if msgs else None


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
        return [link_record(ns, m) for m in ipr(ns).link("dump")]
    except NetlinkError as exc:
        raise fail(exc, "dump links", ns) from None
