"""Octavia's operating statuses of a load balancer's tree, from its spec and the
members' health (the health manager's rules; see :mod:`netbay.dataplane.loadbalancer`)."""

from __future__ import annotations

from collections.abc import Mapping

from netbay.dataplane.lb.health import Health
from netbay.dataplane.lb.spec import LoadBalancerSpec


def operating_statuses(spec: LoadBalancerSpec, health: Mapping[str, Health]
                       ) -> dict[str, dict[str, str | None]]:
    """Octavia's operating statuses of the tree (None: not known yet, report nothing)."""
    # Children first: a report is applied in this order, and a child settled with its
    # own statuses before the load balancer is written once, not twice.
    out: dict[str, dict[str, str | None]] = {k: {} for k in
                                              ("members", "healthmonitors", "pools", "listeners", "loadbalancers")}
    lb_status = "ONLINE" if spec.enabled else "OFFLINE"
    served = {li.pool_id for li in spec.listeners if li.enabled and li.pool_id}
    for pool in spec.pools:
        on = spec.enabled and pool.enabled
        down = enabled = 0
        for m in pool.members:
            if not (on and m.enabled):
                out["members"][m.id] = "OFFLINE"   # HAProxy's MAINT
                continue
            enabled += 1
            if not pool.monitored:
                out["members"][m.id] = "NO_MONITOR"
                continue
            if pool.id not in served:
                out["members"][m.id] = "OFFLINE"   # no frontend: Octavia's haproxy checks nothing
                continue
            h = health.get(m.id)
            up = None if h is None else h.up
            out["members"][m.id] = None if up is None else ("ONLINE" if up else "ERROR")
            down += up is False
        if not on or pool.id not in served:
            status = "OFFLINE"   # no frontend uses it: absent from the amphora's report, Octavia's "offline pool"
        elif not pool.members:
            status = "ONLINE"    # HAProxy's backend with no servers is UP, which Octavia reports ONLINE
        elif not enabled:
            status = "ERROR"     # every member admin-down: HAProxy's backend is DOWN
        elif down and down == enabled:
            status = "ERROR"
        elif down:
            status = "DEGRADED"
        else:
            status = "ONLINE"
        out["pools"][pool.id] = status
        if pool.monitor is not None:
            out["healthmonitors"][pool.monitor.id] = "ONLINE" if on and pool.monitor.enabled else "OFFLINE"
        # A pool with no working member makes the load balancer ERROR, a degraded one
        # DEGRADED (unless already ERROR), as Octavia's health manager rules.
        if spec.enabled and status == "ERROR":
            lb_status = "ERROR"
        elif spec.enabled and status == "DEGRADED" and lb_status == "ONLINE":
            lb_status = "DEGRADED"
    for listener in spec.listeners:
        out["listeners"][listener.id] = "ONLINE" if spec.enabled and listener.enabled else "OFFLINE"
    out.update(l7_statuses(spec))
    out["loadbalancers"][spec.id] = lb_status
    return out


def l7_statuses(spec: LoadBalancerSpec) -> dict[str, dict[str, str | None]]:
    """L7 policies and rules: ``ONLINE`` while they and their listener are enabled."""
    out: dict[str, dict[str, str | None]] = {"l7policies": {}, "l7rules": {}}
    for listener in spec.listeners:
        on = spec.enabled and listener.enabled
        for policy in listener.l7policies:
            out["l7policies"][policy.id] = "ONLINE" if on and policy.enabled else "OFFLINE"
            for rule in policy.rules:
                out["l7rules"][rule.id] = "ONLINE" if on and policy.enabled and rule.enabled else "OFFLINE"
    return out


def status_text(provisioning: str | None, operating: str | None) -> str | None:
    if provisioning and operating:
        return f"{provisioning}/{operating}"
    if provisioning:
        return provisioning
    if operating:
        return f"/{operating}"
    return None
