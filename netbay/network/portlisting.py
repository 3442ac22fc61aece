"""Reading ports for a list: what a caller sees, the filters Neutron takes (``fixed_ips``,
``security_groups``, the bindings' included), and the port rows with their addresses,
groups and QoS in five queries per 500 ports."""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Select, and_, false, or_, select, true
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.context import Context
from netbay.errors import BadRequest, invalid_operation
from netbay.network.portview import VIF_TYPE
from netbay.network.resource import Filter, to_bool, to_int
from netbay.network.resource_request import minimum_rules
from netbay.store.models import IPAllocation, Network, Port, PortSecurityGroup

FILTERS = {
    "name": Filter(Port.name),
    "description": Filter(Port.description),
    "project_id": Filter(Port.project_id),
    "tenant_id": Filter(Port.project_id),
    "network_id": Filter(Port.network_id),
    "mac_address": Filter(Port.mac_address, str.lower),
    "admin_state_up": Filter(Port.admin_state_up, to_bool),
    "status": Filter(Port.status),
    "device_id": Filter(Port.device_id),
    "device_owner": Filter(Port.device_owner),
    "binding:host_id": Filter(Port.binding_host_id),
    "port_security_enabled": Filter(Port.port_security_enabled, to_bool),
    "revision_number": Filter(Port.revision_number, to_int),
    "created_at": Filter(Port.created_at),
    "updated_at": Filter(Port.updated_at),
}


def visible_clause(ctx: Context) -> ColumnElement[bool]:
    """Own ports, and every port on a network the caller's project owns."""
    owned_networks = select(Network.id).where(Network.project_id == ctx.project_id)
    return or_(Port.project_id == ctx.project_id, Port.network_id.in_(owned_networks))


def extra_clause(name: str, values: list[str]) -> ColumnElement[bool] | None:
    """The filters that are no plain column: addresses, groups, bindings."""
    if name == "fixed_ips":
        return fixed_ips_clause(values)
    if name == "security_groups":
        return Port.id.in_(select(PortSecurityGroup.port_id)
                           .where(PortSecurityGroup.security_group_id.in_(values)))
    if name == "binding:vif_type":
        wanted = set(values)
        clauses = [Port.binding_host_id == ""] if "unbound" in wanted else []
        clauses += [Port.binding_host_id != ""] if VIF_TYPE in wanted else []
        return or_(false(), *clauses)
    if name == "binding:vnic_type":
        return true() if "normal" in values else false()
    return None


def fetch_rows(session: Session, stmt: Select) -> list[Any]:
    """Plain rows with their addresses, groups, their networks' QoS policies and the
    minimum-bandwidth rules in effect: five queries per 500 ports.

    Listing thousands of ports as ORM objects (a port, its allocations and
    group bindings each an instance with its bookkeeping) costs several
    times more than rendering them, so ``render`` takes either.
    """
    rows = session.execute(stmt.with_only_columns(*Port.__table__.columns)).all()
    addresses: dict[str, list[Any]] = {}
    groups: dict[str, list[Any]] = {}
    ids = [row.id for row in rows]
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for alloc in session.execute(
            select(IPAllocation.port_id, IPAllocation.subnet_id, IPAllocation.ip_address, IPAllocation.seq)
            .where(IPAllocation.port_id.in_(chunk))
        ):
            addresses.setdefault(alloc.port_id, []).append(alloc)
        for binding in session.execute(
            select(PortSecurityGroup.port_id, PortSecurityGroup.security_group_id)
            .where(PortSecurityGroup.port_id.in_(chunk))
        ):
            groups.setdefault(binding.port_id, []).append(binding)
    net_ids = sorted({row.network_id for row in rows})
    policies: dict[str, str | None] = {}
    for start in range(0, len(net_ids), 500):
        chunk = net_ids[start:start + 500]
        nets = select(Network.id, Network.qos_policy_id).where(Network.id.in_(chunk))
        policies.update((row.id, row.qos_policy_id) for row in session.execute(nets))
    # The minimum-bandwidth rules of every policy in effect (the port's, else its
    # network's), read at once: each port's ``resource_request`` is made of them.
    minimum = minimum_rules(session, {p for row in rows if (p := row.qos_policy_id or policies.get(row.network_id))})
    return [SimpleNamespace(**row._asdict(), fixed_ips=addresses.get(row.id, []),
                            security_groups=groups.get(row.id, []),
                            network_qos_policy_id=policies.get(row.network_id), minimum_rules=minimum)
            for row in rows]


def fixed_ips_clause(values: list[str]) -> ColumnElement[bool]:
    """``fixed_ips=ip_address=X`` / ``subnet_id=Y`` / ``ip_address_substr=Z`` as Neutron takes them."""
    wanted: dict[str, list[str]] = {}
    for value in values:
        key, sep, item = value.partition("=")
        if not sep:
            raise invalid_operation(f"'{value}' is not of the form <key>=[value]")
        if key not in {"ip_address", "subnet_id", "ip_address_substr"}:  # Neutron 29 ignores it
            raise BadRequest(f"Invalid input for operation: '{value}' is not of the form "
                             "ip_address=<ip>, subnet_id=<id> or ip_address_substr=<text>.", kind="InvalidInput")
        if key == "ip_address":
            try:
                item = str(ipaddress.ip_address(item))
            except ValueError:
                pass  # matches nothing, as in Neutron
        wanted.setdefault(key, []).append(item)
    clauses = []
    for key, items in wanted.items():
        cond: ColumnElement[bool]
        if key == "ip_address":
            cond = IPAllocation.ip_address.in_(items)
        elif key == "subnet_id":
            cond = IPAllocation.subnet_id.in_(items)
        else:
            cond = or_(*[IPAllocation.ip_address.contains(i, autoescape=True) for i in items])
        clauses.append(Port.id.in_(select(IPAllocation.port_id).where(cond)))
    return and_(true(), *clauses)
