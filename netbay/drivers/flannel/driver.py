"""The flannel network driver's kernel part: leases, a ``cni0`` bridge per node, a backend.

Flannel's own split: the subnet-lease manager (:mod:`netbay.drivers.leases`) knows
nothing of the kernel; a backend (:mod:`.backend`, one module per backend) carries
traffic between nodes; pods hang off the node's ``cni0`` bridge through
:func:`netbay.drivers.pods.attach`, their ports in hairpin mode (flannel's CNI config's
``hairpinMode: true``: a pod reaches itself through its Service's translation); flanneld's ``--ip-masq`` is
:mod:`netbay.drivers.masq` (on unless ``flannel_ip_masq`` is ``false``).

Dual-stack (``flannel_ipv6_network_cidr``, flannel's ``EnableIPv6``): each node's
IPv6 lease is the /64 paired with its IPv4 lease (:func:`netbay.drivers.leases.paired`,
so the cluster stores nothing more); the driver fills it into the :class:`Node` it
is handed (``lease6``), ``cni0`` carries both gateways, a pod gets the host number
of its IPv4 address in the IPv6 lease too, the backend routes both families and
ip-masq masquerades both.

Integrator's sequence (everything idempotent; ``Node`` is plain data)::

    fl = registry.make("flannel", registry.config("flannel", labels))   # LabelError → 400
    leases = fl.allocate(node_ids, stored_leases)                  # LeasesExhausted → 400 / UPDATE_FAILED
    nodes = [Node(ns, "10.0.0.5/24", leases[id]) for …]
    for n in nodes: fl.setup_node(n)
    for n in nodes: fl.sync_peers(n, nodes)                        # after every scale up/down
    link = fl.attach_pod(node, pod_ns, leases.host(node.lease, 2))
    fl.detach_pod(node, pod_ns); fl.teardown(node)
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping

from netbay.dataplane import rtnl as kernel
from netbay.drivers import leases as leaselib, masq, node as nodelib, pods
from netbay.drivers.flannel import FlannelConfig
from netbay.drivers.flannel import backend as backends
from netbay.drivers.flannel.backend import Backend, BackendError, UnsupportedBackend
from netbay.drivers.node import Node

__all__ = ["Flannel", "Backend", "BackendError", "UnsupportedBackend"]


class Flannel:
    """The driver for one cluster (its config); holds no kernel state of its own."""

    def __init__(self, config: FlannelConfig = FlannelConfig()) -> None:
        self.config = config
        self.network_config = config.network_config      # validates (LeaseError)
        self.backend: Backend = backends.get(config.backend)   # UnsupportedBackend

    @property
    def requires(self) -> frozenset[str]:
        return self.backend.requires

    # -- leases (pure) --
    def allocate(self, nodes: Iterable[str], current: Mapping[str, str]) -> dict[str, str]:
        return leaselib.allocate(self.network_config, nodes, current)

    def dual(self, node: Node) -> Node:
        """``node`` with its IPv6 lease on a dual-stack network (as handed in otherwise)."""
        lease6 = None if node.lease6 else self.config.lease6(node.lease)
        return node if lease6 is None else dataclasses.replace(node, lease6=lease6)

    # -- kernel --
    def pod_mtu(self, node: Node) -> int:
        return self.backend.pod_mtu(nodelib.underlay_mtu(node))

    def setup_node(self, node: Node) -> int:
        """Forwarding on, the backend's devices, ``cni0`` with the lease's gateway(s), the
        ip-masq table(s). Returns the pods' MTU."""
        node = self.dual(node)
        mtu = self.pod_mtu(node)
        nodelib.enable_forwarding(node.ns, ipv6=bool(node.lease6))
        self.backend.setup_node(node)
        nodelib.ensure_cni_bridge(node, mtu)
        if self.config.ip_masq:
            masq.ensure(node.ns, self.config.pod_networks)
        else:
            masq.remove(node.ns)
        return mtu

    def sync_peers(self, node: Node, peers: list[Node]) -> object:
        """Program the complete peer list (``node`` itself may be in it)."""
        return self.backend.sync_peers(self.dual(node), [self.dual(p) for p in peers])

    def teardown(self, node: Node) -> None:
        node = self.dual(node)
        self.backend.teardown(node)
        nodelib.remove_cni_bridge(node)
        masq.remove(node.ns)

    def attach_pod(self, node: Node, pod_ns: str, address: str, *, ifname: str = "eth0",
                   mtu: int | None = None) -> pods.PodLink:
        """Attach ``pod_ns`` to the node's cni0 with ``address`` (in the lease, no prefix);
        on a dual-stack network also with :meth:`address6` of it."""
        node = self.dual(node)
        net = ipaddress.ip_network(node.lease)
        if ipaddress.ip_address(address) not in net or address in (node.gateway, node.lease_network_ip):
            raise ValueError(f"pod address {address} is not a host address of lease {node.lease} "
                             f"(other than the gateway {node.gateway})")
        v6 = {}
        if node.lease6:
            v6 = {"address6": f"{self.address6(node, address)}/{ipaddress.ip_network(node.lease6).prefixlen}",
                  "gateway6": node.gateway6}
        link = pods.attach(node.ns, pod_ns, ifname=ifname, address=f"{address}/{net.prefixlen}",
                           gateway=node.gateway, mtu=mtu or self.pod_mtu(node), bridge=nodelib.BRIDGE,
                           big_packets=self.backend.big_packets, underlay=node.underlay, **v6)
        port = kernel.rtnl(node.ns).link(link.host_ifname)
        if port is not None:   # flannel's CNI config sets hairpinMode: a pod reaches itself through a Service
            kernel.rtnl(node.ns).set_hairpin(port.index)
        return link

    def address6(self, node: Node, address: str) -> str | None:
        """The IPv6 address of the pod holding IPv4 ``address`` on ``node``: the same host
        number in the node's IPv6 lease (``10.100.3.5`` → ``fd00:10:0:3::5``); None on an
        IPv4-only network."""
        return self.config.pod_address6(node.lease, address)

    def bridged(self, node: Node) -> pods.Bridged:
        """Where pods of ``node`` are plugged (for a runtime that configures them itself)."""
        return pods.Bridged(nodelib.BRIDGE, ipaddress.ip_network(node.lease).prefixlen, node.gateway,
                            self.pod_mtu(node), self.backend.big_packets, node.underlay)

    def detach_pod(self, node: Node, pod_ns: str, *, ifname: str = "eth0") -> bool:
        return pods.detach(node.ns, pod_ns, ifname=ifname)
