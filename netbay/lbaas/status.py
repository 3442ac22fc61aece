"""Statuses: the tree Octavia shows (``GET …/loadbalancers/{id}/status``) and
the realizer's reports that settle it.

A report is ``{"loadbalancers": {id: {"provisioning_status": …,
"operating_status": …}}, "listeners": {…}, "pools": {…}, "members": {…},
"healthmonitors": {…}}``; a bare string stands for ``provisioning_status``.
A load balancer's tree is realized as a whole, so settling a load balancer to
``ACTIVE`` or ``ERROR`` settles every child still ``PENDING_*`` to the same;
operating statuses (members ``ONLINE``/``ERROR`` from health checks…) are
reported per object. Every change is an ordinary change in the stream.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from netbay.errors import BadRequest
from netbay.lbaas.common import (
    ACTIVE,
    ERROR,
    OPERATING_STATUSES,
    PENDING,
    PROVISIONING_STATUSES,
    LBResource,
)
from netbay.lbaas.healthmonitors import HEALTHMONITORS
from netbay.lbaas.l7policies import L7POLICIES
from netbay.lbaas.l7rules import L7RULES
from netbay.lbaas.listeners import LISTENERS
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.lbaas.members import MEMBERS
from netbay.lbaas.pools import POOLS
from netbay.store.models import LBHealthMonitor, LBL7Policy, LBL7Rule, LBListener, LBMember, LBPool, LoadBalancer

REPORTABLE: dict[str, LBResource] = {
    "loadbalancers": LOADBALANCERS,
    "listeners": LISTENERS,
    "pools": POOLS,
    "members": MEMBERS,
    "healthmonitors": HEALTHMONITORS,
    "l7policies": L7POLICIES,
    "l7rules": L7RULES,
}


# --- the status tree -----------------------------------------------------------------------


def _named(obj: Any) -> dict[str, Any]:
    return {"id": obj.id, "name": obj.name or "", "provisioning_status": obj.provisioning_status,
            "operating_status": obj.operating_status}


def tree(session: Session, lb: LoadBalancer) -> dict[str, Any]:
    """``{"statuses": {"loadbalancer": {…, "listeners": [{…, "pools": [{…}]}]}}}``."""
    listeners = session.scalars(select(LBListener).where(LBListener.loadbalancer_id == lb.id)
                                .order_by(LBListener.created_at, LBListener.id))
    out = []
    for listener in listeners:
        pools = []
        if listener.default_pool_id:
            pool = session.get_one(LBPool, listener.default_pool_id)
            entry = _named(pool)
            monitor = session.scalars(select(LBHealthMonitor).where(LBHealthMonitor.pool_id == pool.id)).first()
            if monitor is not None:
                entry["health_monitor"] = {**_named(monitor), "type": monitor.type}
            members = session.scalars(select(LBMember).where(LBMember.pool_id == pool.id)
                                      .order_by(LBMember.created_at, LBMember.id))
            entry["members"] = [{**_named(m), "address": m.address, "protocol_port": m.protocol_port}
                                for m in members]
            pools.append(entry)
        policies = session.scalars(select(LBL7Policy).where(LBL7Policy.listener_id == listener.id)
                                   .order_by(LBL7Policy.position))
        l7 = [{**_named(p), "action": p.action, "rules": [
            {k: v for k, v in _named(r).items() if k != "name"} | {"type": r.type}
            for r in session.scalars(select(LBL7Rule).where(LBL7Rule.l7policy_id == p.id)
                                     .order_by(LBL7Rule.created_at, LBL7Rule.id))]} for p in policies]
        out.append({**_named(listener), "pools": pools, **({"l7policies": l7} if l7 else {})})
    return {"statuses": {"loadbalancer": {**_named(lb), "listeners": out}}}


# --- reports ----------------------------------------------------------------------------------


def _parse(kind: str, obj_id: Any, report: Any) -> tuple[str | None, str | None]:
    if isinstance(report, str):
        report = {"provisioning_status": report}
    if not isinstance(obj_id, str) or not isinstance(report, dict) or not report or set(report) - {
            "provisioning_status", "operating_status"}:
        raise BadRequest(f"Invalid status report for {kind} {obj_id}: expected a provisioning status, or an "
                         "object with provisioning_status and/or operating_status.")
    provisioning, operating = report.get("provisioning_status"), report.get("operating_status")
    if provisioning is not None and provisioning not in PROVISIONING_STATUSES:
        raise BadRequest(f"Invalid provisioning_status '{provisioning}' for {kind} {obj_id}; "
                         f"expected one of {', '.join(sorted(PROVISIONING_STATUSES))}.")
    if operating is not None and operating not in OPERATING_STATUSES:
        raise BadRequest(f"Invalid operating_status '{operating}' for {kind} {obj_id}; "
                         f"expected one of {', '.join(sorted(OPERATING_STATUSES))}.")
    return provisioning, operating


def report(session: Session, kind: str, reports: Any) -> list[str]:
    """Apply one collection's reports; returns the ids that no longer exist (the
    realizer may report on something deleted meanwhile: not an error)."""
    resource = REPORTABLE[kind]
    if not isinstance(reports, dict):
        raise BadRequest(f"Invalid status report for {kind}: expected an object keyed by id.")
    parsed = {obj_id: _parse(kind, obj_id, rep) for obj_id, rep in reports.items()}
    missing = []
    for obj_id, (provisioning, operating) in sorted(parsed.items()):
        obj = session.get(resource.model, obj_id, with_for_update=True)
        if obj is None:
            missing.append(obj_id)
            continue
        resource.set_status(session, obj, provisioning, operating)
        if kind == "loadbalancers" and provisioning in (ACTIVE, ERROR):
            _settle_children(session, obj.id, provisioning)
    return missing


def _settle_children(session: Session, lb_id: str, provisioning: str) -> None:
    pools = select(LBPool.id).where(LBPool.loadbalancer_id == lb_id)
    listeners = select(LBListener.id).where(LBListener.loadbalancer_id == lb_id)
    children: list[tuple[LBResource, Select[Any]]] = [
        (LISTENERS, select(LBListener).where(LBListener.loadbalancer_id == lb_id)),
        (POOLS, select(LBPool).where(LBPool.loadbalancer_id == lb_id)),
        (MEMBERS, select(LBMember).where(LBMember.pool_id.in_(pools))),
        (HEALTHMONITORS, select(LBHealthMonitor).where(LBHealthMonitor.pool_id.in_(pools))),
        (L7POLICIES, select(LBL7Policy).where(LBL7Policy.listener_id.in_(listeners))),
        (L7RULES, select(LBL7Rule).where(LBL7Rule.l7policy_id.in_(
            select(LBL7Policy.id).where(LBL7Policy.listener_id.in_(listeners))))),
    ]
    for resource, stmt in children:
        for child in session.scalars(stmt.order_by(resource.model.created_at, resource.model.id)).all():
            if child.provisioning_status in PENDING:
                resource.set_status(session, child, provisioning)


__all__ = ["REPORTABLE", "report", "tree"]
