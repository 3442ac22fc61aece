"""A new port written as plain rows (SQLAlchemy Core), not as ORM objects.

Creating a port is the hottest write of the network API. Through the ORM, a
port with one address and one group costs a unit-of-work flush of three
instances (about twice the CPU of the three INSERTs themselves), and nothing
that makes a port needs the instances afterwards: callers read the port's id
and addresses, and render it. ``insert_port`` runs the INSERTs and returns a
frozen ``NewPort`` carrying exactly what was written; a later change to the
port loads it as an ORM object like any other port.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

from netbay.store.models import IPAllocation, Port, PortSecurityGroup, utcnow

PORTS: Table = Port.__table__  # type: ignore[assignment]
ALLOCATIONS: Table = IPAllocation.__table__  # type: ignore[assignment]
BINDINGS: Table = PortSecurityGroup.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class Allocation:
    subnet_id: str
    ip_address: str
    seq: int


@dataclass(frozen=True)
class Binding:
    security_group_id: str


@dataclass(frozen=True)
class NewPort:
    """A port as inserted: the ``ports`` row's columns, its addresses and groups."""

    id: str
    project_id: str
    network_id: str
    name: str
    description: str
    mac_address: str
    admin_state_up: bool
    status: str
    device_id: str
    device_owner: str
    binding_host_id: str
    port_security_enabled: bool
    allowed_address_pairs: list[Any]
    created_at: datetime
    updated_at: datetime
    revision_number: int
    fixed_ips: tuple[Allocation, ...] = ()
    security_groups: tuple[Binding, ...] = ()


def port_row(**values: Any) -> dict[str, Any]:
    """Every column of a new ``ports`` row: ``values``, else the column's default."""
    now = utcnow()
    row: dict[str, Any] = {"created_at": now, "updated_at": now}
    row.update(values)
    for column in PORTS.columns:
        if column.name not in row:
            default = column.default
            if default is None:
                raise TypeError(f"a new port needs {column.name}")
            row[column.name] = default.arg(None) if default.is_callable else default.arg  # type: ignore[attr-defined]
    return row


def insert_port(session: Session, row: dict[str, Any], addresses: list[tuple[str, str]],
                groups: list[str]) -> NewPort:
    """INSERT the port, its addresses (``(subnet_id, address)`` in order) and groups.

    Runs in the caller's transaction. The session's pending ORM changes go first,
    so rows they refer to (a router, a load balancer) exist.
    """
    if session.new or session.dirty or session.deleted:
        session.flush()
    allocations = tuple(Allocation(subnet_id, ip, seq) for seq, (subnet_id, ip) in enumerate(addresses))
    session.execute(insert(PORTS), row)
    if allocations:
        session.execute(insert(ALLOCATIONS), [
            {"subnet_id": a.subnet_id, "ip_address": a.ip_address, "port_id": row["id"],
             "network_id": row["network_id"], "seq": a.seq} for a in allocations])
    if groups:
        session.execute(insert(BINDINGS), [{"port_id": row["id"], "security_group_id": g} for g in groups])
    return NewPort(**row, fixed_ips=allocations, security_groups=tuple(Binding(g) for g in groups))
