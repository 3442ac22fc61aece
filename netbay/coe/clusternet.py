"""Cluster networks: each node's lease of the container network, kept with the cluster.

The conductor calls :func:`room_problem` before it builds or scales (a cluster that
cannot get a lease per node fails before its stack changes), :func:`sync` after a
create or update succeeded (nodes from the stack's servers; leases allocated keeping
the ones held, released for nodes gone, pods on gone nodes deleted; each node's port
let to carry pod addresses, through the network backend seam) and :func:`forget`
when the cluster goes. The result is a ``clusternet`` in the change stream, all the
dataplane agent needs to program the nodes (:mod:`netbay.drivers.realizer`).
Which lease manager and config a driver uses is the driver's own
(:mod:`netbay.drivers`); this module only keeps the result.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.backends import NetworkBackend
from netbay.context import Context
from netbay.drivers import leases as leaselib, registry
from netbay.errors import NotFound
from netbay.network.resource import Resource, timestamp
from netbay.store.db import Store
from netbay.store.models import (
    Cluster, ClusterNet, ClusterTemplate, CoeStack, CoeStackResource, IPAllocation, Pod, Sandbox, Subnet,
)

SERVER = "OS::Nova::Server"


def lease_config(driver: str | None, cfg: Any) -> leaselib.NetworkConfig | None:
    """What each node of a cluster with driver ``driver`` and typed config ``cfg`` gets
    a lease of; None for a driver that programs no node (or has no config)."""
    return cfg.network_config if cfg is not None and registry.on_nodes(driver) else None


def stored_config(driver: str | None, cluster: Cluster) -> Any:
    """The typed config the cluster stored at create (no label read again). A row from
    before it was stored whose labels the driver refuses has none: then this raises
    that refusal (``LabelError``, a ValueError), as the build always did."""
    if cluster.driver_config is not None:
        return registry.loaded(driver, cluster.driver_config)
    return registry.config(driver, cluster.labels)   # raises for such a row; None for a driver without config


def room_problem(driver: str | None, cfg: Any, masters: int, nodes: int) -> str | None:
    """Why ``masters`` + ``nodes`` cannot each get a lease of ``cfg``'s network, or None."""
    leases = lease_config(driver, cfg)
    if leases is None:
        return None
    capacity = leaselib.capacity(leases)
    needed = masters + nodes
    if needed <= capacity:
        return None
    exhausted = leaselib.LeasesExhausted(leases, capacity, needed)
    return f"A cluster of {masters} master(s) and {nodes} node(s) needs {needed} {driver} node leases: {exhausted}"


# --- the change-stream resource -----------------------------------------------------------------


class ClusterNets(Resource):
    """``clusternet`` in the change stream and ``/netbay/v1/state`` (no API of its own)."""

    member = "clusternet"
    collection = "clusternets"
    model = ClusterNet
    has_tags = False

    def render(self, session: Session, obj: ClusterNet, tags: list[str]) -> dict[str, Any]:
        leases, derive = dict(obj.leases or {}), node_address6(obj)
        return {
            "id": obj.id, "cluster_id": obj.id, "project_id": obj.project_id, "driver": obj.driver,
            "config": dict(obj.config or {}), "leases": leases,
            "nodes": [{**n, "lease": (lease := leases.get(n["name"])),
                       "address6": derive(lease) if derive is not None and lease else None}
                      for n in obj.nodes or []],
            "standins": sorted(_standins(session, obj.id).items()),
            "created_at": timestamp(obj.created_at), "updated_at": timestamp(obj.updated_at),
            "revision_number": obj.revision_number,
        }

    def get(self, session: Session, ctx: Context, obj_id: str, *, for_update: bool = False) -> ClusterNet:
        stmt = self.scoped(ctx).where(ClusterNet.id == obj_id)   # another project's: not found
        obj = session.scalars(stmt.with_for_update() if for_update else stmt).one_or_none()
        if obj is None:
            raise NotFound(f"Cluster {obj_id} has no container network.", kind="ClusterNetNotFound")
        return obj


CLUSTERNETS = ClusterNets()


def node_address6(net: ClusterNet) -> Callable[[str], str | None] | None:
    """How the cluster network's driver derives a node's IPv6 address from its lease —
    where its IPv6 node ports and externalIPs answer (``node_address6`` of its config:
    nothing more is stored; it gives None on an IPv4-only network); None for a driver
    without one. The config is loaded once for all the nodes."""
    return getattr(registry.loaded(net.driver, net.config), "node_address6", None)


def _standins(session: Session, cluster_id: str) -> dict[int, str]:
    """What the agent's stand-ins on the masters answer for (the COE's and the template's ports)."""
    from netbay.coe.fragments import standins

    cluster = session.get(Cluster, cluster_id)
    template = session.get(ClusterTemplate, cluster.cluster_template_id) if cluster is not None else None
    return standins(template.coe if template else None, template.apiserver_port if template else None)


# --- the conductor's calls --------------------------------------------------------------------------


def _server_rows(session: Session, cluster_id: str) -> list[CoeStackResource]:
    stack = session.scalars(select(CoeStack).where(CoeStack.cluster_id == cluster_id)).first()
    if stack is None:
        return []
    return list(session.scalars(select(CoeStackResource).where(
        CoeStackResource.stack_id == stack.id, CoeStackResource.type == SERVER,
        CoeStackResource.physical_id.is_not(None)).order_by(CoeStackResource.name)))


