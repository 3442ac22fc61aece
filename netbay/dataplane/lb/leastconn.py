"""``LEAST_CONNECTIONS`` for the listeners the kernel forwards (the ``nftables``
provider's TCP and HTTP listeners; UDP and SCTP under either provider), as the
amphora's LVS ``lc`` scheduler: a new flow goes to the member with the fewest live flows.

Nothing runs per packet and nothing forks. The listener's rule DNATs through a map
element (``lb/table.py``: ``lc-addr``/``lc-port``, keyed by the listener's ct mark)
that names one member; a watcher thread per load balancer counts live flows per
listener and member from the namespace's conntrack events (``lb/ctevents.py``: NEW
when a flow is confirmed, UPDATE when its state changes, DESTROY when its entry goes)
and, when the least-loaded
member changes, the realizer replaces that element (one nft transaction). Flows
already tracked keep their member (conntrack holds their translation). Ties go to the
first member in the pool's order; weights are not used (LVS's ``lc``, not ``wlc``),
weight 0, admin-down and unhealthy members get no flow, as with the other algorithms.
A UDP or SCTP flow is live while conntrack tracks it (UDP: 30 s after its last packet,
120 s once it has seen replies).

**TCP** is counted as LVS counts it. conntrack keeps a closed connection's entry
for minutes (``TIME_WAIT`` 120 s, ``CLOSE`` 10 s), so "tracked" is not "live": a
connection is *active* while its conntrack state is ``ESTABLISHED`` and *inactive*
otherwise (the handshake, and once either side sent FIN or RST), and a member's load
is LVS's ``ip_vs_dest_conn_overhead``: 256 per active connection plus 1 per inactive
one. Established connections decide; closing and half-open ones only break ties (and
spread a burst of handshakes), as in ``ipvsadm``'s ``ActConn``/``InActConn``. The
state comes from conntrack's update events (a handful per connection: SYN-ACK,
ESTABLISHED, FIN, TIME_WAIT), and from the dump. (UDP and SCTP flows all weigh as one
connection each: LVS counts every UDP connection as inactive, so its order is the same.)

Events can be lost (the socket's buffer overflows in a burst) and a flow tracked
before the watcher started sends no DESTROY if the namespace did not ask for events
then: the counts are rebuilt from a conntrack dump at start (a restarted agent counts
the flows made before it), after a loss, and every ``RESYNC_INTERVAL`` seconds while
flows are counted. Between a flow's NEW event and
the element's update, new flows still go to the previous member: a burst of flows in
the same millisecond is not spread exactly (LVS, counting in the kernel, is exact).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from netbay.dataplane import lbstats, netns
from netbay.dataplane.lb import ctevents
from netbay.dataplane.lb.spec import ListenerSpec, LoadBalancerSpec, MemberSpec, PoolSpec
from netbay.dataplane.lb.table import LEAST_CONNECTIONS, candidates, least_connections_element, table_family

log = logging.getLogger("netbay.dataplane.loadbalancer")   # its messages are the realizer's

RESYNC_INTERVAL = 15.0   # s: a dump then, while flows are counted
ACTIVE, INACTIVE = 256, 1   # a connection's weight in a member's load (LVS's lc)
TCP_ESTABLISHED = 3      # TCP_CONNTRACK_ESTABLISHED
IPPROTO_TCP = 6
POLL = 0.5               # s: how soon a stopped watcher ends
JOIN_TIMEOUT = 5.0

MemberKey = tuple[ctevents.Address, int]
InMap = Callable[[PoolSpec, MemberSpec], bool]


def member_key(member: MemberSpec) -> MemberKey:
    return ipaddress.ip_address(member.address), member.port


def marks(spec: LoadBalancerSpec) -> frozenset[int]:
    """The ct marks of ``spec``'s least-connections listeners (all of them: a listener
    with no member now may get one)."""
    return frozenset(lbstats.mark(li.id) for li in spec.listeners
                     if (pool := spec.pool(li.pool_id)) is not None and pool.algorithm == LEAST_CONNECTIONS)


def served(spec: LoadBalancerSpec, in_map: InMap) -> list[tuple[ListenerSpec, list[MemberSpec]]]:
    """The least-connections listeners that have a rule, each with the members a new
    flow may go to, in the pool's order."""
    if not spec.enabled:
        return []
    out = []
    for li in spec.listeners:
        pool = spec.pool(li.pool_id)
        if not li.enabled or pool is None or not pool.enabled or pool.algorithm != LEAST_CONNECTIONS:
            continue
        members = list({m.id: m for m in candidates(spec, pool, in_map)}.values())   # slots repeat members
        if members:
            out.append((li, members))
    return out


