"""The slice of a Kubernetes cluster that NetworkPolicy needs, as netbay sees it.

A pod is a netbay port (its id and address) with labels and named container ports;
a namespace is a network (its subnet) with labels. Policies stay lightkube
``NetworkPolicy`` objects: the translation reads their fields as the API defines them.
Everything here is immutable, so the engine can keep the previous state and diff.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from lightkube.models.networking_v1 import NetworkPolicy

NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace, as the API server does


@dataclass(frozen=True)
class ContainerPort:
    name: str
    port: int
    protocol: str = "TCP"


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    port_id: str
    ip: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ports: tuple[ContainerPort, ...] = ()
    #: a dual-stack pod's address of its other family (kuryr's port holds it too, so a
    #: group covers it; nodes' tables key on it: :mod:`netbay.k8s.nodepolicy`)
    more_ips: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def ips_of(self, family: str) -> tuple[str, ...]:
        """The pod's addresses of ``family`` (``IPv4``, ``IPv6``)."""
        return self._by_family.get(family, ())

    @cached_property
    def _by_family(self) -> dict[str, tuple[str, ...]]:
        """Its addresses by family, worked out once: every node's table asks for them on
        every change (an IPv6 address has a colon: no parse)."""
        ips = (self.ip, *self.more_ips)
        return {"IPv4": tuple(ip for ip in ips if ":" not in ip), "IPv6": tuple(ip for ip in ips if ":" in ip)}

    def named_port(self, name: str, protocol: str) -> int | None:
        """The number a named port resolves to on this pod (None: it has no such port)."""
        for p in self.ports:
            if p.name == name and p.protocol == protocol:
                return p.port
        return None


@dataclass(frozen=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def all_labels(self) -> dict[str, str]:
        return {**self.labels, NAME_LABEL: self.name}


@dataclass(frozen=True)
class ServicePort:
    port: int
    target_port: int | str
    protocol: str = "TCP"


@dataclass(frozen=True)
class Service:
    """A Service with a selector: egress to its pods also allows its cluster IP."""
    namespace: str
    name: str
    cluster_ip: str
    selector: Mapping[str, str]
    ports: tuple[ServicePort, ...] = ()
    more_ips: tuple[str, ...] = ()   # a dual-stack Service's cluster IP of its other family

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Cluster:
    """Everything the translation reads. ``nodes`` are the node addresses (CIDRs or IPs)
    from which (and to which) pods are always reachable."""
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    policies: dict[str, NetworkPolicy] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()
    #: the families pods have addresses of (a dual-stack cluster: both), so a rule naming
    #: pods (a remote group) is made for each
    families: tuple[str, ...] = ("IPv4",)

    @classmethod
    def of(cls, namespaces: Iterable[Namespace] = (), pods: Iterable[Pod] = (),
           policies: Iterable[NetworkPolicy] = (), services: Iterable[Service] = (),
           nodes: Iterable[str] = (), families: Iterable[str] = ("IPv4",)) -> Cluster:
        return cls({n.name: n for n in namespaces}, {p.key: p for p in pods},
                   {policy_key(p): p for p in policies}, {s.key: s for s in services}, tuple(nodes),
                   tuple(families))

    def copy(self) -> Cluster:
        return Cluster(dict(self.namespaces), dict(self.pods), dict(self.policies),
                       dict(self.services), self.nodes, self.families)

    def namespace_labels(self, name: str) -> dict[str, str]:
        ns = self.namespaces.get(name)
        return ns.all_labels() if ns else {NAME_LABEL: name}


def policy_key(policy: NetworkPolicy) -> str:
    meta: Any = policy.metadata
    if meta is None or not meta.name:
        raise ValueError("a NetworkPolicy needs metadata.name")
    return f"{meta.namespace or 'default'}/{meta.name}"


__all__ = ["Cluster", "ContainerPort", "NAME_LABEL", "Namespace", "Pod", "Service", "ServicePort", "policy_key"]
