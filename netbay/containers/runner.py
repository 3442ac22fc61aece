"""Drives Docker for the container API, off the request path.

The API writes a container ``Creating`` and hands its id here; a small thread pool
makes the Docker containers (:class:`netbay.runtime.docker.DockerRuntime`). As in the
spec's sandbox flow, a container is two: a sandbox ``zun-sandbox-<uuid>`` (image
``NETBAY_SANDBOX_IMAGE``, default ``busybox``, else the app's image) on the
container's ports — the netbay plugin plugs each one — holding the network namespace,
and the app ``zun-<uuid>`` started with ``--net=container:<sandbox>``. Stopping,
restarting or rebuilding (replacing) the app makes no plugin call: the address and
MAC stay. Zun's status is written back (``Created``/``Running``, or ``Error`` with
the reason); after a server restart it is read back from Docker. One lock per
container keeps its operations in order (a delete waits for the create under way).

Where Docker is: ``NETBAY_DOCKER_HOST`` (e.g. ``unix:///run/docker.sock``) and the
plugin's name ``NETBAY_DOCKER_DRIVER`` (``netbay``). Without a Docker host the API
still keeps networks and containers, and a container goes to ``Error`` saying so.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sqlalchemy import select

from netbay.containers import containers, dockerops, placement, plugs, resources, specs
from netbay.containers.creation import Creation
from netbay.containers.neutron import ZunNeutron
from netbay.context import Context
from netbay.runtime.labels import CONTAINER as LABEL
from netbay.runtime.labels import SANDBOX as SANDBOX_LABEL
from netbay.store.models import Container, NetworkAttachment

log = logging.getLogger(__name__)

API_VERSION = "1.41"  # Docker 20.10
EVENT_WINDOW = 2             # seconds per read of Docker's event stream
EVENT_STATUS = {"die": "Stopped", "start": "Running"}
AFTER = {"start": "Running", "stop": "Stopped", "reboot": "Running", "pause": "Paused", "unpause": "Running",
         "kill": "Stopped"}   # Zun's status once the action is done (kill: Stopped, as Zun's driver sets it)


class NoRuntime(Exception):
    pass


class Runner(Creation):
    """``network`` is the network backend the containers' ports live in (netbay's own
    service if None): ports, subnets and networks are read back from it for Docker."""

    def __init__(self, store: Any, docker_host: str | None = None, driver: str | None = None,
                 workers: int = 4, sandbox_image: str | None = None, network: Any = None) -> None:
        self.store = store
        if network is None:
            from netbay.backends import open_backend

            network = open_backend("embedded", store=store)
        self.network = network
        self.docker_host = docker_host if docker_host is not None else os.environ.get("NETBAY_DOCKER_HOST", "")
        self.driver = driver or os.environ.get("NETBAY_DOCKER_DRIVER", "netbay")
        self.sandbox_image = sandbox_image or os.environ.get("NETBAY_SANDBOX_IMAGE", "busybox")
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="netbay-containers")
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._runtime: Any = None
        self._closed = threading.Event()

    # -- plumbing ----------------------------------------------------------------------------

    def runtime(self) -> Any:
        if not self.docker_host:
            raise NoRuntime("No container runtime: netbay was started without a Docker host (NETBAY_DOCKER_HOST).")
        with self._guard:
            if self._runtime is None:
                import docker

                from netbay.runtime.docker import DockerRuntime

                client = docker.DockerClient(base_url=self.docker_host, version=API_VERSION, timeout=60)
                self._runtime = DockerRuntime(client, self.driver)
                threading.Thread(target=self._follow, name="netbay-containers-events", daemon=True).start()
            return self._runtime

    def _follow(self) -> None:
        """Docker's own changes (a command that exits, a container killed) as Zun's statuses,
        read from Docker's event stream in windows of ``EVENT_WINDOW`` seconds; a sandbox
        that dies is started again (:meth:`heal`)."""
        import time

        since = int(time.time())
        while not self._closed.is_set():
            until = int(time.time()) + EVENT_WINDOW
            try:
                events = self._runtime.client.events(since=since, until=until, decode=True,
                                                     filters={"type": "container", "event": list(EVENT_STATUS)})
                for event in events:
                    action = event.get("Action") or event.get("status") or ""
                    attributes = (event.get("Actor") or {}).get("Attributes") or {}
                    if attributes.get(LABEL):
                        self._state_if_idle(attributes[LABEL], event.get("id") or "", EVENT_STATUS[action])
                    elif attributes.get(SANDBOX_LABEL) and action == "die":
                        self.heal(attributes[SANDBOX_LABEL])
                since = until
            except Exception as exc:  # noqa: BLE001 - Docker restarting: try again shortly
                log.debug("docker events: %s", exc)
                self._closed.wait(1.0)

    def heal(self, container_id: str) -> Future:
        """A sandbox died (killed, OOM): start it again — Docker plugs the same port back, the
        endpoint keeps its address and MAC — and restart a running app into its namespace.
        Nothing while an operation of ours is under way (a delete removes the sandbox)."""
        def job(cid: str) -> None:
            with self.store.read() as s:
                c = s.get(Container, cid)
                if c is None or c.task_state is not None or c.status not in ("Running", "Stopped", "Created"):
                    return
                docker_id = c.docker_id
            try:
                rt = self.runtime()
                sandbox = self._sandbox(rt, cid)
                if sandbox is None:
                    return
                rt.ensure_running(sandbox)
                app = rt.find(docker_id) if docker_id else None
                if app is not None and app["State"]["Running"]:
                    rt.client.api.restart(docker_id, timeout=2)
                log.info("container %s: sandbox started again", cid)
            except Exception as exc:  # noqa: BLE001 - dockerd stopping: the app's own events say Stopped
                log.warning("container %s: sandbox not started again: %s", cid, exc)
        return self.submit(container_id, job)

    def _state_if_idle(self, container_id: str, docker_id: str, status: str) -> None:
        """Set ``status`` unless an operation of ours is under way (it sets its own) or the
        event is of an app container a rebuild replaced."""
        def update(s: Any) -> None:
            c = s.get(Container, container_id, with_for_update=True)
            if (c is not None and c.task_state is None and c.status in ("Running", "Stopped", "Created")
                    and (not docker_id or docker_id == c.docker_id)):
                containers.set_state(s, container_id, status=status)
        self.store.retrying(update)

    def recover(self) -> Future:
        """After a restart: each container's status as Docker has it now. Statuses Docker
        changed while netbay was down, and operations a stopped server left half-way
        (``Creating``, a task under way), would otherwise never move again."""
        def job() -> None:
            try:
                rt = self.runtime()
                with self.store.read() as s:
                    found = [(c.id, c.docker_id, c.status) for c in s.scalars(select(Container))]
                for cid, docker_id, status in found:
                    with self.lock(cid):
                        state = (rt.find(docker_id) if docker_id else None) or rt.find(f"zun-{cid}")
                        self._state(cid, **specs.recovered(state, status))
                        sandbox = rt.find(specs.sandbox_name(cid))
                    if sandbox is not None and not sandbox["State"]["Running"]:
                        self.heal(cid)  # died while netbay was down
            except Exception as exc:  # noqa: BLE001 - Docker down: statuses stay as they were
                log.warning("containers: recovery after restart skipped: %s", exc)
        return self._pool.submit(job)

    def lock(self, container_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(container_id, threading.Lock())

    def submit(self, container_id: str, job: Callable[[str], str | None]) -> Future:
        """Run ``job`` under the container's lock; the future's result is None, or why it failed
        (the container then in ``Error`` saying so, or the job's own account of a failure it
        undid) for the action record."""
        def run() -> str | None:
            with self.lock(container_id):
                try:
                    return job(container_id)
                except Exception as exc:  # noqa: BLE001 - reported as the container's status
                    log.warning("container %s: %s", container_id, exc)
                    self._state(container_id, status="Error", status_reason=specs.reason(exc), task_state=None)
                    return specs.reason(exc)
        return self._pool.submit(run)

    def _ensure_network(self, rt: Any, network: dict[str, Any], subnets: list[dict[str, Any]]) -> None:
        """One maker per Docker network: dockerd 20.10 makes duplicates (same name, several
        ids) when creates race, check_duplicate notwithstanding."""
        with self.lock(f"network:{network['id']}"):
            rt.ensure_network(network, subnets)

    def _sandbox(self, rt: Any, container_id: str) -> str | None:
        """The Docker id of the container's sandbox (None: a container from before sandboxes)."""
        found = rt.find(specs.sandbox_name(container_id))
        return found["Id"] if found is not None else None

    def neutron(self, project_id: str) -> ZunNeutron:
        """The backend acting for a container's project (jobs run with no caller)."""
        return ZunNeutron(self.network, Context.admin(project_id))

    def _state(self, container_id: str, **values: Any) -> None:
        self.store.retrying(lambda s: containers.set_state(s, container_id, **values))

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._runtime is not None:
            self._runtime.client.close()
        closing = getattr(self.network, "close", None)   # a cloud's connection
        if closing is not None:
            closing()

    # -- jobs --------------------------------------------------------------------------------

    def create(self, container_id: str) -> Future:
        return self.submit(container_id, self._create)

    def rebuild(self, container_id: str, run: bool) -> Future:
        """Zun's rebuild: a new app container (the image may be new) in the same sandbox, so
        the address, MAC and port stay; started again if it was running."""
        def job(cid: str) -> None:
            rt = self.runtime()
            with self.store.read() as s:
                c = s.get(Container, cid)
                spec, old = specs.app_spec(c), c.docker_id
            sandbox = self._sandbox(rt, cid)
            if sandbox is None:
                raise NoRuntime(f"Container {cid} has no sandbox to rebuild in (made before sandboxes).")
            rt.ensure_running(sandbox)
            if old:
                rt.remove(old)
            new = rt.app(sandbox, spec.pop("image"), spec.pop("command"), start=False, **spec)
            self._files(rt, new, cid)
            if run:
                rt.client.api.start(new)
            self._state(cid, docker_id=new, status="Running" if run else "Created", task_state=None,
                        status_reason="")
        return self.submit(container_id, job)

    def action(self, container_id: str, verb: str, timeout: int = 10, signal: str | None = None) -> Future:
        """start, stop, reboot, pause, unpause or kill (with ``signal``) the app; Zun's status after."""
        def job(cid: str) -> None:
            rt = self.runtime()
            with self.store.read() as s:
                docker_id = s.get(Container, cid).docker_id
            api = rt.client.api
            sandbox = self._sandbox(rt, cid)
            if sandbox is not None and verb in ("start", "reboot"):
                rt.ensure_running(sandbox)  # the app joins its namespace
            if verb == "start":
                api.start(docker_id)
            elif verb == "stop":
                api.stop(docker_id, timeout=timeout)
            elif verb == "reboot":
                api.restart(docker_id, timeout=timeout)
            elif verb == "pause":
                api.pause(docker_id)
            elif verb == "unpause":
                api.unpause(docker_id)
            else:
                dockerops.kill(api, docker_id, signal)
            self._state(cid, status=AFTER[verb], task_state=None, status_reason="")
        return self.submit(container_id, job)

    def call(self, container_id: str, work: Callable[[Any, str], Any], timeout: float = 60) -> Any:
        """``work(docker api, the app's Docker id)`` on the pool, waited for (Zun's synchronous
        actions: execute, logs, top, stats, archives, update)."""
        def job() -> Any:
            with self.store.read() as s:
                docker_id = s.get(Container, container_id).docker_id
            return work(self.runtime().client.api, docker_id)
        return self._pool.submit(job).result(timeout=timeout)

    def network_attach(self, container_id: str, port_id: str) -> Future:
        """Connect the new attachment's port; undo the attachment if Docker refuses."""
        def job(cid: str) -> str | None:
            with self.store.read() as s:
                c = s.get(Container, cid)
                docker_id, neutron = c.docker_id, self.neutron(c.project_id)
                att = s.get(NetworkAttachment, (cid, port_id))
                auto_delete = att.auto_delete
                network, subnets, port = specs.port_plan(s, att, neutron)
            try:
                rt = self.runtime()
                self._ensure_network(rt, network, subnets)
                rt.connect(self._sandbox(rt, cid) or docker_id, port)
            except Exception as exc:  # noqa: BLE001 - any failure is undone and reported on the container
                reason = specs.reason(exc)  # `exc` is unbound once the except block ends

                def undo(s: Any) -> None:
                    plugs.forget(s, cid, port_id)
                    containers.set_state(s, cid, task_state=None, status_reason=reason)
                plugs.release(neutron, cid, port_id, auto_delete)
                self.store.retrying(undo)
                return reason
            self._state(cid, task_state=None)
            return None
        return self.submit(container_id, job)

    def network_detach(self, container_id: str, port_id: str) -> Future:
        """Disconnect the port's network in Docker, then drop the attachment (and a made port)."""
        def job(cid: str) -> None:
            rt = self.runtime()
            with self.store.read() as s:
                c = s.get(Container, cid)
                docker_id, neutron = c.docker_id, self.neutron(c.project_id)
                att = s.get(NetworkAttachment, (cid, port_id))
                network_id, auto_delete = att.network_id, att.auto_delete
            rt.disconnect(self._sandbox(rt, cid) or docker_id, network_id)
            plugs.release(neutron, cid, port_id, auto_delete)

            def drop(s: Any) -> None:
                plugs.forget(s, cid, port_id)
                containers.set_state(s, cid, task_state=None)
            self.store.retrying(drop)
        return self.submit(container_id, job)

    def execute(self, container_id: str, command: list[str], timeout: float = 60) -> dict[str, Any]:
        """Run ``command`` in the running container (Zun's ``execute?run=true``); waits for it."""
        return self.call(container_id, lambda api, docker_id: dockerops.execute(api, docker_id, command), timeout)

    def remove(self, container_id: str) -> None:
        """Remove the Docker container (waiting for any job on it), synchronously."""
        with self.lock(container_id):
            with self.store.read() as s:
                c = s.get(Container, container_id)
                docker_id = c.docker_id if c is not None else ""
                placed = (c.cluster_id, c.node) if c is not None and c.cluster_id else None
                volumes = resources.volumes(c.mounts) if c is not None else []
            if docker_id:
                self.runtime().remove(docker_id)
            for volume in volumes if self.docker_host else ():
                self._drop_volume(volume)
            if self.docker_host:
                sandbox = self._sandbox(self.runtime(), container_id)
                if sandbox is not None:
                    self.runtime().remove(sandbox)
            if placed and self.docker_host:
                self._drop_cluster_network(placement.docker_network(*placed))
        with self._guard:
            self._locks.pop(container_id, None)

    def _drop_volume(self, name: str) -> None:
        from docker.errors import NotFound

        try:
            self.runtime().client.api.remove_volume(name, force=True)
        except NotFound:
            pass

    def _drop_cluster_network(self, name: str) -> None:
        """A node's Docker network once its last container left (Docker refuses while any is on it)."""
        from docker.errors import APIError

        with self.lock(f"network:{name}"):
            try:
                self.runtime().remove_network(name)
            except APIError as exc:
                log.debug("docker network %s kept: %s", name, exc)

    def remove_network(self, network_id: str) -> None:
        if self.docker_host:
            self.runtime().remove_network(network_id)
