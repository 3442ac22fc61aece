"""Creating a container in Docker: its sandbox (on its ports, or placed on a cluster
node's Docker network) holding the network namespace, then the app in it with Zun's
``bind`` files, started if asked — each step undone if a later one fails."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from netbay.containers import containers, placement, resources, specs
from netbay.containers.neutron import ZunNeutron
from netbay.runtime.labels import SANDBOX as SANDBOX_LABEL
from netbay.store.models import Container, Pod

log = logging.getLogger("netbay.containers.runner")   # the runner's log lines


class Creation:
    """The create job of :class:`netbay.containers.runner.Runner` (a mixin: the runner
    owns the attributes and the plumbing it calls)."""

    store: Any
    sandbox_image: str
    runtime: Callable[[], Any]
    neutron: Callable[[str], ZunNeutron]
    lock: Callable[[str], threading.Lock]
    _state: Callable[..., None]
    _ensure_network: Callable[[Any, dict[str, Any], list[dict[str, Any]]], None]

    def _create(self, container_id: str) -> None:
        rt = self.runtime()
        with self.store.read() as s:
            c = s.get(Container, container_id)
            if c is None:
                return
            spec = specs.app_spec(c)
            hostname, run, placed = c.hostname, c.run, (c.cluster_id, c.node)
            neutron = self.neutron(c.project_id)
            plan = [specs.port_plan(s, att, neutron) for att in containers.attachments(s, container_id)]
        if placed[0]:
            sandbox = self._place_sandbox(rt, container_id, spec["image"], *placed, hostname)
        else:
            for network, subnets, _ in plan:
                self._ensure_network(rt, network, subnets)
            sandbox = self._make_sandbox(rt, container_id, spec["image"], plan[0][2], hostname)
        cid = ""
        try:
            for _, _, port in plan[1:]:
                rt.connect(sandbox, port)
            cid = rt.app(sandbox, spec.pop("image"), spec.pop("command"), start=False, **spec)
            self._files(rt, cid, container_id)
        except Exception:
            if cid:   # made, but its files failed: it goes too (no row records its id)
                rt.remove(cid)
            rt.remove(sandbox)
            raise
        self._state(container_id, docker_id=cid)
        try:
            if run:
                rt.client.api.start(cid)
        except Exception:
            rt.remove(cid)
            rt.remove(sandbox)
            self._state(container_id, docker_id="")
            raise
        self._state(container_id, status="Running" if run else "Created", task_state=None,
                    status_reason="")

    def _place_sandbox(self, rt: Any, container_id: str, app_image: str, cluster: str, node: str,
                       hostname: str) -> str:
        """The sandbox on the node's Docker network (the plugin makes its pod row and plugs it
        as a pod); the pod's id is kept for show. The network is made and used under one lock,
        so :meth:`remove` never takes it away between the two."""
        name = placement.docker_network(cluster, node)
        with self.lock(f"network:{name}"):
            rt.ensure_cluster_network(name, cluster, node)
            sandbox = self._make_sandbox(rt, container_id, app_image, name, hostname)
        eid = rt.endpoint_id(sandbox, name)
        with self.store.read() as s:
            pod_id = s.scalar(select(Pod.id).where(Pod.cluster_id == cluster, Pod.name == f"docker-{eid}"))
        self._state(container_id, pod_id=pod_id or "")
        return sandbox

    def _make_sandbox(self, rt: Any, container_id: str, app_image: str, port: dict[str, Any] | str,
                      hostname: str) -> str:
        """The sandbox, in ``sandbox_image`` — or, where Docker has no such image (nothing is
        pulled here), in the app's own image, which then needs a shell."""
        from docker.errors import ImageNotFound

        kw = dict(name=specs.sandbox_name(container_id), labels={SANDBOX_LABEL: container_id}, hostname=hostname)
        try:
            return rt.sandbox(self.sandbox_image, port, **kw)
        except ImageNotFound:
            if app_image == self.sandbox_image:
                raise
            log.info("sandbox image %s missing: container %s's sandbox uses %s", self.sandbox_image,
                     container_id, app_image)
            return rt.sandbox(app_image, port, **kw)

    def _files(self, rt: Any, docker_id: str, container_id: str) -> None:
        """Zun's ``bind`` mounts: each file written into the app before it first starts."""
        with self.store.read() as s:
            mounts = s.get(Container, container_id).mounts
        for path, contents in resources.files(mounts):
            rt.client.api.put_archive(docker_id, "/", resources.tar_of(path, contents))
