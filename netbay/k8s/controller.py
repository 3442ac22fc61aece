"""The mapping controller: converges a kuryr cluster's netbay resources to its objects.

One pass (``resync``) reads the desired state (:mod:`.desired`) and what exists
(everything it made carries ``netbay-cluster=<id>`` and ``netbay-k8s=<what>`` tags and
a name, so a lost reply is found again), makes what is missing and deletes what
nothing wants — namespaces first, then pods, Services, policies; deletions in the
reverse order. Every step is idempotent, so a controller killed at any point is
resumed by the next pass with no leak and no duplicate. A source hands objects over
through ``apply`` / ``delete``, which write the desired state and run a pass.

Every network call goes through the ``NetworkBackend`` seam (``net``: networks,
subnets, ports, router interfaces, floating IPs, the policies' groups) and every
load-balancer call through the load-balancer seam (``lbs``), so the same handlers
run on netbay's own service or on a cloud's Neutron. Where a pod's port becomes a
workload is the pod runtime's business (``pods``): sandboxes plugged into the local
fabric (embedded), or nothing local at all (:class:`netbay.k8s.portsonly.BoundPorts`:
the port, bound to its node, is the pod's whole realization on a cloud).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from netbay.backends import NetworkBackend
from netbay.backends.http import HttpBackend
from netbay.backends.loadbalancers import open_lb_backend
from netbay.client import Api
from netbay.dataplane.names import Names
from netbay.k8s import desired, nodeports, objects, services, svcstatus
from netbay.k8s.cluster import ClusterRefs, find
from netbay.k8s.dns.discovery import Discovery
from netbay.k8s.dockerpods import DockerPods
from netbay.k8s.nodeports import NodePorts
from netbay.k8s.objects import Desired, Key
from netbay.k8s.passes import Known, Report
from netbay.k8s.podport import POD_OWNER
from netbay.k8s.podports import BULK, PodPorts
from netbay.k8s.policyhook import PolicyHook
from netbay.k8s.portsonly import NoDiscovery
from netbay.k8s.sandbox import PodSandboxes
from netbay.store.db import Store

log = logging.getLogger(__name__)

WORKERS = 4     # sandboxes plugged at once (netlink work, the port's bind call)
OWN = "own"   # ``lbs=OWN``: netbay's own load balancers, over ``api``


class Controller(PodPorts):
    """Its jobs, one module each: what it made, found by its marks (:mod:`.owned`);
    namespaces or nodes → networks (:mod:`.segments`); pods → ports and sandboxes
    (:mod:`.podports`); Services → load balancers (:mod:`.services`).

    ``api``: netbay's own API (the cluster, its nodes); ``net``: the network backend
    (default: netbay's own, over ``api``); ``lbs``: the load-balancer backend (default:
    netbay's own; a cloud's Octavia; ``None``: none — Services that need one are refused);
    ``lb_provider``: the provider its load balancers ask for (None: the backend's default,
    as kuryr leaves it to the cloud) unless the cluster's label ``kuryr_octavia_provider``
    names one; ``pods``: the pod runtime (default: sandboxes on this
    host)."""

    def __init__(self, api: Api, store: Store, cluster_id: str, names: Names | None = None,
                 host: str | None = None, *, net: NetworkBackend | None = None, lbs: Any = OWN,
                 lb_provider: str | None = services.PROVIDER, pods: Any = None) -> None:
        self.api, self.store = api, store
        self.net: NetworkBackend = net if net is not None else HttpBackend(api)
        self.lbs = open_lb_backend("embedded", api=api) if lbs == OWN else lbs
        self.refs: ClusterRefs = find(api, self.net, cluster_id)
        self.lb_provider = self.refs.lb_provider or lb_provider
        if self.refs.project_id:   # a cloud's services act for the cluster's project, as kuryr does
            self.net = _for_project(self.net, self.refs.project_id)
            self.lbs = _for_project(self.lbs, self.refs.project_id)
        self.names = names or Names()
        self.host = host or socket.gethostname()
        self.sandboxes = pods if pods is not None else PodSandboxes(self.names)
        self.policy = PolicyHook(self.net, self.refs.cluster_id)
        # What this process last read or wrote of each load balancer's listeners and
        # pools (a new process reads them afresh): a pass then costs no call per Service
        # whose members did not change.
        self.known: Known | None = None
        self.nodeports = NodePorts()
        # cluster DNS, pods' resolv.conf and Service variables: where pods live on this host
        self.discovery = Discovery(self) if self.sandboxes.local else NoDiscovery()
        self.dockerpods = DockerPods(self)  # pods whose runtime is Docker (the rest: sandboxes)
        # Long-lived workers: each keeps its netlink socket of the fabric between passes.
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="netbay-k8s")
        self.listeners: dict[str, tuple[str, int, str]] = {}   # listener id → (protocol, port, pool id)
        self.members: dict[str, list[tuple[str, int]]] = {}     # pool id → [(address, port)]
        self._lock = threading.Lock()
        # Called after each pass with every pod's port and the subnets by network id
        # (the watch source writes the port back onto the pod from it).
        self.on_ports: Callable[[Mapping[tuple[str, str], dict], Mapping[str, dict]], None] | None = None
        # A dual-stack cluster's segments' IPv6 subnets (network id → subnet), beside the
        # IPv4 one each segment's (network, subnet) names: the last pass's.
        self.subnets6: dict[str, dict[str, Any]] = {}
        # (ns, svc) → every cluster IP of the Service, primary first (:func:`services.converge`)
        self.cluster_ips: dict[tuple[str, str], tuple[str, ...]] = {}

    # -- what a source calls -----------------------------------------------------------------

    def refuse(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        """Raise for objects these backends cannot map (a Service needing a load balancer,
        without one): the manifest source asks before anything is written; the watch
        source's objects are mapped as far as they can be (such a Service: none)."""
        want = objects.desired(list(bodies), self.refs.nodes)
        services.refuse_without_lbs(self, want)
        self.dockerpods.refuse(want)

    def apply(self, bodies: Iterable[Mapping[str, Any]]) -> Report:
        desired.put(self.store, self.refs.cluster_id, bodies)
        return self.resync(full=False)

    def delete(self, keys: Iterable[Key]) -> Report:
        desired.drop(self.store, self.refs.cluster_id, keys)
        return self.resync(full=False)

    def keys(self) -> list[Key]:
        """The objects the cluster's desired state holds (a re-listing source drops the rest)."""
        return [objects.key_of(b) for b in desired.load(self.store, self.refs.cluster_id)]

    def delete_all(self) -> Report:
        """Forget every object of the cluster and remove what was made for them."""
        desired.drop_cluster(self.store, self.refs.cluster_id)
        report = self.resync()
        self.policy.close(delete=True)
        return report

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.dockerpods.close()
        self.policy.close()   # its spare-group refill finished: nothing half-made at exit

    # -- one pass ------------------------------------------------------------------------------

    def resync(self, full: bool = True) -> Report:
        """One pass; ``full`` lists what exists (else: starts from the last pass's)."""
        with self._lock:
            known, self.known = (None if full else self.known), None  # none while a pass is under way
            bodies = desired.load(self.store, self.refs.cluster_id)
            want = objects.desired(bodies, self.refs.nodes)
            report = Report()
            segments, found = self._segments(want, report, known)
            containers = self.dockerpods.sweep(want, known, report)
            ports = self._pods(want, segments, report, known)
            self.discovery.before_services(want, known is None)
            vips, lbs, fips = services.converge(self, want, ports, report, known)
            self._service_statuses(bodies, want, fips)
            self.discovery.after_services(want, ports, vips)
            self.dockerpods.realize(want, ports, segments, vips, containers, report, known is None)
            self.nodeports.converge([self.names.sandbox(box) for _, box, _ in self.refs.node_boxes],
                                    nodeports.plan(want, vips))
            self._policies(want, ports, vips)
            self._sweep_segments(segments, found, report)
            self._sweep_sandboxes(ports, report)
            self.known = Known(dict(segments), {p["name"]: p for p in ports.values()}, lbs, fips,
                               dict(self.subnets6))
            if self.on_ports is not None:
                self.on_ports(ports, {net["id"]: subnet for net, subnet in segments.values()})
            return report

    def _service_statuses(self, bodies: list[dict[str, Any]], want: objects.Desired,
                          fips: Mapping[str, dict[str, Any]]) -> None:
        """Each LoadBalancer Service's stored ``status.loadBalancer.ingress`` names the
        floating IP that answers for it, as a cloud provider writes it (one write, only
        what changed)."""
        marked = []
        for body in bodies:
            key = objects.key_of(body)
            svc = want.services.get((key.namespace, key.name)) if key.kind == "Service" else None
            if svc is None or svc.type != "LoadBalancer":
                continue
            status = svcstatus.load_balancer_status(services.ingress(svc, fips))
            if body.get("status") != status:
                marked.append({**body, "status": status})
        if marked:
            desired.put(self.store, self.refs.cluster_id, marked)

    # -- NetworkPolicy → the policy hook -------------------------------------------------------

    def _policies(self, want: Desired, ports: Mapping[tuple[str, str], dict],
                  vips: Mapping[tuple[str, str], str]) -> None:
        if not self.policy.active:
            return
        pods = [{"namespace": ns, "name": name, "port_id": port["id"], "ip": port["fixed_ips"][0]["ip_address"],
                 "labels": want.pods[(ns, name)].labels, "ports": want.pods[(ns, name)].ports}
                for (ns, name), port in ports.items()]
        svcs = [{"namespace": s.namespace, "name": s.name, "cluster_ip": vips[key], "selector": s.selector or {},
                 "ports": [(p.port, p.target, p.protocol) for p in s.ports],
                 "more_ips": self.cluster_ips.get(key, ())[1:]}
                for key, s in want.services.items() if key in vips]
        nodes = [f"{addr}/32" for _, _, addr in self.refs.node_boxes if addr]   # always reach their pods
        self.policy.sync(want.namespaces, pods, want.policies, svcs, nodes, self.refs.families)


__all__ = ["BULK", "Controller", "Known", "POD_OWNER", "Report"]


def _for_project(backend: Any, project_id: str) -> Any:
    """``backend`` acting for ``project_id`` where it serves many projects (a cloud's);
    netbay's own, reached with the cluster's token, is already scoped by it."""
    scope = getattr(backend, "for_project", None)
    return scope(project_id) if scope is not None else backend
