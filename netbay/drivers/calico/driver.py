"""The calico network driver's kernel part: routed pods, per-node blocks, direct routes or VXLAN.

What calico's Felix and CNI plugin program, reduced to the kernel objects:

* **blocks** — each node owns a ``/block_len`` (default /26) of the pool
  (``calico_ipv4pool``, default 192.168.0.0/16), allocated with
  :func:`netbay.drivers.leases.allocate` over :func:`~netbay.drivers.leases.block_config`
  (every block, the first included). The node holds a blackhole route for its own
  block (a packet to an unused address of the block dies there, as in calico).
* **pods** — routed, no bridge: :func:`netbay.drivers.pods.attach` with
  ``bridge=None`` (``cali<hash>`` host end, pod /32, default route via 169.254.1.1;
  see :mod:`netbay.drivers.pods`), and a ``/32`` route per pod in the node.
* **between nodes** — per peer block, either a *direct* route ``<block> via <peer
  eth0 address> dev eth0`` (peers on the node's subnet: one L2) or, with
  ``calico_ipv4pool_vxlan`` ``Always`` (every peer) or ``CrossSubnet`` (peers on
  another subnet), VXLAN: a ``vxlan.calico`` device (VNI 4096, UDP 4789, learning
  off) holding the block's first address as a /32 (the tunnel address), and per
  peer an FDB entry, a neighbour entry and ``<block> via <peer tunnel address> dev
  vxlan.calico onlink`` — the same objects as flannel's vxlan backend.
* **IP-in-IP** (``calico_ipv4pool_ipip`` ``Always``, or ``CrossSubnet`` for peers on
  another subnet): as calico does, the namespace's ``tunl0`` (the ipip fallback
  device, made if the kernel did not) up, holding the block's first address as a
  /32, MTU underlay − 20, and per encapsulated peer ``<block> via <peer eth0 address>
  dev tunl0 onlink``. It needs the kernel's ``ipip`` feature; where it is missing
  (``CONFIG_NET_IPIP`` not set) the driver refuses with :class:`MissingKernelFeature`,
  naming it, and the API answers 400 before anything is made.

* **natOutgoing** (on unless ``calico_ipv4pool_nat_outgoing`` is ``false``): pod
  traffic leaving the pool is masqueraded to the node's address
  (:mod:`netbay.drivers.masq`), so pods reach networks behind the cluster's router.

A peer on another subnet without encapsulation for it is refused
(:class:`CalicoError`): calico would need BGP peering with the router between.

**Dual-stack** (``calico_ipv6pool``): each node's IPv6 block is the /122 of the same
number as its IPv4 block (:func:`netbay.drivers.leases.paired`: nothing more is
stored), filled into the :class:`Node` as ``lease6``, with its own blackhole route.
A pod also gets the same host number in it as a /128, routed like the IPv4 /32
(default route via ``fe80::ecee:eeff:feee:eeee``, calico's IPv6 next hop, a
permanent neighbour entry each way). Direct routes go via the peer's IPv6 link-local
address on the underlay (:func:`netbay.drivers.peers.link_local`); VXLAN carries IPv6
in ``vxlan.calico`` over the IPv4 underlay (the IPv6 block's first address as the
tunnel's /128); natOutgoing masquerades both pools. IP-in-IP carries IPv4 only: the
labels refuse it with an IPv6 pool.

**The node's IPv6 address** (:meth:`CalicoConfig.node_address6`): the IPv6 block's
first address, which no pod gets. In VXLAN modes it is the tunnel's /128; with direct
routes the node would otherwise hold link-local addresses only (the underlay is IPv4),
so — as calico's IP6 autodetection finds a real host's address — it is a /128 on the
node's ``lo`` (kept up). Peers and their pods reach it through the route to the node's
IPv6 block they already hold; a connection the node starts (a node port's masquerade)
takes it as its source, being the node's one global IPv6 address. ``lo`` holds no other
address of the pool: ``setup_node`` (also after a crash, on resync) removes a previous
block's and ``teardown`` this one's.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterable, Mapping

from netbay.dataplane import rtnl as kernel
from netbay.drivers import leases as leaselib, masq, node as nodelib, peers as peerlib, pods
from netbay.drivers.calico import CalicoConfig, CalicoError, MissingKernelFeature
from netbay.drivers.node import Node

__all__ = ["Calico", "CalicoConfig", "CalicoError", "MissingKernelFeature", "check_features",
           "VXLAN_DEVICE", "VXLAN_VNI", "VXLAN_PORT", "IPIP_DEVICE", "NODE6_DEVICE"]

VXLAN_DEVICE = "vxlan.calico"
VXLAN_VNI = 4096
VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
IPIP_DEVICE = "tunl0"
IPIP_OVERHEAD = 20
NODE6_DEVICE = "lo"   # holds a direct-routes node's IPv6 address


def check_features(config: CalicoConfig, detected: Mapping[str, object] | None = None) -> None:
    """Raise :class:`MissingKernelFeature` for the first feature ``config`` needs that the
    host lacks. ``detected``: :func:`netbay.dataplane.features.detect`'s answer (probed
    now when not given)."""
    if detected is None:
        from netbay.dataplane import features
        detected = features.detect(only=config.requires)
    for name in sorted(config.requires):
        f = detected.get(name)
        if f is None or not getattr(f, "available", False):
            what = (f"calico_ipv4pool_ipip={config.ipip}" if name == "ipip" else
                    f"calico_ipv4pool_vxlan={config.vxlan}" if name == "vxlan" else "calico")
            raise MissingKernelFeature(name, what, getattr(f, "detail", "not detected"))


class Calico:
    """The driver for one cluster; refuses at construction what the host cannot do."""

    def __init__(self, config: CalicoConfig = CalicoConfig(), *,
                 features: Mapping[str, object] | None = None) -> None:
        self.config = config
        self.network_config = config.network_config
        check_features(config, features)

    @property
    def requires(self) -> frozenset[str]:
        return self.config.requires

    def allocate(self, nodes: Iterable[str], current: Mapping[str, str]) -> dict[str, str]:
        return leaselib.allocate(self.network_config, nodes, current)

    # -- per node --
    def pod_mtu(self, node: Node) -> int:
        mtu = nodelib.underlay_mtu(node)
        if self.config.vxlan != "Never":
            return mtu - VXLAN_OVERHEAD
        return mtu - IPIP_OVERHEAD if self.config.ipip_on else mtu

    @staticmethod
    def tunnel_ip(node: Node) -> str:
        """The node's tunnel address (VXLAN or IP-in-IP): its block's first address."""
        return node.lease_network_ip

    def dual(self, node: Node) -> Node:
        """``node`` with its IPv6 block on a dual-stack pool (as handed in otherwise)."""
        lease6 = None if node.lease6 else self.config.lease6(node.lease)
        return node if lease6 is None else dataclasses.replace(node, lease6=lease6)

    def _blackholes(self, node: Node) -> list[kernel.KRoute]:
        return [kernel.KRoute(lease, blackhole=True) for lease in (node.lease, node.lease6) if lease]

    def setup_node(self, node: Node) -> int:
        """Forwarding, the own-block blackhole(s), (VXLAN modes) ``vxlan.calico`` and the
        pools' natOutgoing tables. Returns the pods' MTU."""
        node = self.dual(node)
        underlay_mtu = nodelib.underlay_mtu(node)
        nodelib.enable_forwarding(node.ns, ipv6=bool(node.lease6))
        if self.config.vxlan != "Never":
            peerlib.ensure_vtep(node, VXLAN_DEVICE, vni=VXLAN_VNI, port=VXLAN_PORT,
                                mtu=underlay_mtu - VXLAN_OVERHEAD, address=f"{self.tunnel_ip(node)}/32",
                                address6=f"{node.lease6_network_ip}/128" if node.lease6 else None)
        if self.config.ipip_on:
            idx = kernel.ensure_ipip(node.ns, IPIP_DEVICE, mtu=underlay_mtu - IPIP_OVERHEAD)
            peerlib.hold_only(node.ns, idx, f"{self.tunnel_ip(node)}/32")
        for route in self._blackholes(node):
            kernel.add_route(node.ns, route)
        self._hold_address6(node, keep=True)
        if self.config.nat_outgoing:
            masq.ensure(node.ns, self.config.pod_networks)
        else:
            masq.remove(node.ns)
        return self.pod_mtu(node)

    def _hold_address6(self, node: Node, *, keep: bool) -> None:
        """With direct routes on a dual-stack pool, ``lo`` holds the node's IPv6 address as a
        /128 (``keep``) and no other address of the pool — none in VXLAN modes, where the
        tunnel holds it, none once the node is torn down."""
        if not self.config.pool6:
            return
        want = f"{self.config.node_address6(node.lease)}/128" if keep and self.config.vxlan == "Never" else None
        r = kernel.rtnl(node.ns)
        lo = r.link(NODE6_DEVICE)
        if lo is None:
            return
        pool6 = ipaddress.ip_network(self.config.pool6)
        for cidr in r.addresses(lo.index):
            if cidr != want and ipaddress.ip_interface(cidr).ip in pool6:
                r.del_address(lo.index, cidr)
        if want:
            if not lo.up:
                r.set_link(lo.index, up=True)
            r.add_address(lo.index, want)

    def _encapsulation(self, node: Node, peer: Node) -> str | None:
        """"vxlan", "ipip" or None (a direct route) for traffic from ``node`` to ``peer``."""
        same = ipaddress.ip_address(peer.ip) in node.underlay_net
        for kind, mode in (("vxlan", self.config.vxlan), ("ipip", self.config.ipip)):
            if mode == "Always" or (mode == "CrossSubnet" and not same):
                return kind
        return None

    def sync_peers(self, node: Node, peers: list[Node]) -> peerlib.SyncResult:
        """Program exactly ``peers`` (``node`` may be among them)."""
        node = self.dual(node)
        others = [self.dual(p) for p in peers if p.ns != node.ns]
        far = [p.ip for p in others if not self._encapsulation(node, p)
               and ipaddress.ip_address(p.ip) not in node.underlay_net]
        if far:
            raise CalicoError(f"peers {', '.join(far)} are not on {node.underlay_net} and the pool has "
                              "no encapsulation for them (set calico_ipv4pool_vxlan CrossSubnet or Always)")
        uidx = kernel.link_index(node.ns, node.underlay)
        devices = {"vxlan": VXLAN_DEVICE if self.config.vxlan != "Never" else None,
                   "ipip": IPIP_DEVICE if self.config.ipip_on else None}
        index = {kind: kernel.link_index(node.ns, dev) for kind, dev in devices.items() if dev}
        if None in index.values():
            self.setup_node(node)
            index = {kind: kernel.link_index(node.ns, dev) for kind, dev in devices.items() if dev}
        routes = self._blackholes(node)
        vteps = []
        for p in others:
            kind = self._encapsulation(node, p)
            v6 = bool(node.lease6 and p.lease6)
            if kind == "vxlan":
                routes.append(kernel.KRoute(p.lease, gateway=self.tunnel_ip(p), oif=index["vxlan"], onlink=True))
                vteps.append(peerlib.VtepPeer(p.mac(VXLAN_DEVICE), p.ip, self.tunnel_ip(p)))
                if v6:
                    routes.append(kernel.KRoute(p.lease6, gateway=p.lease6_network_ip, oif=index["vxlan"],
                                                onlink=True))
                    vteps.append(peerlib.VtepPeer(p.mac(VXLAN_DEVICE), p.ip, p.lease6_network_ip))
            elif kind == "ipip":
                routes.append(kernel.KRoute(p.lease, gateway=p.ip, oif=index["ipip"], onlink=True))
            else:
                routes.append(kernel.KRoute(p.lease, gateway=p.ip, oif=uidx))
                if v6:
                    try:
                        routes.append(kernel.KRoute(p.lease6, gateway=peerlib.link_local(p), oif=uidx))
                    except peerlib.NoLinkLocal as exc:
                        raise CalicoError(f"calico IPv6 direct route: {exc}") from None
        vidx = index.get("vxlan")
        return peerlib.sync(node, routes, vtep_index=vidx, vtep_peers=vteps,
                            peer_ips={p.ip for p in others})

    def teardown(self, node: Node) -> None:
        peerlib.sync(node, [], peer_ips=set())
        kernel.delete_link(node.ns, VXLAN_DEVICE)
        self._hold_address6(node, keep=False)
        masq.remove(node.ns)
        idx = kernel.link_index(node.ns, IPIP_DEVICE) if self.config.ipip_on else None
        if idx is not None:   # the fallback device stays with its namespace: only its address goes
            peerlib.hold_only(node.ns, idx, None)

    # -- pods --
    def attach_pod(self, node: Node, pod_ns: str, address: str, *, ifname: str = "eth0",
                   mtu: int | None = None) -> pods.PodLink:
        """Attach ``pod_ns`` routed with ``address`` (in the node's block, not its tunnel address);
        on a dual-stack pool also with the same host number of the node's IPv6 block."""
        node = self.dual(node)
        if ipaddress.ip_address(address) not in ipaddress.ip_network(node.lease):
            raise ValueError(f"pod address {address} is not in block {node.lease}")
        if (self.config.vxlan != "Never" or self.config.ipip_on) and address == self.tunnel_ip(node):
            raise ValueError(f"{address} is the node's tunnel address")
        address6 = self.config.pod_address6(node.lease, address)
        return pods.attach(node.ns, pod_ns, ifname=ifname, address=f"{address}/32",
                           gateway=pods.ROUTED_GATEWAY, mtu=mtu or self.pod_mtu(node), bridge=None,
                           big_packets=self.config.vxlan == "Never" and not self.config.ipip_on,
                           underlay=node.underlay, address6=f"{address6}/128" if address6 else None,
                           gateway6=pods.ROUTED_GATEWAY6 if address6 else None)

    def detach_pod(self, node: Node, pod_ns: str, *, ifname: str = "eth0") -> bool:
        return pods.detach(node.ns, pod_ns, ifname=ifname)
