"""A new port written as plain rows (SQLAlchemy Core), not as ORM objects.

Creating a port is the hottest write of the network API. Through the ORM, a
port with one address and one group costs a unit-of-work flush of three
instances (about twice the CPU of the three INSERTs themselves), and nothing
that makes a port needs the instances afterwards: callers read the port's id
and addresses, and render it. ``ports.create_port`` runs the INSERTs (the
port and its groups through ``PortWriter``, its addresses through
``ipam.assign``) and returns a frozen ``NewPort`` carrying exactly what was
written; a later change to the port loads it as an ORM object like any other
port.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, Table, bindparam, insert
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from netbay.network import ipam
from netbay.store.models import CREATED_REVISION, IPAllocation, Port, PortSecurityGroup, utcnow

PORTS: Table = Port.__table__
BINDINGS: Table = PortSecurityGroup.__table__
# Built once: a statement object keeps its cache key, so executing it again is cheaper.
_INSERT_PORT = insert(PORTS)
_INSERT_BINDINGS = insert(BINDINGS)


def _port_with_address(groups: int) -> Insert:
    """PostgreSQL: one statement for a new port, its group binding (``groups`` 0 or 1) and
    its first address, which is skipped if taken (the port is written anyway).

    The port and the binding are data-modifying CTEs of the address's INSERT; the
    foreign keys are checked at the end of the statement, when all rows exist.
    """
    table = IPAllocation.__table__
    port = insert(PORTS).values({c.name: bindparam(c.name) for c in PORTS.columns}).cte("new_port")
    ctes = [port]
    if groups:
        ctes.append(insert(BINDINGS).values(port_id=bindparam("id"),
                                            security_group_id=bindparam("security_group_id")).cte("new_group"))
    return postgresql.insert(table).values(
        subnet_id=bindparam("subnet_id"), ip_address=bindparam("ip_address"), port_id=bindparam("id"),
        network_id=bindparam("network_id"), seq=bindparam("seq"),
    ).on_conflict_do_nothing(index_elements=[table.c.subnet_id, table.c.ip_address]) \
        .returning(table.c.ip_address).add_cte(*ctes)


_PORT_WITH_ADDRESS = {groups: _port_with_address(groups) for groups in (0, 1)}


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
    extra_dhcp_opts: list[Any] | None
    created_at: datetime
    updated_at: datetime
    revision_number: int
    fixed_ips: tuple[Allocation, ...] = ()
    security_groups: tuple[Binding, ...] = ()
    qos_policy_id: str | None = None
    dns_name: str = ""
    # Not a column: its network's QoS policy as the create read it (``porttarget``), so
    # rendering the new port (``portview.network_policy``) loads no network.
    network_qos_policy_id: str | None = None


def port_row(**values: Any) -> dict[str, Any]:
    """Every column of a new ``ports`` row: ``values``, else the column's default."""
    now = utcnow()
    row: dict[str, Any] = {"created_at": now, "updated_at": now, "revision_number": CREATED_REVISION}
    row.update(values)
    for column in PORTS.columns:
        if column.name not in row:
            default = column.default
            if default is None and column.nullable:
                row[column.name] = None
                continue
            if default is None:
                raise TypeError(f"a new port needs {column.name}")
            row[column.name] = default.arg(None) if default.is_callable else default.arg  # type: ignore[attr-defined]
    return row


class PortWriter:
    """Writes a new port's row and group bindings in the caller's transaction, at the
    latest with its first address (``ipam.Holder.write``).

    On PostgreSQL the three go in one statement, one round trip instead of three; on
    SQLite (no round trips) as separate INSERTs. The session's pending ORM changes go
    first, so rows they refer to (a network made in this transaction, a router) exist.
    """

    def __init__(self, row: dict[str, Any], groups: list[str]) -> None:
        self.row, self.groups = row, groups
        self.written = False

    def write_address(self, session: Session, values: dict[str, Any]) -> bool:
        """``ipam.Writer``: the allocation row ``values``, and the port if not written yet."""
        if not self.written:
            self._flush_pending(session)
            conn = session.connection()
            if conn.dialect.name == "postgresql" and len(self.groups) <= 1:
                self.written = True
                params = {**self.row, **values, "security_group_id": self.groups[0] if self.groups else None}
                return conn.execute(_PORT_WITH_ADDRESS[len(self.groups)], params).first() is not None
            self.finish(session)
        return ipam.insert_allocation(session, values)

    def finish(self, session: Session) -> None:
        """Write the port and its groups if no address did (a port without addresses)."""
        if self.written:
            return
        self._flush_pending(session)
        conn = session.connection()
        conn.execute(_INSERT_PORT, self.row)
        if self.groups:
            conn.execute(_INSERT_BINDINGS, [{"port_id": self.row["id"], "security_group_id": g}
                                            for g in self.groups])
        self.written = True

    @staticmethod
    def _flush_pending(session: Session) -> None:
        if session.new or session.dirty or session.deleted:
            session.flush()


def new_port(row: dict[str, Any], addresses: list[tuple[str, str]], groups: list[str],
             network_qos_policy_id: str | None) -> NewPort:
    """What was written: the row, its addresses (``(subnet_id, address)`` in order), its
    groups; and its network's QoS policy."""
    return NewPort(**row, fixed_ips=tuple(Allocation(subnet, ip, seq) for seq, (subnet, ip) in enumerate(addresses)),
                   security_groups=tuple(Binding(g) for g in groups), network_qos_policy_id=network_qos_policy_id)
