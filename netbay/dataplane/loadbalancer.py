"""Load balancers: a namespace owning the VIP, DNAT to members, health checks.

Two providers share this realizer (namespace, routes, health monitors, statuses):
``nftables`` is the table described here; ``haproxy`` (``netbay.dataplane.lb.haproxy``)
is a haproxy process in the same namespace serving every listener but UDP, whose
listeners stay in the table. ``_sync_table`` is the seam: it dispatches on the
spec's driver. Stopping the agent leaves both running (the dataplane outlives it;
a restarted agent adopts them); a deleted load balancer's haproxy is stopped
before its namespace goes.

Each load balancer is a namespace ``names.loadbalancer(id)`` whose only leg is the
VIP port, wired by the fabric as ``vip`` (docs/dataplane.md). This module works
inside it: forwarding, routes (the VIP subnet's gateway and host routes: members on
other subnets are reached through the router the VIP subnet is attached to, as the
member API requires) and one nftables table, ``ip netbay-lb``::

    chain prerouting   (nat, dstnat)
        ip daddr VIP tcp dport 80 dnat ip to numgen inc mod N map { 0 : m1 . 8080, … }
        ip daddr VIP udp dport 53 dnat ip to jhash ip saddr mod N seed S map { … }
    chain postrouting  (nat, srcnat)
        ct status dnat snat ip to VIP

**Full proxy.** Forwarded connections leave with the VIP as their source (SNAT), as
Octavia's amphorae do (members see the load balancer's address, not the client's).
That is what makes replies come back through this namespace whatever the member's
route to the client is (same subnet, a router, a floating IP on the VIP), and lets
a member be a client of its own load balancer. An IPv6 VIP's table is ``ip6 netbay-lb``,
the same rules over IPv6 members (members of the VIP's family only, as an amphora's).

The parts, each its own module: the namespace's sysctls, routes and ARP
(``lb/vipns.py``); the table's content and why it is rebuilt whole (``lb/table.py``);
health monitors: their threads and member health (``lb/monitors.py``), their probes
(``lb/health.py``); Octavia's statuses and what the agent reports
(``lb/statuses.py``); a statistics round (``lb/stats.py``).
"""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from netbay.dataplane import lbstats, links, netns
from netbay.dataplane.lb import haproxy, leastconn, stats
from netbay.dataplane.lb.health import MAX_PROBE_WORKERS, Health, PoolMonitor
from netbay.dataplane.lb.monitors import Monitors
from netbay.dataplane.lb.spec import (
    HAPROXY,
    ListenerSpec,
    LoadBalancerSpec,
    MemberSpec,
    MonitorSpec,
    PoolSpec,
    Tree,
    from_api,
)
from netbay.dataplane.lb.statuses import agent_statuses, operating_statuses, tree_report
from netbay.dataplane.lb.table import FAMILY, TABLE, is_v4, kernel_part, slots, table_commands, table_family
from netbay.dataplane.lb.vipns import VIP_IFNAME, announce_quietly, observed, sync_routes, sysctls
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft, NftError
from netbay.dataplane.rtnl import rtnl

log = logging.getLogger(__name__)

__all__ = [
    "FAMILY", "TABLE", "VIP_IFNAME", "LoadBalancerSpec", "ListenerSpec", "PoolSpec", "MemberSpec",
    "MonitorSpec", "Tree", "from_api", "LoadBalancerRealizer", "observed", "slots",
    "Health", "operating_statuses", "table_commands",
]

JOIN_TIMEOUT = 5.0

Report = Callable[[Mapping[str, Mapping[str, str]]], None]


# --- the realizer ---------------------------------------------------------------------------------


