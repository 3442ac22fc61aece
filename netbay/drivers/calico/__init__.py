"""The calico network driver, declared: its labels (once), their checks, its typed config.

The kernel part — routed pods, per-node blocks, direct routes, VXLAN or IP-in-IP —
is :class:`netbay.drivers.calico.driver.Calico`, built by the registry
(:func:`netbay.drivers.registry.make`) from a :class:`CalicoConfig`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import netbay.drivers.leases as leaselib
from netbay.drivers import servicerange
from netbay.drivers.labelspec import LabelSpec
from netbay.drivers.spec import DriverSpec

__all__ = ["SPEC", "CalicoConfig", "CalicoError", "MissingKernelFeature", "IPIP_MODES", "VXLAN_MODES",
           "DEFAULT_POOL", "DEFAULT_BLOCK_LEN"]

IPIP_MODES = ("Off", "Never", "CrossSubnet", "Always")
VXLAN_MODES = ("Never", "CrossSubnet", "Always")
ENCAPSULATING = ("CrossSubnet", "Always")
DEFAULT_BLOCK_LEN = 26   # calico's blockSize; no label sets it
DEFAULT_BLOCK_LEN6 = 122   # calico's IPv6 blockSize default; no label sets it

LABELS = (
    LabelSpec("calico_ipv4pool", "cidr", "192.168.0.0/16",
              "The IPv4 pool pod addresses come from."),
    LabelSpec("calico_ipv4pool_ipip", "enum", "Off",
              "IP-in-IP encapsulation of the pool (Off and Never both mean none).",
              allowed=IPIP_MODES),
    LabelSpec("calico_ipv4pool_vxlan", "enum", "Never",
              "VXLAN encapsulation of the pool (netbay extension; Magnum has no such label).",
              allowed=VXLAN_MODES),
    LabelSpec("calico_ipv4pool_nat_outgoing", "enum", "true",
              "The pool's natOutgoing (true in Magnum's templates): pod traffic leaving the "
              "pool is masqueraded to the node's address; pod-to-pod traffic keeps its "
              "source (netbay label).",
              allowed=("true", "false")),
    LabelSpec("calico_ipv6pool", "cidr6", "",
              "An IPv6 pool (calico's CALICO_IPV6POOL_CIDR): dual-stack pods. Each node also owns a /122 "
              "block of it, pods get an IPv6 /128 routed like the IPv4 /32 (gateway fe80::ecee:eeff:feee:eeee), "
              "direct routes go via the peers' link-local addresses, VXLAN carries IPv6 in vxlan.calico over "
              "the IPv4 underlay; not with IP-in-IP (IPv4 only). Empty: IPv4 only (netbay label)."),
    LabelSpec("calico_service_cidr_ipv6", "cidr6", "",
              "Dual-stack Services: the IPv6 service range (Kubernetes' second --service-cluster-ip-range, "
              "/108 or longer), IPv6 cluster IPs come from; every node answers them and the Services' node "
              "ports on its IPv6 address (its IPv6 block's first; kube-proxy's ip6 table), leading to the "
              "pods' IPv6 addresses. "
              "Needs calico_ipv6pool. Empty: Services are IPv4 only (netbay label)."),
)
_DEFAULT = {spec.key: spec.default for spec in LABELS}
DEFAULT_POOL = _DEFAULT["calico_ipv4pool"]


class CalicoError(ValueError):
    """A calico configuration netbay cannot realize (the message says why)."""


class MissingKernelFeature(CalicoError):
    """The host's kernel lacks ``feature`` (a name from :mod:`netbay.dataplane.features`)."""

    def __init__(self, feature: str, what: str, detail: str) -> None:
        self.feature = feature
        self.detail = detail
        super().__init__(f"{what} needs the kernel feature '{feature}', which this host "
                         f"does not have ({detail})")


def _both_encapsulate(ipip: str, vxlan: str) -> bool:
    return ipip in ENCAPSULATING and vxlan in ENCAPSULATING