def least_loaded(members: Iterable[MemberSpec], counts: Mapping[MemberKey, int]) -> MemberSpec:
    """The member with the least load (live flows, weighed by :func:`weight`); the first of them on a tie."""
    return min(members, key=lambda m: counts.get(member_key(m), 0))


def weight(flow: ctevents.Flow, before: int | None = None) -> int:
    """What ``flow`` adds to its member's load: a TCP connection is ``ACTIVE`` while
    established, ``INACTIVE`` otherwise (a message without its state: as ``before``);
    any other flow is ``ACTIVE`` while tracked."""
    if flow.protocol != IPPROTO_TCP:
        return ACTIVE
    if flow.tcp_state is None:
        return INACTIVE if before is None else before
    return ACTIVE if flow.tcp_state == TCP_ESTABLISHED else INACTIVE


class LeastConnections:
    """One load balancer's least-connections state: the live flows of its listeners
    (counted by a watcher thread) and the member each listener's element holds.

    ``moved(lb_id)`` is called from the watcher thread when the counts changed; the
    realizer then asks :meth:`updates` (under its lock) for the element changes.
    """

    def __init__(self, lb_id: str, ns: str, moved: Callable[[str], None]) -> None:
        self.lb_id, self.ns, self.moved = lb_id, ns, moved
        self.inode = netns.inode(ns)
        self.events = ctevents.Events(ns)   # subscribed before the listener's rule can take a flow
        self.flows: dict[bytes, tuple[int, MemberKey, int]] = {}   # key -> (mark, member, weight)
        self.counts: dict[int, Counter[MemberKey]] = {}
        self.watched: frozenset[int] = frozenset()
        self.held: dict[int, MemberKey] = {}   # listener mark -> the member its element holds
        self.stop_event = threading.Event()
        self._lock = threading.Lock()           # flows, counts, watched (the watcher and the realizer)
        self.thread = threading.Thread(target=self._run, name=f"netbay-lb-leastconn-{lb_id[:8]}", daemon=True)

    # -- what the realizer calls, under its lock --------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Ask the watcher to end (it closes its socket); join it with :meth:`join`."""
        self.stop_event.set()

    def join(self, timeout: float = JOIN_TIMEOUT) -> None:
        self.thread.join(timeout)

    def watch(self, wanted: frozenset[int]) -> None:
        """Count the flows of the listeners with these marks (a listener that went is forgotten)."""
        with self._lock:
            if wanted == self.watched:
                return
            self.watched = wanted
            for key in [k for k, (m, _, _) in self.flows.items() if m not in wanted]:
                del self.flows[key]
            self.counts = {m: c for m, c in self.counts.items() if m in wanted}

    def snapshot(self, mark: int) -> Counter[MemberKey]:
        with self._lock:
            return Counter(self.counts.get(mark, ()))

    def elements(self, spec: LoadBalancerSpec, in_map: InMap) -> list[dict]:
        """Every listener's element, for a refill of the table (whose maps were flushed)."""
        self.held.clear()
        return self.updates(spec, in_map)

    def updates(self, spec: LoadBalancerSpec, in_map: InMap) -> list[dict]:
        """The element changes that point each listener at its least-loaded member (none
        when every element already does); they are taken as done."""
        fam = table_family(spec)
        cmds: list[dict] = []
        for listener, members in served(spec, in_map):
            mark = lbstats.mark(listener.id)
            best = least_loaded(members, self.snapshot(mark))
            if self.held.get(mark) != member_key(best):
                cmds += least_connections_element(fam, mark, best, replace=mark in self.held)
                self.held[mark] = member_key(best)
        return cmds

    def forget_kernel(self) -> None:
        """The kernel's elements are unknown (a failed transaction): the next refill sets them all."""
        self.held.clear()

    # -- the watcher ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._count_again()
            self.moved(self.lb_id)
            next_dump = time.monotonic() + RESYNC_INTERVAL
            while not self.stop_event.is_set():
                ready = self.events.wait(min(POLL, max(0.0, next_dump - time.monotonic())))
                changed = False
                try:
                    if ready:
                        changed = self._count(self.events.read())
                    if time.monotonic() >= next_dump:
                        next_dump = time.monotonic() + RESYNC_INTERVAL
                        if self.flows:
                            changed |= self._count_again()
                except ctevents.EventsLost:
                    log.debug("load balancer %s: conntrack events lost; counting flows again", self.lb_id)
                    changed = self._count_again()
                if changed and not self.stop_event.is_set():
                    self.moved(self.lb_id)
        except Exception as exc:  # noqa: BLE001 - the namespace went, or a kernel error: the element stays
            if not self.stop_event.is_set():
                log.warning("load balancer %s: least-connections watcher ended: %s", self.lb_id, exc)
        finally:
            self.events.close()

    def _count(self, events: Iterable[tuple[bool, ctevents.Flow]]) -> bool:
        changed = False
        with self._lock:
            for there, flow in events:
                if there:
                    if flow.mark not in self.watched or flow.member is None:
                        continue
                    was = self.flows.get(flow.key)
                    w = weight(flow, was[2] if was is not None else None)
                    if was is not None and was[2] == w:
                        continue
                    counts = self.counts.setdefault(flow.mark, Counter())
                    if was is not None:
                        counts[was[1]] -= was[2]
                    self.flows[flow.key] = (flow.mark, flow.member, w)
                    counts[flow.member] += w
                    changed = True
                elif (gone := self.flows.pop(flow.key, None)) is not None:
                    self.counts[gone[0]][gone[1]] -= gone[2]
                    changed = True
        return changed

    def _count_again(self) -> bool:
        """Counts from a dump of the namespace's conntrack table; True if they changed."""
        found = ctevents.dump(self.ns)
        with self._lock:
            before = self.counts
            self.flows = {f.key: (f.mark, f.member, weight(f)) for f in found
                          if f.mark in self.watched and f.member is not None}
            self.counts = {}
            for mark, member, w in self.flows.values():
                self.counts.setdefault(mark, Counter())[member] += w
            return +Counter({(m, k): n for m, c in before.items() for k, n in c.items()}) != \
                Counter({(m, k): n for m, c in self.counts.items() for k, n in c.items()})



