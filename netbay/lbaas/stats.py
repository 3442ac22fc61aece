"""Statistics of listeners and load balancers, as the dataplane counted them.

The agent reports each listener's kernel counters as absolute values under an
``epoch`` (``netbay.dataplane.lbstats``); a new epoch (namespace rebuilt by a
failover, agent restarted) starts from zero, so what the previous one counted
is carried over and the totals Octavia shows only grow. ``active_connections``
is a gauge: the latest report's. A load balancer's statistics are the sum of
its listeners', as Octavia sums its amphorae's listener statistics.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from netbay.errors import BadRequest
from netbay.store.models import LBListener, LBListenerStats, utcnow

FIELDS = ("bytes_in", "bytes_out", "active_connections", "total_connections", "request_errors")
CARRIED = ("bytes_in", "bytes_out", "total_connections", "request_errors")
_MAX = 2**63 - 1


def _parse(listener_id: Any, report: Any) -> dict[str, Any]:
    if not isinstance(listener_id, str) or not isinstance(report, dict) \
            or not isinstance(report.get("epoch"), str):
        raise BadRequest(f"Invalid statistics for listener {listener_id}: expected an object with "
                         f"epoch and {', '.join(FIELDS)}.")
    out: dict[str, Any] = {"epoch": report["epoch"][:64]}
    for key in FIELDS:
        value = report.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX:
            raise BadRequest(f"Invalid {key} for listener {listener_id}: expected a non-negative integer.")
        out[key] = value
    return out


def record(session: Session, reports: Any) -> list[str]:
    """Apply the agent's ``{"listeners": {id: {epoch, bytes_in, …}}}``; returns the
    listeners that no longer exist (skipped). Rows of deleted listeners are dropped."""
    if not isinstance(reports, dict) or set(reports) - {"listeners"} \
            or not isinstance(reports.get("listeners", {}), dict):
        raise BadRequest("Invalid statistics: expected {\"listeners\": {id: {...}}}.")
    parsed = {lid: _parse(lid, rep) for lid, rep in reports.get("listeners", {}).items()}
    listeners = {li.id: li for li in session.scalars(
        select(LBListener).where(LBListener.id.in_(list(parsed))))} if parsed else {}
    missing = sorted(set(parsed) - set(listeners))
    for lid in sorted(listeners):
        rep, row = parsed[lid], session.get(LBListenerStats, lid, with_for_update=True)
        if row is None:
            row = LBListenerStats(listener_id=lid, loadbalancer_id=listeners[lid].loadbalancer_id, epoch="",
                                  **{k: 0 for k in FIELDS}, **{f"carried_{k}": 0 for k in CARRIED})
            session.add(row)
        if row.epoch != rep["epoch"]:
            for key in CARRIED:
                setattr(row, f"carried_{key}", getattr(row, f"carried_{key}") + getattr(row, key))
            row.epoch = rep["epoch"]
        for key in FIELDS:
            setattr(row, key, rep[key])
        row.updated_at = utcnow()
    session.execute(delete(LBListenerStats).where(
        LBListenerStats.listener_id.not_in(select(LBListener.id))))
    return missing


def _totals(rows: list[LBListenerStats]) -> dict[str, int]:
    out = dict.fromkeys(FIELDS, 0)
    for row in rows:
        for key in FIELDS:
            out[key] += getattr(row, key) + (getattr(row, f"carried_{key}") if key in CARRIED else 0)
    return out


def listener_stats(session: Session, listener_id: str) -> dict[str, int]:
    """``{"bytes_in", "bytes_out", "active_connections", "total_connections", "request_errors"}``."""
    return _totals(list(session.scalars(select(LBListenerStats).where(LBListenerStats.listener_id == listener_id))))


def loadbalancer_stats(session: Session, lb_id: str) -> dict[str, int]:
    rows = session.scalars(select(LBListenerStats).join(
        LBListener, LBListener.id == LBListenerStats.listener_id).where(LBListener.loadbalancer_id == lb_id))
    return _totals(list(rows))


__all__ = ["listener_stats", "loadbalancer_stats", "record"]
