"""Pods run as Docker containers: cluster label ``kuryr_pod_runtime=docker``, or a
pod's annotation ``netbay.io/runtime: docker`` (a pod's annotation wins over its
cluster's label, either way).

As a kubelet does with its pause container: a *sandbox* container (network ``none``;
the cluster resolver as ``--dns``/``--dns-search``/``--dns-option``) holds the pod's
network namespace; the controller names that namespace as a sandbox pod's
(``<prefix>k-<port>``, ``ip netns attach``) and plugs the pod's port into it with the
sandbox pods' own step (:meth:`PodSandboxes.plug`: ``eth0`` with the port's MAC,
address and gateway; the agent adopts the fabric end) — so security groups, Service
membership, NetworkPolicy and DNS are the same as a sandbox pod's. The *app* — the
pod spec's first container: image, ``command`` (Docker's entrypoint), ``args``
(Docker's command), its environment as a kubelet makes it (:mod:`.podenv`: ``env``,
``envFrom``, ``valueFrom`` and ``$(VAR)`` over the Service variables, resolved now: the
pod's address, the ConfigMaps and Secrets of this moment) — joins it with
``--net=container:<sandbox>`` once the port is plugged, so it never runs without
its network; its Docker restart policy is the pod's ``restartPolicy``. A pod whose
environment cannot be made (a ConfigMap, Secret or key missing, not ``optional``)
gets no container at all: a ``CreateContainerConfigError`` event in the pass's
report, tried again each pass; the other pods go on.

Restart-safe as the rest of the controller: every container carries the cluster,
the pod, its port and a hash of what it runs as labels, so a pass adopts what exists,
replaces what differs (a re-made port, a changed template) and removes what no pod
wants. Docker is driven through its Engine API (the docker SDK), never the CLI;
``NETBAY_DOCKER_HOST`` says where it is (as for the container API).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from netbay.dataplane import netns
from netbay.dataplane.rtnl import release
from netbay.k8s import podenv
from netbay.k8s.dns import podfiles
from netbay.k8s.objects import Desired, PodWant
from netbay.k8s.sandbox import pod_port
from netbay.runtime.docker import SANDBOX_COMMAND
# netbay's own labels (cluster, "<namespace>/<name>", port id, "sandbox"|"app", spec hash): no user may set them
from netbay.runtime.labels import K8S_CLUSTER as CLUSTER
from netbay.runtime.labels import K8S_POD as POD
from netbay.runtime.labels import K8S_PORT as PORT
from netbay.runtime.labels import K8S_ROLE as ROLE
from netbay.runtime.labels import K8S_SPEC as SPEC

log = logging.getLogger(__name__)

API_VERSION = "1.41"   # Docker 20.10 and later
RESTART = {"Always": {"Name": "always"}, "OnFailure": {"Name": "on-failure"}, "Never": None}


class NoDocker(RuntimeError):
    pass


@dataclass
class Found:
    """A pod's containers as Docker listed them (its summaries)."""
    sandbox: dict[str, Any] | None = None
    app: dict[str, Any] | None = None

    def all(self) -> list[dict[str, Any]]:
        return [c for c in (self.app, self.sandbox) if c is not None]


def spec_hash(pod: PodWant, sandbox_id: str) -> str:
    """What the app runs, as written: a ConfigMap changed later restarts no pod (as in
    Kubernetes), a changed template does. Plain values hash as before env sources were
    read, so an upgrade restarts no running pod."""
    c = pod.container
    if c is None:
        facts: list[Any] = [sandbox_id]
    elif not c.env_from and all(e.field_path is None and e.ref is None for e in c.env):
        facts = [c.image, c.command, c.args, sorted({e.name: e.value for e in c.env}.items()), c.restart, sandbox_id]
    else:
        facts = [c.image, c.command, c.args, [dataclasses.asdict(e) for e in c.env],
                 [dataclasses.asdict(e) for e in c.env_from], c.restart, sandbox_id]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