class Watchers:
    """The :class:`LeastConnections` of every load balancer realized here, by id (the
    realizer's lock guards it)."""

    def __init__(self, moved: Callable[[str], None]) -> None:
        self.moved = moved
        self._by_lb: dict[str, LeastConnections] = {}

    def get(self, lb_id: str) -> LeastConnections | None:
        return self._by_lb.get(lb_id)

    def sync(self, spec: LoadBalancerSpec, fresh: bool) -> None:
        """A watcher while ``spec`` (what the table serves) has least-connections
        listeners; a new one for a new namespace (``fresh``: it may be)."""
        wanted = marks(spec)
        lc = self._by_lb.get(spec.id)
        if lc is not None and (not wanted or (fresh and lc.inode != netns.inode(spec.ns))):
            self.forget(spec.id)
            lc = None
        if wanted and lc is None:
            lc = self._by_lb[spec.id] = LeastConnections(spec.id, spec.ns, self.moved)
            lc.watch(wanted)
            lc.start()
        elif lc is not None:
            lc.watch(wanted)

    def forget(self, lb_id: str) -> None:
        lc = self._by_lb.pop(lb_id, None)
        if lc is not None:
            lc.stop()

    def stop_all(self) -> list[LeastConnections]:
        """Ask every watcher to end; returns them (to be joined outside the lock: a
        watcher may be waiting for it)."""
        out = list(self._by_lb.values())
        self._by_lb.clear()
        for lc in out:
            lc.stop()
        return out


__all__ = ["ACTIVE", "INACTIVE", "LeastConnections", "Watchers", "least_loaded", "marks", "member_key", "served",
           "weight"]
