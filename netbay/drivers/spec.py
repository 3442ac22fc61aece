"""What a network driver declares (:class:`DriverSpec`): the one module a driver
package imports to describe itself.

It sits below :mod:`netbay.drivers.registry` on purpose: the registry imports each
driver's kernel module by its ``factory`` name (``"module:Class"``), and that module
imports its package (for the typed config), so a package importing the registry
would close a loop (``tests/test_architecture.py`` follows factory names as edges).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netbay.drivers.labelspec import CrossCheck, KernelNeeds, LabelError, LabelSpec

__all__ = ["DriverSpec"]


@dataclass(frozen=True)
class DriverSpec:
    """A network driver as data: what it serves, what it reads, where its code is."""

    name: str
    summary: str
    coes: tuple[str, ...]
    labels: tuple[LabelSpec, ...] = ()
    checks: tuple[CrossCheck, ...] = ()
    beyond_magnum: str = ""
    kernel: KernelNeeds | None = None
    #: the label settings that select each of the driver's kernel modes (``netbay
    #: doctor`` checks each against the host); labels not given take their defaults
    modes: tuple[Mapping[str, str], ...] = ()
    #: the COEs whose clusters get this driver when the template names none
    default_for: tuple[str, ...] = ()
    #: pods hang off a node bridge, so a container runtime can be plugged there too
    #: (the driver object then has ``bridged(node)``, see ``registry.BridgedDriver``)
    takes_containers: bool = False
    #: the typed config its labels are parsed into once (stored with the cluster);
    #: None: the driver reads no label of its own
    config: type[Any] | None = None
    #: ``"module:Class"`` of the driver programming the nodes, built from a config
    #: (imported on first use: the kernel code stays out of the API server's and the
    #: CLI's imports); empty: nothing runs on the nodes (kuryr's pods are ports)
    factory: str = ""
    #: who answers a Kubernetes Service's cluster IP on this driver's clusters:
    #: ``"load-balancers"`` (kuryr: a load balancer per Service, its VIP the cluster IP),
    #: ``"nodes"`` (kube-proxy's job: every node's nftables maps, :mod:`netbay.k8s.kubeproxy`);
    #: empty: the driver's clusters take no Kubernetes objects
    services: str = ""
    #: who enforces a NetworkPolicy: ``"security-groups"`` (kuryr: pods are ports),
    #: ``"nodes"`` (calico's Felix: each node's nftables, :mod:`netbay.k8s.nodepolicy`);
    #: empty: nobody — a policy is accepted and reported *not enforced by <driver>*, as
    #: on a real cluster of that driver (flannel implements no NetworkPolicy)
    policy: str = ""
    #: the node addresses a NodePort Service (and, on ``"nodes"``, an ``externalIPs``
    #: address routed to the node) answers on, as prose for docs/network-drivers.md:
    #: the driver decides which addresses a node has beyond its underlay one
    node_ports: str = ""

    @property
    def takes_k8s(self) -> bool:
        """Whether the driver's clusters take Kubernetes objects (``netbay k8s``)."""
        return bool(self.services)

    @property
    def enforces_policy(self) -> bool:
        return bool(self.policy)

    @property
    def on_nodes(self) -> bool:
        """Whether the driver programs the cluster's nodes (node leases, the agent)."""
        return bool(self.factory)

    def label(self, key: str) -> LabelSpec | None:
        return next((spec for spec in self.labels if spec.key == key), None)

    def effective(self, labels: Mapping[str, str]) -> dict[str, str]:
        """Every label this driver reads: the given (checked) values, else defaults."""
        return {spec.key: labels.get(spec.key, spec.default) for spec in self.labels}

    def checked(self, labels: Mapping[str, Any]) -> dict[str, str]:
        """Every label this driver reads, each given one checked and normalized
        (:class:`LabelError` on the first bad one), then the rules across them."""
        given = {spec.key: spec.check(labels[spec.key]) for spec in self.labels if spec.key in labels}
        values = self.effective(given)
        for rule in self.checks:
            problem = rule(values)
            if problem:
                raise LabelError(problem)
        return values

    def parse(self, labels: Mapping[str, Any] | None) -> Any:
        """Labels → the typed config, once; None for a driver without one."""
        values = self.checked(labels or {})
        return None if self.config is None else self.config.from_values(values)

    def kernel_needs(self, labels: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
        """(kernel feature, what needs it) for the driver with ``labels`` (checked)."""
        return self.kernel(self.checked(labels or {})) if self.kernel else []
