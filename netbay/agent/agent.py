"""The dataplane agent: follows the network service and makes the kernel match.

It reads the whole desired state once (``GET /netbay/v1/state``), makes the
kernel match it — adopting what exists under its names, building what is
missing, deleting every namespace and fabric link of its prefix that nothing
wants — then long-polls ``GET /netbay/v1/changes`` and reconciles per change:
a port create touches that port (and what depends on it), never the whole
world. What it realized is written back with ``PUT /netbay/v1/status``.

Everything runs on one thread (netlink sockets and ``setns`` are per thread).
It is idempotent throughout: killed at any moment and restarted, it converges
with nothing duplicated or leaked.

Other parts of the dataplane plug in as realizers
(:class:`netbay.dataplane.realizers.Realizer`: routers, security groups, load
balancers, tap flows, and the container network drivers' cluster networks): each
is handed the state and the ids a batch of changes touched, after the fabric wired
the ports. This package composes the dataplane and the drivers; neither imports it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

import httpx

from netbay.agent.api import Api, ApiError
from netbay.agent.expand import expand
from netbay.agent.holes import HOLE_POLL, fill_holes, note_holes
from netbay.agent.plugwait import PlugWait
from netbay.agent.realizers import default_realizers
from netbay.agent.reporter import Reporter
from netbay.agent.statuses import statuses
from netbay.agent.sweep import sweep
from netbay.agent.wiring import drop_namespace, reconcile_fabric, release_sockets
from netbay.dataplane import bigtcp
from netbay.dataplane.fabric import Fabric, PortSpec, port_spec
from netbay.dataplane.names import Names
from netbay.dataplane.realizers import Outcome, Realizer, Work
from netbay.dataplane.state import State, Touched

log = logging.getLogger(__name__)

# How far before a snapshot's revision the stream is followed (see netbay.agent.holes).
REPLAY = 100


class Agent:
    """Keeps the kernel of this host in step with the network service."""

    def __init__(self, api: Api, names: Names | None = None, *, host: str | None = None,
                 realizers: Sequence[Realizer] | None = None, wait: float = 30.0,
                 resync_every: float = 600.0) -> None:
        self.api = api
        self.names = names or Names()
        self.host = host if host is not None else socket.gethostname()
        self.fabric = Fabric(self.names)
        self.realizers = list(default_realizers(self.names) if realizers is None else realizers)
        self.wait = wait
        self.resync_every = resync_every
        self.state = State()
        self.ready = threading.Event()     # set after the first full resync
        self.failed: dict[str, set[str]] = defaultdict(set)   # collection -> ids (retried)
        self.outcomes: dict[str, dict[str, bool]] = defaultdict(dict)
        self._unwired: set[str] = set()   # ports unwired by the last reconcile
        self.reporter = Reporter(api.fork())
        for r in self.realizers:
            attach = getattr(r, "attach", None)
            if attach is not None:
                attach(self.reporter.submit)
        self._stats_api: Api | None = None
        self.failovers: set[str] = set()    # load balancers to rebuild from scratch
        self._retry_at = 0.0
        self._retry_delay = 0.5
        self._resynced_at = 0.0
        self._resync_due: float | None = None   # a realizer failed: resync at this time
        self._resync_backoff = 1.0
        self._holes: dict[int, float] = {}      # revision -> when it was found missing
        self.plugs = PlugWait()                 # container ports whose fabric end is awaited
        self.stats = {"resyncs": 0, "batches": 0, "changes": 0}

    # -- running ---------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> None:
        """Resync, then follow the stream until ``stop`` is set. Errors are logged and
        retried with backoff; nothing is lost (the next resync sees everything)."""
        stop = stop or threading.Event()
        bigtcp.decide()   # before the first veth: the per-host cache, else a 1-2.5 s probe
        self.reporter.start()
        self._attach_stats()
        try:
            self._loop(stop)
        finally:
            self.stop_realizers()
            self.reporter.stop()
            if self._stats_api is not None:
                self._stats_api.close()

    def _attach_stats(self) -> None:
        """Realizers that count traffic (load balancers' listeners, routers' metering
        labels) send it on their own thread, with their own API client."""
        for r in self.realizers:
            for hook, send in (("attach_stats", "put_lbstats"), ("attach_metering", "put_metering")):
                attach = getattr(r, hook, None)
                if attach is not None:
                    if self._stats_api is None:
                        self._stats_api = self.api.fork()
                    attach(getattr(self._stats_api, send))

    def stop_realizers(self) -> None:
        """End the realizers' own threads (health checks), bounded."""
        self._each("stop", "stopping")

    def release(self) -> None:
        """Stop the processes the realizers run (haproxy, cluster resolvers) and remove
        their files: the commands running the agent call it when told to stop (SIGTERM,
        SIGINT, ``netbay down``), after :meth:`run` returned. A killed agent leaves them
        to the next one, whose first resync adopts those still wanted and reaps the rest."""
        self._each("release", "releasing")

    def _each(self, verb: str, doing: str) -> None:
        """Call the optional ``verb`` of every realizer that has it; one's failure stops no other."""
        for r in self.realizers:
            fn = getattr(r, verb, None)
            if fn is not None:
                try:
                    fn()
                except Exception:  # the others still go
                    log.exception("netbay agent: %s realizer %s", doing, r.name)

    def _loop(self, stop: threading.Event) -> None:
        backoff = 0.5
        need_resync = True
        while not stop.is_set():
            try:
                now = time.monotonic()
                due = self._resync_due is not None and now >= self._resync_due
                if need_resync or due or now - self._resynced_at > self.resync_every:
                    self._resync_due = None
                    self.resync()
                    need_resync = False
                    if self._resync_due is None:
                        self._resync_backoff = 1.0
                self.step(stop)
                backoff = 0.5
            except (httpx.HTTPError, ApiError) as exc:
                if stop.is_set():
                    break
                log.warning("netbay agent: API unavailable (%s); retrying in %.1fs", exc, backoff)
                need_resync = need_resync or isinstance(exc, ApiError)
                stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            except Exception:
                if stop.is_set():
                    break
                log.exception("netbay agent: reconcile failed; full resync in %.1fs", backoff)
                need_resync = True
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def step(self, stop: threading.Event | None = None) -> int:
        """One long poll and the reconcile of what it brought; returns the changes seen."""
        wait = self.wait
        if any(self.failed.values()):
            wait = max(0.0, min(wait, self._retry_at - time.monotonic()))
        if self._resync_due is not None:
            wait = max(0.0, min(wait, self._resync_due - time.monotonic()))
        if self._holes:
            wait = min(wait, HOLE_POLL)
        if self.plugs:
            wait = max(0.0, min(wait, self.plugs.at - time.monotonic()))
        since = self.state.revision
        body = self.api.changes(since, wait)
        if stop is not None and stop.is_set():
            return 0
        changes = body.get("changes") or []
        note_holes(self._holes, since, changes)
        if self._holes:
            changes = fill_holes(self._holes, self.api, changes)
        touched = self.state.apply_all(changes)
        work = self.expand(touched)
        if self.plugs.due():
            self.plugs.look_again(self.names, work)
        if time.monotonic() >= self._retry_at and any(self.failed.values()):
            for coll, ids in self.failed.items():
                work.setdefault(coll, set()).update(ids)
            self.failed.clear()
        if any(work.values()):
            self.reconcile(work)
            if not any(self.failed.values()):
                self._retry_delay = 0.5
        self.report(work)
        if changes:
            self.stats["batches"] += 1
            self.stats["changes"] += len(changes)
        return len(changes)

    # -- full resync ---------------------------------------------------------------------------

    def resync(self) -> None:
        """Read everything; adopt, build and remove until the kernel matches."""
        self._each("before_snapshot", "looking before the snapshot with")   # what the host holds before it
        self.state = State.from_snapshot(self.api.state())
        # Follow from a little before the snapshot: a transaction that took a revision
        # below it but committed after it is in neither (PostgreSQL). Replaying changes
        # the snapshot already holds, in order, ends where the snapshot is.
        self.state.revision = max(0, self.state.revision - REPLAY)
        self._holes.clear()
        self.plugs.clear()
        self.fabric.reset()
        self.failed.clear()
        self.outcomes.clear()
        state = self.state
        specs = self._all_specs()
        sweep(state, self.names, self.host, self.fabric, specs)
        work: Work = {
            "networks": set(state.networks), "sandboxes": set(state.sandboxes),
            "ports": set(state.ports), "routers": set(state.routers),
            "floatingips": set(state.floatingips), "loadbalancers": set(state.loadbalancers),
        }
        self._realize(work, specs, full=True)
        self._resynced_at = time.monotonic()
        self.stats["resyncs"] += 1
        self.report(work, everything=True)
        self.ready.set()

    def _all_specs(self) -> dict[str, PortSpec]:
        out = {}
        for port in self.state.ports.values():
            spec = port_spec(self.state, port, self.names, self.host)
            if spec is not None:
                out[port["id"]] = spec
        return out

    # -- per change --------------------------------------------------------------------------

    def expand(self, touched: Iterable[Touched]) -> Work:
        """The ids a batch of changes concerns (:func:`netbay.agent.expand.expand`);
        a load balancer's failover is remembered, to rebuild it from scratch."""
        touched = list(touched)
        self.failovers.update(t.id for t in touched if t.collection == "loadbalancers" and t.action == "failover")
        return expand(self.state, touched, self.realizers)

    def reconcile(self, work: Work) -> None:
        for coll, ids in work.items():  # a fresh attempt for everything in this work
            if coll in self.failed:
                self.failed[coll] -= ids
        self._failover(work)
        specs = {}
        for pid in work.get("ports", ()):
            port = self.state.ports.get(pid)
            spec = port_spec(self.state, port, self.names, self.host) if port is not None else None
            if spec is not None:
                specs[pid] = spec
        self._realize(work, specs, full=False)

    def _realize(self, work: Work, specs: Mapping[str, PortSpec], *, full: bool) -> None:
        """Realizers that filter first, then the fabric, then the realizers that need
        wired ports; ``full``: their resync instead of the incremental apply."""
        state, fabric = self.state, self.fabric

        def realizers(before: bool) -> None:
            for r in self.realizers:
                if r.before_fabric is before:
                    self._merge(r.name, (lambda: r.resync(state, fabric, specs)) if full
                                else (lambda: r.apply(state, fabric, work, specs)))

        if state.networks:
            self._attempt("fabric", "", fabric.ensure)
        realizers(before=True)
        self._unwired = reconcile_fabric(state, self.names, self.host, fabric, work, specs, self._attempt, self.plugs)
        realizers(before=False)
        release_sockets(self.names, specs.values(), work)

    def _drop_namespace(self, ns: str) -> None:
        drop_namespace(self.fabric, ns, self._attempt)

    def _failover(self, work: Work) -> None:
        """Octavia's failover here: the load balancer's namespace and VIP leg are
        deleted and rebuilt by the reconcile that follows (same id, same address)."""
        for lb_id in sorted(self.failovers):
            if lb_id in self.state.loadbalancers:
                for r in self.realizers:
                    forget = getattr(r, "failover", None)
                    if forget is not None:
                        forget(lb_id)
                self._drop_namespace(self.names.loadbalancer(lb_id))
                work.setdefault("loadbalancers", set()).add(lb_id)
                work.setdefault("ports", set()).update(p["id"] for p in self.state.ports_of(f"lb-{lb_id}"))
        self.failovers.clear()

    def _attempt(self, collection: str, obj_id: str, fn: Callable[[], object]) -> bool:
        """Run one step; a failure is logged and retried later, never stops the rest."""
        try:
            fn()
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            log.warning("netbay agent: %s %s: %s", collection, obj_id or "-", exc)
            self.failed[collection].add(obj_id)
            self._schedule_retry()
            return False
        return True

    def _merge(self, name: str, fn: Callable[[], Outcome]) -> None:
        try:
            outcome = fn() or {}
        except Exception as exc:  # a realizer's bug must not stop the fabric
            log.exception("netbay agent: realizer %s failed (full resync in %.0fs): %s",
                          name, self._resync_backoff, exc)
            if self._resync_due is None:
                self._resync_due = time.monotonic() + self._resync_backoff
                self._resync_backoff = min(self._resync_backoff * 2, 60.0)
            return
        for coll, results in outcome.items():
            self.outcomes[coll].update(results)
            for obj_id, ok in results.items():
                if not ok:
                    self.failed[coll].add(obj_id)
                    self._schedule_retry()

    def _schedule_retry(self) -> None:
        now = time.monotonic()
        if self._retry_at <= now:
            self._retry_at = now + self._retry_delay
            self._retry_delay = min(self._retry_delay * 2, 30.0)

    # -- status ------------------------------------------------------------------------------

    def statuses(self, work: Work, everything: bool = False) -> dict[str, dict[str, str]]:
        """What to report for the objects of ``work``: only what differs from the state
        (:func:`netbay.agent.statuses.statuses`)."""
        return statuses(self.state, self.fabric, self.names, self.host, self.realizers, self.outcomes,
                        self.failed, self._unwired, work, everything)

    def report(self, work: Work, everything: bool = False) -> None:
        report = self.statuses(work, everything)
        if report:
            self.reporter.submit(report)

