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
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from netbay.backends import NetworkBackend
from netbay.backends import batch as bulk
from netbay.backends.http import HttpBackend
from netbay.backends.loadbalancers import open_lb_backend
from netbay.client import Api, gone_ok
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import release
from netbay.k8s import desired, nodeports, objects, services, svcstatus
from netbay.k8s.cluster import ClusterRefs, find
from netbay.k8s.dns.discovery import Discovery
from netbay.k8s.dockerpods import DockerPods
from netbay.k8s.nodeports import NodePorts
from netbay.k8s.objects import Desired, Key, PodWant
from netbay.k8s.podport import POD_NS, POD_OWNER, device_id, uid_of, with_uid
from netbay.k8s.policyhook import PolicyHook
from netbay.k8s.portsonly import NoDiscovery
from netbay.k8s.sandbox import PodSandboxes, pod_port, sweep_orphans
from netbay.store.db import Store

log = logging.getLogger(__name__)

BULK = 100      # ports per bulk create
WORKERS = 4     # sandboxes plugged at once (netlink work, the port's bind call)
OWN = "own"   # ``lbs=OWN``: netbay's own load balancers, over ``api``


@dataclass
class Known:
    """What the last complete pass left (wanted and made): the next pass of this
    process starts from it instead of listing everything again (``apply``'s fast
    path); a full ``resync`` — every restart — lists afresh."""
    segments: dict[str, tuple[dict, dict]]    # "ns/<name>" or "node/<name>" → (network, subnet)
    ports: dict[str, dict[str, Any]]           # "ns/pod" → port
    lbs: dict[str, dict[str, Any]]             # "ns/svc" → load balancer
    fips: dict[str, dict[str, Any]]            # "ns/svc <address|pool>" → floating IP
    subnets6: dict[str, dict[str, Any]] = field(default_factory=dict)   # network id → its IPv6 subnet


@dataclass
class Report:
    made: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)   # Kubernetes' Warning events (a pod not started, why)

    def __str__(self) -> str:
        return "\n".join([*self.events, f"{len(self.made)} made, {len(self.deleted)} deleted"])


