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
servers are netbay's own API (``api``); on the ``openstack`` backend nodes are
servers of the cloud's Nova through the compute seam (:mod:`netbay.backends.servers`)
where its catalog has one, else claims on their ports (see :mod:`netbay.coe.handlers`).

Crash safety: each resource's row in ``coe_stack_resources`` is written before
its call (``CREATE_IN_PROGRESS``) and after it (physical id,
``CREATE_COMPLETE``); every physical resource carries the tag
``netbay-cluster=<cluster id>`` and ``netbay-resource=<name>`` (sandboxes and
floating IPs also a description saying the same; Nova servers, which take no
such tags, the same marks in their metadata). A new executor adopts rows it
finds, looks up by tag a resource whose call went out but whose id was never
written, and makes what is missing — so a restart converges without duplicates.
A delete also sweeps by tag (:mod:`netbay.coe.sweep`), so nothing the state
table missed is left — on either backend.

This module is the operations (create, update, delete, resume) and what one step
does to one resource; the rows are :mod:`netbay.coe.stackrecord`, the dependency
order :mod:`netbay.coe.schedule`, and what handlers see of the stack
:mod:`netbay.coe.handlers.context`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from netbay.backends import NetworkBackend
from netbay.client import Api
from netbay.backends.loadbalancers import LoadBalancerBackend
from netbay.backends.servers import ServerBackend
from netbay.coe import handlers, intrinsics
from netbay.coe.graph import Graph, Node
from netbay.coe.handlers.context import StackContext
from netbay.coe.schedule import StepFailed, run_in_order
from netbay.coe.stackrecord import Row, StackRecord
from netbay.coe.sweep import sweep, sweep_workloads
from netbay.store.db import Store

LB_CHILDREN = {"OS::Octavia::Listener", "OS::Octavia::Pool", "OS::Octavia::HealthMonitor",
               "OS::Octavia::PoolMember"}
# What a step may fail with: a service's refusal, a transport error, a bad reference.
FAILURES = (*handlers.Refused, httpx.HTTPError, ValueError, LookupError, TypeError, TimeoutError, RuntimeError)

Progress = Callable[[str, str, str], None]


class Interrupted(BaseException):
    """Raised by a hook to stop the executor dead, as a crash would: nothing is rolled
    back and no status is written (tests simulate a restart with it)."""


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


