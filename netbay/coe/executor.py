"""The embedded executor: applies a cluster's resource graph through netbay's own APIs.

It plays Heat's part for the ``Orchestrator`` seam: the same graph a real Heat
would get (:mod:`netbay.coe.hot`) is made here resource by resource over HTTP —
the network API, the load-balancer API and sandboxes standing in for Nova
servers — in dependency order, independent resources in parallel.

Why over HTTP and not in-process: the executor then needs nothing but an API
and a token, obeys every rule a user's call obeys (quotas, overlaps, policy), and
its failures carry the API's own error message into ``status_reason``.

Crash safety: each resource's row in ``coe_stack_resources`` is written before
its API call (``CREATE_IN_PROGRESS``) and after it (physical id,
``CREATE_COMPLETE``); every physical resource carries the tag
``netbay-cluster=<cluster id>`` and ``netbay-resource=<name>`` (sandboxes and
floating IPs also a description saying the same). A new executor adopts rows it
finds, looks up by tag a resource whose call went out but whose id was never
written, and makes what is missing — so a restart converges without duplicates.
A delete also sweeps by tag, so nothing the state table missed is left.
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

from netbay.coe.graph import Graph, Node
from netbay.store.db import Store
from netbay.store.models import CoeStack, CoeStackResource, utcnow_precise

NET = "/network/v2.0"
LB = "/load-balancer/v2/lbaas"
SANDBOXES = "/netbay/v1/sandboxes"
LB_CHILDREN = {"OS::Octavia::Listener", "OS::Octavia::Pool", "OS::Octavia::HealthMonitor",
               "OS::Octavia::PoolMember"}

Progress = Callable[[str, str, str], None]


class Interrupted(BaseException):
    """Raised by a hook to stop the executor dead, as a crash would: nothing is rolled
    back and no status is written (tests simulate a restart with it)."""


class ApiError(RuntimeError):
    """An API call refused; ``message`` is the API's own error text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class StepFailed(RuntimeError):
    def __init__(self, name: str, type_: str, action: str, cause: BaseException) -> None:
        message = cause.message if isinstance(cause, ApiError) else str(cause) or type(cause).__name__
        super().__init__(f"Resource {action} failed: {name} ({type_}): {message}")


