"""Pods → ports + sandboxes: each pod of a kuryr cluster is a port on its segment's
network, made bound (in bulk) and plugged into its sandbox (in parallel); ports and
sandboxes nothing wants are deleted.

A mixin of :class:`netbay.k8s.controller.Controller`.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from netbay.backends import batch as bulk
from netbay.client import gone_ok
from netbay.dataplane.rtnl import release
from netbay.k8s.objects import Desired
from netbay.k8s.passes import Known, Report
from netbay.k8s.podport import POD_OWNER, uid_of, with_uid
from netbay.k8s.sandbox import pod_port, sweep_orphans
from netbay.k8s.segments import Segments

BULK = 100      # ports per bulk create


class PodPorts(Segments):
    """The pods' ports and their sandboxes."""

    host: str
    sandboxes: Any
    dockerpods: Any
    _pool: ThreadPoolExecutor

    def _pods(self, want: Desired, segments: Mapping[str, tuple[dict, dict]], report: Report,
              known: Known | None) -> dict[tuple[str, str], dict[str, Any]]:
        """(ns, pod) → its port, plugged; ports nothing wants are deleted. Missing ports
        are made bound in one bulk create; sandboxes are plugged in parallel."""
        have = dict(known.ports) if known is not None else {p["name"]: p for p in self._list("port", "pod")}
        out: dict[tuple[str, str], dict[str, Any]] = {}
        missing = []
        for (ns, name), pod in sorted(want.pods.items()):
            net, _ = segments[self.segment_of(pod)]
            port = have.pop(f"{ns}/{name}", None)
            if port is not None and port["network_id"] != net["id"]:
                self._drop_port(port)
                port = None
            if port is None:
                # Made bound (device id and host): the agent adopts the fabric end once
                # the sandbox is plugged — one API call per pod. Bound to this host where
                # the pod runtime is local, else to the pod's node (kuryr's binding; its
                # CNI plugs it there).
                body = self._owned({
                    "name": f"{ns}/{name}", "network_id": net["id"], "device_owner": POD_OWNER,
                    "device_id": self._device(ns, name),
                    "binding:host_id": self.host if self.sandboxes.local and not pod.by_cni else self.node_of(pod),
                    "security_groups": [self.refs.pod_sg_id],
                    "description": f"node={self.node_of(pod)}", "_what": "pod"})
                if pod.uid:   # the node's CNI tells this pod from an older one of its name
                    body["tags"] = with_uid(body["tags"], pod.uid)
                missing.append(((ns, name), body))
            else:
                if pod.uid and uid_of(port) != pod.uid:   # the pod was made again under its name
                    tags = with_uid(port.get("tags") or [], pod.uid)
                    port = {**port, "tags": self.net.set_tags("port", port["id"], tags)}
                out[(ns, name)] = port
        for i in range(0, len(missing), BULK):
            chunk = missing[i:i + BULK]
            made = bulk.create_many(self.net, "port", [body for _, body in chunk])
            for (key, _), port in zip(chunk, made):
                out[key] = port
                report.made.append(f"pod {port['name']} {port['fixed_ips'][0]['ip_address']}")
        subnets = {net["id"]: (net, subnet) for net, subnet in segments.values()}
        # A port the last complete pass of this process realized is taken as plugged
        # (no namespace opened per pod and pass); a full resync looks at every one.
        realized = set(known.ports) - self.dockerpods.released if known is not None else set()
        todo = [(key, port) for key, port in sorted(out.items())
                if not self.dockerpods.wants(want.pods[key]) and not want.pods[key].by_cni
                and (not port.get("device_id") or (port["name"] not in realized
                                                   and not self.sandboxes.plugged(port["id"])))]
        if todo:
            for net_id in sorted({port["network_id"] for _, port in todo}):  # before the threads race for it
                net = subnets[net_id][0]
                self.sandboxes.ensure_network(net_id, int(net.get("mtu") or 1500))
            if len(todo) == 1:   # one pod (the common apply): no thread hop
                done = [self._realize(todo[0][0], todo[0][1], subnets)]
            else:
                done = list(self._pool.map(lambda kp: self._realize(kp[0], kp[1], subnets), todo))
            for (key, _), port in zip(todo, done):
                out[key] = port
        for port in have.values():
            self._drop_port(port)
            report.deleted.append(f"pod {port['name']}")
        return out

    def _realize(self, key: tuple[str, str], port: dict[str, Any], subnets: Mapping[str, tuple[dict, dict]]) -> dict:
        """Plug the pod's sandbox (the agent adopts the fabric end of the bound port); a
        port made unbound (before ports were made bound) is bound here."""
        net, subnet = subnets[port["network_id"]]
        try:
            if not self.sandboxes.plugged(port["id"]):
                self.sandboxes.plug(pod_port(port, subnet, int(net.get("mtu") or 1500), self.more_subnets(net["id"])))
            if port.get("device_id"):
                return port
            return self.net.update("port", port["id"], {"device_id": self._device(*key)})
        finally:
            release(self.sandboxes.ns(port["id"]))  # a pool thread's socket of that namespace

    def _drop_port(self, port: dict[str, Any]) -> None:
        gone_ok(lambda: self.net.delete("port", port["id"]))
        self.sandboxes.unplug(port["id"])

    def _sweep_sandboxes(self, ports: Mapping[Any, dict[str, Any]], report: Report) -> None:
        """Pod namespaces whose port is gone (a crash between the two deletes)."""
        if self.sandboxes.existing() - {p["id"] for p in ports.values()}:
            report.deleted += [f"sandbox {p}" for p in sweep_orphans(self.net, self.sandboxes)]
