"""Delete by tag: what a cluster made that its state table does not know of.

Network objects are listed and deleted through the ``NetworkBackend`` seam (the
cloud's Neutron on the ``openstack`` backend), load balancers through the
``LoadBalancerBackend`` seam where there is one (the cloud's Octavia), servers
through the compute seam where there is one (the cloud's Nova, by the marks in
their metadata), and sandboxes through netbay's own API, where the backend has them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from netbay.client import SANDBOXES
from netbay.coe.handlers import gone_ok
from netbay.coe.handlers.neutron import RouterHandler
from netbay.coe.handlers.nova import delete_marked
from netbay.coe.handlers.octavia import LoadBalancerHandler

if TYPE_CHECKING:
    from netbay.coe.handlers.context import StackContext


def _delete_all(st: StackContext, member: str, tags: str) -> None:
    for obj in st.net.list(member, tags=tags):
        gone_ok(lambda: st.net.delete(member, obj["id"]))


def _delete_load_balancers(st: StackContext, tags: list[str]) -> None:
    """Each load balancer carrying all ``tags``, with its whole tree (settled first)."""
    if st.lb is None:
        return
    for lb in st.lb.list("loadbalancer", tags=tags):
        LoadBalancerHandler().delete(st, lb["id"], lb)


def sweep_workloads(st: StackContext) -> None:
    """What was made on the cluster outside its graph — the Kubernetes mapping's
    (:mod:`netbay.k8s`) floating IPs, load balancers, pod and resolver ports and namespace networks,
    tagged ``netbay-k8s=…`` as well — before the graph's own resources: they hang on
    its router and service subnet, which cannot go while they are there."""
    tag = f"netbay-cluster={st.cluster_id}"
    _delete_all(st, "floatingip", f"{tag},netbay-k8s=service")
    _delete_load_balancers(st, [tag, "netbay-k8s=service"])
    for what in ("pod", "dns"):   # pods' ports; the cluster resolver's (on the service subnet)
        _delete_all(st, "port", f"{tag},netbay-k8s={what}")
    for net in st.net.list("network", tags=f"{tag},netbay-k8s=network"):
        for port in st.net.list("port", network_id=net["id"], device_owner="network:router_interface"):
            gone_ok(lambda: st.net.remove_router_interface(port["device_id"], port_id=port["id"]))
        gone_ok(lambda: st.net.delete("network", net["id"]))


def sweep(st: StackContext) -> None:
    """Delete whatever still carries this cluster's tag (or sandbox description), in an
    order the APIs accept: consumers before what they consume."""
    tag = f"netbay-cluster={st.cluster_id}"
    if st.has_own_services:
        prefix = f"netbay-cluster={st.cluster_id} "
        for box in st.api.call("GET", SANDBOXES)["sandboxes"]:
            if str(box.get("description") or "").startswith(prefix):
                st.api.gone_ok("DELETE", f"{SANDBOXES}/{box['id']}")
    delete_marked(st)   # servers before their ports (each waited for until gone)
    _delete_all(st, "floatingip", tag)
    _delete_load_balancers(st, [tag])
    _delete_all(st, "port", tag)
    for router in st.net.list("router", tags=tag):
        RouterHandler().delete(st, router["id"], router)
    for member in ("subnet", "security_group", "network", "subnetpool"):
        _delete_all(st, member, tag)
