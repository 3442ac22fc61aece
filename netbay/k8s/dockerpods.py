"""Pods run as Docker containers: cluster label ``kuryr_pod_runtime=docker``, or a
pod's annotation ``netbay.io/runtime: docker`` (a pod's annotation wins over its
cluster's label, either way).

As a kubelet does with its pause container: a *sandbox* container (network ``none``;
the cluster resolver as ``--dns``/``--dns-search``/``--dns-option``) holds the pod's
network namespace; the controller names that namespace as a sandbox pod's
(``<prefix>k-<port>``, ``ip netns attach``) and plugs the pod's port into it with the
sandbox pods' own step (:meth:`PodSandboxes.plug`: ``eth0`` with the port's MAC,
address and gateway; the agent adopts the fabric end) — so security groups, Service
membership, NetworkPolicy and DNS are the same as a sandbox pod's. Then, once the
port is plugged (so none runs without its network), the pod's init containers in
order and every container joined to the sandbox with ``--net=container:<sandbox>``
(:mod:`.podrun`), each with its environment as a kubelet makes it (:mod:`.podenv`:
``env``, ``envFrom``, ``valueFrom`` and ``$(VAR)`` over the Service variables, resolved
now: the pod's address, the ConfigMaps and Secrets of this moment). A StatefulSet's pod
is made once its predecessor runs. A pod whose
environment cannot be made (a ConfigMap, Secret or key missing, not ``optional``)
gets no container at all: a ``CreateContainerConfigError`` event in the pass's
report, tried again each pass; the other pods go on.

Restart-safe as the rest of the controller: every container carries the cluster,
the pod, its port, its role and name and a hash of what it runs as labels, so a pass adopts what exists,
replaces what differs (a re-made port, a changed template) and removes what no pod
wants. Docker is driven through its Engine API (the docker SDK), never the CLI;
``NETBAY_DOCKER_HOST`` says where it is (as for the container API). A pod's status
is read from its containers (:meth:`DockerPods.statuses`, :mod:`.podstatus`).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

from netbay.dataplane import netns
from netbay.dataplane.rtnl import release
from netbay.k8s import jobgate, podenv, podstatus
from netbay.k8s.dns import podfiles
from netbay.k8s.objects import Desired, ManifestError, PodWant
from netbay.k8s.podrun import Found, NoDocker, PodRun, container_name, running, spec_hash
from netbay.k8s.podspec import ContainerWant
from netbay.k8s.sandbox import pod_port
# netbay's own labels (cluster, "<namespace>/<name>", port id, role, container, spec hash): no user may set them
from netbay.runtime.labels import K8S_CLUSTER as CLUSTER
from netbay.runtime.labels import K8S_CONTAINER as CONTAINER
from netbay.runtime.labels import K8S_POD as POD
from netbay.runtime.labels import K8S_PORT as PORT
from netbay.runtime.labels import K8S_ROLE as ROLE
from netbay.runtime.labels import K8S_SPEC as SPEC

log = logging.getLogger(__name__)

API_VERSION = "1.41"   # Docker 20.10 and later


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
        self.follow = jobgate.FollowUp()   # the next pass once a Job's held pod may start

    # -- Docker -------------------------------------------------------------------------------

    def use(self, client: Any) -> None:
        """Drive this Docker client (a docker.DockerClient, the caller's to close) instead of
        NETBAY_DOCKER_HOST's."""
        self._client, self._owned = client, False

    def close(self) -> None:
        self.follow.close()
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

    def refuse(self, want: Desired) -> None:
        """Raise for a Docker-runtime pod the runtime cannot run as written (run as written
        or not at all: never trimmed)."""
        for pod in want.pods.values():
            if pod.refused and self.wants(pod):
                raise ManifestError(f"Pod/{pod.namespace}/{pod.name}: the docker runtime cannot run it: "
                                    + "; ".join(pod.refused))

    @property
    def run(self) -> PodRun:
        return PodRun(self.client.api, self.ctrl.refs.cluster_id, self.sandbox_image)

    def _list(self) -> dict[tuple[str, str], Found]:
        out: dict[tuple[str, str], Found] = {}
        for c in self.client.api.containers(all=True, filters={"label": f"{CLUSTER}={self.ctrl.refs.cluster_id}"}):
            labels = c.get("Labels") or {}
            ns, _, name = (labels.get(POD) or "/").partition("/")
            found = out.setdefault((ns, name), Found())
            role, cname = labels.get(ROLE), labels.get(CONTAINER) or ""
            if role == "sandbox" and found.sandbox is None:
                found.sandbox = c
            elif role == "app" and cname not in found.apps:
                found.apps[cname] = c
            elif role == "init" and cname not in found.inits:
                found.inits[cname] = c
            else:   # a duplicate (a crash between two creates): not adopted
                self._remove(c)
        return out

    def _remove(self, c: dict[str, Any]) -> None:
        self.run.remove(c)

    def _remove_volumes(self, pod: str) -> None:
        """The emptyDir volumes of pod ``ns/name`` (its containers gone)."""
        from docker.errors import APIError

        api = self.client.api
        for v in (api.volumes(filters={"label": [f"{CLUSTER}={self.ctrl.refs.cluster_id}", f"{POD}={pod}"]})
                  or {}).get("Volumes") or []:
            try:
                api.remove_volume(v["Name"], force=True)
            except APIError as exc:
                log.warning("volume %s of pod %s not removed: %s", v["Name"], pod, exc)

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
            self._remove_volumes(f"{key[0]}/{key[1]}")
            port_id = ((found.all() or [{}])[-1].get("Labels") or {}).get(PORT)
            if port_id:
                self.ctrl.sandboxes.unplug(port_id)
                if pod is not None:   # now a sandbox pod: this pass plugs it afresh
                    self.released.add(f"{key[0]}/{key[1]}")
            report.deleted.append(f"container {key[0]}/{key[1]}")
        return have

    def realize(self, want: Desired, ports: Mapping[tuple[str, str], dict[str, Any]],
                segments: Mapping[str, tuple[dict, dict]], vips: Mapping[tuple[str, str], str],
                have: dict[tuple[str, str], Found], report: Any, full: bool) -> None:
        """Every Docker-runtime pod's sandbox (its namespace plugged to its port), init
        containers and containers; ``have``: what :meth:`sweep` left. A StatefulSet's pod
        waits (this pass) until its predecessor runs; the others are made in parallel."""
        todo = {key: port for key, port in ports.items() if self.wants(want.pods[key])}
        if not todo:
            self._seen = have
            return
        if not self.configured:
            log.warning("%d Docker-runtime pods not run: no Docker host (NETBAY_DOCKER_HOST)", len(todo))
            return
        subnets = {net["id"]: (net, subnet) for net, subnet in segments.values()}
        work: list[tuple[tuple[str, str], dict[str, Any], Found]] = []
        ordered: list[tuple[tuple[str, str], dict[str, Any], Found]] = []
        held = jobgate.held(want.pods, todo, have, self._finished)
        for key, port in sorted(todo.items(), key=lambda kp: (kp[0][0], _ordinal(kp[0][1]))):
            pod, found = want.pods[key], have.get(key) or Found()
            if pod.refused:   # what the runtime cannot run as written: said, never trimmed
                report.events.append(f"Warning pod {key[0]}/{key[1]} Unsupported: " + "; ".join(pod.refused))
                continue
            if key in held:
                report.events.append(f"Normal pod {key[0]}/{key[1]} Waiting: {pod.owner} runs "
                                     f"{pod.parallelism} at once (parallelism)")
                continue
            if not full and self._complete(pod, port, found):
                continue
            (ordered if pod.after else work).append((key, port, found))
        for net_id in sorted({port["network_id"] for _, port, _ in work + ordered}):   # before the threads race
            net = subnets[net_id][0]
            self.ctrl.sandboxes.ensure_network(net_id, int(net.get("mtu") or 1500))
        resolver = self.ctrl.discovery.resolver.addresses

        def one(item: tuple[tuple[str, str], dict[str, Any], Found]) -> Found:
            """One pod; a failure (an image missing, Docker refusing) is that pod's only, as a
            kubelet's: logged, and the next pass tries again."""
            key, port, found = item
            net, subnet = subnets[port["network_id"]]
            opts = podfiles.docker_options(key[0], resolver, self.ctrl.discovery.domain, want.services, vips) \
                if resolver else {"environment": {}}
            pod = want.pods[key]
            env = opts.get("environment", {})
            launch = functools.cache(lambda c: self._launch(pod, c, port, want, env, report))
            try:
                wiring = pod_port(port, subnet, int(net.get("mtu") or 1500), self.ctrl.more_subnets(net["id"]))
                return self._realize(pod, port, wiring, found, opts, launch, report)
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
        for key, port, found in ordered:   # in ordinal order: each once the one before it runs
            before = have.get((key[0], want.pods[key].after or ""))
            if before is None or not self._running(before):
                report.events.append(f"Normal pod {key[0]}/{key[1]} Waiting: {want.pods[key].after} is not Running")
                have.pop(key, None)
                done.append(Found())   # not taken as complete: the next pass looks again
                continue
            have[key] = one((key, port, found))
            done.append(have[key])
        self._seen = None if any(not f.apps for f in done) else have   # after a failure or a wait: list afresh
        if any(want.pods[k].parallelism for k in held):   # the next pass once a Job's pod finishes, unasked
            active = jobgate.watched(want.pods, held, have, self._finished)   # none: finished already
            self.follow.arm(lambda: not active or any(self._finished(f) for f in active),
                            lambda: self.ctrl.resync(full=False))

    def _finished(self, found: Found) -> bool:
        """Every container of the pod has exited for good (a Job's pod done, or failed)."""
        api = self.client.api
        return bool(found.apps) and all(api.inspect_container(c["Id"])["State"]["Status"] == "exited"
                                        for c in found.apps.values())

    def _running(self, found: Found) -> bool:
        """Every container of the pod runs (asked of Docker: it may have exited since)."""
        if not found.apps:
            return False
        api = self.client.api
        return all(api.inspect_container(c["Id"])["State"]["Running"] for c in found.apps.values())

    @staticmethod
    def _complete(pod: PodWant, port: dict[str, Any], found: Found) -> bool:
        """What the last pass of this process made, taken as still there (no Docker call)."""
        sb = found.sandbox
        if sb is None or (sb.get("Labels") or {}).get(PORT) != port["id"]:
            return False
        return all((found.apps.get(container_name(c, i)) or {}).get("Labels", {}).get(SPEC) == spec_hash(c, sb["Id"])
                   for i, c in enumerate(pod.containers))

    # -- one pod ------------------------------------------------------------------------------

    def _launch(self, pod: PodWant, c: ContainerWant, port: dict[str, Any], want: Desired,
                service_env: Mapping[str, str], report: Any) -> podenv.Launch:
        """A container's environment, command and args, resolved now (raises podenv.ConfigError)."""
        node = self.ctrl.node_of(pod)
        facts = podenv.PodFacts(
            pod.name, pod.namespace, pod.uid or port.get("device_id") or "", pod.labels, pod.annotations, node,
            pod.service_account, tuple(addr for name, _, addr in self.ctrl.refs.node_boxes if name == node and addr),
            tuple(ip["ip_address"] for ip in port["fixed_ips"]))
        done = podenv.launch(c.env, c.env_from, c.command, c.args, facts, want.configmaps, want.secrets, service_env)
        report.events.extend(f"Warning pod {pod.namespace}/{pod.name} {w}" for w in done.warnings)
        return done

    def _realize(self, pod: PodWant, port: dict[str, Any], wiring: Any, found: Found, opts: dict,
                 launch: Callable[[ContainerWant], podenv.Launch], report: Any) -> Found:
        api, sandboxes, run = self.client.api, self.ctrl.sandboxes, self.run
        name = f"{pod.namespace}/{pod.name}"
        if pod.container is None:
            raise NoDocker(f"pod {name}: no container with an image to run")
        sb = found.sandbox
        if sb is not None and (sb.get("Labels") or {}).get(PORT) != port["id"]:   # its port was re-made
            for c in found.all():
                run.remove(c)
            found, sb = Found(), None
        ns = sandboxes.ns(port["id"])
        if sb is None:
            for spec in (*pod.init, *pod.containers):
                launch(spec)   # an environment that cannot be made: no sandbox either (nothing to undo)
            if netns.exists(ns):
                sandboxes.unplug(port["id"])   # a stale name: a dead sandbox's, or the pod's as a sandbox pod
            sb = {"Id": run.sandbox(pod, port["id"], opts), "Labels": run.labels(pod, port["id"], "sandbox")}
            report.made.append(f"container {name} {port['fixed_ips'][0]['ip_address']}")
            if pod.ignored:
                report.events.append(f"Warning pod {name} Ignored: not run by the docker runtime: "
                                     + ", ".join(pod.ignored))
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
        out = Found(sb, dict(found.apps), dict(found.inits))
        if moved and pod.init and found.inits:   # a new sandbox: the init containers run again first
            for c in [*out.apps.values(), *out.inits.values()]:
                run.remove(c)
            out.apps, out.inits = {}, {}
        names = {container_name(c, i) for i, c in enumerate(pod.containers)}
        _unnamed_is_first(pod, out)
        for stale in set(out.apps) - names:   # a container the template no longer has
            run.remove(out.apps.pop(stale))
        if set(out.apps) != names:
            if not run.inits(pod, port["id"], sb["Id"], out, launch):
                return out   # Pending (an init container runs) or Init:Error / Init:CrashLoopBackOff
        run.apps(pod, port["id"], sb["Id"], out, moved and not pod.init, launch)
        return out

    # -- status -------------------------------------------------------------------------------

    def statuses(self, want: Desired) -> dict[tuple[str, str], dict[str, Any]]:
        """Every Docker-runtime pod's status as Kubernetes writes it (:mod:`.podstatus`),
        from its containers as Docker has them now."""
        if not self.configured:
            return {}
        api = self.client.api
        have = self._list()
        out = {}
        for key, pod in sorted(want.pods.items()):
            if not self.wants(pod):
                continue
            found = have.get(key) or Found()
            _unnamed_is_first(pod, found)
            inspect = {c["Id"]: api.inspect_container(c["Id"]) for c in found.all()}
            out[key] = podstatus.docker_pod(pod, found, inspect)
        return out


def _unnamed_is_first(pod: PodWant, found: Found) -> None:
    """An app container made before containers had names is taken as the first container
    (its spec hash then says whether it still is what the pod runs: an upgrade restarts
    no pod)."""
    first = container_name(pod.containers[0], 0) if pod.containers else ""
    if "" in found.apps and first not in found.apps:
        found.apps[first] = found.apps.pop("")


def _ordinal(name: str) -> tuple[str, int]:
    """``web-10`` after ``web-9`` (a StatefulSet's ordinals in order)."""
    head, _, tail = name.rpartition("-")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


def sweep_orphans(net: Any, client: Any, live_pods: Collection[str] = ()) -> list[str]:
    """Remove the Docker-runtime pods' containers on this Docker whose port no longer
    exists (a cluster deleted with its pods) — on a flannel or calico cluster, whose netbay
    pod (``live_pods``: the ids of those that exist) is gone. Returns the pods, as ``ns/name``."""
    from docker.errors import NotFound

    found = client.api.containers(all=True, filters={"label": PORT})
    if not found:
        return []
    live = {p["id"] for p in net.list("port", device_owner="compute:kuryr")} | set(live_pods)  # a NetworkBackend
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


__all__ = ["DockerPods", "Found", "NoDocker", "running", "sweep_orphans"]
