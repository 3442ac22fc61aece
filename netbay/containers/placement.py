"""Containers placed on a cluster node: Zun's ``hints`` ``cluster=C [node=N]``.

python-zunclient already says it (``zun run --hint cluster=C --hint node=N``,
``openstack appcontainer run --hint …``); Zun hands hints to its scheduler, netbay
reads two of them and ignores the rest as Zun's filters do. Such a container has no
port: it is plugged into the node exactly as a pod is, by the libnetwork plugin on
a Docker network ``-o netbay.cluster=C -o netbay.node=N`` (a ``runtime: docker`` pod
row takes its address from the node's lease, :mod:`netbay.plugins.libnetwork.clusters`).
The node is chosen here, at create (the least-loaded minion, as for a pod), so that
show and list name it at once and the Docker network is the node's.

Refusals, in Zun's format: an unknown cluster 404 (as Zun's ``*NotFound``), a node
not in the cluster or ``node`` without ``cluster`` 400, a cluster not built yet or
whose driver plugs pods routed (calico: no bridge to hang a container on) 409.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.containers import schema
from netbay.context import Context
from netbay.errors import BadRequest, Conflict
from netbay.store.models import ClusterNet, Container, Pod, Port

HINTS = ("cluster", "node")


def hinted(value: Any) -> dict[str, str]:
    """The placement ``hints`` ask for ({} for none); 400 for a malformed one."""
    if value is None:
        return {}
    wanted = {k: value[k] for k in HINTS if value.get(k)}   # an object of strings (the schema's check)
    if "node" in wanted and "cluster" not in wanted:
        raise schema.invalid("hints", wanted["node"], "'node' needs 'cluster'.")
    return wanted


def place(session: Session, ctx: Context, hints: dict[str, str]) -> tuple[str, str]:
    """(cluster id, node name) for ``hints`` (``cluster`` given), or Zun's refusal."""
    from netbay.coe import clusters
    from netbay.drivers import registry

    cluster = clusters.get(session, ctx, hints["cluster"])   # 404 in Zun's format
    if not cluster.status.endswith("_COMPLETE"):
        raise Conflict(f"Cluster {cluster.id} is {cluster.status}: containers are placed on a "
                       "*_COMPLETE cluster only.")
    net = session.get(ClusterNet, cluster.id)
    if net is None:
        raise Conflict(f"Cluster {cluster.id} has no container network: its network driver places no "
                       "containers.")
    if not registry.takes_containers(net.driver):
        raise Conflict(f"Containers cannot be placed on cluster {cluster.id}: its network driver "
                       f"{net.driver} plugs pods routed, with no node bridge for a container (use a flannel "
                       "or docker-driver cluster).")
    wanted = hints.get("node")
    if wanted:
        node = next((n for n in net.nodes or () if wanted in (n["name"], n["sandbox_id"])), None)
        if node is None:
            raise BadRequest(f"Cluster {cluster.id} has no node {wanted}.")
    else:
        node = _least_loaded(session, net)
    return cluster.id, node["name"]


def _least_loaded(session: Session, net: ClusterNet) -> dict[str, Any]:
    """The minion (masters only when there are none) with the fewest pods, counting the
    containers placed there whose pod Docker has not made yet (a burst of creates spreads)."""
    load = Counter(session.scalars(select(Pod.node).where(Pod.cluster_id == net.id)))
    load.update(session.scalars(select(Container.node).where(Container.cluster_id == net.id,
                                                             Container.pod_id == "", Container.status != "Error")))
    nodes = list(net.nodes or [])
    candidates = [n for n in nodes if n.get("role") != "master"] or nodes
    if not candidates:
        raise Conflict(f"Cluster {net.id} has no nodes.")
    return min(candidates, key=lambda n: load[n["name"]])


def docker_network(cluster_id: str, node: str) -> str:
    """The name of the Docker network placing containers on ``node`` of ``cluster_id``."""
    return f"zun-cluster-{cluster_id}-{node}"


def pod_of(session: Session, c: Container) -> Pod | None:
    return session.get(Pod, c.pod_id) if c.pod_id else None


def addresses(session: Session, c: Container) -> dict[str, list[dict[str, Any]]]:
    """Zun's ``addresses`` for a placed container: its pod's address on the cluster's
    private network (no port of its own: ``port`` is null)."""
    pod = pod_of(session, c)
    net = session.get(ClusterNet, c.cluster_id)
    if pod is None or net is None or not net.nodes:
        return {}
    network_id = session.scalar(select(Port.network_id).where(Port.id == net.nodes[0].get("port_id")))
    return {network_id or c.cluster_id: [{"addr": pod.address, "version": 4, "port": None, "subnet_id": None,
                                          "preserve_on_delete": False}]}


__all__ = ["HINTS", "addresses", "docker_network", "hinted", "place", "pod_of"]