def error_message(response: httpx.Response) -> str:
    """The message of a Neutron, Octavia, Magnum or FastAPI error body, else the text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or f"HTTP {response.status_code}"
    if isinstance(body, dict):
        if isinstance(body.get("NeutronError"), dict):
            return str(body["NeutronError"].get("message"))
        for key in ("faultstring", "description", "detail", "message"):
            if isinstance(body.get(key), str):
                return body[key]
        if isinstance(body.get("errors"), list) and body["errors"]:
            return str(body["errors"][0].get("detail"))
    return str(body)[:500]


class Api:
    """A small HTTP client of netbay's APIs with a token renewed on 401; one
    ``httpx.Client`` per thread (the executor's workers call it in parallel)."""

    def __init__(self, url: str, token: Callable[[], str], *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._token_source = token
        self._token: str | None = None
        self._timeout = timeout
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()

    def _client(self) -> httpx.Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(base_url=self.url, timeout=self._timeout)
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        with self._lock:
            for client in self._clients:
                client.close()
            self._clients.clear()

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        for attempt in range(2):
            token = self._token
            if token is None:
                token = self._token = self._token_source()
            r = self._client().request(method, path, json=body, params=params or None,
                                       headers={"X-Auth-Token": token})
            if r.status_code == 401 and attempt == 0:
                self._token = None
                continue
            if r.status_code >= 400:
                raise ApiError(r.status_code, error_message(r))
            return r.json() if r.content else None
        raise AssertionError("unreachable")

    def gone_ok(self, method: str, path: str, body: Any = None, **params: Any) -> None:
        """A delete: 404 means already gone."""
        try:
            self.call(method, path, body, **params)
        except ApiError as exc:
            if exc.status != 404:
                raise


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

    def __init__(self, store: Store, api: Api, *, cluster_id: str, name: str, project_id: str | None = None,
                 on_progress: Progress | None = None, hook: Progress | None = None, workers: int = 8,
                 lb_timeout: float = 120.0) -> None:
        self.store = store
        self.api = api
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
        except (ApiError, httpx.HTTPError) as exc:
            failure = StepFailed("sweep", "netbay-k8s tag", "DELETE", exc)
        failure = failure or self._delete_rows(set(self.rows))
        if failure is None:
            try:
                self._sweep()
            except (ApiError, httpx.HTTPError) as exc:
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
            except (ApiError, httpx.HTTPError) as exc:
                failure = StepFailed("sweep", "netbay-cluster tag", "DELETE", exc)
        return "" if failure is None else f"; rollback incomplete: {failure}"

    def _sweep(self) -> None:
        sweep(self)

    def _progress(self, name: str, action: str, status: str) -> None:
        if self.hook is not None:
            self.hook(name, action, status)
        if self.on_progress is not None and status not in ("MADE", "FINISHED"):
            self.on_progress(name, action, status)

    # -- one resource ------------------------------------------------------------------------------

    def _ensure(self, graph: Graph, node: Node) -> None:
        """Adopt or make one resource, writing its row before and after the call."""
        handler = HANDLERS[node.type]
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
        except (ApiError, httpx.HTTPError, ValueError, LookupError, TypeError, TimeoutError, RuntimeError) as exc:
            if isinstance(exc, StepFailed):
                raise
            self._progress(node.name, "CREATE", "FAILED")
            raise StepFailed(node.name, node.type, "CREATE", exc) from exc

    def _remove(self, row: Row, doomed_lbs: set[str | None]) -> None:
        handler = HANDLERS[row.type]
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
        except (ApiError, httpx.HTTPError, LookupError, ValueError, TimeoutError, RuntimeError) as exc:
            self._progress(row.name, "DELETE", "FAILED")
            raise StepFailed(row.name, row.type, "DELETE", exc) from exc

    # -- intrinsics --------------------------------------------------------------------------------

    def _resolve(self, graph: Graph, value: Any) -> Any:
        if isinstance(value, Mapping):
            if len(value) == 1:
                (key, arg), = value.items()
                if key == "get_param":
                    return graph.value(arg)
                if key == "get_resource":
                    return self._row(arg).physical_id
                if key == "get_attr":
                    out: Any = self._row(arg[0]).attributes
                    for step in arg[1:]:
                        step = self._resolve(graph, step)
                        out = out[int(step)] if isinstance(out, list) else out[step]
                    return out
                if key == "str_replace":
                    text = str(self._resolve(graph, arg["template"]))
                    for k, v in self._resolve(graph, arg.get("params") or {}).items():
                        text = text.replace(k, str(v))
                    return text
            return {k: self._resolve(graph, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolve(graph, v) for v in value]
        return value

    def _row(self, name: str) -> Row:
        row = self.rows.get(name)
        if row is None or row.physical_id is None:
            raise LookupError(f"resource {name} has not been made")
        return row

    def _outputs(self, graph: Graph) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key, out in graph.outputs.items():
            try:
                values[key] = self._resolve(graph, out.value)
            except (LookupError, KeyError, IndexError, TypeError):
                values[key] = None
        return values

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
        return self._lookup("networks", "network", ref)

    def subnet_id(self, ref: Any) -> str:
        return self._lookup("subnets", "subnet", ref)

    def _lookup(self, collection: str, kind: str, ref: Any) -> str:
        """Heat's name-or-id: an id is taken as given, a name must match exactly one."""
        if ref is None or ref == "":
            raise ValueError(f"no {kind} given")
        if _is_uuid(ref):
            return str(ref)
        found = self.api.call("GET", f"{NET}/{collection}", name=str(ref), fields="id")[collection]
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
            lb = self.api.call("GET", f"{LB}/loadbalancers/{lb_id}")["loadbalancer"]
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
                except ApiError as exc:
                    if exc.status != 409 or attempt == 4:
                        raise
            self.wait_lb(lb_id)
            return result


# --- handlers: one per Heat resource type ---------------------------------------------------------


class Handler:
    """How one Heat type maps onto netbay's APIs. ``create`` returns (physical id,
    attributes for get_attr); ``finish`` completes an adopted or new resource;
    ``exists`` re-reads attributes (None when gone); ``find`` looks up by tag."""

    collection = ""
    member = ""
    base = NET

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = st.owned({"name": st.physical_name(name), "tags": st.tags(name), **self.body(st, props)})
        obj = st.api.call("POST", f"{self.base}/{self.collection}", {self.member: body})[self.member]
        return obj["id"], obj

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {}

    def finish(self, st: Stack, pid: str, attrs: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
        return attrs

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        try:
            return st.api.call("GET", f"{self.base}/{self.collection}/{row.physical_id}")[self.member]
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        key = self.collection.replace("-", "_")
        found = st.api.call("GET", f"{self.base}/{self.collection}", tags=",".join(st.tags(name)))[key]
        return (found[0]["id"], found[0]) if found else None

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        st.api.gone_ok("DELETE", f"{self.base}/{self.collection}/{pid}")


class NetHandler(Handler):
    collection, member = "networks", "network"


class SubnetHandler(Handler):
    collection, member = "subnets", "subnet"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"network_id": st.network_id(props["network"]), "cidr": props["cidr"], "ip_version": 4,
                "dns_nameservers": [d for d in props.get("dns_nameservers") or [] if d]}


class SubnetPoolHandler(Handler):
    collection, member = "subnetpools", "subnetpool"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"prefixes": list(props["prefixes"]), "default_prefixlen": int(props["default_prefixlen"])}


class RouterHandler(Handler):
    collection, member = "routers", "router"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        gateway = props.get("external_gateway_info") or {}
        return {"external_gateway_info": {"network_id": st.network_id(gateway["network"])}} if gateway else {}

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        ports = st.api.call("GET", f"{NET}/ports", device_id=pid, device_owner="network:router_interface")["ports"]
        for port in ports:
            st.api.gone_ok("PUT", f"{NET}/routers/{pid}/remove_router_interface", {"port_id": port["id"]})
        st.api.gone_ok("DELETE", f"{NET}/routers/{pid}")


class RouterInterfaceHandler(Handler):
    """Physical id ``<router>:<subnet>``, as Heat's."""

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        router, subnet = props["router"], st.subnet_id(props["subnet"])
        attrs = self.exists(st, Row(name, "", f"{router}:{subnet}", "", {}, []))
        if attrs is not None:  # made by a run that stopped before writing it down
            return f"{router}:{subnet}", attrs
        out = st.api.call("PUT", f"{NET}/routers/{router}/add_router_interface", {"subnet_id": subnet})
        return f"{router}:{subnet}", {"router_id": router, "subnet_id": subnet, "port_id": out["port_id"]}

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        router, subnet = str(row.physical_id).split(":")
        ports = st.api.call("GET", f"{NET}/ports", device_id=router, device_owner="network:router_interface")["ports"]
        for port in ports:
            if any(ip["subnet_id"] == subnet for ip in port["fixed_ips"]):
                return {"router_id": router, "subnet_id": subnet, "port_id": port["id"]}
        return None

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        return None  # an interface carries no tag: ``create`` adopts one the router has

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        router, subnet = pid.split(":")
        st.api.gone_ok("PUT", f"{NET}/routers/{router}/remove_router_interface", {"subnet_id": subnet})


def _rule_key(rule: Mapping[str, Any]) -> tuple[Any, ...]:
    return (rule.get("direction") or "ingress", rule.get("ethertype") or "IPv4", rule.get("protocol"),
            rule.get("port_range_min"), rule.get("port_range_max"), rule.get("remote_ip_prefix"),
            rule.get("remote_group_id"))


class SecurityGroupHandler(Handler):
    """The group, then its inline rules in one bulk call; ``finish`` adds only the rules
    missing, so a group made before a crash is completed, not duplicated."""

    collection, member = "security-groups", "security_group"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"description": "netbay cluster security group"}

    def finish(self, st: Stack, pid: str, attrs: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
        have = {_rule_key(r) for r in attrs.get("security_group_rules") or []}
        wanted = []
        for rule in props.get("rules") or []:
            body = {"security_group_id": pid, "direction": rule.get("direction", "ingress"),
                    "ethertype": rule.get("ethertype", "IPv4"),
                    **{k: rule[k] for k in ("protocol", "port_range_min", "port_range_max", "remote_ip_prefix",
                                            "remote_group_id") if rule.get(k) is not None}}
            if _rule_key(body) not in have:
                have.add(_rule_key(body))
                wanted.append(body)
        if wanted:
            st.api.call("POST", f"{NET}/security-group-rules", {"security_group_rules": wanted})
        return st.api.call("GET", f"{NET}/security-groups/{pid}")["security_group"]


class PortHandler(Handler):
    collection, member = "ports", "port"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"network_id": st.network_id(props["network"])}
        if props.get("fixed_ips"):
            body["fixed_ips"] = [{**({"subnet_id": st.subnet_id(ip["subnet"])} if ip.get("subnet") else {}),
                                  **({"ip_address": ip["ip_address"]} if ip.get("ip_address") else {})}
                                 for ip in props["fixed_ips"]]
        if props.get("security_groups") is not None:
            body["security_groups"] = list(props["security_groups"])
        return body


class FloatingIPHandler(Handler):
    collection, member = "floatingips", "floatingip"

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = st.owned({"floating_network_id": st.network_id(props["floating_network"]),
                         "description": st.description(name), "tags": st.tags(name)})
        if props.get("port_id"):
            body["port_id"] = props["port_id"]
        obj = st.api.call("POST", f"{NET}/floatingips", {"floatingip": body})["floatingip"]
        return obj["id"], obj


class LoadBalancerHandler(Handler):
    base, collection, member = LB, "loadbalancers", "loadbalancer"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"vip_subnet_id": st.subnet_id(props["vip_subnet"])}

    def finish(self, st: Stack, pid: str, attrs: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
        return st.wait_lb(pid)

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        with st.lb_lock(pid):
            try:
                st.wait_lb(pid)
            except ApiError as exc:
                if exc.status == 404:
                    return
                raise
            st.api.gone_ok("DELETE", f"{LB}/loadbalancers/{pid}", cascade="true")


class LBChildHandler(Handler):
    """Listener, pool, health monitor: made and deleted one at a time per load balancer."""

    base = LB

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        raise NotImplementedError

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = st.owned({"name": st.physical_name(name), "tags": st.tags(name), **self.body(st, props)})
        lb_id = self.lb_of(st, body)
        obj = st.lb_change(lb_id, lambda: st.api.call("POST", self.path(body), {self.member: body})[self.member])
        return obj["id"], {**obj, "loadbalancer_id": lb_id}

    def path(self, body: dict[str, Any]) -> str:
        return f"{LB}/{self.collection}"

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        attrs = super().exists(st, row)
        return None if attrs is None else {**attrs, "loadbalancer_id": row.attributes.get("loadbalancer_id")}

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        found = super().find(st, name)
        if found is None:
            return None
        return found[0], {**found[1], "loadbalancer_id": self.lb_of_found(st, found[1])}

    def lb_of_found(self, st: Stack, obj: dict[str, Any]) -> str | None:
        refs = obj.get("loadbalancers") or []
        return refs[0]["id"] if refs else None

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        lb_id = attrs.get("loadbalancer_id")
        url = f"{LB}/{self.collection}/{pid}"
        if lb_id is None:
            st.api.gone_ok("DELETE", url)
            return
        st.lb_change(lb_id, lambda: st.api.gone_ok("DELETE", url))


class ListenerHandler(LBChildHandler):
    collection, member = "listeners", "listener"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"loadbalancer_id": props["loadbalancer"], "protocol": props["protocol"],
                "protocol_port": int(props["protocol_port"])}

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        return body["loadbalancer_id"]