class DockerPods:
    def __init__(self, ctrl: Any, docker_host: str | None = None, sandbox_image: str | None = None) -> None:
        self.ctrl = ctrl   # netbay.k8s.controller.Controller
        self.docker_host = docker_host if docker_host is not None else os.environ.get("NETBAY_DOCKER_HOST", "")
        self.sandbox_image = sandbox_image or os.environ.get("NETBAY_SANDBOX_IMAGE", "")
        self._client: Any = None
        self._owned = False   # made here from NETBAY_DOCKER_HOST (closed with the controller)
        # What the last complete pass left, by (ns, pod); None: list afresh (every full pass).
        self._seen: dict[tuple[str, str], Found] | None = None
        self.released: set[str] = set()   # "ns/pod": the last sweep took its containers, the pod stays

    # -- Docker -------------------------------------------------------------------------------

    def use(self, client: Any) -> None:
        """Drive this Docker client (a docker.DockerClient, the caller's to close) instead of
        NETBAY_DOCKER_HOST's."""
        self._client, self._owned = client, False

    def close(self) -> None:
        if self._client is not None and self._owned:
            self._client.close()
            self._client = None   # made again if needed

    @property
    def configured(self) -> bool:
        return self._client is not None or bool(self.docker_host)

    @property
    def client(self) -> Any:
        if self._client is None:
            if not self.docker_host:
                raise NoDocker("Docker-runtime pods need a Docker host: set NETBAY_DOCKER_HOST "
                               "(e.g. unix:///run/docker.sock) where the controller runs.")
            import docker

            self._client = docker.DockerClient(base_url=self.docker_host, version=API_VERSION, timeout=60)
            self._owned = True
        return self._client

    def wants(self, pod: PodWant) -> bool:
        """Whether ``pod`` runs as Docker containers (else: a sandbox namespace)."""
        return (pod.runtime or self.ctrl.refs.pod_runtime) == "docker"

    def _list(self) -> dict[tuple[str, str], Found]:
        out: dict[tuple[str, str], Found] = {}
        for c in self.client.api.containers(all=True, filters={"label": f"{CLUSTER}={self.ctrl.refs.cluster_id}"}):
            labels = c.get("Labels") or {}
            ns, _, name = (labels.get(POD) or "/").partition("/")
            found = out.setdefault((ns, name), Found())
            if labels.get(ROLE) == "sandbox" and found.sandbox is None:
                found.sandbox = c
            elif labels.get(ROLE) == "app" and found.app is None:
                found.app = c
            else:   # a duplicate (a crash between two creates): not adopted
                self._remove(c)
        return out

    def _remove(self, c: dict[str, Any]) -> None:
        from docker.errors import NotFound

        try:
            self.client.api.remove_container(c["Id"], force=True)
        except NotFound:
            pass

    # -- one pass: removal first (before the ports go), then the pods (after the Services) --

    def sweep(self, want: Desired, known: Any, report: Any) -> dict[tuple[str, str], Found]:
        """Remove the containers no Docker-runtime pod wants, and take the namespace name
        off their port (a pod switched to the sandbox runtime is named in ``released``:
        not realized, this pass plugs it afresh). Returns the rest, by pod."""
        self.released = set()
        if not self.configured:
            return {}
        if known is None or self._seen is None:
            self._seen = None
            try:
                have = self._list()
            except Exception as exc:  # noqa: BLE001 - Docker down: the sandbox pods go on
                log.warning("Docker-runtime pods: Docker not reachable (%s): none removed or run in this pass", exc)
                return {}
        else:
            have, self._seen = self._seen, None
        for key in sorted(have):
            pod = want.pods.get(key)
            if pod is not None and self.wants(pod):
                continue
            found = have.pop(key)
            for c in found.all():
                self._remove(c)
            port_id = ((found.sandbox or found.app or {}).get("Labels") or {}).get(PORT)
            if port_id:
                self.ctrl.sandboxes.unplug(port_id)
                if pod is not None:   # now a sandbox pod: this pass plugs it afresh
                    self.released.add(f"{key[0]}/{key[1]}")
            report.deleted.append(f"container {key[0]}/{key[1]}")
        return have

    def realize(self, want: Desired, ports: Mapping[tuple[str, str], dict[str, Any]],
                segments: Mapping[str, tuple[dict, dict]], vips: Mapping[tuple[str, str], str],
                have: dict[tuple[str, str], Found], report: Any, full: bool) -> None:
        """Every Docker-runtime pod's sandbox (its namespace plugged to its port) and app;
        ``have``: what :meth:`sweep` left."""
        todo = {key: port for key, port in ports.items() if self.wants(want.pods[key])}
        if not todo:
            self._seen = have
            return
        if not self.configured:
            log.warning("%d Docker-runtime pods not run: no Docker host (NETBAY_DOCKER_HOST)", len(todo))
            return
        subnets = {net["id"]: (net, subnet) for net, subnet in segments.values()}
        work = []
        for key, port in sorted(todo.items()):
            found = have.get(key) or Found()
            if not full and self._complete(want.pods[key], port, found):
                continue
            work.append((key, port, found))
        for net_id in sorted({port["network_id"] for _, port, _ in work}):   # before the threads race for it
            net = subnets[net_id][0]
            self.ctrl.sandboxes.ensure_network(net_id, int(net.get("mtu") or 1500))
        resolver = self.ctrl.discovery.resolver.address

        def one(item: tuple[tuple[str, str], dict[str, Any], Found]) -> Found:
            """One pod; a failure (an image missing, Docker refusing) is that pod's only, as a
            kubelet's: logged, and the next pass tries again."""
            key, port, found = item
            net, subnet = subnets[port["network_id"]]
            opts = podfiles.docker_options(key[0], resolver, self.ctrl.discovery.domain, want.services, vips) \
                if resolver else {"environment": {}}
            pod = want.pods[key]
            launch = functools.cache(lambda: self._launch(pod, port, want, opts.get("environment", {}), report))
            try:
                return self._realize(pod, port, pod_port(port, subnet, int(net.get("mtu") or 1500)),
                                     found, opts, launch, report)
            except podenv.ConfigError as exc:   # kubelet's CreateContainerConfigError: no container
                report.events.append(f"Warning pod {key[0]}/{key[1]} CreateContainerConfigError: Error: {exc}")
                log.warning("pod %s/%s not run: CreateContainerConfigError: %s", key[0], key[1], exc)
                return Found()
            except Exception as exc:  # noqa: BLE001 - reported, the other pods go on
                log.warning("pod %s/%s not run: %s", key[0], key[1], exc)
                return Found()   # nothing taken as made: the next pass lists and looks again
            finally:
                release(self.ctrl.sandboxes.ns(port["id"]))
        done = [one(w) for w in work] if len(work) <= 1 else list(self.ctrl._pool.map(one, work))
        for (key, _, _), found in zip(work, done):
            have[key] = found
        self._seen = None if any(not f.all() for f in done) else have   # after a failure: list afresh

    @staticmethod
    def _complete(pod: PodWant, port: dict[str, Any], found: Found) -> bool:
        """What the last pass of this process made, taken as still there (no Docker call)."""
        sb, app = found.sandbox, found.app
        return (sb is not None and app is not None and (sb.get("Labels") or {}).get(PORT) == port["id"]
                and (app.get("Labels") or {}).get(SPEC) == spec_hash(pod, sb["Id"]))

    # -- one pod ------------------------------------------------------------------------------

    def _launch(self, pod: PodWant, port: dict[str, Any], want: Desired, service_env: Mapping[str, str],
                report: Any) -> podenv.Launch:
        """The app's environment, command and args, resolved now (raises podenv.ConfigError)."""
        c = pod.container
        assert c is not None
        node = self.ctrl.node_of(pod)
        facts = podenv.PodFacts(
            pod.name, pod.namespace, pod.uid or port.get("device_id") or "", pod.labels, pod.annotations, node,
            pod.service_account, tuple(addr for name, _, addr in self.ctrl.refs.node_boxes if name == node and addr),
            tuple(ip["ip_address"] for ip in port["fixed_ips"]))
        done = podenv.launch(c.env, c.env_from, c.command, c.args, facts, want.configmaps, want.secrets, service_env)
        report.events.extend(f"Warning pod {pod.namespace}/{pod.name} {w}" for w in done.warnings)
        return done

    def _realize(self, pod: PodWant, port: dict[str, Any], wiring: Any, found: Found, opts: dict,
                 launch: Callable[[], podenv.Launch], report: Any) -> Found:
        api, sandboxes = self.client.api, self.ctrl.sandboxes
        name = f"{pod.namespace}/{pod.name}"
        if pod.container is None:
            raise NoDocker(f"pod {name}: no container with an image to run")
        sb, app = found.sandbox, found.app
        if sb is not None and (sb.get("Labels") or {}).get(PORT) != port["id"]:   # its port was re-made
            for c in found.all():
                self._remove(c)
            sb = app = None
        ns = sandboxes.ns(port["id"])
        if sb is None:
            launch()   # an environment that cannot be made: no sandbox either (nothing to undo)
            if netns.exists(ns):
                sandboxes.unplug(port["id"])   # a stale name: a dead sandbox's, or the pod's as a sandbox pod
            sb = {"Id": self._sandbox(pod, port, opts), "Labels": self._labels(pod, port, "sandbox")}
            report.made.append(f"container {name} {port['fixed_ips'][0]['ip_address']}")
        state = api.inspect_container(sb["Id"])["State"]
        if not state["Running"]:
            api.start(sb["Id"])
            state = api.inspect_container(sb["Id"])["State"]
        source = f"/proc/{state['Pid']}/ns/net"
        moved = netns.inode(ns) != os.stat(source).st_ino   # none yet, or the sandbox's namespace is new
        if moved:
            if netns.exists(ns):   # the old namespace's name, and its pair
                sandboxes.unplug(port["id"])
            netns.attach(ns, source)
        if not sandboxes.plugged(port["id"]):
            sandboxes.plug(wiring)
        digest = spec_hash(pod, sb["Id"])
        if app is not None and (app.get("Labels") or {}).get(SPEC) != digest:   # a new template, or sandbox
            self._remove(app)
            app = None
        if app is None:
            app = {"Id": self._app(pod, port, sb["Id"], digest, launch()), "Labels": {SPEC: digest}}
        elif moved:   # a sandbox started again (killed, dockerd restarted): the app joins its new namespace
            api.restart(app["Id"], timeout=2)
        elif app.get("State") != "running" and pod.container.restart == "Always":
            api.start(app["Id"])
        return Found(sb, app)

    def _labels(self, pod: PodWant, port: dict[str, Any], role: str) -> dict[str, str]:
        return {CLUSTER: self.ctrl.refs.cluster_id, POD: f"{pod.namespace}/{pod.name}", PORT: port["id"],
                ROLE: role}

    def _container_name(self, pod: PodWant, role: str) -> str:
        return f"k8s_{role}_{pod.name}_{pod.namespace}_{self.ctrl.refs.cluster_id[:8]}"

    def _sandbox(self, pod: PodWant, port: dict[str, Any], opts: dict) -> str:
        assert pod.container is not None
        api = self.client.api
        image = self._sandbox_image(pod.container.image, pod.container.pull)
        host = api.create_host_config(network_mode="none", dns=opts.get("dns"), dns_search=opts.get("dns_search"),
                                      dns_opt=opts.get("dns_opt"))
        return self._create_and_start(
            image, SANDBOX_COMMAND, name=self._container_name(pod, "POD"), hostname=pod.name,
            labels=self._labels(pod, port, "sandbox"), host_config=host)

    def _app(self, pod: PodWant, port: dict[str, Any], sandbox_id: str, digest: str, run: podenv.Launch) -> str:
        c = pod.container
        assert c is not None
        api = self.client.api
        self._image(c.image, c.pull)
        host = api.create_host_config(network_mode=f"container:{sandbox_id}", restart_policy=RESTART.get(c.restart))
        return self._create_and_start(
            c.image, run.args, entrypoint=run.command, name=self._container_name(pod, "app"),
            environment=run.environment, labels={**self._labels(pod, port, "app"), SPEC: digest}, host_config=host)

    def _create_and_start(self, image: str, command: list[str] | None, *, name: str, **create: Any) -> str:
        """Create (a leftover of the same name — a crash before its labels were read — is
        replaced) and start; a container that does not start is removed."""
        from docker.errors import APIError

        api = self.client.api
        for attempt in range(2):
            try:
                cid = api.create_container(image, command, name=name, **create)["Id"]
                break
            except APIError as exc:
                if exc.status_code != 409 or attempt:
                    raise
                self._remove({"Id": name})
        try:
            api.start(cid)
        except APIError:
            self._remove({"Id": cid})
            raise
        return cid

    def _image(self, image: str, pull: str) -> None:
        """Present, or pulled as the pod's imagePullPolicy allows (``Never``: an error)."""
        from docker.errors import ImageNotFound

        try:
            self.client.api.inspect_image(image)
        except ImageNotFound:
            if pull == "Never":
                raise NoDocker(f"image {image} is not present and imagePullPolicy is Never") from None
            repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
            self.client.api.pull(repository, tag=tag)

    def _sandbox_image(self, app_image: str, pull: str) -> str:
        """``NETBAY_SANDBOX_IMAGE`` when present (the container API's sandbox image), else the
        app's own (its ``sh`` waits)."""
        from docker.errors import ImageNotFound

        if self.sandbox_image:
            try:
                self.client.api.inspect_image(self.sandbox_image)
                return self.sandbox_image
            except ImageNotFound:
                pass
        self._image(app_image, pull)
        return app_image


def sweep_orphans(net: Any, client: Any) -> list[str]:
    """Remove the Docker-runtime pods' containers on this Docker whose port no longer
    exists (a cluster deleted with its pods). Returns the pods, as ``ns/name``."""
    from docker.errors import NotFound

    found = client.api.containers(all=True, filters={"label": PORT})
    if not found:
        return []
    live = {p["id"] for p in net.list("port", device_owner="compute:kuryr")}  # a NetworkBackend
    gone = []
    for c in found:
        labels = c.get("Labels") or {}
        if labels.get(PORT) not in live:
            try:
                client.api.remove_container(c["Id"], force=True)
            except NotFound:
                pass
            if labels.get(ROLE) == "sandbox":
                gone.append(labels.get(POD) or c["Id"])
    return sorted(gone)


__all__ = ["DockerPods", "NoDocker", "sweep_orphans"]
