"""Flannel's ``host-gw`` backend (flannel's ``backend/hostgw``): no encapsulation.

For every peer, one route in the node: ``<peer lease> via <peer underlay IP> dev
eth0``. The nodes must share one L2 network (the peer's address is a next hop on
the node's own subnet); a peer elsewhere is refused before anything changes.
Pods keep the underlay's MTU.

A dual-stack node routes each peer's IPv6 lease the same way, via the peer's
IPv6 link-local address on the underlay (the nodes' underlay is IPv4; every
Linux interface has a link-local address, and an IPv6 route cannot have an IPv4
next hop). Nodes are namespaces of this host, so the peer's address is read from
its namespace; a peer without one yet (IPv6 off, or still in duplicate address
detection) is a :class:`BackendError`, retried.
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass

from netbay.dataplane import rtnl as kernel
from netbay.dataplane.rtnl import LinkError
from netbay.drivers import peers as peerlib
from netbay.drivers.flannel.backend import BackendError
from netbay.drivers.node import Node


@dataclass(frozen=True)
class HostGwBackend:
    name: str = "host-gw"
    requires: frozenset[str] = frozenset({"bridge", "veth"})
    big_packets: bool = True

    def pod_mtu(self, underlay_mtu: int) -> int:
        return underlay_mtu

    def setup_node(self, node: Node) -> None:
        if kernel.link_index(node.ns, node.underlay) is None:
            raise LinkError(errno.ENODEV, f"underlay {node.underlay!r} missing in {node.ns!r}")

    def sync_peers(self, node: Node, peers: list[Node]) -> peerlib.SyncResult:
        others = [p for p in peers if p.ns != node.ns]
        far = [p.ip for p in others if ipaddress.ip_address(p.ip) not in node.underlay_net]
        if far:
            raise BackendError(f"host-gw needs every node on one L2 network: {', '.join(far)} "
                               f"not on {node.underlay_net} (use the vxlan backend)")
        uidx = kernel.link_index(node.ns, node.underlay)
        routes = [kernel.KRoute(p.lease, gateway=p.ip, oif=uidx) for p in others]
        if node.lease6:
            try:
                routes += [kernel.KRoute(p.lease6, gateway=peerlib.link_local(p), oif=uidx)
                           for p in others if p.lease6]
            except peerlib.NoLinkLocal as exc:
                raise BackendError(f"host-gw IPv6: {exc}") from None
        return peerlib.sync(node, routes, peer_ips={p.ip for p in others})

    def teardown(self, node: Node) -> None:
        peerlib.sync(node, [], peer_ips=set())


def backend() -> HostGwBackend:
    return HostGwBackend()
