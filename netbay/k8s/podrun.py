"""One Docker-runtime pod's containers, made as a kubelet makes them.

The sandbox (pause-like: the app's image or ``NETBAY_SANDBOX_IMAGE``, sleeping; network
``none`` until the controller plugs the pod's port into its namespace) comes first.
Then every ``initContainer`` in order, each run to completion before the next: one
that exits non-zero fails the pod (``Init:Error``) under ``restartPolicy: Never``, and
is run again otherwise, at most :data:`INIT_RETRIES` times (then
``Init:CrashLoopBackOff``: the pod stays Pending, nothing more is tried). Only then
every container, each joined to the sandbox (``network_mode=container:<sandbox>``),
with its environment, command, args, working directory, its emptyDir mounts (a
Docker volume of the pod's, shared with the init containers) and the pod's restart
policy as Docker's — except a Job's pod under ``Never``, whose failed container is
made again here, at most its ``backoffLimit`` times (the Job controller's new pod).

Every container carries the cluster, pod, port, role, its name in the spec and a hash
of what it runs as labels (:mod:`netbay.runtime.labels`), so a pass adopts it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from netbay.k8s import podenv
from netbay.k8s.objects import PodWant
from netbay.k8s.podspec import ContainerWant
from netbay.runtime.docker import SANDBOX_COMMAND
from netbay.runtime.labels import K8S_ATTEMPT as ATTEMPT
from netbay.runtime.labels import K8S_CLUSTER as CLUSTER
from netbay.runtime.labels import K8S_CONTAINER as CONTAINER
from netbay.runtime.labels import K8S_POD as POD
from netbay.runtime.labels import K8S_PORT as PORT
from netbay.runtime.labels import K8S_ROLE as ROLE
from netbay.runtime.labels import K8S_SPEC as SPEC

log = logging.getLogger(__name__)

INIT_WAIT = 60.0    # s: how long one pass waits for an init container to finish (then: the next pass)
INIT_RETRIES = 3    # an init container's failed runs retried (restartPolicy Always/OnFailure)


class NoDocker(RuntimeError):
    pass


@dataclass
class Found:
    """A pod's containers as Docker listed them (summaries), by role and name."""
    sandbox: dict[str, Any] | None = None
    apps: dict[str, dict[str, Any]] = field(default_factory=dict)
    inits: dict[str, dict[str, Any]] = field(default_factory=dict)

    def all(self) -> list[dict[str, Any]]:
        return [*self.apps.values(), *self.inits.values(), *([self.sandbox] if self.sandbox else [])]


def container_name(c: ContainerWant, index: int) -> str:
    return c.name or f"c{index}"


def spec_hash(c: ContainerWant | None, sandbox_id: str) -> str:
    """What a container runs, as written: a ConfigMap changed later restarts no pod (as in
    Kubernetes), a changed template does. Plain values hash as before env sources were
    read, and mounts and working directory only when set, so an upgrade restarts no
    running pod."""
    if c is None:
        facts: list[Any] = [sandbox_id]
    elif not c.env_from and all(e.field_path is None and e.ref is None for e in c.env):
        facts = [c.image, c.command, c.args, sorted({e.name: e.value for e in c.env}.items()), c.restart, sandbox_id]
    else:
        facts = [c.image, c.command, c.args, [dataclasses.asdict(e) for e in c.env],
                 [dataclasses.asdict(e) for e in c.env_from], c.restart, sandbox_id]
    if c is not None and (c.mounts or c.working_dir):
        facts += [[dataclasses.asdict(m) for m in c.mounts], c.working_dir]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def running(summary: dict[str, Any] | None) -> bool:
    return summary is not None and summary.get("State") == "running"


