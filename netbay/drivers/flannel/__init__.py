"""The flannel network driver, declared: its labels (once), their checks, its typed config.

The kernel part — leases, a ``cni0`` bridge per node, a backend — is
:class:`netbay.drivers.flannel.driver.Flannel`, built by the registry
(:func:`netbay.drivers.registry.make`) from a :class:`FlannelConfig`.
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

__all__ = ["SPEC", "FlannelConfig", "DEFAULT_NETWORK", "DEFAULT_SUBNET_LEN", "DEFAULT_SUBNET_LEN6", "DEFAULT_BACKEND"]

LABELS = (
    LabelSpec("flannel_network_cidr", "cidr", "10.100.0.0/16",
              "The network flannel hands out node subnets from (flannel's Network)."),
    LabelSpec("flannel_network_subnetlen", "int", "24",
              "Prefix length of each node's subnet (flannel's SubnetLen); longer than the "
              "network's prefix.", minimum=8, maximum=30),
    LabelSpec("flannel_backend", "enum", "vxlan",
              "How node subnets reach each other: vxlan encapsulates (works across L3); "
              "host-gw routes directly (all nodes on one L2 segment, as a cluster's private "
              "network is; no encapsulation overhead).",
              allowed=("vxlan", "host-gw"),
              refused={"udp": "flannel's udp backend forwards every packet through a userspace "
                              "process; flannel recommends it only for debugging and netbay does "
                              "not realize it. Use vxlan (the default) or host-gw (fastest, "
                              "nodes on one L2 network)."}),
    LabelSpec("flannel_ip_masq", "enum", "true",
              "flanneld's --ip-masq (on in Magnum's templates): pod traffic leaving "
              "flannel_network_cidr is masqueraded to the node's address, so pods reach "
              "other networks behind the cluster's router and the external network; "
              "pod-to-pod traffic keeps its source (netbay label).",
              allowed=("true", "false")),
    LabelSpec("flannel_ipv6_network_cidr", "cidr6", "",
              "flannel's IPv6Network (with EnableIPv6): a dual-stack pod network. Each node also leases a "
              "/64 of it (flannel's IPv6SubnetLen), pods get an address of both families, vxlan carries "
              "IPv6 over the IPv4 underlay, host-gw routes it via the peers' link-local addresses, and "
              "flannel_ip_masq masquerades IPv6 leaving it too. Empty: IPv4 only (netbay label)."),
    LabelSpec("flannel_service_cidr_ipv6", "cidr6", "",
              "Dual-stack Services: the IPv6 service range (Kubernetes' second --service-cluster-ip-range, "
              "/108 or longer), IPv6 cluster IPs come from; every node answers them and the Services' node "
              "ports on its IPv6 addresses (kube-proxy's ip6 table), leading to the pods' IPv6 addresses. "
              "Needs flannel_ipv6_network_cidr. Empty: Services are IPv4 only (netbay label)."),
)
DEFAULT_SUBNET_LEN6 = 64   # flannel's IPv6SubnetLen default; no label sets it
_DEFAULT = {spec.key: spec.default for spec in LABELS}
DEFAULT_NETWORK = _DEFAULT["flannel_network_cidr"]
DEFAULT_SUBNET_LEN = int(_DEFAULT["flannel_network_subnetlen"])
DEFAULT_BACKEND = _DEFAULT["flannel_backend"]


@dataclass(frozen=True)
class FlannelConfig:
    network: str = DEFAULT_NETWORK
    subnet_len: int = DEFAULT_SUBNET_LEN
    backend: str = DEFAULT_BACKEND
    #: flanneld's ``--ip-masq`` (on in Magnum's templates): pods leaving the network
    #: are masqueraded to the node's address (:mod:`netbay.drivers.masq`)
    ip_masq: bool = _DEFAULT["flannel_ip_masq"] == "true"
    #: flannel's ``IPv6Network`` (``EnableIPv6`` when set): empty for IPv4 only
    network6: str = ""
    subnet_len6: int = DEFAULT_SUBNET_LEN6
    #: the IPv6 service range (dual-stack Services): empty for IPv4 cluster IPs only
    service6: str = ""

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> FlannelConfig:
        return cls(values["flannel_network_cidr"], int(values["flannel_network_subnetlen"]),
                   values["flannel_backend"], values["flannel_ip_masq"] == "true",
                   values["flannel_ipv6_network_cidr"], DEFAULT_SUBNET_LEN6, values["flannel_service_cidr_ipv6"])

    @classmethod
    def from_labels(cls, labels: Mapping[str, Any] | None) -> FlannelConfig:
        """From Magnum's labels, checked as the API checks them (``LabelError``)."""
        return SPEC.parse(labels)

    @property
    def network_config(self) -> leaselib.NetworkConfig:
        return leaselib.NetworkConfig(self.network, self.subnet_len)

    @property
    def network_config6(self) -> leaselib.NetworkConfig | None:
        """The IPv6 leases' config (each node's paired with its IPv4 lease), None if IPv4 only."""
        return leaselib.NetworkConfig(self.network6, self.subnet_len6) if self.network6 else None

    def lease6(self, lease: str) -> str | None:
        """The IPv6 lease paired with IPv4 ``lease`` (:func:`leases.paired`); None if IPv4 only."""
        config6 = self.network_config6
        return None if config6 is None else leaselib.paired(config6, self.network_config, lease)

    def pod_address6(self, lease: str, address: str) -> str | None:
        """The IPv6 address of the pod holding IPv4 ``address`` of ``lease``: the same host
        number in the paired IPv6 lease (``10.100.3.5`` → ``fd00:10:0:3::5``); None if IPv4 only."""
        lease6 = self.lease6(lease)
        return None if lease6 is None else leaselib.same_host(address, lease, lease6)

    def node_address6(self, lease: str) -> str | None:
        """The IPv6 address of the node holding ``lease``: its IPv6 lease's gateway, on
        ``cni0`` (where its IPv6 node ports and externalIPs answer); None if IPv4 only."""
        lease6 = self.lease6(lease)
        return None if lease6 is None else leaselib.gateway(lease6)

    @property
    def pod_networks(self) -> list[str]:
        """What flanneld's ip-masq keeps pod traffic inside of: each family's network."""
        return [self.network, *([self.network6] if self.network6 else [])]


