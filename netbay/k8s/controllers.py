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
from netbay.k8s.controller import Controller
from netbay.k8s.nodecluster import NodeController, network_driver
from netbay.store.db import Store


def open_controller(api: Api, store: Store, cluster_id: str, names: Names | None = None, **kw: Any) -> Any:
    """A Controller or a NodeController for ``cluster_id`` (name or uuid)."""
    cluster = api.call("GET", f"/container-infra/v1/clusters/{cluster_id}")
    spec = registry.get(network_driver(api, cluster))
    if spec is not None and spec.services == "nodes":
        return NodeController(api, store, cluster["uuid"], names)
    return Controller(api, store, cluster_id, names, **kw)


__all__ = ["open_controller"]
