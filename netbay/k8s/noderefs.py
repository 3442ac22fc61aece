"""Which cluster a node controller serves (flannel, calico): the cluster, its network
driver's declaration, and what a pass reads of it afresh (its nodes and their leases,
which a scale changes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netbay.backends.http import HttpBackend
from netbay.client import Api
from netbay.drivers import registry
from netbay.drivers.spec import DriverSpec
from netbay.k8s.cluster import dns_upstream


@dataclass(frozen=True)
class NodeClusterRefs:
    cluster_id: str
    spec: DriverSpec
    nodes: tuple[dict[str, Any], ...]     # the cluster network's nodes (name, role, sandbox_id, address)
    leases: Mapping[str, str]             # node name → its lease (flannel subnet, calico block)
    dns_upstream: tuple[str, ...] = ()    # where the cluster resolver forwards names outside its domain
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)   # the driver's typed config
    pod_runtime: str = "sandbox"          # a pod's own annotation netbay.io/runtime: docker runs it whole

    @property
    def driver(self) -> str:
        return self.spec.name

    @property
    def node_boxes(self) -> tuple[tuple[str, str, str], ...]:
        """(name, sandbox id, address) of every node, as a kuryr cluster's refs have them."""
        return tuple((str(n["name"]), str(n["sandbox_id"]), str(n.get("address") or "").split("/")[0])
                     for n in self.nodes)

    @property
    def leases6(self) -> list[str]:
        """Each node's IPv6 lease on a dual-stack pod network (calico's /122 block paired
        with its IPv4 one, as the driver's config derives it: nothing more is stored); none
        on an IPv4 one."""
        derive = getattr(registry.loaded(self.driver, self.config), "lease6", None) if self.config else None
        return [] if derive is None else [six for lease in self.leases.values() if (six := derive(lease))]


def network_driver(api: Api, cluster: dict[str, Any]) -> str | None:
    """The cluster's network driver: its own field, else its template's (Magnum's order)."""
    if cluster.get("network_driver"):
        return str(cluster["network_driver"])
    template = api.call("GET", f"/container-infra/v1/clustertemplates/{cluster['cluster_template_id']}")
    return template.get("network_driver") or None


def find(api: Api, cluster_id: str) -> NodeClusterRefs:
    """The cluster, its driver's declaration and its nodes; LookupError for a cluster whose
    driver takes no Kubernetes objects on its nodes."""
    cluster = api.call("GET", f"/container-infra/v1/clusters/{cluster_id}")
    driver = network_driver(api, cluster)
    spec = registry.get(driver)
    if spec is None or spec.services != "nodes":
        raise LookupError(f"Cluster {cluster_id}: its network driver {driver or '(none)'} "
                          "answers no Kubernetes Services on its nodes")
    upstream = dns_upstream(api, HttpBackend(api), cluster)
    return with_nodes(api, NodeClusterRefs(cluster["uuid"], spec, (), {}, upstream))


def with_nodes(api: Api, refs: NodeClusterRefs) -> NodeClusterRefs:
    """``refs`` with the cluster network's nodes and leases as they are now (a scale
    changes them between passes)."""
    net = api.call("GET", f"/netbay/v1/clusternets/{refs.cluster_id}")["clusternet"]
    return dataclasses.replace(refs, nodes=tuple(net.get("nodes") or ()), leases=dict(net.get("leases") or {}),
                               config=dict(net.get("config") or {}))
