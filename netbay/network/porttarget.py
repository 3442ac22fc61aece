"""The network a new port goes on, its subnets and the port quota, read in one query by
statements built once: the create path's single round trip before its INSERTs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, bindparam, or_, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import not_found
from netbay.network import ipam, quotas
from netbay.network.rbac import EXTERNAL_NETWORK_IDS, SHARED_NETWORK_IDS
from netbay.store.models import Network, Port, Subnet


@dataclass(frozen=True)
class PortTarget:
    """The network a new port goes on, as far as creating the port reads it."""

    id: str
    project_id: str
    shared: bool
    port_security_enabled: bool = True  # what a new port on it defaults to
    # The network's QoS policy: the new port's ``qos_network_policy_id`` (``portview``), read
    # here so rendering the port needs no ORM load of the network and its subnets.
    qos_policy_id: str | None = None


def _target_statements() -> tuple[Select, Select]:
    """The look-up of a port's network and its subnets, built once: (admin, scoped to a project).

    Plain table columns and bound parameters: no ORM compile step and no statement
    to build (or cache key to compute) per request.
    """
    networks, subnets = Network.__table__, Subnet.__table__
    facts = [subnets.c[column.key].label(f"subnet_{column.key}") for column in ipam.FACT_COLUMNS]
    # The port quota of the new port's project, in the same round trip (``quotas``).
    quota = quotas.limit_and_held(Port, "quota_")

    def target(shared: Any) -> Select:
        return (select(networks.c.id, networks.c.project_id, shared, networks.c.port_security_enabled,
                       networks.c.qos_policy_id, *quota, *facts)
                .select_from(networks.outerjoin(subnets, subnets.c.network_id == networks.c.id))
                .where(networks.c.id == bindparam("network_id")).order_by(subnets.c.created_at))

    # What ``Networks.visible`` lets a project see; an RBAC policy shares a network with it.
    by_rbac = networks.c.id.in_(SHARED_NETWORK_IDS)
    scoped = target(or_(networks.c.shared, by_rbac).label("shared")).where(
        or_(networks.c.project_id == bindparam("project_id"), networks.c.shared, by_rbac,
            networks.c.id.in_(EXTERNAL_NETWORK_IDS)))
    return target(networks.c.shared), scoped


_TARGET_ADMIN, _TARGET_SCOPED = _target_statements()


def target_network(session: Session, ctx: Context, network_id: str,
                    owner: str) -> tuple[PortTarget, list[ipam.SubnetFacts], tuple[int, int]]:
    """The network (if the caller may see it), its subnets for IPAM and the port quota of
    ``owner`` (limit, held): one query, plain rows."""
    params = {"network_id": network_id, **quotas.parameters("port", owner, "quota_")}
    if ctx.is_admin:
        rows = session.connection().execute(_TARGET_ADMIN, params).all()
    else:
        rows = session.connection().execute(_TARGET_SCOPED, {**params, "project_id": ctx.project_id}).all()
    if not rows:
        raise not_found("network", network_id)
    network = PortTarget(*rows[0][:5])
    return network, [ipam.SubnetFacts(*row[7:]) for row in rows if row[7] is not None], rows[0][5:7]
