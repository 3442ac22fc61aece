"""The example driver's kernel part: the shared helpers do all of it.

Each node routes its lease; a pod is a routed veth (:func:`netbay.drivers.pods.attach`
with no bridge: the pod's ``/32``, its default route via 169.254.1.1); a peer's lease is
one route via the peer's underlay address, kept exact by :func:`netbay.drivers.peers.sync`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from netbay.dataplane import rtnl as kernel
from netbay.drivers import leases, node as nodelib, peers as peerlib, pods
from netbay.drivers.example import ExampleConfig
from netbay.drivers.node import Node


class Example:
    requires = frozenset({"veth"})

    def __init__(self, config: ExampleConfig = ExampleConfig()) -> None:
        self.config = config

    def allocate(self, nodes: Iterable[str], current: Mapping[str, str]) -> dict[str, str]:
        return leases.allocate(self.config.network_config, nodes, current)

    def pod_mtu(self, node: Node) -> int:
        return nodelib.underlay_mtu(node)

    def setup_node(self, node: Node) -> int:
        nodelib.enable_forwarding(node.ns)
        return self.pod_mtu(node)

    def sync_peers(self, node: Node, peers: list[Node]) -> peerlib.SyncResult:
        underlay = kernel.link_index(node.ns, node.underlay)
        others = [p for p in peers if p.ns != node.ns]
        routes = [kernel.KRoute(p.lease, gateway=p.ip, oif=underlay) for p in others]
        return peerlib.sync(node, routes, peer_ips={p.ip for p in others})

    def teardown(self, node: Node) -> None:
        peerlib.sync(node, [], peer_ips=set())

    def attach_pod(self, node: Node, pod_ns: str, address: str, *, ifname: str = "eth0",
                   mtu: int | None = None) -> pods.PodLink:
        return pods.attach(node.ns, pod_ns, ifname=ifname, address=f"{address}/32", gateway=pods.ROUTED_GATEWAY,
                           mtu=mtu or self.pod_mtu(node), bridge=None, big_packets=True, underlay=node.underlay)

    def detach_pod(self, node: Node, pod_ns: str, *, ifname: str = "eth0") -> bool:
        return pods.detach(node.ns, pod_ns, ifname=ifname)
