"""Cluster DNS on a flannel or calico cluster, as Kubernetes runs it there: a resolver pod
behind the ``kube-dns`` Service.

The resolver is the kuryr path's own (:mod:`.server`, its process kept by
:mod:`.process`, its records built by :mod:`.records`): it runs in a pod of the
cluster — a netbay pod on a minion, addressed from that node's lease as CoreDNS' pod is
(labelled :data:`LABEL`, so the mapping of Kubernetes pods leaves it alone) — and the
nodes answer ``kube-dns`` on the service range's 10th address (``10.254.0.10``, as
Magnum's templates write it into kubelet's ``--cluster-dns``) for UDP and TCP port 53
through kube-proxy's maps (:meth:`NodeResolver.rules`). Names outside the cluster domain
go to the template's ``dns_nameserver`` (else the cluster subnet's nameservers), reached
from the pod through its node's outgoing NAT. Every pod gets the kuryr path's
``resolv.conf`` and Service variables (:mod:`.podfiles`) in ``/etc/netns/<pod namespace>/``.

The process's files live in ``<state dir>/<prefix>k8s-dns/pod-<pod id>/``: the agent
(:mod:`.reaper`) stops it once its pod is gone, as it does a kuryr resolver whose port
went.
"""

from __future__ import annotations

import ipaddress
import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from typing import Any

from netbay.client import Api, gone_ok
from netbay.dataplane.names import Names
from netbay.k8s.dns import podfiles, records
from netbay.k8s.dns.names import DOMAIN
from netbay.k8s.dns.process import POD_PREFIX, Process, state_root
from netbay.k8s.kubeproxy import ServicePortRule
from netbay.k8s.objects import Desired

log = logging.getLogger(__name__)

PODS = "/netbay/v1/pods"
LABEL = "netbay-k8s-dns"       # the resolver pod's label (value: "resolver")
POD_NAME = "kube-system.coredns"
ADDRESS_INDEX = 10             # the service range's 10th address: kube-dns' cluster IP
PORT = 53
ACTIVE_WAIT = 60.0             # seconds a pass waits for a new resolver pod to be plugged


def dns_address(service_range: str) -> str:
    """``kube-dns``' cluster IP: the range's 10th address (``10.254.0.10``)."""
    return str(ipaddress.ip_network(service_range)[ADDRESS_INDEX])


