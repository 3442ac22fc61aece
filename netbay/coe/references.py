"""Checks of what a template or cluster names in the network service, as Magnum's
``attr_validator`` makes them against Neutron: the external network (by id or
name, ``router:external``), the fixed network and subnet the caller can see.

Magnum also checks the image (Glance) and flavors (Nova); netbay has neither, so
those stay free-form strings that the executor ignores. The keypair is checked
against the caller's keypairs (netbay's ``os-keypairs``, as Magnum asks Nova)
when a cluster is created — the cluster's own, else its template's — and never at
template create or update (Magnum's ``validate_os_resources`` checks it only with a
cluster). docs/magnum.md says which field is checked where.

On the ``openstack`` backend the names live in the cloud's Neutron (where the
cluster's networks are made), not in netbay's own tables: :func:`check` is given
that backend and asks it, with the same rules and the same messages.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.compute import keypairs
from netbay.errors import BadRequest, Conflict, NotFound
from netbay.store.models import Network, Subnet

if TYPE_CHECKING:
    from netbay.backends import NetworkBackend


def external_network(session: Session, ident: str) -> str:
    """The id of the external network ``ident`` names; 400 if none, 409 if several."""
    rows = list(session.scalars(
        select(Network.id).where(Network.external.is_(True), or_(Network.id == ident, Network.name == ident))
        .limit(2)))
    if not rows:
        raise BadRequest(f"Unable to find external network {ident}.")
    if len(rows) > 1:
        raise Conflict(f"Multiple external networks exist with same name '{ident}'. "
                       "Please use the external network ID instead.")
    return rows[0]


def fixed_network(session: Session, ctx: Context, ident: str) -> str:
    stmt = select(Network.id).where(or_(Network.id == ident, Network.name == ident))
    if not ctx.is_admin:
        stmt = stmt.where(or_(Network.project_id == ctx.project_id, Network.shared.is_(True)))
    rows = list(session.scalars(stmt.limit(2)))
    if not rows:
        raise BadRequest(f"Unable to find fixed network {ident}.")
    if len(rows) > 1:
        raise Conflict(f"Multiple networks exist with same name '{ident}'. Please use the network ID instead.")
    return rows[0]


def fixed_subnet(session: Session, ctx: Context, ident: str, network_id: str | None) -> str:
    stmt = select(Subnet.id).join(Network, Network.id == Subnet.network_id).where(
        or_(Subnet.id == ident, Subnet.name == ident))
    if network_id is not None:
        stmt = stmt.where(Subnet.network_id == network_id)
    if not ctx.is_admin:
        stmt = stmt.where(or_(Subnet.project_id == ctx.project_id, Network.shared.is_(True)))
    rows = list(session.scalars(stmt.limit(2)))
    if not rows:
        raise BadRequest(f"Unable to find fixed subnet {ident}.")
    if len(rows) > 1:
        raise Conflict(f"Multiple subnets exist with same name '{ident}'. Please use the subnet ID instead.")
    return rows[0]


def check(session: Session, ctx: Context, values: dict, net: NetworkBackend | None = None) -> None:
    """Every reference ``values`` (a template's or cluster's attributes) holds: in
    netbay's own tables, or in ``net`` when the cluster's networks are made there."""
    if net is not None:
        _check_in(net, values)
        return
    if values.get("external_network_id"):
        external_network(session, values["external_network_id"])
    network_id = None
    if values.get("fixed_network"):
        network_id = fixed_network(session, ctx, values["fixed_network"])
    if values.get("fixed_subnet"):
        fixed_subnet(session, ctx, values["fixed_subnet"], network_id)


def keypair(session: Session, ctx: Context, name: str | None) -> None:
    """404 unless the caller has a keypair ``name`` (Magnum's ``KeyPairNotFound``)."""
    if name and not keypairs.exists(session, ctx.user_id, name):
        raise NotFound(f"Unable to find keypair {name}.")


def _check_in(net: NetworkBackend, values: dict) -> None:
    """:func:`check` against a backend's Neutron, ``net`` acting for the caller
    (``for_context``: a non-admin sees its project's networks and shared ones, as above)."""
    if values.get("external_network_id"):
        ident = values["external_network_id"]
        _one(named(net, "network", ident, is_router_external=True), f"Unable to find external network {ident}.",
             f"Multiple external networks exist with same name '{ident}'. Please use the external network ID instead.")
    network_id = None
    if values.get("fixed_network"):
        ident = values["fixed_network"]
        network_id = _one(named(net, "network", ident),
                          f"Unable to find fixed network {ident}.",
                          f"Multiple networks exist with same name '{ident}'. Please use the network ID instead.")
    if values.get("fixed_subnet"):
        ident = values["fixed_subnet"]
        found = named(net, "subnet", ident, **({"network_id": network_id} if network_id else {}))
        _one(found,
             f"Unable to find fixed subnet {ident}.",
             f"Multiple subnets exist with same name '{ident}'. Please use the subnet ID instead.")


def named(net: NetworkBackend, member: str, ident: str, **filters: Any) -> list[dict]:
    """Objects whose id (when ``ident`` is one) or name is ``ident``."""
    found = {o["id"]: o for o in net.list(member, name=ident, **filters)}
    try:
        uuid.UUID(ident)
    except ValueError:
        return list(found.values())
    found.update({o["id"]: o for o in net.list(member, id=ident, **filters)})
    return list(found.values())


def _one(found: list[dict], missing: str, several: str) -> str:
    if not found:
        raise BadRequest(missing)
    if len(found) > 1:
        raise Conflict(several)
    return found[0]["id"]


def external_cidrs(session: Session, ident: str | None, net: NetworkBackend | None = None) -> list[str]:
    """The CIDRs of the subnets of the external network ``ident`` (none if it is not found:
    :func:`check` says so)."""
    if not ident:
        return []
    if net is not None:
        found = named(net, "network", ident, is_router_external=True)
        if len(found) != 1:
            return []
        return [s["cidr"] for s in net.list("subnet", network_id=found[0]["id"])]
    ids = list(session.scalars(select(Network.id).where(
        Network.external.is_(True), or_(Network.id == ident, Network.name == ident)).limit(2)))
    if len(ids) != 1:
        return []
    return list(session.scalars(select(Subnet.cidr).where(Subnet.network_id == ids[0])))


def subnet_cidr(session: Session, ident: str | None, net: NetworkBackend | None = None) -> str | None:
    """The CIDR of the subnet ``ident`` (id or name), None if there is not exactly one."""
    if not ident:
        return None
    if net is not None:
        found = named(net, "subnet", ident)
        return found[0]["cidr"] if len(found) == 1 else None
    rows = list(session.scalars(select(Subnet.cidr).where(or_(Subnet.id == ident, Subnet.name == ident)).limit(2)))
    return rows[0] if len(rows) == 1 else None
