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

One rule per listener (TCP; HTTP is forwarded as TCP; UDP), its pool's members as
the elements of an anonymous map keyed by ``numgen inc`` (``ROUND_ROBIN``) or a
hash of the client address (``SOURCE_IP``: a client sticks to one member while the
pool's membership is unchanged). Weights repeat a member's slot (divided by their
greatest common divisor, interleaved); weight 0, admin-down members and members the
health monitor found down have no slot. A listener whose pool has no slot gets no
rule: the VIP's own stack answers with a reset (TCP) or port unreachable (UDP).

**Full proxy.** Forwarded connections leave with the VIP as their source (SNAT), as
Octavia's amphorae do (members see the load balancer's address, not the client's).
That is what makes replies come back through this namespace whatever the member's
route to the client is (same subnet, a router, a floating IP on the VIP), and lets
a member be a client of its own load balancer. An IPv6 VIP's table is ``ip6 netbay-lb``,
the same rules over IPv6 members (members of the VIP's family only, as an amphora's).

(Named maps would let a membership change be an element update, but the map's
size is in the rule (``mod N``), and this libnftables (1.0.6) cannot declare a map
keyed by ``numgen`` in JSON. The table is small, so it is rebuilt in one atomic
transaction when what it should hold changes — connections keep their translation
in conntrack — and not touched when nothing changed.)

**Health monitors** (TCP connect, HTTP request with ``expected_codes``, ICMP echo)
run on one thread per monitored pool, probing every member each ``delay`` seconds
(at most ``timeout`` seconds per probe, all members in parallel on a shared bounded
worker pool); the probes' sockets are opened inside the namespace, so they leave
through the VIP port. As Octavia's (HAProxy's ``rise``/``fall``): a member starts
up; ``max_retries_down`` consecutive failures take it down (out of the map,
``ERROR``), ``max_retries`` consecutive successes bring it back (``ONLINE``). A
transition rebuilds the table and reports the tree's operating statuses at once.

Statuses (Octavia's health manager's rules): a member is ``OFFLINE`` when it (or its
pool or load balancer) is disabled, ``NO_MONITOR`` without an enabled monitor, else
``ONLINE``/``ERROR``; a pool is ``OFFLINE`` when disabled, used by no enabled listener
or empty, else ``ONLINE``, ``DEGRADED`` (some enabled members down) or ``ERROR`` (all
enabled members down, or none enabled); a listener ``ONLINE`` (``OFFLINE`` disabled); the load balancer ``OFFLINE``
when disabled, ``ERROR`` when one of its pools is, ``DEGRADED`` when one is. Provisioning
goes ``ACTIVE`` once realized (``ERROR`` if it cannot be), which settles the tree.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import logging
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from netbay.dataplane import lbstats, links, netns
from netbay.dataplane.garp import announce
from netbay.dataplane.lb import haproxy
from netbay.dataplane.lb.health import MAX_PROBE_WORKERS, Health, PoolMonitor
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
from netbay.dataplane.lb.statuses import operating_statuses, status_text
from netbay.dataplane.lb.table import TABLE, is_v4, slots, table_commands, table_family
from netbay.dataplane.names import Names
from netbay.dataplane.nft import Nft
from netbay.dataplane.rtnl import rtnl

log = logging.getLogger(__name__)

__all__ = [
    "TABLE", "VIP_IFNAME", "LoadBalancerSpec", "ListenerSpec", "PoolSpec", "MemberSpec",
    "MonitorSpec", "Tree", "from_api", "LoadBalancerRealizer", "observed", "slots",
]

VIP_IFNAME = "vip"
PENDING = ("PENDING_CREATE", "PENDING_UPDATE", "PENDING_DELETE")
# Forward between the VIP and the members; never redirect a client to a member (the
# forwarded packet goes back out of the interface it came in by).
SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.send_redirects": "0",
    f"net.ipv4.conf.{VIP_IFNAME}.send_redirects": "0",
}
SYSCTLS_V6 = {   # an IPv6 VIP's namespace, beside those
    "net.ipv6.conf.all.forwarding": "1",
}
JOIN_TIMEOUT = 5.0

Report = Callable[[Mapping[str, Mapping[str, str]]], None]


# --- links, routes, sysctls ------------------------------------------------------------------


def _sysctls(ns: str, v6: bool = False) -> None:
    for key, value in {**SYSCTLS, **(SYSCTLS_V6 if v6 else {})}.items():
        if links.read_sysctl(ns, key) != value:
            links.sysctl(ns, key, value)


def _sync_routes(ns: str, index: int, routes: Iterable[tuple[str, str]]) -> None:
    """Exactly ``routes`` (via a gateway) on the VIP leg."""
    r = rtnl(ns)
    want = {(str(ipaddress.ip_network(d)), str(ipaddress.ip_address(g))) for d, g in routes}
    have = set()
    for af in (socket.AF_INET, socket.AF_INET6) if any(":" in g for _, g in want) else (socket.AF_INET,):
        for dst, gw, oif, metric in r.routes(af):
            if oif != index or gw is None:
                continue
            key = (str(ipaddress.ip_network(dst)), gw)
            if key in want:
                have.add(key)
            else:
                r.del_route(dst, gateway=gw, oif=index, metric=metric)
    for dst, gw in sorted(want - have):
        r.replace_route(dst, gateway=gw, oif=index)


