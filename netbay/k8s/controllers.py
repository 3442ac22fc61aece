"""The mapping controller a cluster needs, chosen by what its network driver declares.

A kuryr cluster's pods are ports and its Services load balancers
(:class:`netbay.k8s.controller.Controller`); a flannel or calico cluster's pods take
addresses from their node's lease and its Services are answered by the nodes
(:class:`netbay.k8s.nodecluster.NodeController`). The choice is the driver's
declaration (:attr:`netbay.drivers.spec.DriverSpec.services`), never its name.
"""

from __future__ import annotations

from typing import Any

from netbay.client import Api
from netbay.dataplane.names import Names
from netbay.drivers import registry
from netbay.store.db import Store


def open_controller(api: Api, store: Store, cluster_id: str, names: Names | None = None, **kw: Any) -> Any:
    """A Controller or a NodeController for ``cluster_id`` (name or uuid)."""
    cluster = api.call("GET", f"/container-infra/v1/clusters/{cluster_id}")
    spec = registry.get(network_driver(api, cluster))
    if spec is not None and spec.services == "nodes":
        from netbay.k8s.nodecluster import NodeController

        return NodeController(api, store, cluster["uuid"], names)
    from netbay.k8s.controller import Controller

    return Controller(api, store, cluster_id, names, **kw)


def network_driver(api: Api, cluster: dict[str, Any]) -> str | None:
    """The cluster's network driver: its own field, else its template's (Magnum's order)."""
    if cluster.get("network_driver"):
        return str(cluster["network_driver"])
    template = api.call("GET", f"/container-infra/v1/clustertemplates/{cluster['cluster_template_id']}")
    return template.get("network_driver") or None


__all__ = ["network_driver", "open_controller"]