def _subnetlen_fits(values: Mapping[str, str]) -> str | None:
    network = ipaddress.ip_network(values["flannel_network_cidr"])
    subnetlen = int(values["flannel_network_subnetlen"])
    if subnetlen <= network.prefixlen:
        return (f"Label flannel_network_subnetlen={subnetlen} must be longer than the prefix of "
                f"flannel_network_cidr={network} (/{network.prefixlen}): each node gets a "
                f"/{subnetlen} out of it.")
    return None


def _ipv6_fits(values: Mapping[str, str]) -> str | None:
    """The IPv6 network holds a /64 for every IPv4 lease (each node's pair has the same number)."""
    network6 = values["flannel_ipv6_network_cidr"]
    if not network6:
        return None
    net6, net4 = ipaddress.ip_network(network6), ipaddress.ip_network(values["flannel_network_cidr"])
    subnetlen = int(values["flannel_network_subnetlen"])
    if net6.prefixlen >= DEFAULT_SUBNET_LEN6:
        return (f"Label flannel_ipv6_network_cidr={network6} must be shorter than /{DEFAULT_SUBNET_LEN6}: "
                f"each node gets a /{DEFAULT_SUBNET_LEN6} out of it (flannel's IPv6SubnetLen).")
    if DEFAULT_SUBNET_LEN6 - net6.prefixlen < subnetlen - net4.prefixlen:
        return (f"Label flannel_ipv6_network_cidr={network6} has room for {2 ** (DEFAULT_SUBNET_LEN6 - net6.prefixlen)} "
                f"node /{DEFAULT_SUBNET_LEN6}s, fewer than flannel_network_cidr={net4}'s "
                f"{2 ** (subnetlen - net4.prefixlen)} /{subnetlen}s (each node holds one of each): use "
                f"/{DEFAULT_SUBNET_LEN6 - (subnetlen - net4.prefixlen)} or shorter.")
    return None


def _service6_fits(values: Mapping[str, str]) -> str | None:
    return servicerange.check(values, "flannel_service_cidr_ipv6", "flannel_ipv6_network_cidr")


def _kernel(values: Mapping[str, str]) -> list[tuple[str, str]]:
    backend = values["flannel_backend"]
    return [("vxlan", f"flannel_backend={backend}")] if backend == "vxlan" else []


SPEC = DriverSpec(
    name="flannel",
    summary="flannel: one subnet per node out of a cluster-wide network, joined by VXLAN or host routes.",
    coes=("kubernetes", "swarm", "swarm-mode"),
    labels=LABELS,
    checks=(_subnetlen_fits, _ipv6_fits, _service6_fits),
    kernel=_kernel,
    modes=({"flannel_backend": "vxlan"}, {"flannel_backend": "host-gw"}),
    beyond_magnum=("Magnum's default backend was udp until 2019; netbay defaults to vxlan and refuses udp. "
                   "flannel_ip_masq is a netbay label (Magnum always runs flanneld with --ip-masq); "
                   "flannel_ipv6_network_cidr is a netbay label (Magnum has no IPv6 flannel label): flannel's "
                   "IPv6Network with /64 node subnets; vxlan carries IPv6 in flannel.1 over the IPv4 underlay "
                   "(flannel's own flannel-v6.1 needs an IPv6 underlay, which cluster networks do not give nodes); "
                   "flannel_service_cidr_ipv6 is a netbay label: dual-stack Services' IPv6 range."),
    default_for=("kubernetes",),
    takes_containers=True,
    config=FlannelConfig,
    factory="netbay.drivers.flannel.driver:Flannel",
    services="nodes",
    node_ports=("every address of the node: its `eth0` one, and on a dual-stack network its IPv6 "
                "address, its IPv6 lease's gateway on `cni0`"),
    policy="",   # flannel implements no NetworkPolicy: accepted, reported not enforced
)
