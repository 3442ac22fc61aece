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
from netbay.drivers.labelspec import LabelSpec
from netbay.drivers.spec import DriverSpec

__all__ = ["SPEC", "FlannelConfig", "DEFAULT_NETWORK", "DEFAULT_SUBNET_LEN", "DEFAULT_BACKEND"]

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
              "flannel's IPv6Network (with EnableIPv6): refused, netbay's flannel driver leases, bridges and "
              "routes IPv4 only; use the kuryr driver for dual-stack pods (netbay label)."),
)
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

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> FlannelConfig:
        return cls(values["flannel_network_cidr"], int(values["flannel_network_subnetlen"]),
                   values["flannel_backend"], values["flannel_ip_masq"] == "true")

    @classmethod
    def from_labels(cls, labels: Mapping[str, Any] | None) -> FlannelConfig:
        """From Magnum's labels, checked as the API checks them (``LabelError``)."""
        return SPEC.parse(labels)

    @property
    def network_config(self) -> leaselib.NetworkConfig:
        return leaselib.NetworkConfig(self.network, self.subnet_len)


def _subnetlen_fits(values: Mapping[str, str]) -> str | None:
    network = ipaddress.ip_network(values["flannel_network_cidr"])
    subnetlen = int(values["flannel_network_subnetlen"])
    if subnetlen <= network.prefixlen:
        return (f"Label flannel_network_subnetlen={subnetlen} must be longer than the prefix of "
                f"flannel_network_cidr={network} (/{network.prefixlen}): each node gets a "
                f"/{subnetlen} out of it.")
    return None


def _no_ipv6(values: Mapping[str, str]) -> str | None:
    network6 = values["flannel_ipv6_network_cidr"]
    if network6:
        return (f"Label flannel_ipv6_network_cidr={network6} is not supported: netbay's flannel driver "
                "realizes IPv4 only (its leases, cni0 bridge and vxlan/host-gw backends carry IPv4; flannel's "
                "EnableIPv6 is not realized); IPv6 pod networks: the kuryr driver's kuryr_pod_subnet_pool_ipv6.")
    return None


def _kernel(values: Mapping[str, str]) -> list[tuple[str, str]]:
    backend = values["flannel_backend"]
    return [("vxlan", f"flannel_backend={backend}")] if backend == "vxlan" else []


SPEC = DriverSpec(
    name="flannel",
    summary="flannel: one subnet per node out of a cluster-wide network, joined by VXLAN or host routes.",
    coes=("kubernetes", "swarm", "swarm-mode"),
    labels=LABELS,
    checks=(_subnetlen_fits, _no_ipv6),
    kernel=_kernel,
    modes=({"flannel_backend": "vxlan"}, {"flannel_backend": "host-gw"}),
    beyond_magnum=("Magnum's default backend was udp until 2019; netbay defaults to vxlan and refuses udp. "
                   "flannel_ip_masq is a netbay label (Magnum always runs flanneld with --ip-masq); "
                   "flannel_ipv6_network_cidr is a netbay label that is refused (no IPv6 here yet)."),
    default_for=("kubernetes",),
    takes_containers=True,
    config=FlannelConfig,
    factory="netbay.drivers.flannel.driver:Flannel",
    services="nodes",
    policy="",   # flannel implements no NetworkPolicy: accepted, reported not enforced
)