def pod_ports(pods: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Netbay pods in the shape :func:`records.build` reads of a kuryr pod's port (a
    ``device_id`` once plugged: a headless Service's endpoint is a ready pod)."""
    return {key: {"id": p["id"], "fixed_ips": [{"ip_address": p["address"], "subnet_id": ""}],
                  "device_id": p["id"] if p.get("status") == "ACTIVE" else ""}
            for key, p in pods.items() if p.get("address")}


class NodeResolver:
    """One node cluster's resolver pod and process: ``ensure`` / ``publish`` every pass,
    ``remove`` once the cluster holds no objects."""

    @property
    def addresses(self) -> list[str]:
        """What pods are told (resolv.conf): ``kube-dns``' cluster IP (IPv4: the node
        clusters' Services are)."""
        return [self.address]

    def __init__(self, api: Api, names: Names, cluster_id: str, upstream: Sequence[str],
                 service_range: str, *, wait: float = ACTIVE_WAIT) -> None:
        self.api, self.names, self.cluster_id = api, names, cluster_id
        self.upstream = tuple(upstream)
        self.address = dns_address(service_range)
        self.wait = wait
        self.root = state_root(names.prefix)
        self.pod: dict[str, Any] | None = None
        self.process: Process | None = None
        self._written: str | None = None
        self._absent = False     # the last removal found nothing to remove

    # -- the pod ------------------------------------------------------------------------------
    def _find(self) -> dict[str, Any] | None:
        found = [p for p in self.api.call("GET", PODS, cluster_id=self.cluster_id)["pods"]
                 if (p.get("labels") or {}).get(LABEL)]
        found.sort(key=lambda p: (p.get("status") != "ACTIVE", p["id"]))
        for extra in found[1:]:    # two controllers' race: keep one
            self._process(extra["id"]).remove()
            gone_ok(lambda: self.api.call("DELETE", f"{PODS}/{extra['id']}"))
        return found[0] if found else None

    def _create(self) -> dict[str, Any]:
        return self.api.call("POST", PODS, {"pod": {"name": POD_NAME, "cluster_id": self.cluster_id,
                                                    "labels": {LABEL: "resolver"}}})["pod"]

    def _await_active(self, pod: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + self.wait
        while pod["status"] not in ("ACTIVE", "ERROR") and time.monotonic() < deadline:
            time.sleep(0.02)
            pod = self.api.call("GET", f"{PODS}/{pod['id']}")["pod"]
        return pod

    def _process(self, pod_id: str) -> Process:
        return Process(self.root, POD_PREFIX + pod_id, self.names.pod(pod_id))

    # -- every pass ---------------------------------------------------------------------------
    def ensure(self, full: bool = True) -> dict[str, Any] | None:
        """The resolver pod plugged and its server answering in it; the pod (None: not
        plugged yet, or its server would not start — ``kube-dns`` then has no endpoint
        and drops, as with no CoreDNS). A fast pass trusts a serving process; anything
        else (its pod gone with a node, its namespace re-made) looks the pod up afresh."""
        self._absent = False
        if not full and self.pod is not None and self.process is not None and self.process.serving() is not None:
            return self.pod
        self.pod = pod = self._await_active(self._find() or self._create())
        self._written = None
        if pod["status"] != "ACTIVE":
            log.warning("cluster %s: the resolver pod %s is %s", self.cluster_id, pod["id"], pod["status"])
            return None
        if self.process is None or self.process.ns != self.names.pod(pod["id"]):
            self.process = self._process(pod["id"])
        if self.process.serving() is None:
            self.process.stop()       # one left in a namespace that is gone
            try:
                self.process.start(pod["address"])
            except RuntimeError as exc:   # reported by the pass; the next one tries again
                log.warning("cluster %s: %s", self.cluster_id, exc)
                self.pod = {**pod, "status": "ERROR", "status_reason": str(exc)[:240]}
                return None
        return pod

    def rules(self) -> list[ServicePortRule]:
        """``kube-dns`` as the nodes answer it: UDP and TCP 53 → the resolver pod."""
        pod = self.pod
        backends = ((pod["address"], PORT),) if pod is not None and pod["status"] == "ACTIVE" else ()
        return [ServicePortRule(f"kube-system/kube-dns/{proto}/{PORT}", self.address, proto, PORT, backends)
                for proto in ("UDP", "TCP")]

    def publish(self, want: Desired, pods: Mapping[tuple[str, str], Mapping[str, Any]],
                vips: Mapping[tuple[str, str], str],
                cluster_ips: Mapping[tuple[str, str], Sequence[str]] | None = None) -> None:
        """The records the server answers from (written when they changed), and each
        plugged pod's ``resolv.conf`` and Service variables (once, as kubelet does);
        ``cluster_ips``: a dual-stack Service's every cluster IP (its AAAA records)."""
        if self.process is not None:
            self._written = self.process.publish(
                records.build(want, pod_ports(pods), vips, DOMAIN, self.upstream, cluster_ips), self._written)
        for (namespace, _), p in pods.items():
            if p.get("status") == "ACTIVE":
                podfiles.write_once(self.names.pod(p["id"]), namespace, self.addresses, DOMAIN,
                                    want.services, vips)

    def remove(self, full: bool = True) -> None:
        """The server stopped, its files and its pod gone (none: no-op; a fast pass
        trusts the last one that found none)."""
        if self.pod is None and self._absent and not full:
            return
        pod = self.pod or self._find()
        self._absent = True
        if pod is not None:
            (self.process or self._process(pod["id"])).remove()
            gone_ok(lambda: self.api.call("DELETE", f"{PODS}/{pod['id']}"))
        self.pod, self.process, self._written = None, None, None


def forget_pod(names: Names, pod_id: str) -> None:
    """A deleted pod's ``/etc/netns`` files (its resolv.conf and environment)."""
    shutil.rmtree(podfiles.etc_dir(names.pod(pod_id)), ignore_errors=True)


__all__ = ["LABEL", "NodeResolver", "dns_address", "forget_pod", "pod_ports"]