class PoolHandler(LBChildHandler):
    collection, member = "pools", "pool"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"listener_id": props["listener"], "protocol": props["protocol"],
                "lb_algorithm": props["lb_algorithm"]}

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        listener = st.api.call("GET", f"{LB}/listeners/{body['listener_id']}")["listener"]
        return listener["loadbalancers"][0]["id"]


def _lb_of_pool(st: Stack, pool_id: str) -> str:
    return st.api.call("GET", f"{LB}/pools/{pool_id}")["pool"]["loadbalancers"][0]["id"]


class HealthMonitorHandler(LBChildHandler):
    collection, member = "healthmonitors", "healthmonitor"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"pool_id": props["pool"], "type": props["type"], "delay": int(props["delay"]),
                "max_retries": int(props["max_retries"]), "timeout": int(props["timeout"])}

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        return _lb_of_pool(st, body["pool_id"])

    def lb_of_found(self, st: Stack, obj: dict[str, Any]) -> str | None:
        pools = obj.get("pools") or []
        return _lb_of_pool(st, pools[0]["id"]) if pools else None


class MemberHandler(LBChildHandler):
    """Members live under their pool: the pool id is kept in the attributes."""

    collection, member = "members", "member"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        body = {"pool_id": props["pool"], "address": props["address"], "protocol_port": int(props["protocol_port"])}
        if props.get("subnet"):
            body["subnet_id"] = st.subnet_id(props["subnet"])
        return body

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        pid, attrs = super().create(st, name, props)
        return pid, {**attrs, "pool_id": props["pool"]}

    def path(self, body: dict[str, Any]) -> str:
        return f"{LB}/pools/{body.pop('pool_id')}/members"

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        return _lb_of_pool(st, body["pool_id"])

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        pool = row.attributes.get("pool_id")
        try:
            obj = st.api.call("GET", f"{LB}/pools/{pool}/members/{row.physical_id}")["member"]
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return {**obj, "pool_id": pool, "loadbalancer_id": row.attributes.get("loadbalancer_id")}

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        return None  # members are listed per pool; a lost member is taken by the cascade delete

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        url = f"{LB}/pools/{attrs.get('pool_id')}/members/{pid}"
        lb_id = attrs.get("loadbalancer_id")
        if lb_id is None:
            st.api.gone_ok("DELETE", url)
            return
        st.lb_change(lb_id, lambda: st.api.gone_ok("DELETE", url))


