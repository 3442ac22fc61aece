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

Other parts of the dataplane plug in as :class:`Realizer`\\ s (routers, security
groups, load balancers): each is handed the state and the ids a batch of changes
touched, after the fabric wired the ports.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from netbay.dataplane import bigtcp, netns, rtnl
from netbay.dataplane.fabric import Fabric, PortSpec, consumer, on_host, port_spec
from netbay.dataplane.names import Names
from netbay.dataplane.state import State, Touched

log = logging.getLogger(__name__)

# collection -> ids to reconcile
Work = dict[str, set[str]]
# How far before a snapshot's revision the stream is followed, and how long (s) a
# skipped revision is waited for; see Agent._note_holes.
REPLAY = 100
HOLE_GRACE = 5.0
HOLE_POLL = 0.2
MAX_HOLES = 1000
# collection -> id -> realized?
Outcome = dict[str, dict[str, bool]]


class Realizer(Protocol):
    """A part of the dataplane the agent keeps in step with the state.

    ``resync`` makes everything the realizer owns match ``state`` (adopt, build,
    remove the rest); ``apply`` does the same for the ids of ``work`` only. ``specs``
    are the wanted port wirings (all of them for ``resync``, those of ``work`` for
    ``apply``). A realizer with ``before_fabric`` runs before the ports are wired
    (security groups: a port is filtered before its first packet), the others after
    (routers need their legs). Both return what they realized or failed to, by
    collection and id, which becomes status (a router ``ACTIVE`` or ``ERROR``).
    """

    name: str
    before_fabric: bool

    def resync(self, state: State, fabric: Fabric, specs: Mapping[str, PortSpec]) -> Outcome: ...

    def apply(self, state: State, fabric: Fabric, work: Work, specs: Mapping[str, PortSpec]) -> Outcome: ...

    # Optional (looked up with getattr): ``attach(report)`` hands a realizer with work
    # of its own (health checks) the agent's status reporter; ``stop()`` ends that work
    # when the agent stops; ``statuses(state, work, everything, outcomes, failed)``
    # returns the realizer's own status report (load balancer trees).


# --- talking to the API ---------------------------------------------------------------------


class ApiError(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:300]}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    """Password credentials for Keystone v3 (what an openrc holds)."""
    auth_url: str
    username: str
    password: str
    project_name: str
    user_domain_name: str = "Default"
    project_domain_name: str = "Default"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        env = os.environ if env is None else env
        missing = [k for k in ("OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME") if not env.get(k)]
        if missing:
            raise ValueError(f"missing credentials: {', '.join(missing)} (source the openrc `netbay up` wrote)")
        return cls(env["OS_AUTH_URL"], env["OS_USERNAME"], env["OS_PASSWORD"], env["OS_PROJECT_NAME"],
                   env.get("OS_USER_DOMAIN_NAME") or "Default", env.get("OS_PROJECT_DOMAIN_NAME") or "Default")

    def token(self) -> str:
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": self.username, "domain": {"name": self.user_domain_name}, "password": self.password}}},
            "scope": {"project": {"name": self.project_name, "domain": {"name": self.project_domain_name}}}}}
        url = self.auth_url.rstrip("/")
        if not url.endswith("/v3"):
            url += "/v3"
        r = httpx.post(f"{url}/auth/tokens", json=body, timeout=10)
        if r.status_code != 201:
            raise ApiError(r.status_code, r.text)
        return r.headers["X-Subject-Token"]


