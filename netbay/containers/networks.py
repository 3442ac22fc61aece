"""Container networks (Zun's ``/v1/networks``): a netbay network a project's containers use.

Made from an existing network (name or id), optionally pinned to one of its subnet
pools and subnets, as the spec's ``zun network-create --neutron-net … --neutron-pool
… --neutron-subnet … NAME``. One per (project, network); a container naming a
network that has none gets one made on the fly (Zun makes its ``network`` rows
lazily too). Project-scoped: another project's container network is a 404.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound
from netbay.store.models import ContainerNetwork, Network, NetworkAttachment, Subnet, new_id

BODY_KEYS = {"name", "neutron_net_id", "neutron_pool", "neutron_subnet"}


def neutron_network(session: Session, ctx: Context, ident: str) -> Network:
    """A network the caller may use (own or shared), by id or unique name; Zun's 404 else."""
    visible = or_(Network.project_id == ctx.project_id, Network.shared.is_(True)) if not ctx.is_admin else None
    for column in (Network.id, Network.name):
        stmt = select(Network).where(column == ident)
        if visible is not None:
            stmt = stmt.where(visible)
        found = session.scalars(stmt).all()
        if len(found) > 1:
            raise Conflict(f"Multiple Neutron networks exist with same name. Please use the uuid instead.")
        if found:
            return found[0]
    raise NotFound(f"Neutron network {ident} could not be found.")


def default_network(session: Session, ctx: Context) -> Network:
    """Zun's rule: the project's oldest non-shared network, else a shared one."""
    base = select(Network).where(Network.external.is_(False)).order_by(Network.created_at, Network.id)
    own = session.scalars(base.where(Network.project_id == ctx.project_id, Network.shared.is_(False))).first()
    found = own or session.scalars(base.where(Network.shared.is_(True))).first()
    if found is None:
        raise BadRequest("Unable to find a network for the container: the project has no network and "
                         "no network is shared.")
    return found


def docker_subnet(session: Session, net: ContainerNetwork) -> Subnet:
    """The IPv4 subnet the container network's Docker network (and its ports) use."""
    if net.subnet_id:
        subnet = session.get(Subnet, net.subnet_id)
        if subnet is not None:
            return subnet
    stmt = select(Subnet).where(Subnet.network_id == net.network_id, Subnet.ip_version == 4)
    if net.subnetpool_id:
        stmt = stmt.where(Subnet.subnetpool_id == net.subnetpool_id)
    subnet = session.scalars(stmt.order_by(Subnet.created_at, Subnet.id)).first()
    if subnet is None:
        raise BadRequest(f"Neutron network {net.network_id} has no IPv4 subnet"
                         + (f" from subnet pool {net.subnetpool_id}." if net.subnetpool_id else "."))
    return subnet


def render(net: ContainerNetwork) -> dict[str, Any]:
    return {"uuid": net.id, "name": net.name, "project_id": net.project_id, "user_id": net.user_id,
            "network_id": net.network_id, "neutron_net_id": net.network_id,
            "neutron_pool": net.subnetpool_id, "neutron_subnet": net.subnet_id,
            "created_at": _ts(net.created_at), "updated_at": _ts(net.updated_at)}


def _ts(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def create(session: Session, ctx: Context, body: Any) -> ContainerNetwork:
    if not isinstance(body, dict):
        raise BadRequest("Invalid input: the request body must be a JSON object.")
    unknown = sorted(set(body) - BODY_KEYS)
    if unknown:
        raise BadRequest(f"Additional properties are not allowed ({', '.join(map(repr, unknown))} "
                         f"{'was' if len(unknown) == 1 else 'were'} unexpected)")
    ident = body.get("neutron_net_id")
    if not isinstance(ident, str) or not ident:
        raise BadRequest("'neutron_net_id' is a required property")
    network = neutron_network(session, ctx, ident)
    if session.scalars(select(ContainerNetwork).where(ContainerNetwork.project_id == ctx.project_id,
                                                      ContainerNetwork.network_id == network.id)).first():
        raise Conflict(f"A network with neutron_net_id {network.id} already exists.")
    pool, subnet_id = body.get("neutron_pool"), body.get("neutron_subnet")
    for key, value in (("neutron_pool", pool), ("neutron_subnet", subnet_id), ("name", body.get("name"))):
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"Invalid input for field '{key}': it must be a string.")
    subnets = session.scalars(select(Subnet).where(Subnet.network_id == network.id)).all()
    if pool and not any(s.subnetpool_id == pool for s in subnets):
        raise BadRequest(f"Subnet pool {pool} has no subnet on network {network.id}.")
    if subnet_id:
        subnet = next((s for s in subnets if s.id == subnet_id), None)
        if subnet is None:
            raise BadRequest(f"Subnet {subnet_id} is not a subnet of network {network.id}.")
        if pool and subnet.subnetpool_id != pool:
            raise BadRequest(f"Subnet {subnet_id} is not from subnet pool {pool}.")
        if subnet.ip_version != 4:
            raise BadRequest(f"Subnet {subnet_id} is not an IPv4 subnet.")
    name = body.get("name")
    net = ContainerNetwork(id=new_id(), project_id=ctx.project_id, user_id=ctx.user_id,
                           name=name if isinstance(name, str) and name else network.id, network_id=network.id,
                           subnetpool_id=pool or None, subnet_id=subnet_id or None)
    session.add(net)
    session.flush()
    docker_subnet(session, net)  # refuses a network containers could not use
    return net


def ensure_for(session: Session, ctx: Context, network: Network) -> ContainerNetwork:
    """The project's container network on ``network``, made if there is none."""
    found = session.scalars(select(ContainerNetwork).where(ContainerNetwork.project_id == ctx.project_id,
                                                           ContainerNetwork.network_id == network.id)).first()
    if found is not None:
        return found
    net = ContainerNetwork(id=new_id(), project_id=ctx.project_id, user_id=ctx.user_id, name=network.id,
                           network_id=network.id)
    session.add(net)
    session.flush()
    return net


def resolve(session: Session, ctx: Context, ident: str) -> ContainerNetwork | None:
    """The caller's container network by uuid, name or netbay network id (None: none)."""
    stmt = select(ContainerNetwork).where(ContainerNetwork.project_id == ctx.project_id)
    for column in (ContainerNetwork.id, ContainerNetwork.network_id, ContainerNetwork.name):
        found = session.scalars(stmt.where(column == ident)).all()
        if len(found) > 1:
            raise Conflict(f"Multiple networks exist with same name. Please use the uuid instead.")
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


def neutron_network_or_container(session: Session, ctx: Context, ident: str) -> Network:
    """What a ``nets`` entry's ``network=`` names: a container network of the caller's
    (uuid or name), else a netbay network (id or name)."""
    net = resolve(session, ctx, ident)
    if net is not None:
        found = session.get(Network, net.network_id)
        if found is not None:
            return found
    return neutron_network(session, ctx, ident)
