"""The conductor: the reconciler that builds, scales and deletes clusters.

The API stores the wish and a ``*_IN_PROGRESS`` status, commits, then tells the
conductor which cluster changed. The conductor composes the cluster's resource
graph, applies it with the embedded executor (through netbay's own HTTP APIs, as
any client would) and writes the outcome back onto the cluster: status, reason,
``stack_id`` and the outputs Magnum reports.

Several processes may share the database: a cluster's work is claimed with a lease
(:mod:`netbay.coe.worklease`), so exactly one of them runs it. Every process keeps
looking for clusters ``*_IN_PROGRESS`` that no live lease covers — on start, those a
previous process left; later, those whose owner died — and takes them over: the
executor's persisted stack state lets it adopt what was made and finish the rest.

Jobs for one cluster run one at a time, in the order asked (the latest wish wins
for a cluster that is still queued); different clusters build in parallel.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from netbay.coe import worklease
from netbay.store.db import Store
from netbay.store.models import Cluster, ClusterTemplate, utcnow

log = logging.getLogger("netbay.conductor")

WORKERS = 4


class Conductor(Protocol):
    #: Whether clusters are really built (a delete then waits for the teardown).
    builds: bool

    def cluster_changed(self, cluster_id: str, action: str) -> None:
        """``action`` is ``create``, ``update`` or ``delete``; called after the commit."""

    def names(self) -> Any:
        """The backend a template's or cluster's network names are looked up in (``None``:
        netbay's own tables)."""


class NoConductor:
    """No builder (``--no-conductor``): changes are recorded in the store and wait
    there; an admin (or a test) plays its part through ``PUT /netbay/v1/status``."""

    builds = False

    def cluster_changed(self, cluster_id: str, action: str) -> None:
        return None

    def names(self) -> Any:
        return None


class EmbeddedConductor:
    """Builds clusters with :class:`netbay.coe.executor.Stack` on a few worker threads."""

    builds = True

    def __init__(self, store: Store, workers: int = WORKERS, network: tuple[str, str | None] = ("embedded", None)
                 ) -> None:
        self.store = store
        self.workers = workers
        self.network = network  # (backend kind, clouds.yaml cloud): where Neutron's types are made
        self._api_factory: Callable[[], Any] | None = None
        self._queue: dict[str, str] = {}     # cluster id -> the action still to run
        self._running: set[str] = set()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._heartbeat: Any = None
        self.owner = worklease.owner_id()    # this process, in the leases it holds
        self._names: Any = None
        self._names_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, url: str, token: Callable[[], str], ready_timeout: float = 120.0) -> None:
        """Resume unfinished clusters and start the workers, once the API answers at
        ``url`` (the server may still be binding its socket when this is called)."""
        from netbay.client import Api
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
            self._keep_leases()

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
        with self._names_lock:
            if self._names is not None and hasattr(self._names, "close"):
                self._names.close()
            self._names = None

    def resume(self) -> None:
        """Queue every cluster ``*_IN_PROGRESS`` that no process holds a live lease on."""
        for cluster_id, action in worklease.unclaimed(self.store):
            with self._cond:   # checked and queued at once: a worker may take it meanwhile
                if cluster_id not in self._running and cluster_id not in self._queue:
                    self._enqueue(cluster_id, action)

    def _keep_leases(self) -> None:
        """Renew the leases of the work running here; take up work nobody holds."""
        import time

        renewed = time.monotonic()
        while not self._stop.wait(worklease.SCAN):
            try:
                if time.monotonic() - renewed >= worklease.RENEW:
                    with self._cond:
                        running = sorted(self._running)
                    worklease.renew(self.store, self.owner, running)
                    renewed = time.monotonic()
                self.resume()
            except Exception:  # the database may be away for a moment
                log.exception("conductor: keeping leases")

    # -- the API's calls ---------------------------------------------------------------------

    def cluster_changed(self, cluster_id: str, action: str) -> None:
        with self._cond:
            self._enqueue(cluster_id, action)

    def _enqueue(self, cluster_id: str, action: str) -> None:
        """Queue ``action`` (``_cond`` held). A create still queued and now deleted needs
        only the delete (which also sweeps anything a half-run create made)."""
        queued = self._queue.get(cluster_id)
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
            follow_up = None
            try:
                # Another process's live lease: it runs this cluster, and it sees the new
                # wish in the status when it reports (see ``_report``).
                if worklease.claim(self.store, cluster_id, self.owner, action):
                    follow_up = self.run(cluster_id, action)
            except Exception:  # a worker must survive any one cluster
                log.exception("conductor: %s of cluster %s", action, cluster_id)
            finally:
                with self._cond:
                    self._running.discard(cluster_id)
                    self._cond.notify_all()
            if follow_up:
                self.cluster_changed(cluster_id, follow_up)

    def run(self, cluster_id: str, action: str) -> str | None:
        """Converge one cluster to its stored wish and write the outcome back; returns
        the action asked for meanwhile (a delete during a create), still to run."""
        from netbay.coe import clusternet
        from netbay.coe.compose import build
        from netbay.coe.executor import Outcome, Stack

        assert self._api_factory is not None, "conductor not started"
        with self.store.read() as s:
            cluster = s.get(Cluster, cluster_id)
            if cluster is None or not cluster.status.endswith("_IN_PROGRESS"):
                # Gone, or settled meanwhile: a wish queued twice (the API's call and the
                # scan for unclaimed work) runs once; a second run would build a failed
                # cluster again.
                self.store.retrying(lambda s: worklease.release(s, cluster_id, self.owner))
                return None
            action = _wish(cluster.status) or action
            template = s.get(ClusterTemplate, cluster.cluster_template_id)
            inputs = composition_inputs(s, cluster, template)
            name, project = cluster.name, cluster.project_id
            # Every node needs a lease of the container network: checked before the stack changes.
            driver = template.network_driver if template else None
            try:
                no_room = clusternet.room_problem(driver, clusternet.stored_config(driver, cluster),
                                                  cluster.master_count, cluster.node_count)
            except ValueError as exc:   # labels refused, kept from before the API checked them
                no_room = str(exc)
        verb = action.upper()
        if action != "delete" and no_room:
            return self._report(cluster_id, action, Outcome(f"{verb}_FAILED", no_room))
        api = self._api_factory()
        try:
            net = self._network(project)
            lb, servers = _cloud_load_balancers(net), _cloud_servers(net)
        except Exception as exc:  # noqa: BLE001 - an unreachable cloud fails the cluster, with why
            api.close()
            return self._report(cluster_id, action, Outcome(f"{verb}_FAILED", f"network backend: {exc}"))
        stack = Stack(self.store, api, cluster_id=cluster_id, name=name, project_id=project, net=net, lb=lb,
                      servers=servers)
        try:
            if action == "delete":
                clusternet.forget(self.store, cluster_id)
                outcome = stack.delete()
            elif action == "update":
                outcome = stack.update(node_count=inputs["cluster"]["node_count"])
            else:
                outcome = stack.create(build(inputs["template"], inputs["cluster"]), inputs)
            if outcome.ok and action != "delete":
                clusternet.sync(self.store, cluster_id, stack.net)   # leases follow the nodes
        except Exception as exc:  # reported on the cluster, not lost
            log.exception("conductor: %s of cluster %s", action, cluster_id)
            outcome = Outcome(f"{verb}_FAILED", f"{type(exc).__name__}: {exc}")
        finally:
            api.close()
            if net is not None and hasattr(net, "close"):
                net.close()
        return self._report(cluster_id, action, outcome)

    def names(self) -> Any:
        """The configured backend (one connection, opened on first use), where a cluster's
        networks are made and so where the names its template gives must exist; None:
        netbay's own service, whose tables the API reads in its own transaction."""
        with self._names_lock:
            if self._names is None:
                self._names = self._network()
            return self._names

    def _network(self, project_id: str | None = None) -> Any:
        """The configured backend's connection for one run, acting for the cluster's
        owner ``project_id`` (creates in it, sees what it sees: the clouds.yaml
        credentials name the project, :mod:`netbay.backends.cloudscope`); None: netbay's
        own service (configured as ``embedded``), over the API client the stack already has."""
        kind, cloud = self.network
        if kind == "embedded":
            return None
        from netbay.backends import open_backend

        backend = open_backend(kind, cloud=cloud)
        return backend.for_project(project_id) if project_id else backend

    def _report(self, cluster_id: str, action: str, outcome: Any) -> str | None:
        """Write the outcome and give the lease up, in one transaction. A lease lost (this
        process stalled past its expiry) writes nothing: the new owner reports. A wish
        that came meanwhile keeps the lease and is returned, to run next."""

        def write(s: Any) -> str | None:
            if not worklease.holds(s, cluster_id, self.owner):
                log.warning("conductor: lost the lease of cluster %s; its new owner reports", cluster_id)
                return None
            cluster = s.get(Cluster, cluster_id, with_for_update=True)
            if cluster is None:
                worklease.release(s, cluster_id, self.owner)
                return None
            if outcome.status == "DELETE_COMPLETE":
                s.delete(cluster)
                worklease.release(s, cluster_id, self.owner)
                return None
            wish = _wish(cluster.status)
            if wish is not None and wish != action:
                cluster.stack_id = outcome.stack_id or cluster.stack_id
                return wish
            worklease.release(s, cluster_id, self.owner)
            cluster.status = outcome.status
            cluster.status_reason = outcome.status_reason
            cluster.stack_id = outcome.stack_id or cluster.stack_id
            outputs = outcome.outputs or {}
            if outcome.ok:
                cluster.api_address = outputs.get("api_address")
                cluster.master_addresses = list(outputs.get("master_addresses") or [])
                cluster.node_addresses = list(outputs.get("node_addresses") or [])
            cluster.updated_at = utcnow()
            return None

        return self.store.retrying(write)  # type: ignore[return-value]


ACTIONS = ("create", "update", "delete")


def _wish(status: str) -> str | None:
    """The action a cluster's stored status asks for (``UPDATE_IN_PROGRESS``: update); None once settled."""
    verb = status.split("_", 1)[0].lower()
    return verb if status.endswith("_IN_PROGRESS") and verb in ACTIONS else None


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


def _cloud_load_balancers(net: Any) -> Any:
    """The cloud's Octavia on the ``openstack`` backend's connection, where its catalog
    lists one; None otherwise (netbay's own load balancers, or none on such a cloud)."""
    from netbay.backends.loadbalancers import cloud_load_balancers

    return None if net is None else cloud_load_balancers(net)


def _cloud_servers(net: Any) -> Any:
    """The cloud's Nova on the ``openstack`` backend's connection, where its catalog
    lists a compute service; None otherwise (sandboxes, or claims on the nodes' ports)."""
    from netbay.backends.servers import cloud_servers

    return None if net is None else cloud_servers(net)
