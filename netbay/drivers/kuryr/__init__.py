"""The kuryr network driver, declared: its labels (once), their check, its typed config.

A kuryr cluster's pods are ports on their namespace's network and its Services
load balancers (:mod:`netbay.k8s`): nothing is programmed on the nodes, so it has
no kernel part here (no factory: the registry's :func:`make` refuses it). Its
:class:`KuryrConfig` is what the Kubernetes mapping reads (:mod:`netbay.k8s.cluster`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from netbay.drivers.labelspec import LabelSpec
from netbay.drivers import servicerange
from netbay.drivers.spec import DriverSpec

__all__ = ["SPEC", "KuryrConfig"]


LABELS = (
    LabelSpec("kuryr_subnet_driver", "enum", "namespace",
              "What gets a network and a subnet from the pod pool: each Kubernetes namespace "
              "(kuryr's default) or each node.", allowed=("namespace", "node")),
    LabelSpec("kuryr_pod_subnet_pool", "cidr", "10.10.0.0/16",
              "The subnet pool pod subnets are allocated from (the cluster subnet)."),
    LabelSpec("kuryr_pod_subnet_prefixlen", "int", "24",
              "Prefix length of each namespace's (or node's) pod subnet.", minimum=8, maximum=29),
    LabelSpec("kuryr_service_cidr", "cidr", "10.96.0.0/16",
              "The service range: the subnet cluster IPs (load balancer VIPs) come from."),
    LabelSpec("kuryr_pod_subnet_pool_ipv6", "cidr6", "",
              "Dual-stack: the IPv6 subnet pool each namespace's (or node's) second, IPv6 pod subnet comes "
              "from, so pods get an address of each family (kuryr-kubernetes' IPv6 pod subnet pool; "
              "Kubernetes' second --cluster-cidr). Empty: IPv4 only. Set together with "
              "kuryr_service_cidr_ipv6 (netbay label)."),
    LabelSpec("kuryr_pod_subnet_prefixlen_ipv6", "int", "64",
              "Prefix length of each IPv6 pod subnet (netbay label).", minimum=16, maximum=120),
    LabelSpec("kuryr_service_cidr_ipv6", "cidr6", "",
              "Dual-stack: the IPv6 service range, IPv6 cluster IPs (load balancer VIPs) come from "
              "(Kubernetes' second --service-cluster-ip-range: /108 or longer). Empty: IPv4 only "
              "(netbay label)."),
    LabelSpec("kuryr_pod_runtime", "enum", "sandbox",
              "What runs a pod on its port: a network namespace of its own (sandbox) or Docker "
              "containers as a kubelet runs them: its init containers, then every container, in one "
              "sandbox (docker; the controller's NETBAY_DOCKER_HOST). "
              "A pod's annotation netbay.io/runtime overrides it.", allowed=("sandbox", "docker")),
    LabelSpec("kuryr_octavia_provider", "string", "",
              "The Octavia provider the cluster's Services' load balancers ask for (kuryr-kubernetes' "
              "endpoints_driver_octavia_provider), e.g. ovn for a cloud's OVN load balancing; their pools "
              "then use SOURCE_IP_PORT, that provider's one algorithm (ROUND_ROBIN otherwise). Empty: the "
              "controller's default (netbay's own nftables embedded; the cloud's default provider on "
              "--backend openstack)."),
)
_DEFAULT = {spec.key: spec.default for spec in LABELS}


@dataclass(frozen=True)
class KuryrConfig:
    """The kuryr labels, checked and typed: what the Kubernetes mapping needs."""

    subnet_driver: str = _DEFAULT["kuryr_subnet_driver"]       # "namespace" | "node": what gets a pod subnet
    pod_subnet_pool: str = _DEFAULT["kuryr_pod_subnet_pool"]
    pod_subnet_prefixlen: int = int(_DEFAULT["kuryr_pod_subnet_prefixlen"])
    service_cidr: str = _DEFAULT["kuryr_service_cidr"]
    pod_runtime: str = _DEFAULT["kuryr_pod_runtime"]           # "sandbox" | "docker"
    #: dual-stack (both set, or neither): the IPv6 pod pool, its subnets' length, the IPv6 service range
    pod_subnet_pool_ipv6: str = ""
    pod_subnet_prefixlen_ipv6: int = int(_DEFAULT["kuryr_pod_subnet_prefixlen_ipv6"])
    service_cidr_ipv6: str = ""
    octavia_provider: str = ""   # "": the controller's default provider

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> KuryrConfig:
        return cls(values["kuryr_subnet_driver"], values["kuryr_pod_subnet_pool"],
                   int(values["kuryr_pod_subnet_prefixlen"]), values["kuryr_service_cidr"],
                   values["kuryr_pod_runtime"], values["kuryr_pod_subnet_pool_ipv6"],
                   int(values["kuryr_pod_subnet_prefixlen_ipv6"]), values["kuryr_service_cidr_ipv6"],
                   values["kuryr_octavia_provider"])

    @property
    def families(self) -> tuple[str, ...]:
        """The cluster's IP families, as Kubernetes names them (IPv4 first: netbay's
        dual-stack clusters are IPv4-primary, as kubeadm's are by default)."""
        return ("IPv4", "IPv6") if self.service_cidr_ipv6 else ("IPv4",)



