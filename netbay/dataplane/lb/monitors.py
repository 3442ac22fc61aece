"""The health monitors of every load balancer realized here: one thread per monitored
pool (``lb/health.py``'s :class:`PoolMonitor`) and the health of each member.

As Octavia's (HAProxy's ``rise``/``fall``) monitors: TCP connect, HTTP request with
``expected_codes``, ICMP echo and the others of ``lb/health.py`` run on one thread
per monitored pool, probing every member each ``delay`` seconds (at most ``timeout``
seconds per probe, all members in parallel on the realizer's shared bounded worker
pool); the probes' sockets are opened inside the namespace, so they leave through the
VIP port. A member starts up; ``max_retries_down`` consecutive failures take it down
(out of the map, ``ERROR``), ``max_retries`` consecutive successes bring it back
(``ONLINE``). The realizer rebuilds the table on a transition and reports the tree's
operating statuses at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netbay.dataplane.lb.health import Health, PoolMonitor
from netbay.dataplane.lb.spec import LoadBalancerSpec, MemberSpec, MonitorSpec


class Monitors:
    """The monitor threads (pool id -> thread) and member health (member id -> health)
    of the realizer ``owner`` (whose lock guards both)."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.threads: dict[str, PoolMonitor] = {}
        self.health: dict[str, Health] = {}

    def sync(self, spec: LoadBalancerSpec, old: LoadBalancerSpec | None) -> None:
        """One thread per enabled monitor of an enabled pool. A new (or re-enabled,
        or replaced) monitor starts from scratch; health is kept across other changes."""
        wanted = {p.id: p for p in spec.pools if spec.enabled and p.enabled and p.monitored}
        for pool_id, mon in list(self.threads.items()):
            pool = wanted.get(pool_id)
            if mon.lb_id == spec.id and (pool is None or pool.monitor is None or pool.monitor.id != mon.monitor_id):
                self.threads.pop(pool_id).stop.set()
        keep = {m.id for p in wanted.values() for m in p.members}
        for s in (spec, old):
            for pool in (s.pools if s is not None else ()):
                for m in pool.members:
                    if m.id not in keep:
                        self.health.pop(m.id, None)
        for pool_id, pool in wanted.items():
            if pool_id not in self.threads and pool.monitor is not None:
                for m in pool.members:
                    self.health.pop(m.id, None)
                mon = self.threads[pool_id] = PoolMonitor(self.owner, spec.id, pool_id, pool.monitor.id)
                mon.start()

    def forget(self, lb_id: str, spec: LoadBalancerSpec | None) -> None:
        """Stop the load balancer's threads and forget its members' health."""
        for pool_id in [p for p, m in self.threads.items() if m.lb_id == lb_id]:
            self.threads.pop(pool_id).stop.set()
        if spec is not None:
            for pool in spec.pools:
                for m in pool.members:
                    self.health.pop(m.id, None)

    def stop_all(self) -> list[PoolMonitor]:
        """Ask every thread to end; returns them (to be joined outside the lock)."""
        out = list(self.threads.values())
        self.threads.clear()
        for mon in out:
            mon.stop.set()
        return out

    def target(self, spec: LoadBalancerSpec | None, mon: PoolMonitor
               ) -> tuple[str, MonitorSpec, list[MemberSpec]] | None:
        """What thread ``mon`` probes now in ``spec`` (its load balancer's), or None: it
        was replaced or stopped."""
        pool = spec.pool(mon.pool_id) if spec is not None else None
        if spec is None or pool is None or pool.monitor is None or self.threads.get(mon.pool_id) is not mon:
            return None
        return spec.ns, pool.monitor, [m for m in pool.members if m.enabled]

    def record(self, member_ids: set[str], monitor: MonitorSpec, results: Mapping[str, bool]) -> bool:
        """Count one round of probes of the members in ``member_ids``; True on a transition."""
        changed = False
        for mid, ok in results.items():
            if mid in member_ids:
                h = self.health.setdefault(mid, Health())
                changed |= h.record(ok, max(1, monitor.max_retries), max(1, monitor.max_retries_down))
        return changed


__all__ = ["Monitors"]
