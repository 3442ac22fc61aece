"""A Service's ``status.loadBalancer`` as a cloud provider writes it.

Kubernetes leaves a LoadBalancer Service's ``status.loadBalancer`` to whoever gives it
an address (a cloud provider's controller): ``ingress`` lists the addresses that answer
for it, and ``kubectl get svc`` shows them as ``EXTERNAL-IP`` (``<pending>`` while the
list is empty). On a kuryr cluster the floating IP on the Service's VIP answers
(:func:`netbay.k8s.services.ingress`). On a flannel or calico cluster the nodes answer
a LoadBalancer Service's ``spec.loadBalancerIP`` (kube-proxy's ``external-backends``
map, :mod:`netbay.k8s.kubeproxy`), so that address is its ingress; one without
``loadBalancerIP`` has no address that answers, and says so by an empty ``loadBalancer``.
The controllers write it into the Service's stored body (the cluster's desired state),
as they write a NetworkPolicy's enforcement status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def load_balancer_status(addresses: list[str]) -> dict[str, Any]:
    """A Service's ``status`` whose load balancer answers on ``addresses`` (none: pending)."""
    return {"loadBalancer": {"ingress": [{"ip": a} for a in addresses]} if addresses else {}}


def on_node_cluster(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``status`` of a stored Service on a node cluster: a LoadBalancer's names its
    ``spec.loadBalancerIP`` (what every node answers); None for the other types (their
    status is not this cluster's to write)."""
    spec = body.get("spec") or {}
    if spec.get("type") != "LoadBalancer":
        return None
    address = spec.get("loadBalancerIP")
    return load_balancer_status([address] if address else [])


__all__ = ["load_balancer_status", "on_node_cluster"]
