"""The cluster resolver's life: a port of the service network, a namespace, a process.

The port (``compute:kuryr``, tagged ``netbay-k8s=dns``, the pod default group) takes
the 10th address of the service range, as Kubernetes' ``kube-dns`` Service does
(``10.254.0.10`` for ``10.254.0.0/16``; any free one if a cluster IP holds it), so
every pod reaches it through the router as it reaches cluster IPs. A dual-stack
cluster's port also takes the 10th of its IPv6 service range (``fd00:96::a``), where
the server answers too. It is plugged
like a pod into ``<prefix>kd-<port id>`` (not ``k-``: the pods' sweep leaves it);
the process (:mod:`.server`, kept by :mod:`.process`) runs detached in that
namespace, so a controller that exits leaves it answering, and the next pass adopts
it by its pid file in ``<state dir>/<prefix>k8s-dns/<port id>/`` (checked in
``/proc``: that command, started before its pid file, that namespace). The cluster's
delete takes the port; the agent of the prefix (:mod:`.reaper`) then the process,
namespace and files; :func:`sweep_orphans` does the same on demand.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Collection
from typing import Any

from netbay.client import gone_ok
from netbay.errors import Conflict
from netbay.dataplane.fabric import KURYR_POD
from netbay.dataplane.garp import announce
from netbay.dataplane.rtnl import release
from netbay.k8s.dns.names import RESOLVER_TAG
from netbay.k8s.dns.process import POD_PREFIX, Process, namespace, port_ids, state_root
from netbay.k8s.sandbox import PodSandboxes, pod_port

ADDRESS_INDEX = 10


class ResolverBoxes(PodSandboxes):
    """Pod-style wiring (the controller's fabric, or the cloud's Open vSwitch) into ``<prefix>kd-<port id>``."""

    def __init__(self, pods: PodSandboxes) -> None:
        self.names, self.fabric = pods.names, pods.fabric
        self.vifs, self._vifs_lock = pods.vifs, pods._vifs_lock   # one plugger per host, one lock

    def ns(self, port_id: str) -> str:
        return namespace(self.names.prefix, port_id)


class ClusterResolver:
    """Keeps one cluster's resolver: ``ensure`` (every pass), ``publish``, ``remove``."""

    def __init__(self, ctrl: Any) -> None:  # netbay.k8s.controller.Controller (no import: no cycle)
        self.net, self.refs = ctrl.net, ctrl.refs
        self.boxes = ResolverBoxes(ctrl.sandboxes)
        self.root = state_root(ctrl.names.prefix)
        self.port: dict[str, Any] | None = None
        self.process: Process | None = None
        self._written: str | None = None
        self._absent = False     # the last removal found nothing to remove

    @property
    def address(self) -> str | None:
        return next((f["ip_address"] for f in (self.port or {}).get("fixed_ips", ())
                     if ":" not in f["ip_address"]), None)

    @property
    def address6(self) -> str | None:
        """The IPv6 address it answers on too (a dual-stack cluster's), else None."""
        return next((f["ip_address"] for f in (self.port or {}).get("fixed_ips", ())
                     if ":" in f["ip_address"]), None)

    @property
    def addresses(self) -> list[str]:
        """Every address it answers on, IPv4 first: what pods are told (resolv.conf, the CNI result)."""
        return [a for a in (self.address, self.address6) if a]

    def _tags(self) -> list[str]:
        return [self.refs.tag, RESOLVER_TAG]

    def _find(self) -> dict[str, Any] | None:
        found = self.net.list("port", tags=",".join(self._tags()))
        for extra in found[1:]:    # two controllers' race: keep one
            Process(self.root, extra["id"], self.boxes.ns(extra["id"])).remove()
            gone_ok(lambda: self.net.delete("port", extra["id"]))
            self.boxes.unplug(extra["id"])
        return found[0] if found else None

    def ensure(self, full: bool = True) -> str:
        """The resolver answers (made, re-plugged or restarted as needed); its address."""
        self._absent = False
        if full or self.port is None:
            self.port = self._find() or self._create()
            self._written = None
        port = self.port
        ns = self.boxes.ns(port["id"])
        if self.process is None or self.process.ns != ns:
            self.process = Process(self.root, port["id"], ns)
        if not full and self.process.serving() is not None:
            return self.address
        subnet = self.refs.service_subnet
        fresh = False
        try:
            if not self.boxes.plugged(port["id"]):
                self.process.stop()   # its sockets were in the namespace that is gone
                net = self.net.show("network", port["network_id"])
                more = (self.refs.service_subnet6,) if self.refs.service_subnet6 else ()
                self.boxes.plug(pod_port(port, subnet, int(net.get("mtu") or 1500), more))
                fresh = True
        finally:
            release(ns)
        if not port.get("device_id"):
            self.port = port = self.net.update("port", port["id"], {
                "device_id": f"netbay-k8s-dns-{self.refs.cluster_id}"})
        if fresh:   # the address is the same in every cluster: the router may know an old MAC
            with contextlib.suppress(OSError):
                announce(ns, "eth0", port["mac_address"], self.address)
        if self.process.serving() is None:
            self.process.stop()      # one left in a namespace that is gone
            self.process.start(*(a for a in (self.address, self.address6) if a))
            self._written = None     # a new process may have found no records: write them again
        return self.address

    def _create(self) -> dict[str, Any]:
        subnet = self.refs.service_subnet
        body: dict[str, Any] = {
            "name": "dns", "network_id": subnet["network_id"], "device_owner": KURYR_POD,
            "security_groups": [self.refs.pod_sg_id], "tags": self._tags(),
            "fixed_ips": [{"subnet_id": subnet["id"],
                           "ip_address": str(ipaddress.ip_network(subnet["cidr"])[ADDRESS_INDEX])}]}
        subnet6 = self.refs.service_subnet6
        if subnet6:
            body["fixed_ips"].append({"subnet_id": subnet6["id"], "ip_address": str(
                ipaddress.ip_network(subnet6["cidr"])[ADDRESS_INDEX])})
        if self.refs.project_id:
            body["project_id"] = self.refs.project_id
        try:
            return self.net.create("port", body)
        except Conflict:   # a cluster IP holds a 10th: any free ones
            body["fixed_ips"] = [{"subnet_id": s["id"]} for s in (subnet, subnet6) if s]
            return self.net.create("port", body)

    def publish(self, records: dict[str, Any]) -> None:
        """Write the records the server answers from (only when they changed)."""
        if self.process is not None:
            self._written = self.process.publish(records, self._written)

    def remove(self, full: bool = True) -> None:
        """Stop the server and delete its port, namespace and files (none: no-op; a
        fast pass trusts the last pass that found none)."""
        if self.port is None and self._absent and not full:
            return
        port = self.port if self.port is not None else self._find()
        self._absent = True
        if port is None:
            return
        (self.process or Process(self.root, port["id"], self.boxes.ns(port["id"]))).remove()
        gone_ok(lambda: self.net.delete("port", port["id"]))
        self.boxes.unplug(port["id"])
        self.port, self.process, self._written = None, None, None


def sweep_orphans(net: Any, pods: PodSandboxes, live_pods: Collection[str] | None = None) -> list[str]:
    """Resolvers on this host whose port is gone (their cluster was deleted): their
    process, namespace and files. A flannel or calico cluster's resolver (``pod-<pod id>``,
    :mod:`.nodes`) goes when its pod is not in ``live_pods`` (None: those are left alone).
    ``net``: a NetworkBackend. Returns the port ids (and ``pod-<id>``)."""
    boxes = ResolverBoxes(pods)
    stray = port_ids(pods.names.prefix)
    if live_pods is None:
        stray = {s for s in stray if not s.startswith(POD_PREFIX)}
    if not stray:
        return []
    live = {p["id"] for p in net.list("port", device_owner=KURYR_POD)} | {POD_PREFIX + p for p in live_pods or ()}
    gone = sorted(stray - live)
    for port_id in gone:
        Process(state_root(pods.names.prefix), port_id, boxes.ns(port_id)).remove()
        boxes.unplug(port_id)
    return gone
