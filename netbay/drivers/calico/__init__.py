"""The calico container-network driver: routed pods, per-node blocks, direct routes or VXLAN.

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
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from netbay.dataplane.links import LinkError
from netbay.dataplane.rtnl import LinkInfo
from netbay.drivers import kernel, leases as leaselib, masq, node as nodelib, peers as peerlib, pods
from netbay.drivers.node import Node

__all__ = ["CalicoConfig", "Calico", "CalicoError", "MissingKernelFeature", "IPIP_MODES",
           "VXLAN_MODES", "VXLAN_DEVICE", "VXLAN_VNI", "VXLAN_PORT", "IPIP_DEVICE", "DEFAULT_POOL"]

DEFAULT_POOL = "192.168.0.0/16"
DEFAULT_BLOCK_LEN = 26
IPIP_MODES = ("Off", "Never", "CrossSubnet", "Always")
VXLAN_MODES = ("Never", "CrossSubnet", "Always")
VXLAN_DEVICE = "vxlan.calico"
VXLAN_VNI = 4096
VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
IPIP_DEVICE = "tunl0"
IPIP_OVERHEAD = 20


class CalicoError(ValueError):
    """A calico configuration netbay cannot realize (the message says why)."""


class MissingKernelFeature(CalicoError):
    """The host's kernel lacks ``feature`` (a name from :mod:`netbay.dataplane.features`)."""

    def __init__(self, feature: str, what: str, detail: str) -> None:
        self.feature = feature
        self.detail = detail
        super().__init__(f"{what} needs the kernel feature '{feature}', which this host "
                         f"does not have ({detail})")


