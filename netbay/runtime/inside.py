"""A port's container end inside a namespace a runtime made (CNI's ``CNI_NETNS``).

:meth:`netbay.runtime.attach.Attacher.plug` makes the pair with its inner end
already there; this module gives that end the port's addresses and routes, checks
it (CNI ``CHECK``) and removes it. A socket is opened per call and closed at once:
a cached one would keep the runtime's namespace alive after it deleted it. The
host's own namespace is refused (:class:`netbay.dataplane.rtnl.Rtnl`).

Not thread-safe: call it from the thread that plugs.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from netbay.dataplane.netns import NetnsError
from netbay.dataplane.rtnl import LinkError, LinkInfo, Rtnl


class NamespaceGone(LinkError):
    """The runtime's namespace file is not there (or is no namespace)."""


@dataclass(frozen=True)
class Addressing:
    """What the container end gets: its addresses and (destination, next hop) routes,
    of either family or both (IPv6 addresses are added without duplicate address
    detection: IPAM made them unique, and a tentative address would drop the first
    packets)."""
    cidrs: tuple[str, ...]
    routes: tuple[tuple[str, str], ...] = ()


@contextmanager
def opened(path: str) -> Iterator[Rtnl]:
    """An rtnetlink socket inside ``path``; ``NamespaceGone`` if there is none."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise NamespaceGone(exc.errno or errno.ENOENT, f'failed to open netns "{path}": {exc.strerror}') from None
    if not os.path.isabs(path) or st.st_dev != os.stat("/proc/self/ns/net").st_dev:
        raise NamespaceGone(errno.EINVAL, f'failed to open netns "{path}": not a network namespace')
    try:
        r = Rtnl(path)
    except NetnsError as exc:
        raise NamespaceGone(exc.errno or errno.ENOENT, f'failed to open netns "{path}": {exc.strerror}') from None
    try:
        yield r
    finally:
        r.close()


def present(path: str, ifname: str) -> LinkInfo | None:
    with opened(path) as r:
        return r.link(ifname)


def configure(path: str, ifname: str, addressing: Addressing, carrier_wait: float = 0.2,
              mac: str | None = None) -> LinkInfo:
    """Up (with ``mac``, if given, in the same request), addresses, routes, then a wait
    (bounded) for carrier: the bridge drops what is sent before it, and a lost first ARP
    costs the sender a second. The kernel brings carrier up meanwhile (linkwatch), so
    the wait overlaps the rest. ENODEV if the link vanished (an agent resync raced the plug)."""
    with opened(path) as r:
        link = r.link(ifname)
        if link is None:
            raise LinkError(errno.ENODEV, f"{ifname} vanished from {path}")
        if mac is not None and (link.address or "").lower() == mac.lower():
            mac = None
        if not link.up or mac is not None:
            r.set_link(link.index, up=True, mac=mac)
        for cidr in addressing.cidrs:
            r.add_address(link.index, cidr)
        on_link = [ipaddress.ip_interface(c).network for c in addressing.cidrs]
        for dst, gateway in addressing.routes:
            reachable = any(ipaddress.ip_address(gateway) in net for net in on_link)
            r.replace_route(dst, gateway=gateway, oif=link.index, onlink=not reachable)
        deadline = time.monotonic() + carrier_wait
        for _ in range(10_000):
            now = r.link(index=link.index)
            if now is None:
                raise LinkError(errno.ENODEV, f"{ifname} vanished from {path}")
            if now.operstate == "UP" or time.monotonic() > deadline:
                return now
            time.sleep(0.0002)
        return link


@dataclass(frozen=True)
class Seen:
    """The container end as it is in the kernel, read without knowing what it should be
    (CHECK reads it while it asks the API what the port says)."""
    path: str
    ifname: str
    link: LinkInfo | None
    addresses: frozenset[str] = frozenset()
    routes: frozenset[tuple[str, str | None]] = frozenset()   # (dst, gateway) via the link or any

    def problems(self, mac: str, addressing: Addressing) -> list[str]:
        """What differs from ``addressing`` and ``mac`` (empty: as made)."""
        link = self.link
        if link is None:
            return [f"{self.ifname} is not in {self.path}"]
        found: list[str] = []
        if (link.address or "").lower() != mac.lower():
            found.append(f"{self.ifname} has MAC {link.address}, the port {mac}")
        if not link.up:
            found.append(f"{self.ifname} is down")
        found += [f"{self.ifname} lacks address {c}" for c in addressing.cidrs if c not in self.addresses]
        found += [f"no route to {d} via {g}" for d, g in addressing.routes if (str(ipaddress.ip_network(d)), g)
                  not in self.routes]
        return found


def seen(path: str, ifname: str) -> Seen:
    """``ifname`` in ``path``: its link, addresses and routes (NamespaceGone: no namespace)."""
    with opened(path) as r:
        link = r.link(ifname)
        if link is None:
            return Seen(path, ifname, None)
        routes = {(dst, gw) for family in (socket.AF_INET, socket.AF_INET6)
                  for dst, gw, oif, _metric in r.routes(family) if oif in (None, link.index)}
        return Seen(path, ifname, link, frozenset(r.addresses(link.index)), frozenset(routes))


def problems(path: str, ifname: str, mac: str, addressing: Addressing) -> list[str]:
    """What differs from ``addressing`` inside ``path`` (empty: as made)."""
    return seen(path, ifname).problems(mac, addressing)


def remove(path: str, ifname: str, kinds: Sequence[str] = ("veth",)) -> bool:
    """Delete ``ifname`` in ``path`` (its fabric end goes with it); False if the
    namespace or the link is gone already."""
    try:
        with opened(path) as r:
            link = r.link(ifname)
            if link is None or link.kind not in kinds:
                return False
            return r.delete_link(ifname)
    except NamespaceGone:
        return False


__all__ = ["Addressing", "NamespaceGone", "Seen", "configure", "opened", "present", "problems", "remove", "seen"]
