"""A new port written as plain rows (SQLAlchemy Core), not as ORM objects.

Creating a port is the hottest write of the network API. Through the ORM, a
port with one address and one group costs a unit-of-work flush of three
instances (about twice the CPU of the three INSERTs themselves), and nothing
that makes a port needs the instances afterwards: callers read the port's id
and addresses, and render it. ``ports.create_port`` runs the INSERTs (the
addresses through ``ipam.assign``) and returns a frozen ``NewPort`` carrying
exactly what was written; a later change to the port loads it as an ORM object
like any other port.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

from netbay.store.models import Port, PortSecurityGroup, utcnow

PORTS: Table = Port.__table__  # type: ignore[assignment]
BINDINGS: Table = PortSecurityGroup.__table__  # type: ignore[assignment]
# Built once: a statement object keeps its cache key, so executing it again is cheaper.
_INSERT_PORT = insert(PORTS)
_INSERT_BINDINGS = insert(BINDINGS)


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


def insert_port(session: Session, row: dict[str, Any]) -> None:
    """INSERT the ``ports`` row, in the caller's transaction (addresses come next, see
    ``ports.assign_addresses``). The session's pending ORM changes go first, so rows
    they refer to (a network made in this transaction, a router) exist."""
    if session.new or session.dirty or session.deleted:
        session.flush()
    session.connection().execute(_INSERT_PORT, row)


def insert_groups(session: Session, port_id: str, groups: list[str]) -> None:
    if groups:
        session.connection().execute(_INSERT_BINDINGS, [{"port_id": port_id, "security_group_id": g} for g in groups])


def new_port(row: dict[str, Any], addresses: list[tuple[str, str]], groups: list[str]) -> NewPort:
    """What was written: the row, its addresses (``(subnet_id, address)`` in order), its groups."""
    return NewPort(**row, fixed_ips=tuple(Allocation(subnet, ip, seq) for seq, (subnet, ip) in enumerate(addresses)),
                   security_groups=tuple(Binding(g) for g in groups))