def _announce_quietly(ns: str, mac: str, address: str) -> None:
    """:func:`announce`, off the agent's thread (closing a packet socket waits for an
    RCU grace period, ~10 ms); best effort: neighbours also re-resolve in time."""
    try:
        announce(ns, VIP_IFNAME, mac, address)
    except OSError as exc:
        log.debug("load balancer namespace %s: gratuitous ARP for %s: %s", ns, address, exc)


def observed(names: Names) -> set[str]:
    """Ids of the load balancers whose namespaces exist (``<prefix>lb-<id>``)."""
    head = names.loadbalancer("")
    return {n[len(head):] for n in netns.list(head) if len(n) > len(head)}


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
        self._stats_seen: dict[str, tuple[dict, dict]] = {}
        self.specs: dict[str, LoadBalancerSpec] = {}
        self.health: dict[str, Health] = {}                 # member id -> health
        self.applied: dict[str, tuple[int | None, str]] = {}  # lb id -> (ns inode, table JSON)
        self.monitors: dict[str, PoolMonitor] = {}             # pool id -> thread
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
        out: dict[str, dict[str, Any]] = {}
        for spec, nft, inode in work:
            if nft is None or inode is None:
                continue
            try:
                counters = lbstats.read_counters(nft, table_family(spec), TABLE)
                seen = self._stats_seen.get(spec.id)
                if seen is not None and seen[0] == counters:
                    opened = seen[1]   # no packet since: no connection opened or closed
                else:
                    # A conntrack dump walks the kernel's whole (shared) hash table, ~100 ms
                    # here: only when packets flowed. Counters again after it, so that a
                    # connection seen open is always in the total too.
                    opened = lbstats.open_connections(spec.ns)
                    counters = lbstats.read_counters(nft, table_family(spec), TABLE)
                self._stats_seen[spec.id] = (counters, opened)
            except (OSError, RuntimeError) as exc:   # the namespace went meanwhile
                log.debug("load balancer %s: no statistics this round: %s", spec.id, exc)
                continue
            try:
                lbstats.drop_stale(nft, table_family(spec), TABLE, counters, [li.id for li in spec.listeners])
            except (OSError, RuntimeError) as exc:   # a refill under way still names them: next round
                log.debug("load balancer %s: stale counters kept this round: %s", spec.id, exc)
            epoch = f"{lbstats.PROCESS}:{inode}"
            for listener in spec.listeners:
                out[listener.id] = lbstats.listener_stats(counters, opened, listener.id, epoch)
        return out

    def failover(self, lb_id: str) -> None:
        """Forget everything about the load balancer before its namespace is rebuilt
        (the agent deletes the namespace; the next ensure starts from scratch)."""
        with self._lock:
            self._forget(lb_id)

    def stop(self) -> None:
        """Stop every monitor thread (bounded), the probe workers and the statistics."""
        if self.stats is not None:
            self.stats.stop()
            self.stats = None
        self.stopping.set()
        with self._lock:
            monitors = list(self.monitors.values())
            self.monitors.clear()
        for mon in monitors:
            mon.stop.set()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for mon in monitors:
            mon.thread.join(max(0.0, deadline - time.monotonic()))
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
                _sysctls(spec.ns, not is_v4(spec.vip_address))
                _sync_routes(spec.ns, vip.index, spec.routes)
            if (old is None or fresh or old.vip_address != spec.vip_address) and vip.address:
                self.pool_executor().submit(_announce_quietly, spec.ns, vip.address, spec.vip_address)
            self._sync_table(spec)
            self._sync_monitors(spec, old)

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
        l4 = spec
        if spec.driver == HAPROXY:
            # haproxy serves everything but UDP and SCTP, which stay in the kernel (the amphora's LVS).
            l4 = replace(spec, listeners=tuple(li for li in spec.listeners if li.protocol != "tcp"))
            config = haproxy.render(spec, self.haproxy.dir(spec.id), self._in_map)
        cmds = table_commands(l4, self._in_map)
        text = json.dumps(cmds, sort_keys=True) + (config or "")
        inode = netns.inode(spec.ns)
        if self.applied.get(spec.id) == (inode, text):
            return
        if config is not None:
            self.haproxy.ensure(spec.id, spec.ns, config)
        nft = self.nfts.get(spec.id)
        if nft is None:
            # Kept open: closing a context costs up to tens of ms after some transactions.
            nft = self.nfts[spec.id] = Nft(spec.ns)
        if self.applied.get(spec.id, (None,))[0] != inode and (table_family(l4), TABLE) in nft.tables():
            nft.run(table_commands(l4, self._in_map, rebuild=True))
        else:
            nft.run(cmds)
        self.applied[spec.id] = (inode, text)
        self.realizations[spec.id] += 1

    def _sync_monitors(self, spec: LoadBalancerSpec, old: LoadBalancerSpec | None) -> None:
        """One thread per enabled monitor of an enabled pool. A new (or re-enabled,
        or replaced) monitor starts from scratch; health is kept across other changes."""
        wanted = {p.id: p for p in spec.pools if spec.enabled and p.enabled and p.monitored}
        for pool_id, mon in list(self.monitors.items()):
            pool = wanted.get(pool_id)
            if mon.lb_id == spec.id and (pool is None or pool.monitor is None or pool.monitor.id != mon.monitor_id):
                self.monitors.pop(pool_id).stop.set()
        keep = {m.id for p in wanted.values() for m in p.members}
        for s in (spec, old):
            for pool in (s.pools if s is not None else ()):
                for m in pool.members:
                    if m.id not in keep:
                        self.health.pop(m.id, None)
        for pool_id, pool in wanted.items():
            if pool_id not in self.monitors and pool.monitor is not None:
                for m in pool.members:
                    self.health.pop(m.id, None)
                mon = self.monitors[pool_id] = PoolMonitor(self, spec.id, pool_id, pool.monitor.id)
                mon.start()

    def _forget(self, lb_id: str) -> None:
        spec = self.specs.pop(lb_id, None)
        self._stats_seen.pop(lb_id, None)
        self.applied.pop(lb_id, None)
        nft = self.nfts.pop(lb_id, None)
        if nft is not None:
            nft.close()
        for pool_id in [p for p, m in self.monitors.items() if m.lb_id == lb_id]:
            self.monitors.pop(pool_id).stop.set()
        if spec is not None:
            for pool in spec.pools:
                for m in pool.members:
                    self.health.pop(m.id, None)

    # -- health --------------------------------------------------------------------------------------

    def monitor_target(self, mon: PoolMonitor) -> tuple[str, MonitorSpec, list[MemberSpec]] | None:
        """What monitor thread ``mon`` probes now, or None: it was replaced or stopped."""
        with self._lock:
            spec = self.specs.get(mon.lb_id)
            pool = spec.pool(mon.pool_id) if spec is not None else None
            if spec is None or pool is None or pool.monitor is None or self.monitors.get(mon.pool_id) is not mon:
                return None
            return spec.ns, pool.monitor, [m for m in pool.members if m.enabled]

    def health_results(self, lb_id: str, pool_id: str, monitor: MonitorSpec, results: Mapping[str, bool]) -> None:
        """Count one round of probes; on a transition, rebuild the table and report."""
        with self._lock:
            spec = self.specs.get(lb_id)
            pool = spec.pool(pool_id) if spec is not None else None
            if spec is None or pool is None or pool.monitor is None or pool.monitor.id != monitor.id:
                return
            current = {m.id for m in pool.members}
            changed = False
            for mid, ok in results.items():
                if mid in current:
                    h = self.health.setdefault(mid, Health())
                    changed |= h.record(ok, max(1, monitor.max_retries), max(1, monitor.max_retries_down))
            if not changed:
                return
            try:
                self._sync_table(spec)
            except Exception as exc:  # noqa: BLE001 - retried at the next transition or change
                log.warning("load balancer %s: cannot update members after a health change: %s", lb_id, exc)
                self.applied.pop(lb_id, None)
            report = self._tree_report(spec)
        if self.report is not None and report:
            self.report(report)

    def _tree_report(self, spec: LoadBalancerSpec) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = defaultdict(dict)
        for kind, items in operating_statuses(spec, self.health).items():
            for obj_id, operating in items.items():
                if operating is not None:
                    out[kind][obj_id] = f"/{operating}"
        return dict(out)

    # -- statuses for the agent --------------------------------------------------------------------

    def statuses(self, state: Any, work: Mapping[str, set[str]], everything: bool,
                 outcomes: Mapping[str, Mapping[str, bool]], failed: Mapping[str, set[str]]
                 ) -> dict[str, dict[str, str]]:
        """What to report for the load balancers of ``work``: what differs from the state.

        Realized: provisioning ``ACTIVE`` (settling the pending tree) and the operating
        statuses; failed: ``ERROR``.
        """
        ids = set(state.loadbalancers) if everything else set(work.get("loadbalancers") or ())
        out: dict[str, dict[str, str]] = defaultdict(dict)
        tables = state.tables
        with self._lock:
            for lb_id in ids:
                lb = state.loadbalancers.get(lb_id)
                if lb is None:
                    continue
                ok = (outcomes.get("loadbalancers") or {}).get(lb_id)
                if lb_id in (failed.get("loadbalancers") or ()):
                    if lb.get("provisioning_status") != "ERROR":
                        out["loadbalancers"][lb_id] = "ERROR"
                    continue
                spec = self.specs.get(lb_id)
                if not ok or spec is None:
                    continue
                for kind, items in operating_statuses(spec, self.health).items():
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
