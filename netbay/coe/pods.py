"""Pods: a sandbox on a cluster node, addressed from the node's lease.

The API stores the pod with its node and address and answers at once (``BUILD``);
the dataplane agent makes its namespace, plugs it into the node
(:func:`netbay.drivers.pods.attach` through the cluster's driver) and reports
``ACTIVE``. Placement and addressing happen here, under the cluster network's row
lock, so two creates never pick the same address: the least-loaded minion (masters
only when there are none) and the lowest free host of its lease after the gateway.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from netbay.coe import common
from netbay.context import Context
from netbay.drivers import registry
from netbay.errors import BadRequest, Conflict, NotFound
from netbay.network.resource import Filter, Resource, standard
from netbay.network.types import Body, Labels, Name, ProjectID, Text
from netbay.store import labels as labellib
from netbay.store.models import ClusterNet, Pod, new_id

STATUSES = {"BUILD", "ACTIVE", "ERROR"}


class PodCreate(Body):
    name: Name
    cluster_id: Name
    node: Name | None = None
    description: Text = ""
    labels: Labels | None = None
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    # who plugs it: "" (the agent, into a namespace of its own) or "docker" (the libnetwork
    # plugin, into a Docker container: a container placed on a cluster node)
    runtime: Literal["", "docker"] = ""


def pod_not_found(pod_id: str) -> NotFound:
    return NotFound(f"Pod {pod_id} could not be found.", kind="PodNotFound")


class Pods(Resource):
    member = "pod"
    collection = "pods"
    model = Pod
    has_tags = False
    create_body = PodCreate
    filters = {name: Filter(getattr(Pod, name)) for name in
               ("name", "cluster_id", "node", "sandbox_id", "address", "status", "runtime", "project_id",
                            "created_at")}
    filters["tenant_id"] = Filter(Pod.project_id)

    def extra_filter(self, name: str, values: list[str]) -> Any:
        return labellib.clause(Pod.labels, values) if name == "labels" else None

    def missing(self, obj_id: str) -> NotFound:
        return pod_not_found(obj_id)

    def render(self, session: Session, obj: Pod, tags: list[str]) -> dict[str, Any]:
        body = standard(obj, tags)
        body.pop("tags")
        return {**body, "cluster_id": obj.cluster_id, "node": obj.node, "sandbox_id": obj.sandbox_id,
                "address": obj.address, "address6": self._address6(session, obj),
                "labels": dict(obj.labels or {}), "status": obj.status,
                "status_reason": obj.status_reason or None, "runtime": obj.runtime or ""}

    @staticmethod
    def _address6(session: Session, pod: Pod) -> str | None:
        """The pod's IPv6 address on a dual-stack cluster network: its driver's config derives
        it from the node's lease and the IPv4 address (flannel's IPv6 lease is paired with the
        IPv4 one, so nothing more is stored); None for an IPv4-only one."""
        net = session.get(ClusterNet, pod.cluster_id)
        lease = (net.leases or {}).get(pod.node) if net is not None else None
        if net is None or not lease:
            return None
        derive = getattr(registry.loaded(net.driver, net.config), "pod_address6", None)
        return derive(lease, pod.address) if derive is not None else None

    def create(self, session: Session, ctx: Context, body: PodCreate) -> Pod:
        given = body.given()
        project_id = self.owner_for_create(ctx, given)
        if not given["name"]:
            raise BadRequest("Invalid input for name. Reason: a pod needs a name.")
        try:
            cluster = common.get_cluster(session, ctx, given["cluster_id"])
        except NotFound as exc:
            raise NotFound(exc.message, kind="ClusterNotFound") from None
        if not cluster.status.endswith("_COMPLETE"):
            raise Conflict(f"Cluster {cluster.id} is {cluster.status}: pods are placed on a "
                           f"*_COMPLETE cluster only.", kind="ClusterNotReady")
        net = session.get(ClusterNet, cluster.id, with_for_update=True)  # serializes placement
        if net is None:
            raise Conflict(f"Cluster {cluster.id} has no container network (its network driver "
                           f"places no pods).", kind="ClusterNotReady")
        if session.scalar(select(Pod.id).where(Pod.cluster_id == cluster.id, Pod.name == given["name"])):
            raise Conflict(f"A pod named {given['name']} already exists in cluster {cluster.id}.",
                           kind="PodExists")
        node = self._node(session, net, given.get("node"))
        pod = Pod(id=new_id(), project_id=project_id, name=given["name"], description=given.get("description", ""),
                  cluster_id=cluster.id, node=node["name"], sandbox_id=node["sandbox_id"],
                  address=self._address(session, net, node), status="BUILD", runtime=given.get("runtime") or "",
                  labels={**labellib.strings(cluster.labels), **labellib.strings(given.get("labels"))})
        session.add(pod)
        session.flush()
        self.record(session, pod, "create")
        return pod

    @staticmethod
    def _node(session: Session, net: ClusterNet, wanted: str | None) -> dict[str, Any]:
        nodes = list(net.nodes or [])
        if wanted:
            for n in nodes:
                if wanted in (n["name"], n["sandbox_id"]):
                    return n
            raise NotFound(f"Cluster {net.id} has no node {wanted}.", kind="NodeNotFound")
        load = dict(session.execute(select(Pod.node, func.count()).where(Pod.cluster_id == net.id)
                                    .group_by(Pod.node)).all())
        candidates = [n for n in nodes if n.get("role") != "master"] or nodes
        if not candidates:
            raise Conflict(f"Cluster {net.id} has no nodes.", kind="NodeNotFound")
        return min(candidates, key=lambda n: load.get(n["name"], 0))

    @staticmethod
    def _address(session: Session, net: ClusterNet, node: dict[str, Any]) -> str:
        """The lowest free host of the node's lease after its first (the gateway)."""
        lease = ipaddress.ip_network((net.leases or {})[node["name"]])
        used = set(session.scalars(select(Pod.address).where(Pod.cluster_id == net.id, Pod.node == node["name"])))
        for n in range(2, min(lease.num_addresses - 1, 1 << 16)):
            address = str(lease.network_address + n)
            if address not in used:
                return address
        raise Conflict(f"The lease {lease} of node {node['name']} is full: no address left for a pod.",
                       kind="IpAddressGenerationFailure")

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        pod = self.get(session, ctx, obj_id, for_update=True)
        if not ctx.is_admin and pod.project_id != ctx.project_id:
            raise pod_not_found(obj_id)
        self.remove(session, pod)

    def remove(self, session: Session, pod: Pod) -> None:
        self.record(session, pod, "delete", None)
        session.delete(pod)
        session.flush()


PODS = Pods()


def set_status(session: Session, pod_id: str, report: str) -> bool:
    """The dataplane's report on a pod, ``STATUS`` or ``ERROR: why`` (the reason is kept
    in ``status_reason`` until the pod is ACTIVE again); True if it changed."""
    status, _, reason = report.partition(":")
    status, reason = status.strip(), reason.strip()[:255] if status.strip() == "ERROR" else ""
    if status not in STATUSES:
        raise BadRequest(f"Invalid input for status. Reason: '{status}' is not in {sorted(STATUSES)}.")
    pod = session.get(Pod, pod_id, with_for_update=True)
    if pod is None or (pod.status, pod.status_reason or "") == (status, reason):
        return False
    pod.status, pod.status_reason = status, reason
    PODS.touch(pod)
    PODS.record(session, pod, "update")
    return True


__all__ = ["PODS", "PodCreate", "Pods", "set_status"]
