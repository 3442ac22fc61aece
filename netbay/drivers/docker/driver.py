"""The ``docker`` network driver's kernel part: Docker's overlay, one subnet across the nodes.

What Docker's overlay driver builds on each node of a swarm, reduced to the kernel
objects, in the node's own namespace:

* **one subnet** — ``docker_overlay_cidr`` (default 10.200.0.0/16) is a single L2
  network spanning every node: a container on node 1 reaches one on node 2 on-link
  (ARP, no router), as on a Docker overlay network. To keep addresses unique
  without a cluster-wide allocator in the data path, each node hands out addresses
  from its own block of the subnet (:func:`netbay.drivers.docker.block_len`), allocated like flannel's
  leases (:mod:`netbay.drivers.leases`); the block is bookkeeping only — the
  containers' prefix is the whole subnet's.
* **a bridge** ``ov-br0`` (Docker's ``br0`` in the overlay namespace) holding the
  node's block gateway with the *subnet's* prefix (``10.200.3.1/16``): the node
  reaches every container, and a container leaving the overlay uses it.
* **VXLAN** ``ov-vx0`` (VNI 4096, UDP 4789: Docker's overlay numbers) enslaved to
  the bridge, source the node's underlay address. Broadcast (ARP) is replicated
  head-end to every peer by one all-zeros FDB entry per peer (``bridge fdb append
  00:00:00:00:00:00 dst PEER``); unicast follows the MACs the device learns from
  what it receives. Docker programs each remote container's MAC from its gossip
  instead; netbay has no gossip, so learning stands in for it — the packets on the
  wire are the same VXLAN frames.
* **containers and pods** hang off ``ov-br0`` through
  :func:`netbay.drivers.pods.attach` (bridged, MTU underlay − 50, no BIG TCP
  through the VXLAN device).

The peer programming reuses flannel's primitives (:mod:`netbay.dataplane.rtnl`,
:mod:`netbay.drivers.peers`); the interface is the flannel driver's, so the agent
drives all three drivers alike.
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Iterable, Mapping

from netbay.dataplane import rtnl as kernel
from netbay.dataplane.rtnl import LinkError
from netbay.drivers import leases as leaselib, node as nodelib, pods
from netbay.drivers.docker import DockerOverlayConfig
from netbay.drivers.node import Node

__all__ = ["DockerOverlay", "BRIDGE", "DEVICE", "VNI", "PORT"]

BRIDGE = "ov-br0"
DEVICE = "ov-vx0"
VNI = 4096          # Docker's first overlay VNI
PORT = 4789         # Docker's overlay data port (IANA VXLAN)
OVERHEAD = 50       # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8
FLOOD = "00:00:00:00:00:00"


class DockerOverlay:
    """The driver for one cluster (its config); holds no kernel state of its own."""

    requires = frozenset({"vxlan", "bridge", "veth"})
    big_packets = False   # behind a VXLAN device (see netbay.drivers.pods.gso_path)

    def __init__(self, config: DockerOverlayConfig = DockerOverlayConfig()) -> None:
        self.config = config
        self.network_config = config.network_config      # validates (LeaseError)
        self.prefixlen = ipaddress.ip_network(config.network).prefixlen

    def allocate(self, nodes: Iterable[str], current: Mapping[str, str]) -> dict[str, str]:
        return leaselib.allocate(self.network_config, nodes, current)

    def pod_mtu(self, node: Node) -> int:
        return nodelib.underlay_mtu(node) - OVERHEAD

    def setup_node(self, node: Node) -> int:
        """The bridge with the node's gateway on the whole subnet, the VXLAN device in
        it (learning on). Returns the containers' MTU. Idempotent."""
        mtu = self.pod_mtu(node)
        nodelib.enable_forwarding(node.ns)
        br = kernel.ensure_bridge(node.ns, BRIDGE, mtu=mtu, mac=node.mac(BRIDGE))
        r = kernel.rtnl(node.ns)
        want = f"{node.gateway}/{self.prefixlen}"
        for cidr in r.addresses(br):
            if cidr != want and ipaddress.ip_interface(cidr).version == 4:
                r.del_address(br, cidr)
        r.add_address(br, want)
        vx = kernel.ensure_vxlan(node.ns, DEVICE, vni=VNI, port=PORT, local=node.ip, underlay=node.underlay,
                                 mtu=mtu, mac=node.mac(DEVICE), learning=True)
        link = r.link(index=vx)
        if link is not None and link.master != br:
            r.set_link(vx, master=br)
        return mtu

    def sync_peers(self, node: Node, peers: list[Node]) -> list[str]:
        """Exactly one flood entry per other node; returns the peers' underlay addresses."""
        idx = kernel.link_index(node.ns, DEVICE)
        if idx is None:
            self.setup_node(node)
            idx = kernel.link_index(node.ns, DEVICE)
            if idx is None:
                raise LinkError(errno.ENODEV, f"{DEVICE} missing in {node.ns!r} after its set-up")
        want = {p.ip for p in peers if p.ns != node.ns}
        have = {e.dst for e in kernel.fdb(node.ns, idx) if e.mac == FLOOD}
        for dst in have - want:
            kernel.del_fdb(node.ns, idx, FLOOD, dst)
        for dst in sorted(want - have):
            kernel.append_fdb(node.ns, idx, FLOOD, dst)
        return sorted(want)

    def teardown(self, node: Node) -> None:
        kernel.delete_link(node.ns, DEVICE)
        kernel.delete_link(node.ns, BRIDGE)

    def attach_pod(self, node: Node, pod_ns: str, address: str, *, ifname: str = "eth0",
                   mtu: int | None = None) -> pods.PodLink:
        """Attach ``pod_ns`` to the node's overlay bridge with ``address`` (a host of the
        node's block, no prefix); it gets the whole subnet's prefix."""
        self.check_address(node, address)
        return pods.attach(node.ns, pod_ns, ifname=ifname, address=f"{address}/{self.prefixlen}",
                           gateway=node.gateway, mtu=mtu or self.pod_mtu(node), bridge=BRIDGE,
                           big_packets=self.big_packets, underlay=node.underlay)

    def check_address(self, node: Node, address: str) -> None:
        block = ipaddress.ip_network(node.lease)
        if ipaddress.ip_address(address) not in block or address in (node.gateway, node.lease_network_ip):
            raise ValueError(f"container address {address} is not a host address of block {node.lease} "
                             f"(other than the gateway {node.gateway})")

    def bridged(self, node: Node) -> pods.Bridged:
        """Where containers of ``node`` are plugged (for a runtime that configures them itself)."""
        return pods.Bridged(BRIDGE, self.prefixlen, node.gateway, self.pod_mtu(node), self.big_packets,
                            node.underlay)

    def detach_pod(self, node: Node, pod_ns: str, *, ifname: str = "eth0") -> bool:
        return pods.detach(node.ns, pod_ns, ifname=ifname)