class Api:
    """The three calls the agent makes, with an admin token renewed on 401."""

    def __init__(self, url: str, token: Callable[[], str]) -> None:
        self.url = url.rstrip("/")
        self._token_source = token
        self._token: str | None = None
        self.client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(10.0))

    def fork(self) -> Api:
        """Another client of the same server and credentials (one per thread)."""
        return Api(self.url, self._token_source)

    def close(self) -> None:
        self.client.close()

    def _call(self, method: str, path: str, *, timeout: float | None = None, **kw: Any) -> Any:
        for attempt in range(2):
            if self._token is None:
                self._token = self._token_source()
            r = self.client.request(method, path, headers={"X-Auth-Token": self._token},
                                    timeout=httpx.Timeout(10.0, read=timeout) if timeout else None, **kw)
            if r.status_code == 401 and attempt == 0:
                self._token = None
                continue
            if r.status_code >= 400:
                raise ApiError(r.status_code, r.text)
            return r.json()
        raise AssertionError("unreachable")

    def state(self) -> dict[str, Any]:
        return self._call("GET", "/netbay/v1/state", timeout=120)

    def changes(self, since: int, wait: float) -> dict[str, Any]:
        return self._call("GET", "/netbay/v1/changes", params={"since": since, "wait": wait},
                          timeout=wait + 30)

    def put_status(self, report: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
        return self._call("PUT", "/netbay/v1/status", json=report, timeout=60)

    def put_lbstats(self, report: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        return self._call("PUT", "/netbay/v1/lbstats", json=report, timeout=60)


class Reporter:
    """Writes status in the background, so that a slow PUT never delays wiring.

    Reports are merged per object (the latest wins) and sent in order by one
    thread; a failed PUT is retried with backoff, newer reports taking precedence.
    """

    def __init__(self, api: Api) -> None:
        self.api = api
        self._pending: dict[str, dict[str, str]] = defaultdict(dict)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="netbay-agent-status", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.api.close()

    def submit(self, report: Mapping[str, Mapping[str, str]]) -> None:
        with self._lock:
            for coll, items in report.items():
                self._pending[coll].update(items)
            self._idle.clear()
        self._wake.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted was written (tests, shutdown)."""
        return self._idle.wait(timeout)

    def _take(self) -> dict[str, dict[str, str]]:
        with self._lock:
            report = {k: v for k, v in self._pending.items() if v}
            self._pending = defaultdict(dict)
            if not report:
                self._idle.set()
            return report

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            report = self._take()
            if not report:
                continue
            try:
                self.api.put_status(report)
                backoff = 0.2
            except Exception as exc:  # noqa: BLE001 - retried; the agent must not stop
                log.warning("netbay agent: cannot write status (%s); retrying", exc)
                with self._lock:
                    for coll, items in report.items():
                        newer = self._pending[coll]
                        self._pending[coll] = {**items, **newer}
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            self._wake.set()  # look again: more may have come meanwhile


# --- the agent --------------------------------------------------------------------------------


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
        """Realizers that count traffic (load balancers) send it on their own thread,
        with their own API client."""
        for r in self.realizers:
            attach = getattr(r, "attach_stats", None)
            if attach is not None:
                if self._stats_api is None:
                    self._stats_api = self.api.fork()
                attach(self._stats_api.put_lbstats)

    def stop_realizers(self) -> None:
        """End the realizers' own threads (health checks), bounded."""
        for r in self.realizers:
            stop_fn = getattr(r, "stop", None)
            if stop_fn is not None:
                try:
                    stop_fn()
                except Exception:  # noqa: BLE001 - stopping must go on
                    log.exception("netbay agent: stopping realizer %s", r.name)

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
        since = self.state.revision
        body = self.api.changes(since, wait)
        if stop is not None and stop.is_set():
            return 0
        changes = body.get("changes") or []
        self._note_holes(since, changes)
        if self._holes:
            changes = self._fill_holes(changes)
        touched = self.state.apply_all(changes)
        work = self.expand(touched)
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

    # -- revisions committed out of order ------------------------------------------------------

    def _note_holes(self, since: int, changes: Sequence[Mapping[str, Any]]) -> None:
        """Remember revisions skipped over: on PostgreSQL a transaction that took a lower
        revision may commit after one with a higher (or never: a rollback)."""
        now, prev = time.monotonic(), since
        for c in changes:
            rev = c.get("revision")
            if not isinstance(rev, int):
                continue
            if prev + 1 < rev <= prev + MAX_HOLES:
                for missing in range(prev + 1, rev):
                    self._holes.setdefault(missing, now)
            prev = max(prev, rev)
            self._holes.pop(rev, None)

    def _fill_holes(self, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fetch what has since been committed below the newest revision seen; holes
        older than :data:`HOLE_GRACE` are given up (rolled back)."""
        now = time.monotonic()
        for rev, seen in list(self._holes.items()):
            if now - seen > HOLE_GRACE:
                del self._holes[rev]
        if not self._holes:
            return changes
        late = self.api.changes(min(self._holes) - 1, 0).get("changes") or []
        found = [c for c in late if c.get("revision") in self._holes]
        for c in found:
            del self._holes[c["revision"]]
        # Late changes concern other rows than the ones committed after them (a row's
        # writers are serialized by its lock), so applying them now is safe.
        return [*found, *changes]

    # -- full resync ---------------------------------------------------------------------------

    def resync(self) -> None:
        """Read everything; adopt, build and remove until the kernel matches."""
        self.state = State.from_snapshot(self.api.state())
        # Follow from a little before the snapshot: a transaction that took a revision
        # below it but committed after it is in neither (PostgreSQL). Replaying changes
        # the snapshot already holds, in order, ends where the snapshot is.
        self.state.revision = max(0, self.state.revision - REPLAY)
        self._holes.clear()
        self.fabric.reset()
        self.failed.clear()
        self.outcomes.clear()
        state = self.state
        specs = self._all_specs()
        self._sweep(specs)
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

    def wanted_namespaces(self, specs: Mapping[str, PortSpec]) -> set[str]:
        state, names = self.state, self.names
        wanted = {s.ns for s in specs.values()}
        wanted |= {names.sandbox(i) for i, sb in state.sandboxes.items() if on_host(sb, self.host)}
        wanted |= {names.router(i) for i in state.routers}
        wanted |= {names.loadbalancer(i) for i in state.loadbalancers}
        if state.networks:
            wanted.add(names.fabric)
        return wanted

    def _owned_kinds(self) -> list[str]:
        """Namespace name heads this agent sweeps (never another component's)."""
        n = self.names
        heads = [n.sandbox(""), n.router(""), n.external("")]
        if "loadbalancers" in self.state.known:
            heads.append(n.loadbalancer(""))
        return heads

    def owned_namespaces(self) -> list[str]:
        """Namespaces of this agent's kinds that exist (mounted or a stale mount point)."""
        try:
            present = os.listdir(netns.NETNS_RUN_DIR)
        except FileNotFoundError:
            return []
        heads = self._owned_kinds()
        return sorted(n for n in present if n == self.names.fabric or any(n.startswith(h) for h in heads))

    def _sweep(self, specs: Mapping[str, PortSpec]) -> None:
        wanted = self.wanted_namespaces(specs)
        for ns in self.owned_namespaces():
            if ns not in wanted:
                log.info("netbay agent: deleting namespace %s (nothing wants it)", ns)
                netns.delete(ns)
        if self.names.fabric in wanted and netns.exists(self.names.fabric):
            taps = {Names.tap(p) for p in specs}
            bridges = {Names.bridge(n) for n in self.state.networks}
            for name in self.fabric.sweep(taps, bridges):
                log.info("netbay agent: deleted fabric link %s (nothing wants it)", name)

    # -- per change --------------------------------------------------------------------------

    def expand(self, touched: Iterable[Touched]) -> Work:
        """The ids a batch of changes concerns, following dependencies (a subnet's
        ports, a sandbox's ports, the routers a floating IP moved between…)."""
        state = self.state
        w: Work = defaultdict(set)
        for t in touched:
            w[t.collection].add(t.id)
            if t.collection == "networks":
                w["ports"].update(p["id"] for p in state.ports_on(t.id))
            elif t.collection == "subnets":
                for net in t.values("network_id"):
                    for p in state.ports_on(net):
                        w["ports"].add(p["id"])
                        if str(p.get("device_owner", "")).startswith("network:router"):
                            w["routers"].add(p["device_id"])
                        elif str(p.get("device_id", "")).startswith("lb-"):
                            w["loadbalancers"].add(p["device_id"][3:])  # VIP routes
            elif t.collection == "ports":
                for dev in t.values("device_id"):
                    if dev in state.sandboxes or any(
                            r is not None and r.get("device_owner") == "netbay:sandbox" for r in (t.old, t.new)):
                        w["sandboxes"].add(dev)
                        w["ports"].update(p["id"] for p in state.ports_of(dev))  # default route choice
                    if dev in state.routers:
                        w["routers"].add(dev)
                w["floatingips"].update(f["id"] for f in state.floatingips.values() if f.get("port_id") == t.id)
                w["loadbalancers"].update(d[3:] for d in t.values("device_id") if str(d).startswith("lb-"))
            elif t.collection == "sandboxes":
                w["ports"].update(p["id"] for p in state.ports_of(t.id))
                for r in (t.old, t.new):
                    if r is not None:
                        w["ports"].update(p.get("port_id") for p in r.get("ports") or () if p.get("port_id"))
            elif t.collection == "routers":
                w["ports"].update(p["id"] for p in state.ports_of(t.id))
                w["floatingips"].update(f["id"] for f in state.floatingips.values() if f.get("router_id") == t.id)
            elif t.collection == "floatingips":
                w["routers"].update(t.values("router_id"))
            elif t.collection == "security_group_rules":
                w["security_groups"].update(t.values("security_group_id"))
            elif t.collection == "loadbalancers":
                w["ports"].update(p["id"] for p in state.ports_of(f"lb-{t.id}"))
                if t.action == "failover":
                    self.failovers.add(t.id)
            elif t.collection in LB_CHILDREN:
                w["loadbalancers"].update(_lb_of(state, t))
            for r in self.realizers:   # what a realizer's own kinds depend on (cluster nodes)
                more = getattr(r, "expand", None)
                if more is not None:
                    more(state, t, w)
        return w

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
                    self._merge(r.name, (lambda r=r: r.resync(state, fabric, specs)) if full
                                else (lambda r=r: r.apply(state, fabric, work, specs)))

        if state.networks:
            self._attempt("fabric", "", fabric.ensure)
        realizers(before=True)
        self._reconcile_fabric(work, specs)
        realizers(before=False)
        self._release(specs.values(), work)

    def _reconcile_fabric(self, work: Work, specs: Mapping[str, PortSpec]) -> None:
        state, names, fabric = self.state, self.names, self.fabric
        for nid in sorted(work.get("networks", ())):
            net = state.networks.get(nid)
            if net is not None:
                self._attempt("networks", nid, lambda: fabric.ensure_bridge(nid, int(net.get("mtu") or 1500)))
        for sid in sorted(work.get("sandboxes", ())):
            sb = state.sandboxes.get(sid)
            if sb is not None and on_host(sb, self.host):
                self._attempt("sandboxes", sid, lambda: _ensure_namespace(names.sandbox(sid)))
        # Ports: unwire first (a port moving between consumers frees its names), then wire.
        gone_consumers = set()
        self._unwired = set()
        for pid in sorted(work.get("ports", ())):
            if pid not in specs and pid in fabric.wired:
                gone_consumers.add(fabric.wired[pid].ns)
                self._unwired.add(pid)
                self._attempt("ports", pid, lambda: fabric.remove_port(pid))
        for pid in sorted(work.get("ports", ()), key=lambda p: (specs[p].ns, specs[p].ifname) if p in specs else ("", "")):
            spec = specs.get(pid)
            if spec is not None and fabric.wired.get(pid) != spec:
                self._attempt("ports", pid, lambda: fabric.ensure_port(spec))
        # Namespaces and bridges nothing wants any more.
        for sid in sorted(work.get("sandboxes", ())):
            sb = state.sandboxes.get(sid)
            if sb is None or not on_host(sb, self.host):
                self._drop_namespace(names.sandbox(sid))
        for rid in sorted(work.get("routers", ())):
            if rid not in state.routers:
                self._drop_namespace(names.router(rid))
        for lb in sorted(work.get("loadbalancers", ())):
            if lb not in state.loadbalancers:
                self._drop_namespace(names.loadbalancer(lb))
        still = {s.ns for s in fabric.wired.values()}
        for ns in gone_consumers:
            if ns.startswith(names.external("")) and ns not in still:
                self._drop_namespace(ns)
        for nid in sorted(work.get("networks", ())):
            if nid not in state.networks:
                self._attempt("networks", nid, lambda: fabric.remove_bridge(nid))
        if not state.networks and netns.exists(names.fabric):
            self._attempt("fabric", "", fabric.remove)

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

    def _release(self, specs: Iterable[PortSpec], work: Work) -> None:
        """Close this thread's netlink sockets of the sandbox namespaces just
        configured: one per namespace would otherwise stay open (thousands of
        sandboxes, thousands of descriptors). The fabric's stays: every change uses it.
        Other threads' sockets are theirs (closing one under a thread hangs it)."""
        touched = {s.ns for s in specs if s.consumer.kind == "sandbox"}
        touched |= {self.names.sandbox(i) for i in work.get("sandboxes", ())}
        for ns in touched:
            rtnl.release(ns)

    def _drop_namespace(self, ns: str) -> None:
        for pid, spec in list(self.fabric.wired.items()):
            if spec.ns == ns:
                self._attempt("ports", pid, lambda pid=pid: self.fabric.remove_port(pid))
        netns.delete(ns)

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
        """What to report for the objects of ``work``: only what differs from the state."""
        state, fabric = self.state, self.fabric
        out: dict[str, dict[str, str]] = defaultdict(dict)
        failed = self.failed
        port_ids = set(state.ports) if everything else set(work.get("ports", ()))
        sandbox_ids = set(state.sandboxes) if everything else set(work.get("sandboxes", ()))
        router_ids = set(state.routers) if everything else set(work.get("routers", ()))
        fip_ids = set(state.floatingips) if everything else set(work.get("floatingips", ()))
        fip_ids |= {f["id"] for f in state.floatingips.values() if f.get("router_id") in router_ids}
        for pid in port_ids:
            port = state.ports.get(pid)
            if port is None:
                continue
            if consumer(state, port, self.names, self.host) is None and pid not in self._unwired:
                continue  # not a port this agent wires: someone else reports on it
            if pid in failed.get("ports", ()):
                want = "ERROR"
            elif pid in fabric.wired and port.get("admin_state_up", True):
                want = "ACTIVE"
            else:
                want = "DOWN"
            if port.get("status") != want:
                out["ports"][pid] = want
        for sid in sandbox_ids:
            sb = state.sandboxes.get(sid)
            if sb is None or not on_host(sb, self.host):
                continue
            mine = [p.get("port_id") for p in sb.get("ports") or () if p.get("port_id") in state.ports]
            if sid in failed.get("sandboxes", ()) or any(p in failed.get("ports", ()) for p in mine):
                want = "ERROR"
            elif all(p in fabric.wired for p in mine) and netns.exists(self.names.sandbox(sid)):
                want = "ACTIVE"
            else:
                want = "BUILD"
            if sb.get("status") != want:
                out["sandboxes"][sid] = want
        has_routers = any(r.name == "routers" for r in self.realizers)
        for rid in router_ids:
            router = state.routers.get(rid)
            if router is None:
                continue
            ok = self.outcomes.get("routers", {}).get(rid, not has_routers)
            want = "ACTIVE" if ok else ("ERROR" if rid in failed.get("routers", ()) else router.get("status"))
            if want and router.get("status") != want:
                out["routers"][rid] = want
        for fid in fip_ids:
            fip = state.floatingips.get(fid)
            if fip is None:
                continue
            rid = fip.get("router_id")
            realized = bool(fip.get("port_id") and rid and has_routers
                            and self.outcomes.get("routers", {}).get(rid)
                            and self.outcomes.get("floatingips", {}).get(fid, True))
            want = "ACTIVE" if realized else "DOWN"
            if fip.get("status") != want:
                out["floatingips"][fid] = want
        for r in self.realizers:
            own = getattr(r, "statuses", None)
            if own is not None:
                for coll, items in own(state, work, everything, self.outcomes, failed).items():
                    out[coll].update(items)
        return {k: v for k, v in out.items() if v}

    def report(self, work: Work, everything: bool = False) -> None:
        report = self.statuses(work, everything)
        if report:
            self.reporter.submit(report)


LB_CHILDREN = ("listeners", "pools", "members", "healthmonitors")


def _lb_of(state: State, t: Touched) -> set[str]:
    """The load balancers a change of a listener, pool, member or monitor concerns
    (through its old and new rendering: a child never moves, but be safe)."""
    out: set[str] = set()
    pools = state.table("pools")
    for r in (t.old, t.new):
        if r is None:
            continue
        refs = r.get("loadbalancers")
        pool_ids = [r.get("pool_id")] if t.collection == "members" else \
            [p.get("id") for p in r.get("pools") or () if isinstance(p, dict)]
        if t.collection in ("listeners", "pools"):
            out.update(x.get("id") for x in refs or () if isinstance(x, dict) and x.get("id"))
        for pid in pool_ids:
            pool = pools.get(pid or "")
            if pool is not None:
                out.update(x.get("id") for x in pool.get("loadbalancers") or ()
                           if isinstance(x, dict) and x.get("id"))
    return out


def _ensure_namespace(ns: str) -> None:
    if netns.create(ns):
        rtnl.rtnl(ns).set_link(1, up=True)  # lo


# --- realizers of the other dataplane parts -----------------------------------------------------


def default_realizers(names: Names) -> list[Realizer]:
    """The realizers whose modules are present (each is optional)."""
    out: list[Realizer] = []
    for make in (SecurityGroupRealizer, RouterRealizer, _load_balancers, _cluster_networks, _taps):
        try:
            out.append(make(names))
        except ImportError as exc:  # pragma: no cover - module absent
            log.info("netbay agent: no %s realizer (%s)", getattr(make, "name", make.__name__), exc)
    return out


def _load_balancers(names: Names) -> Realizer:
    """Load balancers through :mod:`netbay.dataplane.loadbalancer` (the VIP port is
    wired into ``<prefix>lb-<id>`` as ``vip`` by the fabric; the realizer does the rest)."""
    from netbay.dataplane.loadbalancer import LoadBalancerRealizer

    return LoadBalancerRealizer(names)


def _cluster_networks(names: Names) -> Realizer:
    """Cluster networks and pods through :mod:`netbay.dataplane.clusternet` (the drivers)."""
    from netbay.dataplane.clusternet import ClusterNetRealizer

    return ClusterNetRealizer(names)


def _taps(names: Names) -> Realizer:
    """Tap flows as tc mirrors through :mod:`netbay.dataplane.taas` (port mirroring)."""
    from netbay.dataplane.taas import TaasRealizer

    return TaasRealizer(names)


class RouterRealizer:
    """Routers through :mod:`netbay.dataplane.router` (namespace, forwarding, NAT)."""

    name = "routers"
    before_fabric = False

    def __init__(self, names: Names) -> None:
        from netbay.dataplane import router

        self.router = router
        self.names = names

    def _ensure(self, state: State, rid: str) -> bool:
        r = self.router
        try:
            spec = r.from_api(state.routers[rid], list(state.ports_of(rid)), state.subnets,
                              state.floatingips.values(), self.names)
            r.ensure(spec)
        except Exception as exc:  # noqa: BLE001 - reported as the router's status
            log.warning("netbay agent: router %s: %s", rid, exc)
            return False
        return True

    def resync(self, state: State, fabric: Fabric, specs: Mapping[str, PortSpec]) -> Outcome:
        for rid in self.router.observed_routers(self.names) - set(state.routers):
            self.router.remove_router(self.names.router(rid))
        return {"routers": {rid: self._ensure(state, rid) for rid in state.routers}}

    def apply(self, state: State, fabric: Fabric, work: Work, specs: Mapping[str, PortSpec]) -> Outcome:
        done: dict[str, bool] = {}
        for rid in work.get("routers", ()):
            if rid in state.routers:
                done[rid] = self._ensure(state, rid)
            else:
                self.router.remove_router(self.names.router(rid))
        return {"routers": done}


class SecurityGroupRealizer:
    """Security groups through :mod:`netbay.dataplane.secgroups`, in the fabric.

    Runs before the fabric wires a port, so the port is filtered from its first
    packet. The agent chooses each port's mark (unique, 1..65535, reassigned at a
    resync) and each network's conntrack zone (its segmentation id).
    """

    name = "security_groups"
    before_fabric = True

    def __init__(self, names: Names) -> None:
        from netbay.dataplane import secgroups

        self.module = secgroups
        self.names = names
        self.sg: Any = None
        self.marks: dict[str, int] = {}
        self._next = 1

    def _groups(self) -> Any:
        if self.sg is None:
            self.sg = self.module.SecurityGroups(self.names.fabric)
        return self.sg

    def _mark(self, port_id: str) -> int:
        mark = self.marks.get(port_id)
        if mark is None:
            used = set(self.marks.values())
            for _ in range(self.module.MAX_MARK):
                if self._next > self.module.MAX_MARK:
                    self._next = 1
                if self._next not in used:
                    break
                self._next += 1
            else:
                raise RuntimeError("no free port mark: more than 65535 ports in one fabric")
            mark = self.marks[port_id] = self._next
            self._next += 1
        return mark

    @staticmethod
    def _zone(state: State, network_id: str) -> int:
        seg = (state.networks.get(network_id) or {}).get("provider:segmentation_id")
        if isinstance(seg, int) and 0 < seg <= 0xFFFF:
            return seg
        return (zlib.crc32(network_id.encode()) % 0xFFFF) + 1

    def _entry(self, state: State, spec: PortSpec) -> tuple[Mapping[str, Any], int, int]:
        return state.ports[spec.port_id], self._mark(spec.port_id), self._zone(state, spec.network_id)

    def _reset(self) -> None:
        if self.sg is not None:
            self.sg.close()
        self.sg, self.marks, self._next = None, {}, 1

    def resync(self, state: State, fabric: Fabric, specs: Mapping[str, PortSpec]) -> Outcome:
        self._reset()
        if not netns.exists(self.names.fabric):
            return {}
        ports = [self._entry(state, specs[p]) for p in sorted(specs)]
        self._groups().sync(ports, list(state.table("security_groups").values()))
        return {}

    def apply(self, state: State, fabric: Fabric, work: Work, specs: Mapping[str, PortSpec]) -> Outcome:
        if not netns.exists(self.names.fabric):
            self._reset()
            return {}
        sg = self._groups()
        groups = state.table("security_groups")
        failed: dict[str, bool] = {}
        with sg.batch():  # the whole pass in one nft transaction
            for gid in sorted(work.get("security_groups", ())):
                if gid in groups:
                    sg.ensure_group(groups[gid])
                else:
                    sg.remove_group(gid)
            for pid in sorted(work.get("ports", ())):
                try:
                    if pid in specs:
                        sg.ensure_port(*self._entry(state, specs[pid]))
                    elif pid in self.marks:
                        sg.remove_port(pid)
                        del self.marks[pid]
                except (ValueError, OSError, RuntimeError) as exc:
                    log.warning("netbay agent: security groups of port %s: %s", pid, exc)
                    failed[pid] = False
        return {"ports": failed} if failed else {}


__all__ = ["Agent", "Api", "ApiError", "Credentials", "Realizer", "Reporter", "RouterRealizer",
           "SecurityGroupRealizer", "default_realizers"]
