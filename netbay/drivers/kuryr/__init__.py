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
    LabelSpec("kuryr_pod_runtime", "enum", "sandbox",
              "What runs a pod on its port: a network namespace of its own (sandbox) or a Docker "
              "container from its first container's image (docker; the controller's NETBAY_DOCKER_HOST). "
              "A pod's annotation netbay.io/runtime overrides it.", allowed=("sandbox", "docker")),
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

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> KuryrConfig:
        return cls(values["kuryr_subnet_driver"], values["kuryr_pod_subnet_pool"],
                   int(values["kuryr_pod_subnet_prefixlen"]), values["kuryr_service_cidr"],
                   values["kuryr_pod_runtime"])


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
    return None


SPEC = DriverSpec(
    name="kuryr",
    summary="kuryr: every pod a port on its namespace's network (subnets from a pool), every Service a "
            "load balancer whose VIP is the cluster IP.",
    coes=("kubernetes",),
    labels=LABELS,
    checks=(_ranges_fit,),
    beyond_magnum="Magnum never shipped a kuryr driver; the labels follow kuryr-kubernetes' options "
                  "(pod_subnet_pool, service_subnet, subnet driver namespace|node).",
    config=KuryrConfig,
    services="load-balancers",
    policy="security-groups",
)
