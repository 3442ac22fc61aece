"""Flannel's ``vxlan`` backend, statically programmed (flannel's ``backend/vxlan``).

In each node: a VXLAN device ``flannel.1`` (VNI 1, UDP 8472, source the node's
underlay address, learning off, MAC derived from the node) with the lease's network
address as a /32 (``10.100.3.0/32``), MTU underlay − 50. For every peer, what
flannel's daemon writes when it sees the peer's lease:

* FDB ``<peer VTEP MAC> dev flannel.1 dst <peer underlay IP> self permanent``
* neighbour ``<peer lease network address> lladdr <peer VTEP MAC> dev flannel.1 permanent``
* route ``<peer lease> via <peer lease network address> dev flannel.1 onlink``

A dual-stack node (its ``lease6``) gets the same for IPv6 on the same device: the
IPv6 lease's network address as a /128, and per peer a neighbour and route of its
IPv6 lease. flannel makes a second device ``flannel-v6.1`` for IPv6, whose source
is the node's IPv6 underlay address; a cluster's nodes have an IPv4 underlay only,
and the kernel refuses a second IPv4 VXLAN device with the same VNI and port, so
netbay carries IPv6 in ``flannel.1`` (VXLAN is Ethernet: the inner family does not
matter; the overhead over the IPv4 underlay stays 50).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from netbay.dataplane import rtnl as kernel
from netbay.dataplane.rtnl import LinkError
from netbay.drivers import peers as peerlib
from netbay.drivers.node import Node

DEVICE = "flannel.1"
VNI = 1
PORT = 8472
OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8


@dataclass(frozen=True)
class VxlanBackend:
    name: str = "vxlan"
    requires: frozenset[str] = frozenset({"vxlan", "bridge", "veth"})
    big_packets: bool = False
    device: str = DEVICE
    vni: int = VNI
    port: int = PORT

    def pod_mtu(self, underlay_mtu: int) -> int:
        return underlay_mtu - OVERHEAD

    def setup_node(self, node: Node) -> None:
        ul = kernel.rtnl(node.ns).link(node.underlay)
        if ul is None:
            raise LinkError(errno.ENODEV, f"underlay {node.underlay!r} missing in {node.ns!r}")
        peerlib.ensure_vtep(node, self.device, vni=self.vni, port=self.port,
                            mtu=self.pod_mtu(ul.mtu), address=f"{node.lease_network_ip}/32",
                            address6=f"{node.lease6_network_ip}/128" if node.lease6 else None)

    def sync_peers(self, node: Node, peers: list[Node]) -> peerlib.SyncResult:
        idx = kernel.link_index(node.ns, self.device)
        if idx is None:
            self.setup_node(node)
            idx = kernel.link_index(node.ns, self.device)
        others = [p for p in peers if p.ns != node.ns]
        routes = [kernel.KRoute(p.lease, gateway=p.lease_network_ip, oif=idx, onlink=True) for p in others]
        vteps = [peerlib.VtepPeer(p.mac(self.device), p.ip, p.lease_network_ip) for p in others]
        if node.lease6:
            dual = [p for p in others if p.lease6]
            routes += [kernel.KRoute(p.lease6, gateway=p.lease6_network_ip, oif=idx, onlink=True) for p in dual]
            vteps += [peerlib.VtepPeer(p.mac(self.device), p.ip, p.lease6_network_ip) for p in dual]
        return peerlib.sync(node, routes, vtep_index=idx, vtep_peers=vteps,
                            peer_ips={p.ip for p in others})

    def teardown(self, node: Node) -> None:
        peerlib.sync(node, [], peer_ips=set())
        kernel.delete_link(node.ns, self.device)


def backend() -> VxlanBackend:
    return VxlanBackend()
