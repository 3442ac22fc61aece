"""A stack's persisted state: its ``coe_stacks`` row and one ``coe_stack_resources``
row per resource, mirrored in memory as :class:`Row`.

The executor (:mod:`netbay.coe.executor`) writes a resource's row before its call
and after it, so a restarted executor finds what was made, or what may have been,
and adopts it instead of making it twice; the stack row keeps the operation, its
graph and its inputs, so an interrupted one can be finished.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from netbay.coe.graph import Graph
from netbay.store.db import Store
from netbay.store.models import CoeStack, CoeStackResource, utcnow_precise


@dataclass
class Row:
    """In-memory copy of a ``coe_stack_resources`` row."""

    name: str
    type: str
    physical_id: str | None
    status: str
    attributes: dict[str, Any]
    depends_on: list[str]


@dataclass(frozen=True)
class Stored:
    """A plain copy of the ``coe_stacks`` row, usable outside its session."""

    action: str
    status: str
    graph: dict[str, Any] | None
    inputs: dict[str, Any]
    outputs: dict[str, Any]


class StackRecord:
    """One cluster's stack row and resource rows; ``rows`` is the in-memory copy."""

    def __init__(self, store: Store, *, cluster_id: str, name: str, project_id: str | None) -> None:
        self.store = store
        self.cluster_id = cluster_id
        self.name = name
        self.project_id = project_id
        self.rows: dict[str, Row] = {}
        self.stack_id = ""
        self._lock = threading.Lock()   # ``rows`` and ``_seq``: the executor's workers write in parallel
        self._seq = 0
        self._loaded = False

    def load(self) -> None:
        """Read the cluster's stack and its rows, once."""
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

    def stored(self) -> Stored | None:
        with self.store.read() as s:
            stack = s.get(CoeStack, self.stack_id) if self.stack_id else None
            if stack is None:
                return None
            return Stored(stack.action, stack.status, stack.graph, dict(stack.inputs or {}),
                          dict(stack.outputs or {}))

    # -- the stack row ----------------------------------------------------------------------------

    def begin(self, action: str, graph: Graph, inputs: Mapping[str, Any] | None, **extra: Any) -> None:
        """Mark ``action`` in progress toward ``graph`` (the stack row is made on first use)."""
        self.load()
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

    def set_status(self, action: str, status: str, reason: str | None) -> None:
        with self.store.write() as s:
            stack = s.get(CoeStack, self.stack_id) if self.stack_id else None
            if stack is not None:
                stack.action, stack.status, stack.status_reason = action, status, reason
                stack.updated_at = utcnow_precise()

    def finish(self, status: str, reason: str, outputs: dict[str, Any]) -> None:
        """The operation's end: its status and outputs; the update's bookmark goes."""
        with self.store.write() as s:
            stack = s.get_one(CoeStack, self.stack_id)
            stack.status, stack.status_reason, stack.outputs = status, reason, outputs
            stack.inputs = {k: v for k, v in (stack.inputs or {}).items() if k != "before_update"}
            stack.updated_at = utcnow_precise()

    def remove(self) -> None:
        """The stack row itself: the last step of a delete (none if the cluster was deleted
        before its create began)."""
        if not self.stack_id:
            return
        with self.store.write() as s:
            stack = s.get(CoeStack, self.stack_id)
            if stack is not None:
                s.delete(stack)

    def recompose(self, node_count: int | None) -> Graph:
        """The graph of the stored inputs, with ``node_count`` if given (stored too)."""
        from netbay.coe.compose import build

        stored = self.stored()
        inputs = dict(stored.inputs.get("compose") or {}) if stored is not None else {}
        if not inputs:
            raise ValueError(f"stack of cluster {self.cluster_id} has no stored inputs to recompose from")
        cluster = dict(inputs["cluster"])
        if node_count is not None:
            cluster["node_count"] = node_count
        with self.store.write() as s:
            stack = s.get_one(CoeStack, self.stack_id)
            stack.inputs = {**stack.inputs, "compose": {"template": inputs["template"], "cluster": cluster}}
        return build(inputs["template"], cluster)

    # -- resource rows ----------------------------------------------------------------------------

    def write_row(self, row: Row, reason: str | None = None) -> None:
        with self._lock:
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

    def drop_row(self, name: str) -> None:
        with self._lock:
            self.rows.pop(name, None)
        with self.store.write() as s:
            db = s.get(CoeStackResource, (self.stack_id, name))
            if db is not None:
                s.delete(db)

    def rows_of(self, names: set[str]) -> dict[str, Row]:
        with self._lock:
            return {n: self.rows[n] for n in names if n in self.rows}

    def add_unrecorded(self) -> None:
        """Resources of the stored graph without a row (a crash before the row was
        written, or a lost row): looked up by tag when their turn comes, so they too
        are deleted in dependency order — a floating IP before its router interface."""
        stored = self.stored()
        graph = Graph.from_dict(stored.graph) if stored is not None and stored.graph else Graph()
        with self._lock:
            for name, node in graph.nodes.items():
                if name not in self.rows:
                    self.rows[name] = Row(name, node.type, None, "CREATE_IN_PROGRESS", {}, sorted(node.requires()))