def node_ports(session: Session, cluster_id: str) -> list[str]:
    """Each node's first port (on the cluster's private network), as the stack's server
    rows recorded it on any backend: a sandbox lists ``{"port_id": …}``, a cloud's node ids."""
    out = []
    for row in _server_rows(session, cluster_id):
        ports = (row.attributes or {}).get("ports") or []
        if ports:
            out.append(ports[0]["port_id"] if isinstance(ports[0], dict) else str(ports[0]))
    return out


def stack_nodes(session: Session, cluster_id: str) -> list[dict[str, Any]]:
    """The cluster's servers as the stack made them: logical name, role, sandbox id and
    underlay address (the first fixed IPv4 of its first port, with the subnet's prefix);
    masters first, then by index."""
    out = []
    for row in _server_rows(session, cluster_id):
        sandbox = session.get(Sandbox, row.physical_id)
        if sandbox is None or not sandbox.ports:
            continue
        address = None
        for alloc in session.scalars(select(IPAllocation).where(IPAllocation.port_id == sandbox.ports[0].port_id)
                                     .order_by(IPAllocation.seq)):
            subnet = session.get(Subnet, alloc.subnet_id)
            if subnet is not None and subnet.ip_version == 4:
                address = f"{alloc.ip_address}/{ipaddress.ip_network(subnet.cidr).prefixlen}"
                break
        if address is None:
            continue
        meta = (row.attributes or {}).get("metadata") or {}
        role = meta.get("role") or ("master" if "master" in row.name else "minion")
        out.append({"name": row.name, "role": role, "index": int(meta.get("index", 0)),
                    "sandbox_id": sandbox.id, "port_id": sandbox.ports[0].port_id, "address": address})
    out.sort(key=lambda n: (n["role"] != "master", n["index"], n["name"]))
    return [{k: v for k, v in n.items() if k != "index"} for n in out]


def sync(store: Store, cluster_id: str, net: NetworkBackend) -> None:
    """Make the cluster's ``clusternet`` match its stack: leases kept for the nodes that
    hold one, new ones for new nodes, released for nodes gone (with their pods). First
    every node's port in ``net`` (the backend the stack made it in) is let to carry the
    pods' network, so the nodes' traffic passes before the agent routes pods over them.
    Raises :class:`netbay.drivers.leases.LeasesExhausted` and changes no lease if the
    nodes do not fit."""
    from netbay.coe.pods import PODS

    with store.read() as s:
        cluster = s.get(Cluster, cluster_id)
        template = s.get(ClusterTemplate, cluster.cluster_template_id) if cluster is not None else None
        driver = template.network_driver if template is not None else None
        cfg = None if cluster is None else stored_config(driver, cluster)
        netcfg = lease_config(driver, cfg)
        ports = node_ports(s, cluster_id)
    if netcfg is None:
        return
    config = registry.stored(cfg) or {}   # a config is there: netcfg came from it
    # a dual-stack driver's config lists each family's pod network (its IPv6 one too)
    for cidr in getattr(cfg, "pod_networks", None) or [netcfg.network]:
        for port_id in ports:
            allow_pod_network(net, port_id, cidr)

    def write(s: Session) -> None:
        cluster = s.get(Cluster, cluster_id)
        if cluster is None:
            return
        nodes = stack_nodes(s, cluster_id)
        row = s.get(ClusterNet, cluster_id, with_for_update=True)
        leases = leaselib.allocate(netcfg, [n["name"] for n in nodes], dict(row.leases or {}) if row else {})
        if row is not None and (row.config, row.leases, row.nodes) == (config, leases, nodes):
            return
        action = "update" if row is not None else "create"
        if row is None:
            row = ClusterNet(id=cluster_id, project_id=cluster.project_id, driver=driver)
            s.add(row)
        row.config, row.leases, row.nodes = config, leases, nodes
        CLUSTERNETS.touch(row)
        CLUSTERNETS.record(s, row, action)
        for pod in s.scalars(select(Pod).where(Pod.cluster_id == cluster_id, Pod.node.not_in(list(leases)))):
            PODS.remove(s, pod)

    store.retrying(write)


def allow_pod_network(net: NetworkBackend, port_id: str, cidr: str) -> None:
    """Let a node's port send and receive pod addresses (``cidr`` as an allowed address
    pair, as Magnum's templates give node ports the pods' network): unencapsulated pod
    traffic (host-gw, calico direct routes, a pod to a node) passes anti-spoofing.
    A read-modify-write of the port's pairs in ``net``: the pairs it has stay, a pair
    already there is not added again, a port without port security (which Neutron
    refuses pairs on) or gone is left alone."""
    try:
        port = net.show("port", port_id)
    except NotFound:
        return
    pairs = list(port.get("allowed_address_pairs") or [])
    if port.get("port_security_enabled") is False or any(p.get("ip_address") == cidr for p in pairs):
        return
    net.update("port", port_id, {"allowed_address_pairs": [*pairs, {"ip_address": cidr,
                                                                     "mac_address": port["mac_address"]}]})


def forget(store: Store, cluster_id: str) -> None:
    """The cluster goes: its pods and its ``clusternet`` (the agent unplugs them)."""
    from netbay.coe.pods import PODS

    def write(s: Session) -> None:
        for pod in s.scalars(select(Pod).where(Pod.cluster_id == cluster_id)):
            PODS.remove(s, pod)
        row = s.get(ClusterNet, cluster_id, with_for_update=True)
        if row is not None:
            CLUSTERNETS.record(s, row, "delete", None)
            s.delete(row)

    store.retrying(write)


__all__ = ["CLUSTERNETS", "ClusterNets", "allow_pod_network", "forget", "lease_config", "node_ports",
           "node_address6", "room_problem", "stack_nodes", "stored_config", "sync"]
