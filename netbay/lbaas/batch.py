"""Octavia's member batch update: ``PUT /pools/{id}/members`` sets a pool's members.

Members are matched by (address, protocol_port), as Octavia does: one in the
request and not in the pool is created, one in both is updated with the given
attributes, one in the pool and not in the request is deleted (kept with
``additive_only``). Everything happens in one transaction under one claim of the
load balancer, so the dataplane sees the whole new membership at once and
realizes it once. A batch that changes nothing changes nothing (not even
statuses). kuryr-style controllers use this to keep a pool equal to a service's
endpoints.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.lbaas.common import NO_MONITOR, OFFLINE, PENDING_CREATE, validation
from netbay.lbaas.members import MEMBERS, MemberCreate
from netbay.lbaas.pools import POOLS
from netbay.lbaas.tree import claim
from netbay.store.models import LBHealthMonitor, LBMember, LoadBalancer

# Attributes a batch may change on a member that stays (address and port are its key,
# the subnet is immutable).
UPDATABLE = ("name", "admin_state_up", "weight", "monitor_address", "monitor_port")
NULL_MEANS = {"name": "", "weight": 1, "admin_state_up": True}


def batch_update(session: Session, ctx: Context, pool_id: str, members: list[MemberCreate],
                 *, additive_only: bool = False) -> dict[str, int]:
    """Apply the batch; returns how many members were created, updated and deleted."""
    pool = POOLS.get(session, ctx, pool_id, for_update=True)
    lb = session.get_one(LoadBalancer, pool.loadbalancer_id)
    wanted: dict[tuple[str, int], MemberCreate] = {}
    for body in members:
        key = (body.address, body.protocol_port)
        if key in wanted:
            raise validation("Member must be updated only once in the same request.")
        wanted[key] = body
    for body in members:
        if body.subnet_id:
            MEMBERS._check_subnet(session, ctx, lb, body.subnet_id)
    old = {(m.address, m.protocol_port): m for m in session.scalars(
        select(LBMember).where(LBMember.pool_id == pool.id).order_by(LBMember.created_at, LBMember.id)
        .with_for_update())}
    counts = {"created": 0, "updated": 0, "deleted": 0}
    if not wanted and (additive_only or not old):
        return counts   # Octavia: a no-op batch returns early, claiming nothing
    took = claim(session, lb.id, listeners=POOLS.listeners_of(session, pool), pool=pool,
                 pool_must_be_active=True)
    monitored = session.scalar(select(LBHealthMonitor.id).where(LBHealthMonitor.pool_id == pool.id))
    for key, body in wanted.items():
        given, tags = MEMBERS.child_body(body)
        member = old.get(key)
        if member is None:
            member = LBMember(project_id=pool.project_id, pool_id=pool.id, provisioning_status=PENDING_CREATE,
                              operating_status=OFFLINE if monitored else NO_MONITOR,
                              **{**given, "name": given.get("name") or ""})
            session.add(member)
            session.flush()
            if tags:
                MEMBERS.set_tags(session, member, tags)
                member.revision_number = 0
            MEMBERS.record(session, member, "create")
            counts["created"] += 1
            continue
        for attr in UPDATABLE:
            if attr in given:
                setattr(member, attr, given[attr] if given[attr] is not None else NULL_MEANS.get(attr))
        MEMBERS.updated(session, member, tags if "tags" in body.model_fields_set else None)
        counts["updated"] += 1
    if not additive_only:
        for key, member in old.items():
            if key not in wanted:
                MEMBERS.remove(session, member)
                counts["deleted"] += 1
    took.log(session)
    return counts


__all__ = ["batch_update"]