class ServerHandler(Handler):
    """A node: a sandbox holding its ports (Nova's server without Nova). The sandbox
    has no tags, so its description carries the cluster and resource names."""

    base, collection, member = "/netbay/v1", "sandboxes", "sandbox"

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ports = [n["port"] for n in props.get("networks") or [] if n.get("port")]
        body = st.owned({"name": st.physical_name(name), "description": st.description(name), "ports": ports})
        if (props.get("metadata") or {}).get("labels"):
            body["labels"] = props["metadata"]["labels"]    # the cluster's, on its node
        obj = st.api.call("POST", SANDBOXES, {"sandbox": body})["sandbox"]
        return obj["id"], {**obj, "metadata": props.get("metadata") or {}}

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        attrs = super().exists(st, row)
        return None if attrs is None else {**attrs, "metadata": row.attributes.get("metadata") or {}}

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        found = st.api.call("GET", SANDBOXES, description=st.description(name))["sandboxes"]
        return (found[0]["id"], found[0]) if found else None


class ValueHandler(Handler):
    """``OS::Heat::Value``: nothing to make; the resolved value is its attribute."""

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return f"value:{name}", {"value": props.get("value")}

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        return row.attributes

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        return None

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        return None


HANDLERS: dict[str, Handler] = {
    "OS::Neutron::Net": NetHandler(),
    "OS::Neutron::Subnet": SubnetHandler(),
    "OS::Neutron::SubnetPool": SubnetPoolHandler(),
    "OS::Neutron::Router": RouterHandler(),
    "OS::Neutron::RouterInterface": RouterInterfaceHandler(),
    "OS::Neutron::SecurityGroup": SecurityGroupHandler(),
    "OS::Neutron::Port": PortHandler(),
    "OS::Neutron::FloatingIP": FloatingIPHandler(),
    "OS::Octavia::LoadBalancer": LoadBalancerHandler(),
    "OS::Octavia::Listener": ListenerHandler(),
    "OS::Octavia::Pool": PoolHandler(),
    "OS::Octavia::HealthMonitor": HealthMonitorHandler(),
    "OS::Octavia::PoolMember": MemberHandler(),
    "OS::Nova::Server": ServerHandler(),
    "OS::Heat::Value": ValueHandler(),
}