class LoadBalancerRealizer:
    """Load balancers for the agent (:class:`netbay.dataplane.realizers.Realizer`).

    The agent thread calls ``resync``/``apply``/``statuses``; monitor threads call
    ``health_results``. One lock serializes what they share (specs, health, the
    tables); the kernel work under it is one small nft transaction.
    """

    name = "loadbalancers"
    before_fabric = False

    def __init__(self, names: Names, report: Report | None = None, *, stats_interval: float = 5.0) -> None:
        self.names = names
        self.report = report
        self.stats_interval = stats_interval
        self.stats: lbstats.StatsSender | None = None
        self.realizations: dict[str, int] = defaultdict(int)   # lb id -> table transactions
        # lb id -> (counters, open connections by mark) as the last statistics round saw them
        self._stats_seen: stats.Seen = {}
        self.specs: dict[str, LoadBalancerSpec] = {}
        self.applied: dict[str, tuple[int | None, str]] = {}  # lb id -> (ns inode, table JSON)
        self.monitoring = Monitors(self)                       # health monitor threads and member health:
        self.health: dict[str, Health] = self.monitoring.health          # member id -> health
        self.monitors: dict[str, PoolMonitor] = self.monitoring.threads  # pool id -> thread
        self.leastconn = leastconn.Watchers(self._flows_moved)   # flow counts for LEAST_CONNECTIONS
        self.nfts: dict[str, Nft] = {}                      # lb id -> its namespace's nft context
        self.stopping = threading.Event()
        self._lock = threading.RLock()
        self._executor: ThreadPoolExecutor | None = None
        self.haproxy = haproxy.Haproxy(haproxy.state_dir(names.prefix))  # the haproxy provider's processes
        netns.on_delete(self._namespace_deleted)

    # -- life cycle ----------------------------------------------------------------------------

    def attach(self, report: Report) -> None:
        """Where asynchronous (health) status reports go: the agent's reporter."""
        self.report = report

    def attach_stats(self, send: lbstats.Send) -> None:
        """Where listener statistics go (the agent's ``PUT /netbay/v1/lbstats``): start
        sending them every ``stats_interval`` seconds."""
        if self.stats is not None:
            self.stats.stop()
        self.stats = lbstats.StatsSender(self.collect_stats, send, self.stats_interval)
        self.stats.start()

    def collect_stats(self) -> dict[str, dict[str, Any]]:
        """Listener id -> its counters, for every load balancer realized here."""
        with self._lock:
            work = [(spec, self.nfts.get(lb_id), self.applied.get(lb_id, (None,))[0])
                    for lb_id, spec in self.specs.items()]
        return stats.collect(work, self._stats_seen)

    def failover(self, lb_id: str) -> None:
        """Forget everything about the load balancer before its namespace is rebuilt
        (the agent deletes the namespace; the next ensure starts from scratch)."""
        with self._lock:
            self._forget(lb_id)

    def stop(self) -> None:
        """Stop every monitor and least-connections thread (bounded), the probe workers
        and the statistics."""
        if self.stats is not None:
            self.stats.stop()
            self.stats = None
        self.stopping.set()
        with self._lock:
            monitors = self.monitoring.stop_all()
            watchers = self.leastconn.stop_all()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for mon in monitors:
            mon.thread.join(max(0.0, deadline - time.monotonic()))
        for w in watchers:
            w.join(max(0.0, deadline - time.monotonic()))
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self.stopping.clear()

    def release(self) -> None:
        """The agent is told to stop: its haproxy processes stop, their files go (the
        namespaces stay for ``netbay down``; the next agent starts them again)."""
        with self._lock:
            for lb_id in list(self.specs):
                self._forget(lb_id)
            self.haproxy.stop_all()

    def pool_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(MAX_PROBE_WORKERS, thread_name_prefix="netbay-lb-probe")
            return self._executor

    # -- the agent's verbs -----------------------------------------------------------------------

    def resync(self, state: Any, fabric: Any, specs: Mapping[str, Any]) -> dict[str, dict[str, bool]]:
        for lb_id in (observed(self.names) | self.haproxy.known()) - set(state.loadbalancers):
            self.remove(lb_id)
        with self._lock:
            self.applied.clear()  # verify everything again
            for lb_id in set(self.specs) - set(state.loadbalancers):
                self._forget(lb_id)
        tree = Tree.build(state.tables)
        return {"loadbalancers": {lb: self._ensure(state, tree, lb) for lb in state.loadbalancers}}

    def apply(self, state: Any, fabric: Any, work: Mapping[str, set[str]],
              specs: Mapping[str, Any]) -> dict[str, dict[str, bool]]:
        ids = work.get("loadbalancers") or set()
        if not ids:
            return {}
        tree = Tree.build(state.tables)
        done: dict[str, bool] = {}
        for lb_id in sorted(ids):
            if lb_id in state.loadbalancers:
                done[lb_id] = self._ensure(state, tree, lb_id)
            else:
                self.remove(lb_id)
        return {"loadbalancers": done}

    def _namespace_deleted(self, ns: str) -> None:
        """Whoever deletes a load balancer's namespace (a sweep, a failover), its
        haproxy goes first: no haproxy is left serving a namespace nothing can reach."""
        head = self.names.loadbalancer("")
        if ns.startswith(head) and ns[len(head):] in self.haproxy.known():
            self.haproxy.stop(ns[len(head):])

    def expand(self, state: Any, touched: Any, work: dict[str, set[str]]) -> None:
        """An L7 policy's change concerns its listener's load balancer (rule changes
        are logged as their policy's update too)."""
        if touched.collection != "l7policies":
            return
        listeners = state.table("listeners")
        for listener_id in touched.values("listener_id"):
            for ref in (listeners.get(listener_id) or {}).get("loadbalancers") or ():
                if isinstance(ref, dict) and ref.get("id"):
                    work.setdefault("loadbalancers", set()).add(ref["id"])

    def remove(self, lb_id: str) -> None:
        """Stop its monitors, forget it, delete its namespace (the VIP leg goes along)."""
        with self._lock:
            self._forget(lb_id)
            self.haproxy.stop(lb_id)   # before its namespace goes: no haproxy outlives its load balancer
        netns.delete(self.names.loadbalancer(lb_id))

    # -- ensure -------------------------------------------------------------------------------------

    def _ensure(self, state: Any, tree: Tree, lb_id: str) -> bool:
        lb = state.loadbalancers[lb_id]
        try:
            spec = from_api(lb, tree, state.ports, state.subnets, self.names)
            self.ensure(spec)
        except Exception as exc:  # noqa: BLE001 - reported as the load balancer's status
            log.warning("netbay agent: load balancer %s: %s", lb_id, exc)
            return False
        return True

    def ensure(self, spec: LoadBalancerSpec) -> None:
        """Make the namespace forward ``spec``'s listeners; start/stop its monitors.
        Raises if the VIP leg is not wired yet (the agent retries)."""
        if not netns.exists(spec.ns):
            raise links.LinkError(errno.ENODEV, f"load balancer namespace {spec.ns!r} not made yet "
                                                f"(VIP port not wired)")
        vip = rtnl(spec.ns).link(VIP_IFNAME)
        if vip is None:
            raise links.LinkError(errno.ENODEV, f"{spec.ns}: VIP leg {VIP_IFNAME!r} not wired yet")
        with self._lock:
            old = self.specs.get(spec.id)
            self.specs[spec.id] = spec
            fresh = spec.id not in self.applied or self.applied[spec.id][0] != netns.inode(spec.ns)
            if old is None or old.routes != spec.routes or fresh:
                sysctls(spec.ns, not is_v4(spec.vip_address))
                sync_routes(spec.ns, vip.index, spec.routes)
            if (old is None or fresh or old.vip_address != spec.vip_address) and vip.address:
                self.pool_executor().submit(announce_quietly, spec.ns, vip.address, spec.vip_address)
            self.leastconn.sync(kernel_part(spec), fresh)
            self._sync_table(spec)
            self.monitoring.sync(spec, old)

    def _in_map(self, pool: PoolSpec, member: MemberSpec) -> bool:
        if not member.enabled or member.weight <= 0:
            return False
        if not pool.monitored:
            return True
        h = self.health.get(member.id)
        return h is None or h.up is not False

    def _sync_table(self, spec: LoadBalancerSpec) -> None:
        """Refill the table (one transaction) and, for the haproxy provider, its
        configuration, if what they should hold changed. The first time in this
        process, a table already there (a restart) is rebuilt from scratch; a running
        haproxy is adopted (reloaded only if its configuration differs)."""
        config = None
        l4 = kernel_part(spec)
        if spec.driver == HAPROXY:
            config = haproxy.render(spec, self.haproxy.dir(spec.id), self._in_map)
        cmds = table_commands(l4, self._in_map)
        text = json.dumps(cmds, sort_keys=True) + (config or "")
        inode = netns.inode(spec.ns)
        lc = self.leastconn.get(spec.id)
        if self.applied.get(spec.id) == (inode, text):
            if lc is not None:   # the members a flow may go to may have changed (health)
                self._point_least_connections(spec)
            return
        if config is not None:
            self.haproxy.ensure(spec.id, spec.ns, config)
        nft = self.nfts.get(spec.id)
        if nft is None:
            # Kept open: closing a context costs up to tens of ms after some transactions.
            nft = self.nfts[spec.id] = Nft(spec.ns)
        elements = lc.elements(l4, self._in_map) if lc is not None else []   # the maps are emptied
        try:
            if self.applied.get(spec.id, (None,))[0] != inode and (table_family(l4), TABLE) in nft.tables():
                nft.run(table_commands(l4, self._in_map, rebuild=True) + elements)
            else:
                nft.run(cmds + elements)
        except Exception:
            if lc is not None:
                lc.forget_kernel()
            raise
        self.applied[spec.id] = (inode, text)
        self.realizations[spec.id] += 1

    # -- least connections (every listener in the table) ----------------------------------------

    def _flows_moved(self, lb_id: str) -> None:
        """The watcher's counts changed: point the listeners at their least-loaded members."""
        with self._lock:
            spec = self.specs.get(lb_id)
            if spec is not None and lb_id in self.applied:
                self._point_least_connections(spec)

    def _point_least_connections(self, spec: LoadBalancerSpec) -> None:
        """Replace the elements whose least-loaded member changed (one transaction); if
        that fails, the table is refilled."""
        lc, nft = self.leastconn.get(spec.id), self.nfts.get(spec.id)
        if lc is None or nft is None:
            return
        cmds = lc.updates(kernel_part(spec), self._in_map)
        if not cmds:
            return
        try:
            nft.run(cmds)
        except (NftError, OSError) as exc:
            log.info("load balancer %s: least-connections element not replaced (%s); refilling", spec.id, exc)
            lc.forget_kernel()
            self.applied.pop(spec.id, None)
            try:
                self._sync_table(spec)
            except Exception as again:  # noqa: BLE001 - retried at the next change or resync
                log.warning("load balancer %s: cannot refill its table: %s", spec.id, again)

    def _forget(self, lb_id: str) -> None:
        spec = self.specs.pop(lb_id, None)
        self._stats_seen.pop(lb_id, None)
        self.applied.pop(lb_id, None)
        nft = self.nfts.pop(lb_id, None)
        if nft is not None:
            nft.close()
        self.monitoring.forget(lb_id, spec)
        self.leastconn.forget(lb_id)

    # -- health --------------------------------------------------------------------------------------

    def monitor_target(self, mon: PoolMonitor) -> tuple[str, MonitorSpec, list[MemberSpec]] | None:
        """What monitor thread ``mon`` probes now, or None: it was replaced or stopped."""
        with self._lock:
            return self.monitoring.target(self.specs.get(mon.lb_id), mon)

    def health_results(self, lb_id: str, pool_id: str, monitor: MonitorSpec, results: Mapping[str, bool]) -> None:
        """Count one round of probes; on a transition, rebuild the table and report."""
        with self._lock:
            spec = self.specs.get(lb_id)
            pool = spec.pool(pool_id) if spec is not None else None
            if spec is None or pool is None or pool.monitor is None or pool.monitor.id != monitor.id:
                return
            if not self.monitoring.record({m.id for m in pool.members}, monitor, results):
                return
            try:
                self._sync_table(spec)
            except Exception as exc:  # noqa: BLE001 - retried at the next transition or change
                log.warning("load balancer %s: cannot update members after a health change: %s", lb_id, exc)
                self.applied.pop(lb_id, None)
            report = tree_report(spec, self.health)
        if self.report is not None and report:
            self.report(report)

    # -- statuses for the agent --------------------------------------------------------------------

    def statuses(self, state: Any, work: Mapping[str, set[str]], everything: bool,
                 outcomes: Mapping[str, Mapping[str, bool]], failed: Mapping[str, set[str]]
                 ) -> dict[str, dict[str, str]]:
        """What to report for the load balancers of ``work``: what differs from the state.

        Realized: provisioning ``ACTIVE`` (settling the pending tree) and the operating
        statuses; failed: ``ERROR``.
        """
        ids = set(state.loadbalancers) if everything else set(work.get("loadbalancers") or ())
        with self._lock:
            return agent_statuses(state.tables, ids, self.specs, self.health, outcomes, failed)