@dataclass(frozen=True)
class CalicoConfig:
    pool: str = DEFAULT_POOL
    block_len: int = DEFAULT_BLOCK_LEN
    ipip: str = _DEFAULT["calico_ipv4pool_ipip"]
    vxlan: str = _DEFAULT["calico_ipv4pool_vxlan"]
    #: the pool's ``natOutgoing`` (true in Magnum's templates): pods leaving the pool
    #: are masqueraded to the node's address (:mod:`netbay.drivers.masq`)
    nat_outgoing: bool = _DEFAULT["calico_ipv4pool_nat_outgoing"] == "true"
    #: an IPv6 pool (``CALICO_IPV6POOL_CIDR``): empty for IPv4 only
    pool6: str = ""
    block_len6: int = DEFAULT_BLOCK_LEN6
    #: the IPv6 service range (dual-stack Services): empty for IPv4 cluster IPs only
    service6: str = ""

    def __post_init__(self) -> None:
        """A config built from stored data (not through the labels' checks) is held to them too."""
        if self.ipip not in IPIP_MODES:
            raise CalicoError(f"calico_ipv4pool_ipip must be one of {', '.join(IPIP_MODES)}, not {self.ipip!r}")
        if self.vxlan not in VXLAN_MODES:
            raise CalicoError(f"calico_ipv4pool_vxlan must be one of {', '.join(VXLAN_MODES)}, "
                              f"not {self.vxlan!r}")
        if _both_encapsulate(self.ipip, self.vxlan):
            raise CalicoError("calico_ipv4pool_ipip and calico_ipv4pool_vxlan cannot both be on "
                              "(calico allows one encapsulation per pool)")

    @property
    def ipip_on(self) -> bool:
        return self.ipip in ENCAPSULATING

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> CalicoConfig:
        return cls(values["calico_ipv4pool"], DEFAULT_BLOCK_LEN, values["calico_ipv4pool_ipip"],
                   values["calico_ipv4pool_vxlan"], values["calico_ipv4pool_nat_outgoing"] == "true",
                   values["calico_ipv6pool"], DEFAULT_BLOCK_LEN6, values["calico_service_cidr_ipv6"])

    @classmethod
    def from_labels(cls, labels: Mapping[str, Any] | None) -> CalicoConfig:
        """From Magnum's labels, checked as the API checks them (``LabelError``)."""
        return SPEC.parse(labels)

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

    def lease6(self, lease: str) -> str | None:
        """The IPv6 block paired with IPv4 block ``lease`` (the same number); None if IPv4 only."""
        if not self.pool6:
            return None
        return leaselib.paired(leaselib.block_config(self.pool6, self.block_len6), self.network_config, lease)

    def pod_address6(self, lease: str, address: str) -> str | None:
        """The IPv6 address of the pod holding IPv4 ``address`` of block ``lease``: the same
        host number in the paired IPv6 block; None if IPv4 only."""
        lease6 = self.lease6(lease)
        return None if lease6 is None else leaselib.same_host(address, lease, lease6)

    def node_address6(self, lease: str) -> str | None:
        """The IPv6 address of the node holding block ``lease``: its IPv6 block's first
        address, which no pod gets (pods start at the third) — with VXLAN the tunnel's /128
        on ``vxlan.calico`` (calico's IPv6 tunnel address), with direct routes a /128 on the
        node's ``lo`` (what calico's IP6 autodetection finds on a real host: the underlay
        here is IPv4 only). Its IPv6 node ports and externalIPs answer there, and NodePort
        traffic is masqueraded to it. None if IPv4 only."""
        lease6 = self.lease6(lease)
        return None if lease6 is None else str(ipaddress.ip_network(lease6).network_address)

    @property
    def pod_networks(self) -> list[str]:
        """The pools natOutgoing keeps pod traffic inside of: each family's."""
        return [self.pool, *([self.pool6] if self.pool6 else [])]