def sweep_workloads(st: Stack) -> None:
    """What was made on the cluster outside its graph — the Kubernetes mapping's
    (:mod:`netbay.k8s`) floating IPs, load balancers, pod and resolver ports and namespace networks,
    tagged ``netbay-k8s=…`` as well — before the graph's own resources: they hang on
    its router and service subnet, which cannot go while they are there."""
    tag = f"netbay-cluster={st.cluster_id}"
    for fip in st.api.call("GET", f"{NET}/floatingips", tags=f"{tag},netbay-k8s=service")["floatingips"]:
        st.api.gone_ok("DELETE", f"{NET}/floatingips/{fip['id']}")
    for lb in st.api.call("GET", f"{LB}/loadbalancers", tags=f"{tag},netbay-k8s=service")["loadbalancers"]:
        LoadBalancerHandler().delete(st, lb["id"], lb)
    for what in ("pod", "dns"):   # pods' ports; the cluster resolver's (on the service subnet)
        for port in st.api.call("GET", f"{NET}/ports", tags=f"{tag},netbay-k8s={what}")["ports"]:
            st.api.gone_ok("DELETE", f"{NET}/ports/{port['id']}")
    for net in st.api.call("GET", f"{NET}/networks", tags=f"{tag},netbay-k8s=network")["networks"]:
        for port in st.api.call("GET", f"{NET}/ports", network_id=net["id"],
                                device_owner="network:router_interface")["ports"]:
            st.api.gone_ok("PUT", f"{NET}/routers/{port['device_id']}/remove_router_interface",
                           {"port_id": port["id"]})
        st.api.gone_ok("DELETE", f"{NET}/networks/{net['id']}")


