"""A port update that only moves the port between security groups, as plain rows.

WHY: it is the write every NetworkPolicy change makes (a pod's port joining or leaving
a policy's group; a label change is nothing else), and the floor every policy change
is measured against. Through the ORM it loads the port, its addresses and its
bindings as instances (three queries and their bookkeeping), then flushes a unit of
work: about two thirds of the transaction's CPU for a DELETE, an INSERT and an
UPDATE. Here the port is read as rows (``Ports.fetch``, the list call's loader), the
bindings that differ are deleted and inserted, and the port rendered from the rows:
the same checks, answer and change record as ``Ports.update``, for about a third of
the CPU (bench/policy_ops.py; BENCHMARKS.md "NetworkPolicy: the last milliseconds").
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Table, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import not_found, policy_refused
from netbay.network.resource import Resource
from netbay.store.models import IPAllocation, Port, PortSecurityGroup, utcnow

PORTS: Table = Port.__table__
BINDINGS: Table = PortSecurityGroup.__table__
# Built once: executing a statement object again skips building it and its cache key.
_INSERT = insert(BINDINGS)
_DELETE = delete(BINDINGS).where(BINDINGS.c.port_id == bindparam("port"),
                                 BINDINGS.c.security_group_id.in_(bindparam("gone", expanding=True)))
_PORT = select(*PORTS.columns).where(PORTS.c.id == bindparam("id")).with_for_update()
_ADDRESSES = select(IPAllocation.port_id, IPAllocation.subnet_id, IPAllocation.ip_address, IPAllocation.seq) \
    .where(IPAllocation.port_id == bindparam("id"))
_BINDINGS = select(BINDINGS.c.port_id, BINDINGS.c.security_group_id).where(BINDINGS.c.port_id == bindparam("id"))
_TOUCH = update(PORTS).where(PORTS.c.id == bindparam("port")).values(
    updated_at=bindparam("at"), revision_number=bindparam("rev"))


class _Binding:
    __slots__ = ("security_group_id",)

    def __init__(self, group_id: str) -> None:
        self.security_group_id = group_id


def move(resource: Resource, session: Session, ctx: Context, port_id: str, groups: list[str], *,
         check_port_security: Callable[[Any, dict[str, Any]], None],
         check_groups: Callable[[Session, Context, str, list[str]], None]) -> Any:
    """``PUT /ports/<id>`` with ``{"security_groups": groups}`` alone; returns the port
    (its rows) as ``Ports.render`` takes it, recorded like any update."""
    port = _read(resource, session, ctx, port_id)
    if port is None:
        raise not_found("port", port_id)
    if not ctx.is_admin and port.project_id != ctx.project_id:
        raise policy_refused("update_port")
    groups = list(dict.fromkeys(groups))
    check_port_security(port, {"security_groups": groups})
    check_groups(session, ctx, port.project_id, groups)
    have = [b.security_group_id for b in port.security_groups]
    gone = [g for g in have if g not in groups]
    if gone:
        session.execute(_DELETE, {"port": port.id, "gone": gone})
    new = [{"port_id": port.id, "security_group_id": g} for g in groups if g not in have]
    if new:
        session.execute(_INSERT, new)
    port.updated_at, port.revision_number = utcnow(), (port.revision_number or 0) + 1
    session.execute(_TOUCH, {"port": port.id, "at": port.updated_at, "rev": port.revision_number})
    port.security_groups = [_Binding(g) for g in groups]
    _forget(session, port.id, gone)
    resource.record(session, port, "update", resource.render(session, port, resource.tags_of(session, [port.id])[port.id]))
    return port


def _read(resource: Resource, session: Session, ctx: Context, port_id: str) -> Any:
    """The port as ``Ports.fetch`` gives it (locked for the update); for an admin (the
    policy engine, the CNI path) through statements built once, on the connection."""
    if not ctx.is_admin:
        rows = resource.fetch(session, resource.scoped(ctx).where(Port.id == port_id).with_for_update())
        return rows[0] if rows else None
    session.flush()  # an earlier operation of the batch may have pending ORM changes
    conn = session.connection()
    row = conn.execute(_PORT, {"id": port_id}).one_or_none()
    if row is None:
        return None
    return SimpleNamespace(**row._asdict(), fixed_ips=conn.execute(_ADDRESSES, {"id": port_id}).all(),
                           security_groups=conn.execute(_BINDINGS, {"id": port_id}).all())


def _forget(session: Session, port_id: str, gone: list[str]) -> None:
    """An ORM instance of this port loaded earlier in the transaction (a batch) is
    stale now: expired, it is read again when next used; bindings deleted here leave
    the session."""
    port = session.identity_map.get(session.identity_key(Port, port_id))
    if port is not None:
        session.expire(port)
    for gid in gone:
        binding = session.identity_map.get(session.identity_key(PortSecurityGroup, (port_id, gid)))
        if binding is not None:
            session.expunge(binding)


__all__ = ["move"]
