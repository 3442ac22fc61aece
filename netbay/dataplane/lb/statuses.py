"""Octavia's operating statuses of a load balancer's tree, from its spec and the
members' health (the health manager's rules), and what the agent reports of them.

Statuses (Octavia's health manager's rules): a member is ``OFFLINE`` when it (or its
pool or load balancer) is disabled, ``NO_MONITOR`` without an enabled monitor, else
``ONLINE``/``ERROR``; a pool is ``OFFLINE`` when disabled, used by no enabled listener
or empty, else ``ONLINE``, ``DEGRADED`` (some enabled members down) or ``ERROR`` (all
enabled members down, or none enabled); a listener ``ONLINE`` (``OFFLINE`` disabled); the load balancer ``OFFLINE``
when disabled, ``ERROR`` when one of its pools is, ``DEGRADED`` when one is. Provisioning
goes ``ACTIVE`` once realized (``ERROR`` if it cannot be), which settles the tree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

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


# --- what the agent reports ----------------------------------------------------------------------

PENDING = ("PENDING_CREATE", "PENDING_UPDATE", "PENDING_DELETE")


def tree_report(spec: LoadBalancerSpec, health: Mapping[str, Health]) -> dict[str, dict[str, str]]:
    """The tree's known operating statuses as a status report (``/<operating>``)."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for kind, items in operating_statuses(spec, health).items():
        for obj_id, operating in items.items():
            if operating is not None:
                out[kind][obj_id] = f"/{operating}"
    return dict(out)


def agent_statuses(tables: Mapping[str, Mapping[str, dict]], ids: Iterable[str],
                   specs: Mapping[str, LoadBalancerSpec], health: Mapping[str, Health],
                   outcomes: Mapping[str, Mapping[str, bool]], failed: Mapping[str, set[str]]
                   ) -> dict[str, dict[str, str]]:
    """What to report for the load balancers ``ids``: what differs from the state's ``tables``.

    Realized: provisioning ``ACTIVE`` (settling the pending tree) and the operating
    statuses; failed: ``ERROR``.
    """
    out: dict[str, dict[str, str]] = defaultdict(dict)
    loadbalancers = tables.get("loadbalancers") or {}
    for lb_id in ids:
        lb = loadbalancers.get(lb_id)
        if lb is None:
            continue
        ok = (outcomes.get("loadbalancers") or {}).get(lb_id)
        if lb_id in (failed.get("loadbalancers") or ()):
            if lb.get("provisioning_status") != "ERROR":
                out["loadbalancers"][lb_id] = "ERROR"
            continue
        spec = specs.get(lb_id)
        if not ok or spec is None:
            continue
        for kind, items in operating_statuses(spec, health).items():
            for obj_id, operating in items.items():
                current = (tables.get(kind) or {}).get(obj_id)
                if current is None:
                    continue
                prov = current.get("provisioning_status")
                # ERROR too: a failed attempt (reported ERROR) that a retry realized.
                want_prov = "ACTIVE" if prov in PENDING or prov == "ERROR" else None
                want_op = operating if operating is not None and current.get("operating_status") != operating \
                    else None
                text = status_text(want_prov, want_op)
                if text is not None:
                    out[kind][obj_id] = text
    return {k: v for k, v in out.items() if v}