def sweep(st: Stack) -> None:
    """Delete whatever still carries this cluster's tag (or sandbox description), in an
    order the APIs accept: consumers before what they consume."""
    tag = f"netbay-cluster={st.cluster_id}"
    prefix = f"netbay-cluster={st.cluster_id} "
    for box in st.api.call("GET", SANDBOXES)["sandboxes"]:
        if str(box.get("description") or "").startswith(prefix):
            st.api.gone_ok("DELETE", f"{SANDBOXES}/{box['id']}")
    for fip in st.api.call("GET", f"{NET}/floatingips", tags=tag)["floatingips"]:
        st.api.gone_ok("DELETE", f"{NET}/floatingips/{fip['id']}")
    for lb in st.api.call("GET", f"{LB}/loadbalancers", tags=tag)["loadbalancers"]:
        LoadBalancerHandler().delete(st, lb["id"], lb)
    for port in st.api.call("GET", f"{NET}/ports", tags=tag)["ports"]:
        st.api.gone_ok("DELETE", f"{NET}/ports/{port['id']}")
    for router in st.api.call("GET", f"{NET}/routers", tags=tag)["routers"]:
        RouterHandler().delete(st, router["id"], router)
    for subnet in st.api.call("GET", f"{NET}/subnets", tags=tag)["subnets"]:
        st.api.gone_ok("DELETE", f"{NET}/subnets/{subnet['id']}")
    for sg in st.api.call("GET", f"{NET}/security-groups", tags=tag)["security_groups"]:
        st.api.gone_ok("DELETE", f"{NET}/security-groups/{sg['id']}")
    for net in st.api.call("GET", f"{NET}/networks", tags=tag)["networks"]:
        st.api.gone_ok("DELETE", f"{NET}/networks/{net['id']}")
    for pool in st.api.call("GET", f"{NET}/subnetpools", tags=tag)["subnetpools"]:
        st.api.gone_ok("DELETE", f"{NET}/subnetpools/{pool['id']}")