def _kernel(values: Mapping[str, str]) -> list[tuple[str, str]]:
    out = []
    if values["calico_ipv4pool_ipip"] in ENCAPSULATING:
        out.append(("ipip", f"calico_ipv4pool_ipip={values['calico_ipv4pool_ipip']}"))
    if values["calico_ipv4pool_vxlan"] in ENCAPSULATING:
        out.append(("vxlan", f"calico_ipv4pool_vxlan={values['calico_ipv4pool_vxlan']}"))
    return out


def _ipv6_fits(values: Mapping[str, str]) -> str | None:
    """An IPv6 pool holds a /122 block for every IPv4 block, and no IP-in-IP beside it."""
    pool6 = values["calico_ipv6pool"]
    if not pool6:
        return None
    ipip = values["calico_ipv4pool_ipip"]
    if ipip in ENCAPSULATING:
        return (f"Label calico_ipv6pool={pool6} cannot be used with calico_ipv4pool_ipip={ipip}: IP-in-IP "
                "carries IPv4 only; dual-stack pools use VXLAN (calico_ipv4pool_vxlan) or direct routes.")
    net6, net4 = ipaddress.ip_network(pool6), ipaddress.ip_network(values["calico_ipv4pool"])
    need = DEFAULT_BLOCK_LEN - net4.prefixlen
    if DEFAULT_BLOCK_LEN6 - net6.prefixlen < need:
        return (f"Label calico_ipv6pool={pool6} has room for {2 ** max(0, DEFAULT_BLOCK_LEN6 - net6.prefixlen)} "
                f"/{DEFAULT_BLOCK_LEN6} blocks, fewer than calico_ipv4pool={net4}'s {2 ** need} "
                f"/{DEFAULT_BLOCK_LEN} blocks (each node holds one of each): use /{DEFAULT_BLOCK_LEN6 - need} or shorter.")
    return None


def _service6_fits(values: Mapping[str, str]) -> str | None:
    return servicerange.check(values, "calico_service_cidr_ipv6", "calico_ipv6pool")


def _one_encapsulation(values: Mapping[str, str]) -> str | None:
    ipip, vxlan = values["calico_ipv4pool_ipip"], values["calico_ipv4pool_vxlan"]
    if _both_encapsulate(ipip, vxlan):
        return (f"Labels calico_ipv4pool_ipip={ipip} and calico_ipv4pool_vxlan={vxlan} cannot both "
                "encapsulate: a Calico IP pool uses IP-in-IP or VXLAN, not both. Set one of them "
                "to Never.")
    return None


SPEC = DriverSpec(
    name="calico",
    summary="Calico: routed pod networks from an IP pool, optionally encapsulated (IP-in-IP or VXLAN).",
    coes=("kubernetes",),
    labels=LABELS,
    checks=(_one_encapsulation, _ipv6_fits, _service6_fits),
    kernel=_kernel,
    modes=({}, {"calico_ipv4pool_vxlan": "Always"}, {"calico_ipv4pool_vxlan": "CrossSubnet"},
           {"calico_ipv4pool_ipip": "Always"}, {"calico_ipv4pool_ipip": "CrossSubnet"}),
    beyond_magnum=("calico_ipv4pool_vxlan, calico_ipv4pool_nat_outgoing, calico_ipv6pool and "
                   "calico_service_cidr_ipv6 are netbay labels "
                   "(calico_ipv6pool: calico's CALICO_IPV6POOL_CIDR with /122 blocks; not with IP-in-IP)."),
    takes_containers=False,   # routed pods: no node bridge a container runtime could plug into
    config=CalicoConfig,
    factory="netbay.drivers.calico.driver:Calico",
    services="nodes",
    node_ports=("every address of the node: its `eth0` one, and on a dual-stack pool its IPv6 address, "
                "the first of its IPv6 block (VXLAN: `vxlan.calico`'s tunnel address; direct routes: "
                "a /128 on the node's `lo`)"),
    policy="nodes",
)
