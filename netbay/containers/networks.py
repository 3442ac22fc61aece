"""Container networks (Zun's ``/v1/networks``): a netbay network a project's containers use.

Made from an existing network of the network backend (name or id: netbay's own
service or a cloud's Neutron, :mod:`netbay.containers.neutron`), optionally pinned to one of its subnet
pools and subnets, as the spec's ``zun network-create --neutron-net … --neutron-pool
… --neutron-subnet … NAME``. One per (project, network); a container naming a
network that has none gets one made on the fly (Zun makes its ``network`` rows
lazily too). Project-scoped: another project's container network is a 404.
"""

from __future__ import annotations

import contextlib
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.containers import schema
from netbay.containers.neutron import ZunNeutron
from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound
from netbay.store.db import Store
from netbay.store.models import ContainerNetwork, NetworkAttachment, new_id


def docker_subnets(neutron: ZunNeutron, net: ContainerNetwork) -> list[dict[str, Any]]:
    """The subnets the container network's Docker network (and its ports) use: the IPv4
    one, and an IPv6 one on a dual-stack network."""
    return neutron.docker_subnets(net.network_id, net.subnet_id, net.subnetpool_id)


def render(net: ContainerNetwork) -> dict[str, Any]:
    return {"uuid": net.id, "name": net.name, "project_id": net.project_id, "user_id": net.user_id,
            "network_id": net.network_id, "neutron_net_id": net.network_id,
            "neutron_pool": net.subnetpool_id, "neutron_subnet": net.subnet_id,
            "created_at": _ts(net.created_at), "updated_at": _ts(net.updated_at)}


def _ts(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def create(store: Store, neutron: ZunNeutron, body: Any) -> dict[str, Any]:
    """Checked against the backend first (its reads stay out of netbay's transaction),
    then written; the new network, rendered."""
    ctx = neutron.ctx
    schema.validate(schema.NETWORK_CREATE, body)
    ident = body["neutron_net_id"]
    pool, subnet_id = body.get("neutron_pool"), body.get("neutron_subnet")
    network = neutron.network(ident)
    subnets = neutron.subnets(network["id"])
    if pool and not any(s.get("subnetpool_id") == pool for s in subnets):
        raise BadRequest(f"Subnet pool {pool} has no subnet on network {network['id']}.")
    if subnet_id:
        subnet = next((s for s in subnets if s["id"] == subnet_id), None)
        if subnet is None:
            raise BadRequest(f"Subnet {subnet_id} is not a subnet of network {network['id']}.")
        if pool and subnet.get("subnetpool_id") != pool:
            raise BadRequest(f"Subnet {subnet_id} is not from subnet pool {pool}.")
        if subnet["ip_version"] != 4:
            raise BadRequest(f"Subnet {subnet_id} is not an IPv4 subnet.")
    name = body.get("name")
    net = ContainerNetwork(id=new_id(), project_id=ctx.project_id, user_id=ctx.user_id,
                           name=name if isinstance(name, str) and name else network["id"],
                           network_id=network["id"], subnetpool_id=pool or None, subnet_id=subnet_id or None)
    docker_subnets(neutron, net)  # refuses a network containers could not use

    def write(session: Session) -> dict[str, Any]:
        if session.scalars(select(ContainerNetwork.id).where(ContainerNetwork.project_id == ctx.project_id,
                                                             ContainerNetwork.network_id == net.network_id)).first():
            raise Conflict(f"A network with neutron_net_id {net.network_id} already exists.")
        session.add(net)
        session.flush()
        return render(net)

    return store.retrying(write)  # type: ignore[return-value]


def find_for(session: Session, ctx: Context, network_id: str) -> ContainerNetwork | None:
    return session.scalars(select(ContainerNetwork).where(ContainerNetwork.project_id == ctx.project_id,
                                                          ContainerNetwork.network_id == network_id)).first()


def ensure_for(session: Session, ctx: Context, network_id: str) -> ContainerNetwork:
    """The project's container network on ``network_id``, made if there is none."""
    found = find_for(session, ctx, network_id)
    if found is not None:
        return found
    net = ContainerNetwork(id=new_id(), project_id=ctx.project_id, user_id=ctx.user_id, name=network_id,
                           network_id=network_id)
    session.add(net)
    session.flush()
    return net


def resolve(session: Session, ctx: Context, ident: str) -> ContainerNetwork | None:
    """The caller's container network by uuid, name or netbay network id (None: none)."""
    stmt = select(ContainerNetwork).where(ContainerNetwork.project_id == ctx.project_id)
    for column in (ContainerNetwork.id, ContainerNetwork.network_id, ContainerNetwork.name):
        found = session.scalars(stmt.where(column == ident)).all()
        if len(found) > 1:
            raise Conflict("Multiple networks exist with same name. Please use the uuid instead.")
        if found:
            return found[0]
    return None


def get(session: Session, ctx: Context, ident: str) -> ContainerNetwork:
    net = resolve(session, ctx, ident)
    if net is None:
        raise NotFound(f"Network {ident} could not be found.")
    return net


def listing(session: Session, ctx: Context) -> list[ContainerNetwork]:
    return list(session.scalars(select(ContainerNetwork).where(ContainerNetwork.project_id == ctx.project_id)
                                .order_by(ContainerNetwork.created_at, ContainerNetwork.id)))


def delete(session: Session, ctx: Context, ident: str) -> tuple[str, bool]:
    """Delete it unless containers are attached (409); returns (netbay network id, whether
    no other project's container network uses that network, i.e. its Docker network may go)."""
    net = get(session, ctx, ident)
    attached = session.scalars(select(NetworkAttachment.container_id)
                               .where(NetworkAttachment.container_network_id == net.id)).first()
    if attached is not None:
        raise Conflict(f"Network {net.id} is in use by container {attached}: delete or detach the "
                       f"containers first.")
    network_id = net.network_id
    session.delete(net)
    session.flush()
    last = session.scalars(select(ContainerNetwork.id).where(ContainerNetwork.network_id == network_id)).first()
    return network_id, last is None


def neutron_network_or_container(session: Session, neutron: ZunNeutron, ident: str) -> dict[str, Any]:
    """What a ``nets`` entry's ``network=`` names: a container network of the caller's
    (uuid or name), else a network of the backend's (id or name)."""
    net = resolve(session, neutron.ctx, ident)
    if net is not None:
        with contextlib.suppress(NotFound):
            return neutron.network(net.network_id)
    return neutron.network(ident)