@dataclass(frozen=True)
class CalicoConfig:
    pool: str = DEFAULT_POOL
    block_len: int = DEFAULT_BLOCK_LEN
    ipip: str = "Off"
    vxlan: str = "Never"
    #: the pool's ``natOutgoing`` (true in Magnum's templates): pods leaving the pool
    #: are masqueraded to the node's address (:mod:`netbay.drivers.masq`)
    nat_outgoing: bool = True

    def __post_init__(self) -> None:
        if self.ipip not in IPIP_MODES:
            raise CalicoError(f"calico_ipv4pool_ipip must be one of {', '.join(IPIP_MODES)}, not {self.ipip!r}")
        if self.vxlan not in VXLAN_MODES:
            raise CalicoError(f"calico_ipv4pool_vxlan must be one of {', '.join(VXLAN_MODES)}, "
                              f"not {self.vxlan!r}")
        if self.ipip_on and self.vxlan != "Never":
            raise CalicoError("calico_ipv4pool_ipip and calico_ipv4pool_vxlan cannot both be on "
                              "(calico allows one encapsulation per pool)")

    @property
    def ipip_on(self) -> bool:
        return self.ipip in ("CrossSubnet", "Always")

    @classmethod
    def from_labels(cls, labels: Mapping[str, str] | None) -> CalicoConfig:
        labels = labels or {}
        return cls(labels.get("calico_ipv4pool", DEFAULT_POOL), DEFAULT_BLOCK_LEN,
                   labels.get("calico_ipv4pool_ipip", "Off"), labels.get("calico_ipv4pool_vxlan", "Never"),
                   str(labels.get("calico_ipv4pool_nat_outgoing", "true")).lower() != "false")

    @property
    def requires(self) -> frozenset[str]:
        need = {"veth"}
        if self.vxlan != "Never":
            need.add("vxlan")
        if self.ipip_on:
            need.add("ipip")
        return frozenset(need)

    @property
    def network_config(self) -> leaselib.NetworkConfig:
        return leaselib.block_config(self.pool, self.block_len)


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
    def _underlay(self, node: Node) -> LinkInfo:
        link = kernel.rtnl(node.ns).link(node.underlay)
        if link is None:
            raise LinkError(errno.ENODEV, f"underlay {node.underlay!r} missing in {node.ns!r}")
        return link

    def pod_mtu(self, node: Node) -> int:
        mtu = self._underlay(node).mtu
        if self.config.vxlan != "Never":
            return mtu - VXLAN_OVERHEAD
        return mtu - IPIP_OVERHEAD if self.config.ipip_on else mtu

    @staticmethod
    def tunnel_ip(node: Node) -> str:
        """The node's tunnel address (VXLAN or IP-in-IP): its block's first address."""
        return node.lease_network_ip

    def _blackhole(self, node: Node) -> kernel.KRoute:
        return kernel.KRoute(node.lease, blackhole=True)

    def setup_node(self, node: Node) -> int:
        """Forwarding, the own-block blackhole, (VXLAN modes) ``vxlan.calico`` and the
        pool's natOutgoing table. Returns the pods' MTU."""
        ul = self._underlay(node)
        nodelib.enable_forwarding(node.ns)
        if self.config.vxlan != "Never":
            peerlib.ensure_vtep(node, VXLAN_DEVICE, vni=VXLAN_VNI, port=VXLAN_PORT,
                                mtu=ul.mtu - VXLAN_OVERHEAD, address=f"{self.tunnel_ip(node)}/32")
        if self.config.ipip_on:
            idx = kernel.ensure_ipip(node.ns, IPIP_DEVICE, mtu=ul.mtu - IPIP_OVERHEAD)
            peerlib.hold_only(node.ns, idx, f"{self.tunnel_ip(node)}/32")
        kernel.add_route(node.ns, self._blackhole(node))
        if self.config.nat_outgoing:
            masq.ensure(node.ns, [self.config.pool])
        else:
            masq.remove(node.ns)
        return self.pod_mtu(node)

    def _encapsulation(self, node: Node, peer: Node) -> str | None:
        """"vxlan", "ipip" or None (a direct route) for traffic from ``node`` to ``peer``."""
        same = ipaddress.ip_address(peer.ip) in node.underlay_net
        for kind, mode in (("vxlan", self.config.vxlan), ("ipip", self.config.ipip)):
            if mode == "Always" or (mode == "CrossSubnet" and not same):
                return kind
        return None

    def sync_peers(self, node: Node, peers: list[Node]) -> peerlib.SyncResult:
        """Program exactly ``peers`` (``node`` may be among them)."""
        others = [p for p in peers if p.ns != node.ns]
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
        routes = [self._blackhole(node)]
        vteps = []
        for p in others:
            kind = self._encapsulation(node, p)
            if kind == "vxlan":
                routes.append(kernel.KRoute(p.lease, gateway=self.tunnel_ip(p), oif=index["vxlan"], onlink=True))
                vteps.append(peerlib.VtepPeer(p.mac(VXLAN_DEVICE), p.ip, self.tunnel_ip(p)))
            elif kind == "ipip":
                routes.append(kernel.KRoute(p.lease, gateway=p.ip, oif=index["ipip"], onlink=True))
            else:
                routes.append(kernel.KRoute(p.lease, gateway=p.ip, oif=uidx))
        vidx = index.get("vxlan")
        return peerlib.sync(node, routes, vtep_index=vidx, vtep_peers=vteps,
                            peer_ips={p.ip for p in others})

    def teardown(self, node: Node) -> None:
        peerlib.sync(node, [], peer_ips=set())
        kernel.delete_link(node.ns, VXLAN_DEVICE)
        masq.remove(node.ns)
        idx = kernel.link_index(node.ns, IPIP_DEVICE) if self.config.ipip_on else None
        if idx is not None:   # the fallback device stays with its namespace: only its address goes
            peerlib.hold_only(node.ns, idx, None)

    # -- pods --
    def attach_pod(self, node: Node, pod_ns: str, address: str, *, ifname: str = "eth0",
                   mtu: int | None = None) -> pods.PodLink:
        """Attach ``pod_ns`` routed with ``address`` (in the node's block, not its tunnel address)."""
        if ipaddress.ip_address(address) not in ipaddress.ip_network(node.lease):
            raise ValueError(f"pod address {address} is not in block {node.lease}")
        if (self.config.vxlan != "Never" or self.config.ipip_on) and address == self.tunnel_ip(node):
            raise ValueError(f"{address} is the node's tunnel address")
        return pods.attach(node.ns, pod_ns, ifname=ifname, address=f"{address}/32",
                           gateway=pods.ROUTED_GATEWAY, mtu=mtu or self.pod_mtu(node), bridge=None,
                           big_packets=self.config.vxlan == "Never" and not self.config.ipip_on,
                           underlay=node.underlay)

    def detach_pod(self, node: Node, pod_ns: str, *, ifname: str = "eth0") -> bool:
        return pods.detach(node.ns, pod_ns, ifname=ifname)
