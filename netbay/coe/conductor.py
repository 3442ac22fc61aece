"""The conductor: the reconciler that builds, scales and deletes clusters.

The API stores the wish and a ``*_IN_PROGRESS`` status, commits, then tells the
conductor which cluster changed. The conductor composes the cluster's resource
graph, applies it with the embedded executor (through netbay's own HTTP APIs, as
any client would) and writes the outcome back onto the cluster: status, reason,
``stack_id`` and the outputs Magnum reports. On start it resumes every cluster a
previous process left ``*_IN_PROGRESS``: the executor's persisted stack state lets
it adopt what was made and finish the rest.

Jobs for one cluster run one at a time, in the order asked (the latest wish wins
for a cluster that is still queued); different clusters build in parallel.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy import select

from netbay.store.db import Store
from netbay.store.models import Cluster, ClusterTemplate, utcnow

log = logging.getLogger("netbay.conductor")

WORKERS = 4


class Conductor(Protocol):
    #: Whether clusters are really built (a delete then waits for the teardown).
    builds: bool

    def cluster_changed(self, cluster_id: str, action: str) -> None:
        """``action`` is ``create``, ``update`` or ``delete``; called after the commit."""


class NoConductor:
    """No builder (``--no-conductor``): changes are recorded in the store and wait
    there; an admin (or a test) plays its part through ``PUT /netbay/v1/status``."""

    builds = False

    def cluster_changed(self, cluster_id: str, action: str) -> None:
        return None


class EmbeddedConductor:
    """Builds clusters with :class:`netbay.coe.executor.Stack` on a few worker threads."""

    builds = True

    def __init__(self, store: Store, workers: int = WORKERS) -> None:
        self.store = store
        self.workers = workers
        self._api_factory: Callable[[], Any] | None = None
        self._queue: dict[str, str] = {}     # cluster id -> the action still to run
        self._running: set[str] = set()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._heartbeat: Any = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, url: str, token: Callable[[], str], ready_timeout: float = 120.0) -> None:
        """Resume unfinished clusters and start the workers, once the API answers at
        ``url`` (the server may still be binding its socket when this is called)."""
        from netbay.coe.executor import Api
        from netbay.coe.mservices import Heartbeat

        self._api_factory = lambda: Api(url, token)
        self._heartbeat = Heartbeat(self.store)  # listed at /v1/mservices
        self._heartbeat.start()

        def begin() -> None:
            if not _wait_until_answering(url, ready_timeout, self._stop):
                log.error("conductor: %s did not answer within %.0f s; clusters are not built", url, ready_timeout)
                return
            self.resume()
            for i in range(self.workers):
                thread = threading.Thread(target=self._work, name=f"netbay-conductor-{i}", daemon=True)
                thread.start()
                self._threads.append(thread)

        starter = threading.Thread(target=begin, name="netbay-conductor-start", daemon=True)
        starter.start()
        self._threads.append(starter)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.stop(timeout)
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=timeout)

    def resume(self) -> None:
        """Queue every cluster left ``*_IN_PROGRESS`` (by a process that stopped)."""
        with self.store.read() as s:
            rows = s.execute(select(Cluster.id, Cluster.status).where(Cluster.status.like("%_IN_PROGRESS")))
            for cluster_id, status in rows:
                self.cluster_changed(cluster_id, status.split("_", 1)[0].lower())

    # -- the API's calls ---------------------------------------------------------------------

    def cluster_changed(self, cluster_id: str, action: str) -> None:
        with self._cond:
            queued = self._queue.get(cluster_id)
            # A create still queued and now deleted needs only the delete (which also
            # sweeps anything a half-run create made).
            self._queue[cluster_id] = action if queued != "delete" else queued
            self._cond.notify()

    def idle(self) -> bool:
        with self._cond:
            return not self._queue and not self._running

    # -- work ------------------------------------------------------------------------------

    def _take(self) -> tuple[str, str] | None:
        with self._cond:
            while not self._stop.is_set():
                for cluster_id, action in self._queue.items():
                    if cluster_id not in self._running:
                        del self._queue[cluster_id]
                        self._running.add(cluster_id)
                        return cluster_id, action
                self._cond.wait(timeout=1.0)
        return None

    def _work(self) -> None:
        while (job := self._take()) is not None:
            cluster_id, action = job
            try:
                self.run(cluster_id, action)
            except Exception:  # noqa: BLE001 - a worker must survive any one cluster
                log.exception("conductor: %s of cluster %s", action, cluster_id)
            finally:
                with self._cond:
                    self._running.discard(cluster_id)
                    self._cond.notify_all()

    def run(self, cluster_id: str, action: str) -> None:
        """Converge one cluster to its stored wish and write the outcome back."""
        from netbay.coe import clusternet
        from netbay.coe.compose import build
        from netbay.coe.executor import Outcome, Stack

        assert self._api_factory is not None, "conductor not started"
        with self.store.read() as s:
            cluster = s.get(Cluster, cluster_id)
            if cluster is None:
                return
            template = s.get(ClusterTemplate, cluster.cluster_template_id)
            inputs = composition_inputs(s, cluster, template)
            name, project = cluster.name, cluster.project_id
            # Every node needs a lease of the container network: checked before the stack changes.
            no_room = clusternet.room_problem(template.network_driver if template else None, cluster.labels,
                                              cluster.master_count, cluster.node_count)
        verb = action.upper()
        if action != "delete" and no_room:
            self._report(cluster_id, Outcome(f"{verb}_FAILED", no_room))
            return
        api = self._api_factory()
        stack = Stack(self.store, api, cluster_id=cluster_id, name=name, project_id=project)
        try:
            if action == "delete":
                clusternet.forget(self.store, cluster_id)
                outcome = stack.delete()
            elif action == "update":
                outcome = stack.update(node_count=inputs["cluster"]["node_count"])
            else:
                outcome = stack.create(build(inputs["template"], inputs["cluster"]), inputs)
            if outcome.ok and action != "delete":
                clusternet.sync(self.store, cluster_id)   # leases follow the nodes
        except Exception as exc:  # noqa: BLE001 - reported on the cluster, not lost
            log.exception("conductor: %s of cluster %s", action, cluster_id)
            outcome = Outcome(f"{verb}_FAILED", f"{type(exc).__name__}: {exc}")
        finally:
            api.close()
        self._report(cluster_id, outcome)

    def _report(self, cluster_id: str, outcome: Any) -> None:
        def write(s: Any) -> None:
            cluster = s.get(Cluster, cluster_id, with_for_update=True)
            if cluster is None:
                return
            if outcome.status == "DELETE_COMPLETE":
                s.delete(cluster)
                return
            cluster.status = outcome.status
            cluster.status_reason = outcome.status_reason
            cluster.stack_id = outcome.stack_id or cluster.stack_id
            outputs = outcome.outputs or {}
            if outcome.ok:
                cluster.api_address = outputs.get("api_address")
                cluster.master_addresses = list(outputs.get("master_addresses") or [])
                cluster.node_addresses = list(outputs.get("node_addresses") or [])
            cluster.updated_at = utcnow()

        self.store.retrying(write)


def _wait_until_answering(url: str, timeout: float, stop: threading.Event) -> bool:
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            httpx.get(url + "/", timeout=2.0)
            return True
        except httpx.HTTPError:
            stop.wait(0.1)
    return False


def composition_inputs(session: Any, cluster: Cluster, template: ClusterTemplate | None) -> dict[str, Any]:
    """What a cluster's graph is composed from: Magnum's template and cluster fields."""
    from netbay.coe import clusters, templates

    if template is None:
        raise LookupError(f"cluster {cluster.id} has no template {cluster.cluster_template_id}")
    return {"template": templates.render(template), "cluster": clusters.render(session, cluster)}


__all__ = ["Conductor", "EmbeddedConductor", "NoConductor", "composition_inputs"]