class PodRun:
    """Makes one pod's containers on ``api`` (docker's APIClient) for cluster ``cluster_id``."""

    def __init__(self, api: Any, cluster_id: str, sandbox_image: str = "") -> None:
        self.api, self.cluster_id, self.sandbox_image = api, cluster_id, sandbox_image

    def labels(self, pod: PodWant, port_id: str, role: str) -> dict[str, str]:
        return {CLUSTER: self.cluster_id, POD: f"{pod.namespace}/{pod.name}", PORT: port_id, ROLE: role}

    def name(self, pod: PodWant, role: str) -> str:
        return f"k8s_{role}_{pod.name}_{pod.namespace}_{self.cluster_id[:8]}"

    def remove(self, c: dict[str, Any]) -> None:
        from docker.errors import NotFound

        try:
            self.api.remove_container(c["Id"], force=True)
        except NotFound:
            pass

    # -- the sandbox ----------------------------------------------------------------------------

    def sandbox(self, pod: PodWant, port_id: str, opts: dict) -> str:
        image = self._sandbox_image(pod)
        host = self.api.create_host_config(network_mode="none", dns=opts.get("dns"),
                                           dns_search=opts.get("dns_search"), dns_opt=opts.get("dns_opt"))
        return self.create_and_start(image, SANDBOX_COMMAND, name=self.name(pod, "POD"), hostname=pod.name,
                                     labels=self.labels(pod, port_id, "sandbox"), host_config=host)

    def _sandbox_image(self, pod: PodWant) -> str:
        """``NETBAY_SANDBOX_IMAGE`` when present (the container API's sandbox image), else the
        first container's own (its ``sh`` waits)."""
        from docker.errors import ImageNotFound

        if self.sandbox_image:
            try:
                self.api.inspect_image(self.sandbox_image)
                return self.sandbox_image
            except ImageNotFound:
                pass
        first = pod.container
        if first is None:
            raise NoDocker(f"pod {pod.namespace}/{pod.name}: no container with an image to run")
        self.image(first.image, first.pull)
        return first.image

    # -- init containers, in order --------------------------------------------------------------

    def inits(self, pod: PodWant, port_id: str, sandbox_id: str, found: Found,
              launch: Callable[[ContainerWant], podenv.Launch]) -> bool:
        """Run the pod's init containers in order; True once every one exited 0 (else the pod
        waits: one still running, or failed — Init:Error under Never, retried otherwise)."""
        for i, c in enumerate(pod.init):
            name = container_name(c, i)
            digest = spec_hash(c, sandbox_id)
            have = found.inits.get(name)
            if have is not None and (have.get("Labels") or {}).get(SPEC) != digest:
                self.remove(have)
                found.inits.pop(name, None)
                have = None
            if have is None:
                have = found.inits[name] = self._run(pod, port_id, sandbox_id, c, name, "init", digest, 0, launch)
            code = self._wait(have["Id"])
            while code not in (None, 0) and pod.restart != "Never" and \
                    int((have.get("Labels") or {}).get(ATTEMPT) or 0) < INIT_RETRIES:
                attempt = int((have.get("Labels") or {}).get(ATTEMPT) or 0) + 1
                self.remove(have)
                have = found.inits[name] = self._run(pod, port_id, sandbox_id, c, name, "init", digest, attempt,
                                                     launch)
                code = self._wait(have["Id"])
            if code != 0:
                return False
        return True

    def _wait(self, cid: str) -> int | None:
        """The container's exit code, waiting up to :data:`INIT_WAIT` (None: still running)."""
        state = self.api.inspect_container(cid)["State"]
        if not state["Running"] and state["Status"] != "created":
            return int(state["ExitCode"])
        try:
            return int(self.api.wait(cid, timeout=INIT_WAIT)["StatusCode"])
        except Exception:  # noqa: BLE001 - requests' timeout: still running, the next pass looks again
            return None

    # -- the containers -------------------------------------------------------------------------

    def apps(self, pod: PodWant, port_id: str, sandbox_id: str, found: Found, moved: bool,
             launch: Callable[[ContainerWant], podenv.Launch]) -> None:
        """Every container, joined to the sandbox; a changed one replaced, a stopped one under
        ``Always`` started, a Job pod's failed one (``Never``) made again within its backoffLimit."""
        for i, c in enumerate(pod.containers):
            name = container_name(c, i)
            digest = spec_hash(c, sandbox_id)
            have = found.apps.get(name)
            if have is not None and (have.get("Labels") or {}).get(SPEC) != digest:   # a new template, or sandbox
                self.remove(have)
                have = None
            if have is None:
                found.apps[name] = self._run(pod, port_id, sandbox_id, c, name, "app", digest, 0, launch)
            elif moved:   # a sandbox started again (killed, dockerd restarted): the app joins its new namespace
                self.api.restart(have["Id"], timeout=2)
            elif not running(have) and pod.restart == "Always":
                self.api.start(have["Id"])
            elif not running(have) and pod.backoff_limit is not None and pod.restart == "Never":
                attempt = int((have.get("Labels") or {}).get(ATTEMPT) or 0)
                state = self.api.inspect_container(have["Id"])["State"]
                if state["Status"] == "exited" and state["ExitCode"] != 0 and attempt < pod.backoff_limit:
                    self.remove(have)
                    found.apps[name] = self._run(pod, port_id, sandbox_id, c, name, "app", digest, attempt + 1,
                                                 launch)

    def _run(self, pod: PodWant, port_id: str, sandbox_id: str, c: ContainerWant, name: str, role: str,
             digest: str, attempt: int, launch: Callable[[ContainerWant], podenv.Launch]) -> dict[str, Any]:
        self.image(c.image, c.pull)
        run = launch(c)
        restart: dict[str, Any] | None = None
        if role == "app" and pod.restart == "Always":
            restart = {"Name": "always"}
        elif role == "app" and pod.restart == "OnFailure":
            restart = {"Name": "on-failure", "MaximumRetryCount": pod.backoff_limit or 0}
        binds = {self.volume(pod, port_id, m.volume): {"bind": m.path, "mode": "ro" if m.read_only else "rw"}
                 for m in c.mounts}
        host = self.api.create_host_config(network_mode=f"container:{sandbox_id}", restart_policy=restart,
                                           binds=binds or None)
        labels = {**self.labels(pod, port_id, role), SPEC: digest, CONTAINER: name, ATTEMPT: str(attempt)}
        cid = self.create_and_start(c.image, run.args, entrypoint=run.command, working_dir=c.working_dir,
                                    name=f"{self.name(pod, name)}_{attempt}" if role == "init" or attempt
                                    else self.name(pod, name),
                                    environment=run.environment, labels=labels, host_config=host)
        return {"Id": cid, "Labels": labels, "State": "running"}

    def volume(self, pod: PodWant, port_id: str, volume: str) -> str:
        """The pod's emptyDir ``volume``: a Docker volume with the pod's labels (made once)."""
        name = self.name(pod, f"vol-{volume}")
        self.api.create_volume(name, labels=self.labels(pod, port_id, "volume"))   # idempotent in Docker
        return name

    def create_and_start(self, image: str, command: list[str] | None, *, name: str, **create: Any) -> str:
        """Create (a leftover of the same name — a crash before its labels were read — is
        replaced) and start; a container that does not start is removed."""
        from docker.errors import APIError

        for attempt in range(2):
            try:
                cid = self.api.create_container(image, command, name=name, **create)["Id"]
                break
            except APIError as exc:
                if exc.status_code != 409 or attempt:
                    raise
                self.remove({"Id": name})
        try:
            self.api.start(cid)
        except APIError:
            self.remove({"Id": cid})
            raise
        return cid

    def image(self, image: str, pull: str) -> None:
        """Present, or pulled as the pod's imagePullPolicy allows (``Never``: an error)."""
        from docker.errors import ImageNotFound

        try:
            self.api.inspect_image(image)
        except ImageNotFound:
            if pull == "Never":
                raise NoDocker(f"image {image} is not present and imagePullPolicy is Never") from None
            repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
            self.api.pull(repository, tag=tag)


__all__ = ["Found", "INIT_RETRIES", "NoDocker", "PodRun", "container_name", "running", "spec_hash"]
