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

from sqlalchemy import Table, bindparam, insert
from sqlalchemy.orm import Session

from netbay.store.models import Port, PortSecurityGroup, utcnow

PORTS: Table = Port.__table__  # type: ignore[assignment]
BINDINGS: Table = PortSecurityGroup.__table__  # type: ignore[assignment]
# Built once: a statement object keeps its cache key, so executing it again is cheaper.
_INSERT_PORT = insert(PORTS)
_INSERT_BINDINGS = insert(BINDINGS)
# PostgreSQL: the port inserted in a data-modifying CTE of its group binding's INSERT; the
# binding's foreign key is checked at the end of the statement, when both rows exist.
_INSERT_PORT_WITH_GROUP = insert(BINDINGS).values(
    port_id=bindparam("id"), security_group_id=bindparam("security_group_id"),
).add_cte(insert(PORTS).values({c.name: bindparam(c.name) for c in PORTS.columns}).cte("new_port"))


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


def insert_port(session: Session, row: dict[str, Any], groups: list[str]) -> None:
    """INSERT the ``ports`` row and its group bindings, in the caller's transaction
    (addresses come next, see ``ports.assign_addresses``).

    The session's pending ORM changes go first, so rows they refer to (a network
    made in this transaction, a router) exist. On PostgreSQL a port with one group
    (the usual default group) is one statement, one round trip.
    """
    if session.new or session.dirty or session.deleted:
        session.flush()
    conn = session.connection()
    if len(groups) == 1 and conn.dialect.name == "postgresql":
        conn.execute(_INSERT_PORT_WITH_GROUP, {**row, "security_group_id": groups[0]})
        return
    conn.execute(_INSERT_PORT, row)
    if groups:
        conn.execute(_INSERT_BINDINGS, [{"port_id": row["id"], "security_group_id": g} for g in groups])


def new_port(row: dict[str, Any], addresses: list[tuple[str, str]], groups: list[str]) -> NewPort:
    """What was written: the row, its addresses (``(subnet_id, address)`` in order), its groups."""
    return NewPort(**row, fixed_ips=tuple(Allocation(subnet, ip, seq) for seq, (subnet, ip) in enumerate(addresses)),
                   security_groups=tuple(Binding(g) for g in groups))
