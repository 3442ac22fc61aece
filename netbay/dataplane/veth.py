"""Veth pairs, as the fabric, the container runtimes and the pod drivers make them.

Making a pair asks for BIG TCP's GSO size where :mod:`netbay.dataplane.bigtcp`
says so, makes it again without when the kernel refuses, and clears a pair in the
way (a retry, a crash's leftover) once before giving up: :func:`make_pair`. A new
pair passes packets only once both ends are operationally up (the kernel enables
them asynchronously, by linkwatch, and a lost first ARP costs its sender a second):
:func:`await_carrier`. A runtime's inner end may wait in the host namespace for a
moment; if it is left there, :func:`delete_host_end` removes it — the one netlink
request netbay makes in the host namespace, through pyroute2 (:class:`Rtnl` refuses
that namespace).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable

from netbay.dataplane import bigtcp
from netbay.dataplane.rtnl import LinkError, Rtnl

log = logging.getLogger(__name__)

ATTEMPTS = 3


def make_pair(local: Rtnl, name: str, peer: str, peer_ns: str | None, *, mtu: int, master: int | None,
              up: bool = True, peer_mac: str | None = None, gso_path: str,
              gso_ceiling: Callable[[int | None], int | None] = lambda gso: gso,
              clear: Callable[[], None]) -> int | None:
    """Make ``name`` in ``local``'s namespace with its peer ``peer`` in ``peer_ns`` (None:
    the host's, for a runtime to move at once), a port of ``master``; the GSO size asked
    for (None: the kernel's default). ``gso_ceiling`` caps the size of ``gso_path``'s
    decision; on EEXIST ``clear()`` removes what is in the way and the pair is made
    again (at most :data:`ATTEMPTS` times)."""
    for attempt in range(ATTEMPTS):
        gso = gso_ceiling(bigtcp.gso_max_size(gso_path))
        try:
            local.add_veth(name, peer, peer_ns, mtu=mtu, peer_mac=peer_mac, master=master, up=up,
                           gso_max_size=gso)
            return gso
        except LinkError as exc:
            if bigtcp.refused(exc, gso):
                continue
            if exc.errno != errno.EEXIST or attempt == ATTEMPTS - 1:
                raise
            clear()
    raise LinkError(errno.EEXIST, f"cannot make {name}/{peer}")


def await_carrier(inside: Rtnl, index: int, outside: Rtnl, name: str, limit: float = 0.2) -> bool:
    """Wait (bounded by ``limit`` s) until both ends — ``index`` in ``inside``, ``name``
    in ``outside`` — are operationally up; False if they were not by then."""
    deadline = time.monotonic() + limit
    for _ in range(10_000):
        a, b = inside.link(index=index), outside.link(name)
        if a is not None and b is not None and a.operstate == "UP" and b.operstate == "UP":
            return True
        if time.monotonic() > deadline:
            break
        time.sleep(0.0002)
    log.debug("%s: carrier not up after %.0f ms", name, limit * 1000)
    return False


def await_delivery(inside: Rtnl, address: str, limit: float = 1.0) -> bool:
    """Wait (bounded by ``limit`` s: a lost neighbour answer costs a second) until the
    kernel delivers ``address`` in ``inside`` (:meth:`Rtnl.delivers`); False if not by then."""
    deadline = time.monotonic() + limit
    for _ in range(100_000):
        if inside.delivers(address):
            return True
        if time.monotonic() > deadline:
            break
        time.sleep(0.0002)
    log.debug("%s: not delivered locally after %.0f ms", address, limit * 1000)
    return False


def host_ends(prefix: str) -> dict[str, int]:
    """The links named ``prefix…`` in the host namespace, by name: their ifindex (a
    runtime's inner ends not moved yet, or a crash's leftovers)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return {name: link["index"] for link in ipr.get_links()
                if (name := link.get_attr("IFLA_IFNAME") or "").startswith(prefix)}


def delete_host_end(ifname: str) -> bool:
    """Delete the veth end ``ifname`` left in the host namespace (its peer goes with it);
    False if there is none, or it is not a veth, or deleting it failed (gone meanwhile)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            return False
        info = ipr.get_links(found[0])[0].get_attr("IFLA_LINKINFO")
        if info is None or info.get_attr("IFLA_INFO_KIND") != "veth":
            return False
        try:
            ipr.link("del", index=found[0])
        except Exception as exc:  # noqa: BLE001 - gone meanwhile
            log.debug("delete %s: %s", ifname, exc)
            return False
    return True


__all__ = ["ATTEMPTS", "await_carrier", "delete_host_end", "host_ends", "make_pair"]