class Controller:
    """``api``: netbay's own API (the cluster, its nodes); ``net``: the network backend
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
            segments = self._segments(want, report, known)
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
            self._sweep_segments(segments, report, known)
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

    # -- namespaces (or nodes) → networks ------------------------------------------------------

    def _tags(self, what: str) -> list[str]:
        return [self.refs.tag, f"netbay-k8s={what}"]

    def _list(self, member: str, what: str) -> list[dict[str, Any]]:
        """What this controller made of ``member`` for ``what``: by its tags, plus what lost
        them (see :meth:`_untagged`)."""
        found = self.net.list(member, tags=",".join(self._tags(what)))
        return found + self._untagged(member, what, {o["id"] for o in found})

    def _untagged(self, member: str, what: str, seen: set[str]) -> list[dict[str, Any]]:
        """Objects made but not yet tagged: a Neutron that refuses ``tags`` on POST takes them
        in a second call, and a controller killed between the two leaves an object no tag
        finds. Its own marks find it — a pod's port by its device id (derived from the
        cluster and the port's name), a network or subnet by its description — and it is
        tagged now, so it is adopted (or deleted) like the rest."""
        if member == "port" and what == "pod":
            mine = [p for p in self.net.list("port", device_owner=POD_OWNER)
                    if p["id"] not in seen and "/" in (p.get("name") or "")
                    and p.get("device_id") == self._device(*p["name"].split("/", 1))]
        elif member in ("network", "subnet") and what == "network":
            mine = [o for o in self.net.list(member, description=self._mark()) if o["id"] not in seen]
        else:
            return []
        return [self._tagged(member, obj, self._tags(what)) for obj in mine]

    def _mark(self) -> str:
        return f"netbay k8s {self.refs.tag}"

    def _owned(self, body: dict[str, Any]) -> dict[str, Any]:
        what = body.pop("_what")
        if self.refs.project_id:
            body["project_id"] = self.refs.project_id
        return {**body, "tags": self._tags(what)}

    def _tagged(self, member: str, obj: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        """An object found by its mark or device id whose tags a crash kept from it (made,
        then killed before the backend's second, tagging call) gets them now: the next
        pass finds it by them."""
        if set(tags) <= set(obj.get("tags") or []):
            return obj
        return {**obj, "tags": self.net.set_tags(member, obj["id"], tags)}

    def _make(self, member: str, body: dict[str, Any]) -> dict[str, Any]:
        owned = self._owned(body)
        return self.net.create(member, owned)

    def segment_of(self, pod: PodWant) -> str:
        """The network a pod's port is on: its namespace's, or its node's."""
        if self.refs.subnet_driver == "node":
            return f"node/{self.node_of(pod)}"
        return f"ns/{pod.namespace}"

    def node_of(self, pod: PodWant) -> str:
        if pod.node:
            return pod.node
        nodes = self.refs.nodes or ("local",)
        return nodes[uuid.uuid5(POD_NS, f"{pod.namespace}/{pod.name}").int % len(nodes)]

    def _wanted_segments(self, want: Desired) -> set[str]:
        if self.refs.subnet_driver == "node":
            return {self.segment_of(p) for p in want.pods.values()}
        return {f"ns/{n}" for n in want.namespaces}

    def _segments(self, want: Desired, report: Report, known: Known | None) -> dict[str, tuple[dict, dict]]:
        """name → (network, its IPv4 subnet) for every wanted segment, made where missing;
        on a dual-stack cluster each also has an IPv6 subnet from the IPv6 pool
        (``self.subnets6``)."""
        if known is not None:
            nets = {name: net for name, (net, _) in known.segments.items()}
            subnets = {net["id"]: subnet for net, subnet in known.segments.values()}
            subnets6 = dict(known.subnets6)
            attached = {subnet["id"] for _, subnet in known.segments.values()} | \
                {subnet["id"] for subnet in subnets6.values()}
        else:
            nets = {n["name"]: n for n in self._list("network", "network")}
            mine = self._list("subnet", "network")
            subnets = {s["network_id"]: s for s in mine if s.get("ip_version", 4) == 4}
            subnets6 = {s["network_id"]: s for s in mine if s.get("ip_version") == 6}
            attached = {ip["subnet_id"] for p in self.net.list(
                "port", device_id=self.refs.router_id, device_owner="network:router_interface")
                for ip in p["fixed_ips"]}
        self.subnets6 = {}
        out = {}
        for name in sorted(self._wanted_segments(want)):
            net = nets.get(name)
            if net is None:
                net = self._make("network", {"name": name, "description": self._mark(), "_what": "network"})
                report.made.append(f"network {name}")
            subnet = subnets.get(net["id"])
            if subnet is None:
                subnet = self._make("subnet", {"name": name, "network_id": net["id"], "description": self._mark(),
                                               "subnetpool_id": self.refs.pool_id, "ip_version": 4,
                                               "_what": "network"})
                report.made.append(f"subnet {name} {subnet['cidr']}")
            if subnet["id"] not in attached:
                self._ensure_interface(subnet)
            if self.refs.pool6_id:
                subnet6 = subnets6.get(net["id"]) or self._make_subnet6(name, net, report)
                if subnet6["id"] not in attached:
                    self._ensure_interface(subnet6)
                self.subnets6[net["id"]] = subnet6
            out[name] = (net, subnet)
        return out

    def more_subnets(self, net_id: str) -> tuple[dict[str, Any], ...]:
        """A segment's subnets beside its IPv4 one (a dual-stack cluster's IPv6 subnet)."""
        return (self.subnets6[net_id],) if net_id in self.subnets6 else ()

    def _make_subnet6(self, name: str, net: dict[str, Any], report: Report) -> dict[str, Any]:
        """A dual-stack segment's IPv6 subnet, from the cluster's IPv6 pool (after the IPv4
        one: ports list their IPv4 address first)."""
        subnet = self._make("subnet", {"name": name, "network_id": net["id"], "description": self._mark(),
                                       "subnetpool_id": self.refs.pool6_id, "ip_version": 6,
                                       "_what": "network"})
        report.made.append(f"subnet {name} {subnet['cidr']}")
        return subnet

    def _ensure_interface(self, subnet: dict[str, Any]) -> None:
        self.net.add_router_interface(self.refs.router_id, subnet_id=subnet["id"])

    def _sweep_segments(self, segments: Mapping[str, Any], report: Report, known: Known | None) -> None:
        wanted = {net["id"] for net, _ in segments.values()}
        nets = [net for net, _ in known.segments.values()] if known is not None \
            else self._list("network", "network")
        for net in nets:
            if net["id"] in wanted:
                continue
            for subnet in self.net.list("subnet", network_id=net["id"]):
                gone_ok(lambda: self.net.remove_router_interface(self.refs.router_id,
                                                                               subnet_id=subnet["id"]))
            for port in self.net.list("port", network_id=net["id"], device_owner=POD_OWNER):
                self._drop_port(port)
            gone_ok(lambda: self.net.delete("network", net["id"]))
            report.deleted.append(f"network {net['name']}")

    # -- pods → ports + sandboxes --------------------------------------------------------------

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

    def _device(self, ns: str, name: str) -> str:
        return device_id(self.refs.cluster_id, ns, name)

    def _drop_port(self, port: dict[str, Any]) -> None:
        gone_ok(lambda: self.net.delete("port", port["id"]))
        self.sandboxes.unplug(port["id"])

    def _sweep_sandboxes(self, ports: Mapping[Any, dict[str, Any]], report: Report) -> None:
        """Pod namespaces whose port is gone (a crash between the two deletes)."""
        if self.sandboxes.existing() - {p["id"] for p in ports.values()}:
            report.deleted += [f"sandbox {p}" for p in sweep_orphans(self.net, self.sandboxes)]

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


__all__ = ["Controller", "POD_OWNER", "Report"]


def _for_project(backend: Any, project_id: str) -> Any:
    """``backend`` acting for ``project_id`` where it serves many projects (a cloud's);
    netbay's own, reached with the cluster's token, is already scoped by it."""
    scope = getattr(backend, "for_project", None)
    return scope(project_id) if scope is not None else backend