class Stack(StackContext):
    """One cluster's stack: ``create(graph)``, ``update(graph | node_count)``, ``delete()``,
    ``resume()``. Every call converges from whatever rows and resources exist, so
    calling it again after a crash finishes the job."""

    def __init__(self, store: Store, api: Api | None, *, cluster_id: str, name: str,
                 project_id: str | None = None, net: NetworkBackend | None = None,
                 lb: LoadBalancerBackend | None = None, servers: ServerBackend | None = None,
                 on_progress: Progress | None = None, hook: Progress | None = None, workers: int = 8,
                 lb_timeout: float = 120.0, server_timeout: float = 300.0) -> None:
        super().__init__(api, cluster_id=cluster_id, name=name, project_id=project_id, net=net, lb=lb,
                         lb_timeout=lb_timeout, servers=servers, server_timeout=server_timeout)
        self.store = store
        self.record = StackRecord(store, cluster_id=cluster_id, name=name, project_id=project_id)
        self.handlers = handlers.table(self.net.traits, load_balancers=self.lb is not None,
                                       servers=self.servers is not None)
        self.on_progress = on_progress
        self.hook = hook
        self.workers = workers
        self._trust_complete = False

    @property
    def stack_id(self) -> str:
        return self.record.stack_id

    # -- the conductor's interface ------------------------------------------------------------

    def create(self, graph: Graph, inputs: Mapping[str, Any] | None = None) -> Outcome:
        """Make everything in ``graph``; on failure roll back what the create made."""
        graph.check()
        self.record.begin("CREATE", graph, inputs)
        refused = self._unavailable(graph)
        if refused is not None:
            return self._finish("CREATE_FAILED", str(refused), graph, outputs=False)
        failure = self._converge(graph)
        if failure is None:
            return self._finish("CREATE_COMPLETE", "Stack CREATE completed successfully", graph)
        reason = str(failure)
        leftover = self._rollback(set(self.record.rows), sweep=True)
        return self._finish("CREATE_FAILED", reason + leftover, graph, outputs=False)

    def update(self, graph: Graph | None = None, *, node_count: int | None = None) -> Outcome:
        """Converge to a new graph (or the stored inputs recomposed with ``node_count``):
        removed resources go first (the newest minions: highest indexes), then new ones
        are made. A failure rolls back what this update added."""
        self.record.load()
        if graph is None:
            graph = self.record.recompose(node_count)
        graph.check()
        stored = self.record.stored()
        keep = list(stored.inputs.get("before_update") or []) if stored is not None else []
        in_progress = stored is not None and stored.status == "UPDATE_IN_PROGRESS"
        before = keep if in_progress and keep else sorted(self.record.rows)
        self._trust_complete = stored is not None and stored.status.endswith("_COMPLETE")
        self.record.begin("UPDATE", graph, None, before_update=before)
        extra = set(self.record.rows) - set(graph.nodes)
        failure = self._delete_rows(extra) if extra else None
        if failure is None:
            failure = self._converge(graph)
        if failure is None:
            return self._finish("UPDATE_COMPLETE", "Stack UPDATE completed successfully", graph)
        added = set(self.record.rows) - set(before)
        leftover = self._rollback(added, sweep=False)
        return self._finish("UPDATE_FAILED", str(failure) + leftover, graph)

    def delete(self) -> Outcome:
        """Delete every resource (dependents first; 404 = already gone), then sweep by
        tag for anything the state table missed; the stack's rows go last."""
        self.record.load()
        self.record.set_status("DELETE", "DELETE_IN_PROGRESS", None)
        self.record.add_unrecorded()
        failure = None
        try:
            sweep_workloads(self)
        except FAILURES as exc:
            failure = StepFailed("sweep", "netbay-k8s tag", "DELETE", exc)
        failure = failure or self._delete_rows(set(self.record.rows))
        if failure is None:
            failure = self._sweep()
        if failure is not None:
            self.record.set_status("DELETE", "DELETE_FAILED", str(failure))
            return Outcome("DELETE_FAILED", str(failure), {}, self.stack_id)
        self.record.remove()
        return Outcome("DELETE_COMPLETE", "Stack DELETE completed successfully", {}, self.stack_id)

    def resume(self) -> Outcome | None:
        """Finish the operation a previous executor left ``*_IN_PROGRESS`` (None if none)."""
        self.record.load()
        stored = self.record.stored()
        if stored is None or not stored.status.endswith("_IN_PROGRESS"):
            return None
        graph = Graph.from_dict(stored.graph)
        if stored.action == "DELETE":
            return self.delete()
        if stored.action == "UPDATE":
            return self.update(graph)
        return self.create(graph, stored.inputs.get("compose"))

    def outputs(self) -> dict[str, Any]:
        stored = self.record.stored()
        return stored.outputs if stored is not None else {}

    def _finish(self, status: str, reason: str, graph: Graph, *, outputs: bool = True) -> Outcome:
        values = self._outputs(graph) if outputs else {}
        self.record.finish(status, reason, values)
        return Outcome(status, reason, values, self.stack_id)

    # -- scheduling ------------------------------------------------------------------------------

    def _converge(self, graph: Graph) -> StepFailed | None:
        prereqs = {name: node.requires() for name, node in graph.nodes.items()}
        return run_in_order(graph.nodes, prereqs, lambda name: self._ensure(graph, graph.nodes[name]),
                            workers=self.workers)

    def _delete_rows(self, names: set[str]) -> StepFailed | None:
        """Dependents first: a row waits for every row in ``names`` that depends on it."""
        rows = self.record.rows_of(names)
        dependents: dict[str, set[str]] = {n: set() for n in rows}
        for name, row in rows.items():
            for req in row.depends_on:
                if req in dependents:
                    dependents[req].add(name)
        doomed_lbs = {r.physical_id for r in rows.values() if r.type == "OS::Octavia::LoadBalancer"}
        return run_in_order(rows, dependents, lambda name: self._remove(rows[name], doomed_lbs),
                            workers=self.workers)

    def _rollback(self, names: set[str], *, sweep: bool) -> str:
        """Delete what the failed step made; a text to append to the reason if it could not."""
        failure = self._delete_rows(names)
        if failure is None and sweep:
            failure = self._sweep()
        return "" if failure is None else f"; rollback incomplete: {failure}"

    def _sweep(self) -> StepFailed | None:
        """Delete by tag whatever the rows missed (:func:`netbay.coe.sweep.sweep`)."""
        try:
            sweep(self)
        except FAILURES as exc:
            return StepFailed("sweep", "netbay-cluster tag", "DELETE", exc)
        return None

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
        row = self.record.rows.get(node.name)
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
            self.record.write_row(Row(node.name, node.type, found[0] if found else None, "CREATE_IN_PROGRESS",
                                      found[1] if found else {}, deps))
            if found is None:
                pid, attrs = handler.create(self, node.name, props)
                self._progress(node.name, "CREATE", "MADE")  # a crash here loses the id: ``find``
                self.record.write_row(Row(node.name, node.type, pid, "CREATE_IN_PROGRESS", attrs, deps))
            else:
                pid, attrs = found
            attrs = handler.finish(self, pid, attrs, props)
            self._progress(node.name, "CREATE", "FINISHED")  # a crash here: ``exists`` re-reads
            self.record.write_row(Row(node.name, node.type, pid, "CREATE_COMPLETE", attrs, deps))
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
            self.record.drop_row(row.name)
            self._progress(row.name, "DELETE", "COMPLETE")
        except FAILURES as exc:
            self._progress(row.name, "DELETE", "FAILED")
            raise StepFailed(row.name, row.type, "DELETE", exc) from exc

    # -- intrinsics --------------------------------------------------------------------------------

    def _resolve(self, graph: Graph, value: Any) -> Any:
        return intrinsics.resolve(graph, value, self._row)

    def _row(self, name: str) -> Row:
        row = self.record.rows.get(name)
        if row is None or row.physical_id is None:
            raise LookupError(f"resource {name} has not been made")
        return row

    def _outputs(self, graph: Graph) -> dict[str, Any]:
        return intrinsics.outputs(graph, self._row)


__all__ = ["Interrupted", "Outcome", "Stack", "StepFailed"]
