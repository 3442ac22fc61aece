"""The embedded executor: applies a cluster's resource graph, resource by resource.

It plays Heat's part for the ``Orchestrator`` seam: the same graph a real Heat
would get (:mod:`netbay.coe.hot`) is made here in dependency order, independent
resources in parallel, by one handler per Heat type (:mod:`netbay.coe.handlers`).
Neutron's types go through a ``NetworkBackend`` (:mod:`netbay.backends`), chosen
by configuration: embedded — netbay's own network service over its API
(:class:`netbay.backends.http.HttpBackend`, which says why HTTP) — or
``openstack``, a real cloud's Neutron. Octavia's types go through the
load-balancer seam (:mod:`netbay.backends.loadbalancers`): netbay's own API, or
the cloud's Octavia where its catalog has one. Sandboxes standing in for Nova
servers are netbay's own API (``api``); on the ``openstack`` backend a cloud's
Nova is not driven (see :mod:`netbay.coe.handlers`).

Crash safety: each resource's row in ``coe_stack_resources`` is written before
its call (``CREATE_IN_PROGRESS``) and after it (physical id,
``CREATE_COMPLETE``); every physical resource carries the tag
``netbay-cluster=<cluster id>`` and ``netbay-resource=<name>`` (sandboxes and
floating IPs also a description saying the same). A new executor adopts rows it
finds, looks up by tag a resource whose call went out but whose id was never
written, and makes what is missing — so a restart converges without duplicates.
A delete also sweeps by tag (:mod:`netbay.coe.sweep`), so nothing the state
table missed is left — on either backend.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import select

from netbay.backends import NetworkBackend
from netbay.backends.http import HttpBackend
from netbay.backends.loadbalancers import LoadBalancerBackend, open_lb_backend
from netbay.coe import handlers, intrinsics
from netbay.backends.apiclient import LB, NET, SANDBOXES, Api, ApiError, error_message
from netbay.coe.graph import Graph, Node
from netbay.coe.sweep import sweep, sweep_workloads
from netbay.store.db import Store
from netbay.store.models import CoeStack, CoeStackResource, utcnow_precise

LB_CHILDREN = {"OS::Octavia::Listener", "OS::Octavia::Pool", "OS::Octavia::HealthMonitor",
               "OS::Octavia::PoolMember"}
# What a step may fail with: a service's refusal, a transport error, a bad reference.
FAILURES = (*handlers.Refused, httpx.HTTPError, ValueError, LookupError, TypeError, TimeoutError, RuntimeError)

Progress = Callable[[str, str, str], None]


class Interrupted(BaseException):
    """Raised by a hook to stop the executor dead, as a crash would: nothing is rolled
    back and no status is written (tests simulate a restart with it)."""


class StepFailed(RuntimeError):
    def __init__(self, name: str, type_: str, action: str, cause: BaseException) -> None:
        message = getattr(cause, "message", None) or str(cause) or type(cause).__name__
        super().__init__(f"Resource {action} failed: {name} ({type_}): {message}")


@dataclass
class Outcome:
    """What the conductor copies onto the cluster."""

    status: str
    status_reason: str
    outputs: dict[str, Any] = field(default_factory=dict)
    stack_id: str = ""

    @property
    def ok(self) -> bool:
        return self.status.endswith("_COMPLETE")


@dataclass
class Row:
    """In-memory copy of a ``coe_stack_resources`` row."""

    name: str
    type: str
    physical_id: str | None
    status: str
    attributes: dict[str, Any]
    depends_on: list[str]


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
        return True
    except ValueError:
        return False


class Stack:
    """One cluster's stack: ``create(graph)``, ``update(graph | node_count)``, ``delete()``,
    ``resume()``. Every call converges from whatever rows and resources exist, so
    calling it again after a crash finishes the job."""

    def __init__(self, store: Store, api: Api | None, *, cluster_id: str, name: str,
                 project_id: str | None = None, net: NetworkBackend | None = None,
                 lb: LoadBalancerBackend | None = None,
                 on_progress: Progress | None = None, hook: Progress | None = None, workers: int = 8,
                 lb_timeout: float = 120.0) -> None:
        if net is None and api is None:
            raise ValueError("a stack needs netbay's API or a network backend")
        self.store = store
        self.api = api    # netbay's own API: sandboxes standing in for Nova (embedded)
        self.net: NetworkBackend = net if net is not None else HttpBackend(api)  # type: ignore[arg-type]
        # Sandboxes are netbay's own only beside its own network service.
        self.has_own_services = api is not None and self.net.name != "openstack"
        # Load balancers: netbay's own beside its own network service; a cloud's Octavia if given one.
        if lb is None and self.has_own_services:
            lb = open_lb_backend("embedded", api=api)
        self.lb: LoadBalancerBackend | None = lb
        self.handlers = handlers.table(self.net.name, load_balancers=lb is not None)
        self.cluster_id = cluster_id
        self.name = name
        self.project_id = project_id
        self.on_progress = on_progress
        self.hook = hook
        self.workers = workers
        self.lb_timeout = lb_timeout
        self.rows: dict[str, Row] = {}
        self.stack_id = ""
        self._rows_lock = threading.Lock()
        self._lb_locks: dict[str, threading.Lock] = {}
        self._seq = 0
        self._loaded = False
        self._trust_complete = False

    # -- the conductor's interface ------------------------------------------------------------

    def create(self, graph: Graph, inputs: Mapping[str, Any] | None = None) -> Outcome:
        """Make everything in ``graph``; on failure roll back what the create made."""
        graph.check()
        self._begin("CREATE", graph, inputs)
        refused = self._unavailable(graph)
        if refused is not None:
            return self._finish("CREATE_FAILED", str(refused), graph, outputs=False)
        failure = self._converge(graph)
        if failure is None:
            return self._finish("CREATE_COMPLETE", "Stack CREATE completed successfully", graph)
        reason = str(failure)
        leftover = self._rollback(set(self.rows), sweep=True)
        return self._finish("CREATE_FAILED", reason + leftover, graph, outputs=False)

    def update(self, graph: Graph | None = None, *, node_count: int | None = None) -> Outcome:
        """Converge to a new graph (or the stored inputs recomposed with ``node_count``):
        removed resources go first (the newest minions: highest indexes), then new ones
        are made. A failure rolls back what this update added."""
        self._load()
        if graph is None:
            graph = self._recompose(node_count)
        graph.check()
        with self.store.read() as s:
            stack = s.get(CoeStack, self.stack_id)
            keep = list((stack.inputs or {}).get("before_update") or []) if stack is not None else []
            in_progress = stack is not None and stack.status == "UPDATE_IN_PROGRESS"
        before = keep if in_progress and keep else sorted(self.rows)
        self._trust_complete = stack is not None and stack.status.endswith("_COMPLETE")
        self._begin("UPDATE", graph, None, before_update=before)
        extra = set(self.rows) - set(graph.nodes)
        failure = self._delete_rows(extra) if extra else None
        if failure is None:
            failure = self._converge(graph)
        if failure is None:
            return self._finish("UPDATE_COMPLETE", "Stack UPDATE completed successfully", graph)
        added = set(self.rows) - set(before)
        leftover = self._rollback(added, sweep=False)
        return self._finish("UPDATE_FAILED", str(failure) + leftover, graph)

    def delete(self) -> Outcome:
        """Delete every resource (dependents first; 404 = already gone), then sweep by
        tag for anything the state table missed; the stack's rows go last."""
        self._load()
        self._set_status("DELETE", "DELETE_IN_PROGRESS", None)
        self._add_unrecorded()
        failure = None
        try:
            sweep_workloads(self)
        except FAILURES as exc:
            failure = StepFailed("sweep", "netbay-k8s tag", "DELETE", exc)
        failure = failure or self._delete_rows(set(self.rows))
        if failure is None:
            try:
                self._sweep()
            except FAILURES as exc:
                failure = StepFailed("sweep", "netbay-cluster tag", "DELETE", exc)
        if failure is not None:
            self._set_status("DELETE", "DELETE_FAILED", str(failure))
            return Outcome("DELETE_FAILED", str(failure), {}, self.stack_id)
        with self.store.write() as s:
            stack = s.get(CoeStack, self.stack_id)
            if stack is not None:
                s.delete(stack)
        return Outcome("DELETE_COMPLETE", "Stack DELETE completed successfully", {}, self.stack_id)

    def _add_unrecorded(self) -> None:
        """Resources of the stored graph without a row (a crash before the row was
        written, or a lost row): looked up by tag when their turn comes, so they too
        are deleted in dependency order — a floating IP before its router interface."""
        with self.store.read() as s:
            stack = s.get(CoeStack, self.stack_id) if self.stack_id else None
            graph = Graph.from_dict(stack.graph) if stack is not None and stack.graph else Graph()
        with self._rows_lock:
            for name, node in graph.nodes.items():
                if name not in self.rows:
                    self.rows[name] = Row(name, node.type, None, "CREATE_IN_PROGRESS", {}, sorted(node.requires()))

    def resume(self) -> Outcome | None:
        """Finish the operation a previous executor left ``*_IN_PROGRESS`` (None if none)."""
        self._load()
        with self.store.read() as s:
            stack = s.get(CoeStack, self.stack_id) if self.stack_id else None
            if stack is None or not stack.status.endswith("_IN_PROGRESS"):
                return None
            action, graph, inputs = stack.action, Graph.from_dict(stack.graph), dict(stack.inputs or {})
        if action == "DELETE":
            return self.delete()
        if action == "UPDATE":
            return self.update(graph)
        return self.create(graph, inputs.get("compose"))

    def outputs(self) -> dict[str, Any]:
        with self.store.read() as s:
            stack = s.get(CoeStack, self.stack_id) if self.stack_id else None
            return dict(stack.outputs or {}) if stack is not None else {}

    # -- stack rows ----------------------------------------------------------------------------

    def _load(self) -> None:
        if self._loaded:
            return
        with self.store.read() as s:
            stack = s.scalars(select(CoeStack).where(CoeStack.cluster_id == self.cluster_id)).first()
            if stack is not None:
                self.stack_id = stack.id
                for r in s.scalars(select(CoeStackResource).where(CoeStackResource.stack_id == stack.id)):
                    self.rows[r.name] = Row(r.name, r.type, r.physical_id, r.status, dict(r.attributes or {}),
                                            list(r.depends_on or []))
                    self._seq = max(self._seq, r.seq + 1)
        self._loaded = True

    def _begin(self, action: str, graph: Graph, inputs: Mapping[str, Any] | None, **extra: Any) -> None:
        self._load()
        with self.store.write() as s:
            stack = s.get(CoeStack, self.stack_id) if self.stack_id else None
            if stack is None:
                stack = CoeStack(id=str(uuid.uuid4()), cluster_id=self.cluster_id, name=self.name,
                                 project_id=self.project_id or "", inputs={})
                s.add(stack)
                self.stack_id = stack.id
            merged = dict(stack.inputs or {})
            if inputs is not None:
                merged["compose"] = dict(inputs)
            merged.update(extra)
            stack.inputs = merged
            stack.action, stack.status, stack.status_reason = action, f"{action}_IN_PROGRESS", None
            stack.graph = graph.to_dict()
            stack.updated_at = utcnow_precise()

    def _set_status(self, action: str, status: str, reason: str | None) -> None:
        with self.store.write() as s:
            stack = s.get(CoeStack, self.stack_id) if self.stack_id else None
            if stack is not None:
                stack.action, stack.status, stack.status_reason = action, status, reason
                stack.updated_at = utcnow_precise()

    def _finish(self, status: str, reason: str, graph: Graph, *, outputs: bool = True) -> Outcome:
        values = self._outputs(graph) if outputs else {}
        with self.store.write() as s:
            stack = s.get(CoeStack, self.stack_id)
            stack.status, stack.status_reason, stack.outputs = status, reason, values
            stack.inputs = {k: v for k, v in (stack.inputs or {}).items() if k != "before_update"}
            stack.updated_at = utcnow_precise()
        return Outcome(status, reason, values, self.stack_id)

    def _write_row(self, row: Row, reason: str | None = None) -> None:
        with self._rows_lock:
            self.rows[row.name] = row
            seq = self._seq
            self._seq += 1
        with self.store.write() as s:
            db = s.get(CoeStackResource, (self.stack_id, row.name))
            if db is None:
                db = CoeStackResource(stack_id=self.stack_id, name=row.name, seq=seq)
                s.add(db)
            db.type, db.physical_id, db.status, db.status_reason = row.type, row.physical_id, row.status, reason
            db.attributes, db.depends_on, db.updated_at = row.attributes, row.depends_on, utcnow_precise()

    def _drop_row(self, name: str) -> None:
        with self._rows_lock:
            self.rows.pop(name, None)
        with self.store.write() as s:
            db = s.get(CoeStackResource, (self.stack_id, name))
            if db is not None:
                s.delete(db)

    def _recompose(self, node_count: int | None) -> Graph:
        from netbay.coe.compose import build

        with self.store.read() as s:
            stack = s.get(CoeStack, self.stack_id) if self.stack_id else None
            inputs = dict((stack.inputs or {}).get("compose") or {}) if stack is not None else {}
        if not inputs:
            raise ValueError(f"stack of cluster {self.cluster_id} has no stored inputs to recompose from")
        cluster = dict(inputs["cluster"])
        if node_count is not None:
            cluster["node_count"] = node_count
        with self.store.write() as s:
            stack = s.get(CoeStack, self.stack_id)
            stack.inputs = {**stack.inputs, "compose": {"template": inputs["template"], "cluster": cluster}}
        return build(inputs["template"], cluster)

    # -- scheduling ------------------------------------------------------------------------------

    def _run(self, names: Iterable[str], prereqs: Mapping[str, set[str]],
             work: Callable[[str], None]) -> StepFailed | None:
        """Run ``work`` on every name once its prerequisites are done, up to ``workers``
        at a time. The first failure stops new work; running work finishes. An
        ``Interrupted`` (a simulated crash) propagates once the running work is done."""
        pending = set(names)
        done: set[str] = set()
        running: dict[Future[None], str] = {}
        failure: StepFailed | None = None
        crash: BaseException | None = None
        within = set(pending)
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="netbay-stack") as pool:
            for _ in range(2 * len(pending) + 2):  # each round finishes at least one
                if failure is None and crash is None:
                    for name in sorted(n for n in pending if prereqs.get(n, set()) & within <= done):
                        pending.discard(name)
                        running[pool.submit(work, name)] = name
                if not running:
                    break
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    name = running.pop(fut)
                    exc = fut.exception()
                    if exc is None:
                        done.add(name)
                    elif not isinstance(exc, Exception):
                        crash = crash or exc
                    elif failure is None:
                        failure = exc if isinstance(exc, StepFailed) else StepFailed(name, "?", "?", exc)
        if crash is not None:
            raise crash
        if failure is None and pending:
            failure = StepFailed(min(pending), "?", "schedule", RuntimeError("unreachable prerequisites"))
        return failure

    def _converge(self, graph: Graph) -> StepFailed | None:
        prereqs = {name: node.requires() for name, node in graph.nodes.items()}
        return self._run(graph.nodes, prereqs, lambda name: self._ensure(graph, graph.nodes[name]))

    def _delete_rows(self, names: set[str]) -> StepFailed | None:
        """Dependents first: a row waits for every row in ``names`` that depends on it."""
        with self._rows_lock:
            rows = {n: self.rows[n] for n in names if n in self.rows}
        dependents: dict[str, set[str]] = {n: set() for n in rows}
        for name, row in rows.items():
            for req in row.depends_on:
                if req in dependents:
                    dependents[req].add(name)
        doomed_lbs = {r.physical_id for r in rows.values() if r.type == "OS::Octavia::LoadBalancer"}
        return self._run(rows, dependents, lambda name: self._remove(rows[name], doomed_lbs))

    def _rollback(self, names: set[str], *, sweep: bool) -> str:
        """Delete what the failed step made; a text to append to the reason if it could not."""
        failure = self._delete_rows(names)
        if failure is None and sweep:
            try:
                self._sweep()
            except FAILURES as exc:
                failure = StepFailed("sweep", "netbay-cluster tag", "DELETE", exc)
        return "" if failure is None else f"; rollback incomplete: {failure}"

    def _sweep(self) -> None:
        sweep(self)

    def _unavailable(self, graph: Graph) -> StepFailed | None:
        """The first resource this backend cannot make, named before anything is made."""
        for name in sorted(graph.nodes):
            handler = self.handlers[graph.nodes[name].type]
            if isinstance(handler, handlers.Unavailable):
                return StepFailed(name, graph.nodes[name].type, "CREATE", RuntimeError(handler.why))
        return None

    def _progress(self, name: str, action: str, status: str) -> None:
        if self.hook is not None:
            self.hook(name, action, status)
        if self.on_progress is not None and status not in ("MADE", "FINISHED"):
            self.on_progress(name, action, status)

    # -- one resource ------------------------------------------------------------------------------

    def _ensure(self, graph: Graph, node: Node) -> None:
        """Adopt or make one resource, writing its row before and after the call."""
        handler = self.handlers[node.type]
        row = self.rows.get(node.name)
        deps = sorted(node.requires())
        try:
            props = self._resolve(graph, node.properties)
            if row is not None and row.status == "CREATE_COMPLETE" and row.physical_id:
                # A complete row from a run that ended cleanly is trusted (a scale touches
                # only what changes); after an interruption every row is checked.
                attrs = row.attributes if self._trust_complete else handler.exists(self, row)
                if attrs is not None:
                    row.attributes, row.depends_on = attrs, deps
                    return
            self._progress(node.name, "CREATE", "IN_PROGRESS")
            found = None
            if row is not None:  # the call may have gone out before the executor stopped
                if row.physical_id:
                    # Re-read, not the attributes written down after ``create``: ``finish``
                    # may have gone further (a group's rules) before the executor stopped.
                    fresh = handler.exists(self, row)
                    found = None if fresh is None else (row.physical_id, fresh)
                else:
                    found = handler.find(self, node.name)
            self._write_row(Row(node.name, node.type, found[0] if found else None, "CREATE_IN_PROGRESS",
                                found[1] if found else {}, deps))
            if found is None:
                pid, attrs = handler.create(self, node.name, props)
                self._progress(node.name, "CREATE", "MADE")  # a crash here loses the id: ``find``
                self._write_row(Row(node.name, node.type, pid, "CREATE_IN_PROGRESS", attrs, deps))
            else:
                pid, attrs = found
            attrs = handler.finish(self, pid, attrs, props)
            self._progress(node.name, "CREATE", "FINISHED")  # a crash here: ``exists`` re-reads
            self._write_row(Row(node.name, node.type, pid, "CREATE_COMPLETE", attrs, deps))
            self._progress(node.name, "CREATE", "COMPLETE")
        except FAILURES as exc:
            if isinstance(exc, StepFailed):
                raise
            self._progress(node.name, "CREATE", "FAILED")
            raise StepFailed(node.name, node.type, "CREATE", exc) from exc

    def _remove(self, row: Row, doomed_lbs: set[str | None]) -> None:
        handler = self.handlers[row.type]
        self._progress(row.name, "DELETE", "IN_PROGRESS")
        try:
            if row.physical_id is None:
                found = handler.find(self, row.name)
                row.physical_id, row.attributes = found if found else (None, row.attributes)
            if row.physical_id is not None:
                cascaded = row.type in LB_CHILDREN and row.attributes.get("loadbalancer_id") in doomed_lbs
                if not cascaded:  # the load balancer's cascade delete takes its children
                    handler.delete(self, row.physical_id, row.attributes)
            self._drop_row(row.name)
            self._progress(row.name, "DELETE", "COMPLETE")
        except FAILURES as exc:
            self._progress(row.name, "DELETE", "FAILED")
            raise StepFailed(row.name, row.type, "DELETE", exc) from exc

    # -- intrinsics --------------------------------------------------------------------------------

    def _resolve(self, graph: Graph, value: Any) -> Any:
        return intrinsics.resolve(graph, value, self._row)

    def _row(self, name: str) -> Row:
        row = self.rows.get(name)
        if row is None or row.physical_id is None:
            raise LookupError(f"resource {name} has not been made")
        return row

    def _outputs(self, graph: Graph) -> dict[str, Any]:
        return intrinsics.outputs(graph, self._row)

    # -- naming, lookups, load balancers ---------------------------------------------------------

    def physical_name(self, name: str) -> str:
        return f"{self.name}-{name}"[:255]

    def tags(self, name: str) -> list[str]:
        return [f"netbay-cluster={self.cluster_id}", f"netbay-resource={name}"[:255]]

    def description(self, name: str) -> str:
        return f"netbay-cluster={self.cluster_id} netbay-resource={name}"[:255]

    def owned(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.project_id:
            body["project_id"] = self.project_id
        return body

    def network_id(self, ref: Any) -> str:
        return self._lookup("network", ref)

    def subnet_id(self, ref: Any) -> str:
        return self._lookup("subnet", ref)

    def _lookup(self, kind: str, ref: Any) -> str:
        """Heat's name-or-id: an id is taken as given, a name must match exactly one."""
        if ref is None or ref == "":
            raise ValueError(f"no {kind} given")
        if _is_uuid(ref):
            return str(ref)
        found = self.net.list(kind, name=str(ref))
        if len(found) != 1:
            what = "Unable to find" if not found else "Multiple matches for"
            raise LookupError(f"{what} {kind} with name or id '{ref}'")
        return found[0]["id"]

    def lb_lock(self, lb_id: str) -> threading.Lock:
        with self._rows_lock:
            return self._lb_locks.setdefault(lb_id, threading.Lock())

    def wait_lb(self, lb_id: str) -> dict[str, Any]:
        """Wait (bounded) until the load balancer leaves ``PENDING_*``, as Heat's Octavia
        resources do: Octavia refuses any change to a load balancer's tree meanwhile."""
        deadline = time.monotonic() + self.lb_timeout
        delay = 0.01
        while True:
            lb = self.lb.show("loadbalancer", lb_id)
            status = lb["provisioning_status"]
            if status == "ERROR":
                raise RuntimeError(f"load balancer {lb_id} went to ERROR")
            if not status.startswith("PENDING_"):
                return lb
            if time.monotonic() > deadline:
                raise TimeoutError(f"load balancer {lb_id} still {status} after {self.lb_timeout:.0f}s")
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def lb_change(self, lb_id: str, change: Callable[[], Any]) -> Any:
        """One change in a load balancer's tree: settled before, settled after; a 409 from a
        concurrent change is retried (bounded)."""
        with self.lb_lock(lb_id):
            for attempt in range(5):
                self.wait_lb(lb_id)
                try:
                    result = change()
                    break
                except handlers.Refused as exc:
                    if exc.status != 409 or attempt == 4:
                        raise
            self.wait_lb(lb_id)
            return result


__all__ = ["LB", "NET", "SANDBOXES", "Api", "ApiError", "Interrupted", "Outcome", "Row", "Stack",
           "StepFailed", "error_message", "sweep", "sweep_workloads"]
