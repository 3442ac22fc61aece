"""Programming a node's view of its peers: routes, and a VXLAN device's FDB and neighbours.

Shared by flannel (vxlan, host-gw) and calico (direct, VXLAN). A backend computes
the *whole* desired state for one node — every route to a peer's lease, and for an
overlay each peer's VTEP (MAC, underlay IP, overlay IP) — and :func:`sync` makes the
kernel match it: missing entries are added, changed ones replaced, and everything
else the drivers own is removed — routes carrying :data:`kernel.RTPROT_NETBAY`,
permanent neighbour and FDB entries on the VXLAN device — plus the underlay ARP
entry of a peer that is gone (it would otherwise linger until the kernel's GC).
Both families: a dual-stack flannel network's IPv6 routes and VTEP neighbours are
synced (and removed) with the IPv4 ones.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence, Set as AbstractSet
from dataclasses import dataclass, field

from netbay.dataplane import rtnl as kernel
from netbay.drivers.node import Node

__all__ = ["VtepPeer", "SyncResult", "sync", "ensure_vtep", "hold_only", "link_local", "NoLinkLocal"]


@dataclass(frozen=True)
class VtepPeer:
    mac: str           # the peer's VTEP MAC
    underlay_ip: str   # where its VXLAN packets go (FDB dst)
    vtep_ip: str       # its overlay address (neighbour entry, route next hop)


@dataclass
class SyncResult:
    routes_added: int = 0
    routes_deleted: int = 0
    fdb_deleted: list[str] = field(default_factory=list)
    neighbours_deleted: list[str] = field(default_factory=list)


FAMILIES = (socket.AF_INET, socket.AF_INET6)


class NoLinkLocal(RuntimeError):
    """A peer without an IPv6 link-local address on its underlay (yet): retried."""


def link_local(node: Node) -> str:
    """The IPv6 link-local address of ``node``'s underlay: the next hop of a route to its
    IPv6 lease over an IPv4 underlay (an IPv6 route cannot have an IPv4 next hop). Nodes
    are namespaces of this host, so it is read from the node's namespace."""
    r = kernel.rtnl(node.ns)
    link = r.link(node.underlay)
    found = [] if link is None else [a.split("/")[0] for a in r.addresses(link.index) if a.startswith("fe80:")]
    if not found:
        raise NoLinkLocal(f"node {node.ns} has no IPv6 link-local address on {node.underlay} (IPv6 off "
                          f"there?): its IPv6 lease {node.lease6} cannot be routed")
    return found[0]


def ensure_vtep(node: Node, name: str, *, vni: int, port: int, mtu: int, address: str,
                address6: str | None = None) -> int:
    """A VXLAN device ``name`` in the node (source: the node's underlay address, learning
    off, MAC derived from the node) holding exactly ``address`` (a /32) and, for a
    dual-stack overlay, ``address6`` (a /128). Returns its ifindex."""
    idx = kernel.ensure_vxlan(node.ns, name, vni=vni, port=port, local=node.ip,
                              underlay=node.underlay, mtu=mtu, mac=node.mac(name))
    hold_only(node.ns, idx, address)
    hold_only(node.ns, idx, address6, version=6)
    return idx


def hold_only(ns: str, index: int, address: str | None, *, version: int = 4) -> None:
    """Link ``index`` holds exactly ``address`` (a tunnel address), or none, of its IP
    ``version`` (IPv6 link-local addresses are the kernel's and stay)."""
    r = kernel.rtnl(ns)
    for cidr in r.addresses(index):
        v6 = ":" in cidr
        if cidr != address and v6 == (version == 6) and not cidr.startswith("fe80:"):
            r.del_address(index, cidr)
    if address:
        r.add_address(index, address)


def sync(node: Node, routes: list[kernel.KRoute], *, vtep_index: int | None = None,
         vtep_peers: Sequence[VtepPeer] = (), peer_ips: AbstractSet[str] = frozenset()) -> SyncResult:
    """Make ``node``'s peer state exactly this (see the module docstring).

    ``peer_ips``: the underlay addresses of the current peers (their ARP entries stay).
    """
    ns = node.ns
    res = SyncResult()
    gone_underlay: set[str] = set()
    if vtep_index is not None:
        want_fdb = {p.mac: p.underlay_ip for p in vtep_peers}
        want_neigh = {p.vtep_ip: p.mac for p in vtep_peers}
        for e in kernel.fdb(ns, vtep_index):
            if want_fdb.get(e.mac) != e.dst:
                kernel.del_fdb(ns, vtep_index, e.mac, e.dst)
                res.fdb_deleted.append(e.mac)
                if e.dst:
                    gone_underlay.add(e.dst)
        have_fdb = {e.mac: e.dst for e in kernel.fdb(ns, vtep_index)}
        for mac, dst in want_fdb.items():
            if have_fdb.get(mac) != dst:
                kernel.add_fdb(ns, vtep_index, mac, dst)
        have_neigh = {}
        for n in [n for family in FAMILIES for n in kernel.neighbours(ns, vtep_index, family)]:
            if want_neigh.get(n.ip) != n.mac or not n.permanent:
                kernel.del_neighbour(ns, vtep_index, n.ip)
                res.neighbours_deleted.append(n.ip)
            else:
                have_neigh[n.ip] = n.mac
        for ip, mac in want_neigh.items():
            if have_neigh.get(ip) != mac:
                kernel.add_neighbour(ns, vtep_index, ip, mac)
    before = [rt for family in FAMILIES for rt in kernel.routes(ns, family=family)]
    for family in FAMILIES:
        added, deleted = kernel.sync_routes(ns, routes, family)
        res.routes_added += added
        res.routes_deleted += deleted
    want_dsts = {rt.dst for rt in routes}
    gone_underlay |= {rt.gateway for rt in before if rt.dst not in want_dsts and rt.gateway}
    gone_underlay -= set(peer_ips)
    if gone_underlay:
        uidx = kernel.link_index(ns, node.underlay)
        if uidx is not None:
            for n in [n for family in FAMILIES for n in kernel.neighbours(ns, uidx, family)]:
                if n.ip in gone_underlay:
                    kernel.del_neighbour(ns, uidx, n.ip)
                    res.neighbours_deleted.append(n.ip)
    return res