def _ranges_fit(values: Mapping[str, str]) -> str | None:
    pool = ipaddress.ip_network(values["kuryr_pod_subnet_pool"])
    prefixlen = int(values["kuryr_pod_subnet_prefixlen"])
    service = ipaddress.ip_network(values["kuryr_service_cidr"])
    if prefixlen <= pool.prefixlen:
        return (f"Label kuryr_pod_subnet_prefixlen={prefixlen} must be longer than the prefix of "
                f"kuryr_pod_subnet_pool={pool} (/{pool.prefixlen}): each namespace (or node) gets a "
                f"/{prefixlen} out of it.")
    if pool.overlaps(service):
        return (f"Labels kuryr_pod_subnet_pool={pool} and kuryr_service_cidr={service} overlap: cluster "
                "IPs and pod addresses must come from different ranges.")
    return _ipv6_ranges_fit(values)


def _ipv6_ranges_fit(values: Mapping[str, str]) -> str | None:
    """Dual-stack's ranges: both or neither, the subnets inside the pool, apart from the services."""
    pool6, service6 = values["kuryr_pod_subnet_pool_ipv6"], values["kuryr_service_cidr_ipv6"]
    if not pool6 and not service6:
        return None
    if not pool6 or not service6:
        given, missing = (("kuryr_pod_subnet_pool_ipv6", "kuryr_service_cidr_ipv6") if pool6
                          else ("kuryr_service_cidr_ipv6", "kuryr_pod_subnet_pool_ipv6"))
        return (f"Label {given}={pool6 or service6} asks for a dual-stack cluster, which needs IPv6 pod "
                f"subnets and IPv6 cluster IPs: set {missing} too (an IPv6 network), or neither.")
    pool = ipaddress.ip_network(pool6)
    prefixlen = int(values["kuryr_pod_subnet_prefixlen_ipv6"])
    if prefixlen <= pool.prefixlen:
        return (f"Label kuryr_pod_subnet_prefixlen_ipv6={prefixlen} must be longer than the prefix of "
                f"kuryr_pod_subnet_pool_ipv6={pool} (/{pool.prefixlen}): each namespace (or node) gets a "
                f"/{prefixlen} out of it.")
    return servicerange.fits("kuryr_service_cidr_ipv6", service6, "kuryr_pod_subnet_pool_ipv6", pool6)


SPEC = DriverSpec(
    name="kuryr",
    summary="kuryr: every pod a port on its namespace's network (subnets from a pool), every Service a "
            "load balancer whose VIP is the cluster IP.",
    coes=("kubernetes",),
    labels=LABELS,
    checks=(_ranges_fit,),
    beyond_magnum="Magnum never shipped a kuryr driver; the labels follow kuryr-kubernetes' options "
                  "(pod_subnet_pool, service_subnet, subnet driver namespace|node). The _ipv6 labels make a "
                  "dual-stack cluster (Kubernetes' two --cluster-cidr and --service-cluster-ip-range ranges).",
    config=KuryrConfig,
    services="load-balancers",
    node_ports="the node's `eth0` address, IPv4 (`ip netbay-k8s-nodeport`: a DNAT to the Service's VIP)",
    policy="security-groups",
)
