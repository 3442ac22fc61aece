"""Kubernetes objects on a cluster whose network driver programs the nodes (flannel, calico).

As those clusters do it in real life, with each job where its driver declares it
(:attr:`netbay.drivers.spec.DriverSpec.services` / ``policy``):

* **pods** take addresses from their node's lease (flannel's subnet, calico's block:
  the driver's IPAM): each is a netbay pod (``/netbay/v1/pods``, placed and addressed
  under the cluster network's lock, plugged by the agent through the driver), named
  ``<namespace>.<pod>`` and labelled with the pod's namespace and name;
* **Services** get a cluster IP from the service range (``spec.clusterIP`` when
  given; else allocated once and written into the stored Service, as the API server
  does) answered on every node — kube-proxy's job, :mod:`netbay.k8s.kubeproxy` —
  node ports included (numbered by :func:`netbay.k8s.nodeports.plan`, as on kuryr);
  on a dual-stack cluster (``<driver>_service_cidr_ipv6``) one of each family a
  Service has (:mod:`netbay.k8s.nodeips`), the IPv6 one leading to the pods' IPv6
  addresses;
* **NetworkPolicy** is enforced in the nodes where the driver does it (calico:
  :mod:`netbay.k8s.nodepolicy`, the kuryr path's translation); where it does not
  (flannel), every policy is accepted and reported *not enforced by <driver>* — a
  Warning event on each pass and the stored policy's status condition
  (:func:`netbay.k8s.nodepolicy.policy_status`: ``Enforced`` ``False``, reason ``NotEnforced``);
* **cluster DNS** is a resolver pod behind ``kube-dns`` (the service range's 10th
  address) as CoreDNS is: :mod:`netbay.k8s.dns.nodes`, the kuryr path's resolver run in
  a pod of the cluster; every pod's ``resolv.conf`` names it;
* a pod annotated ``netbay.io/runtime: docker`` **runs whole** (sandbox, init
  containers, containers): the kuryr path's runtime on the node's wiring
  (:mod:`netbay.k8s.nodedocker`).

The desired state is the store's (``k8s_objects``), as for kuryr, and every pass
converges to it: pods nothing wants are deleted, the nodes' tables rebuilt when a
controller starts.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from netbay.client import Api, ApiError, gone_ok
from netbay.dataplane.names import Names
from netbay.k8s import desired, nodeplug, objects, podstatus, svcstatus
from netbay.k8s.controller import Report
from netbay.k8s.dns.names import DOMAIN
from netbay.k8s.dns.nodes import NodeResolver, forget_pod
from netbay.k8s.dockerpods import DockerPods
from netbay.k8s.kubeproxy import KubeProxy, ServicePortRule
from netbay.k8s.nodeips import allocate, families_of, label_of, pinned, ranges_of, service_families
from netbay.k8s.nodedocker import RUNTIME, DnsView, NodeSandboxes, as_ports, placements
from netbay.k8s.nodepolicy import NodePolicy, not_enforced, policy_cluster, policy_status
from netbay.k8s.noderefs import NodeClusterRefs, find, network_driver, with_nodes
from netbay.k8s.objects import Desired, Key
from netbay.k8s.podport import POD_NS
from netbay.k8s.proxyrules import SERVICE_RANGE, RulesMemo, cluster_ips, proxy_rules
from netbay.store.db import Store

log = logging.getLogger(__name__)

PODS = "/netbay/v1/pods"
ACTIVE_WAIT = 60.0                # seconds a pass waits for new pods to be plugged
K8S_LABEL = "netbay-k8s"          # a pod made for a Kubernetes pod: its "<namespace>/<name>"


class NodeController:
    """The mapping controller of a flannel or calico cluster (same interface as
    :class:`netbay.k8s.controller.Controller` towards sources and the CLI)."""

    def __init__(self, api: Api, store: Store, cluster_id: str, names: Names | None = None, *,
                 wait: float = ACTIVE_WAIT) -> None:
        self.api, self.store = api, store
        self.refs = find(api, cluster_id)
        self.names = names or Names()
        self.wait = wait
        self.families = families_of(self.refs.config)   # IPv4, and IPv6 with <driver>_service_cidr_ipv6
        self.proxy = KubeProxy(ipv6="IPv6" in self.families)
        self._node_ns: dict[str, str] = {}   # node name → its namespace
        self._pod_node: dict[str, str] = {}   # netbay pod id → node namespace
        self.policy = NodePolicy(lambda p: self._pod_node.get(p.port_id)) if self.refs.spec.enforces_policy \
            else None
        self._lock = threading.Lock()
        self.vips: dict[tuple[str, str], str] = {}
        self.cluster_ips: dict[tuple[str, str], tuple[str, ...]] = {}   # every family's, primary first
        self._reported: dict[tuple[str, str], str] = {}   # the Services the last pass reported made
        self._bodies: dict[Key, dict[str, Any]] | None = None   # the desired state as last read or written
        self._parsed: objects.Memo = {}   # its Pods and Services as parsed, kept between passes
        self._rules = RulesMemo()         # its Service ports as the nodes answer them
        self._last_pods: tuple[dict, dict] | None = None   # (pods wanted, netbay pods): the last pass's, all ACTIVE
        self._made: dict[tuple[str, str], dict[str, Any]] | None = None   # the netbay pods the last pass left
        self.on_ports: Any = None   # the watch source's hook: these pods have no ports to write back
        self.dns = NodeResolver(api, self.names, self.refs.cluster_id, self.refs.dns_upstream, SERVICE_RANGE,
                                wait=wait)
        # Docker-runtime pods: the kuryr path's runtime, on the nodes' wiring (netbay.k8s.nodedocker)
        self.sandboxes = NodeSandboxes(self.names)
        self.discovery = DnsView(self.dns, DOMAIN)
        self.dockerpods = DockerPods(self)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="netbay-k8s")
        self._nodes_of: dict[tuple[str, str], str] = {}   # (ns, pod) → the node its netbay pod is on

    # -- what a source calls ----------------------------------------------------------------
    def refuse(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        """Every Service is answered by the nodes, of the families the cluster has (else
        Kubernetes' refusal, :class:`netbay.k8s.families.FamilyError`); a Docker-runtime pod
        the runtime cannot run as written is refused (never trimmed)."""
        want = objects.desired(list(bodies), self._daemon_nodes())
        for svc in want.services.values():
            if not svc.headless:
                service_families(svc, self.families, label_of(self.refs.driver))
        self.dockerpods.refuse(want)

    def apply(self, bodies: Iterable[Mapping[str, Any]]) -> Report:
        given = self._allocated([dict(b) for b in bodies])
        desired.put(self.store, self.refs.cluster_id, given)
        if self._bodies is not None:
            self._bodies.update({objects.key_of(b): b for b in given})
        return self.resync(full=False)

    def _allocated(self, given: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``given`` with each new Service's cluster IP already written in (as :meth:`_pin`
        would after the pass): the apply then costs one write of the desired state, not two."""
        if self._bodies is None or not any(objects.key_of(b).kind == "Service"
                                           and not (b.get("spec") or {}).get("clusterIP") for b in given):
            return given
        with self._lock:
            merged = {**self._bodies, **{objects.key_of(b): b for b in given}}
            ips = self._allocate(objects.desired(list(merged.values()), self._daemon_nodes(), self._parsed))
        out = []
        for body in given:
            key, spec = objects.key_of(body), body.get("spec") or {}
            vips = ips.get((key.namespace, key.name))
            pin = key.kind == "Service" and not spec.get("clusterIP") and vips
            out.append({**body, "spec": pinned(spec, vips)} if pin and vips else body)
        return out

    def delete(self, keys: Iterable[Key]) -> Report:
        keys = list(keys)
        desired.drop(self.store, self.refs.cluster_id, keys)
        if self._bodies is not None:
            for key in keys:
                self._bodies.pop(key, None)
        return self.resync(full=False)

    def keys(self) -> list[Key]:
        return [objects.key_of(b) for b in desired.load(self.store, self.refs.cluster_id)]

    def delete_all(self) -> Report:
        desired.drop_cluster(self.store, self.refs.cluster_id)
        report = self.resync()
        self.dns.remove()
        self.proxy.remove(self.node_namespaces)
        if self.policy is not None:
            self.policy.close(delete=True)
        return report

    def close(self) -> None:
        """The nodes' libnftables contexts go; their tables stay (the kernel keeps them)."""
        self._pool.shutdown(wait=True)
        self.dockerpods.close()
        self.proxy.close()

    @property
    def node_namespaces(self) -> list[str]:
        return sorted(self._node_ns.values())

    # -- one pass ---------------------------------------------------------------------------
    def resync(self, full: bool = True) -> Report:
        """One pass; ``full`` reads the desired state afresh (else: this process's copy,
        kept in step by ``apply`` and ``delete`` after their writes)."""
        with self._lock:
            if full or self._bodies is None:
                self._bodies = {objects.key_of(b): b for b in desired.load(self.store, self.refs.cluster_id)}
            bodies = list(self._bodies.values())
            if full or not self.refs.nodes:   # else the last pass's nodes, as a kuryr controller keeps its own
                self.refs = with_nodes(self.api, self.refs)
            want = objects.desired(bodies, self._daemon_nodes(), self._parsed)
            self._node_ns = {n["name"]: self.names.sandbox(n["sandbox_id"]) for n in self.refs.nodes}
            report = Report()
            containers = self.dockerpods.sweep(want, None, report)   # before the pods they ran in go
            pods = self._pods(want, report, full)
            addresses = {key: p["address"] for key, p in pods.items() if p["status"] == "ACTIVE"}
            addresses6 = {key: p["address6"] for key, p in pods.items() if p["status"] == "ACTIVE" and p.get("address6")}
            self.cluster_ips = self._allocate(want)
            self.vips = {key: ips[0] for key, ips in self.cluster_ips.items()}
            self._pin()
            self._statuses()
            self._report_services(want, report)
            resolver = self._resolver(want, full, report)
            rules = proxy_rules(want, self.vips, addresses, self._rules, more_ips=self.cluster_ips,
                                addresses6=addresses6)
            self.proxy.converge(self.node_namespaces, rules + resolver)
            if resolver:
                self.dns.publish(want, pods, self.vips, self.cluster_ips)
            self._docker(want, pods, containers, report, full)
            self._policies(want, pods, report)
            return report

    def _resolver(self, want: Desired, full: bool, report: Report) -> list[ServicePortRule]:
        """A cluster with objects has a resolver (its ``kube-dns`` rules); one without has none."""
        if not want.namespaces:
            self.dns.remove(full)
            return []
        if self.dns.ensure(full) is None:
            pod = self.dns.pod or {}
            why = pod.get("status_reason") or pod.get("status")
            report.events.append(f"Warning pod kube-system/coredns: not plugged ({why}): kube-dns has no endpoint")
        return self.dns.rules()

    def _docker(self, want: Desired, pods: Mapping[tuple[str, str], dict[str, Any]], containers: Any,
                report: Report, full: bool) -> None:
        """The Docker-runtime pods' containers, each sandbox plugged into its node."""
        self.sandboxes.placement = placements(self.names, self.refs.driver, self.refs.config, self.refs.nodes, pods)
        ports, segments = as_ports({k: p for k, p in pods.items() if p.get("runtime") == RUNTIME}, self.refs.leases)
        self.dockerpods.realize(want, ports, segments, self.vips, containers, report, full)

    def node_of(self, pod: objects.PodWant) -> str:
        """The node a pod's netbay pod is on (its ``spec.nodeName`` field for its containers)."""
        return self._nodes_of.get((pod.namespace, pod.name)) or pod.node or ""

    def more_subnets(self, network_id: str) -> tuple[dict, ...]:
        """A node's lease is the pod's one prefix (kuryr's dual-stack segments have more)."""
        return ()

    def _allocate(self, want: Desired) -> dict[tuple[str, str], tuple[str, ...]]:
        return allocate(want, ranges_of(self.refs.config), label_of(self.refs.driver))

    def _pin(self) -> None:
        """Write each allocated cluster IP into its Service's stored ``spec.clusterIP`` (and
        ``clusterIPs``, dual-stack), as the API server allocates them once: Services made
        later never move them."""
        changed = []
        for key, body in (self._bodies or {}).items():
            if key.kind != "Service":
                continue
            spec = body.get("spec") or {}
            if spec.get("clusterIP") and len(self.families) == 1:
                continue   # pinned (an IPv4 cluster's every Service once allocated): one look
            ips = self.cluster_ips.get((key.namespace, key.name))
            if ips and (not spec.get("clusterIP") or len(spec.get("clusterIPs") or ()) < len(ips)):
                changed.append({**body, "spec": pinned(spec, ips)})
        if changed:
            desired.put(self.store, self.refs.cluster_id, changed)
            if self._bodies is not None:
                self._bodies.update({objects.key_of(b): b for b in changed})

    def _statuses(self) -> None:
        """Each stored object's ``status`` as this cluster sets it, in one write: a
        NetworkPolicy's says whether the driver enforces it (:func:`netbay.k8s.nodepolicy.policy_status`:
        flannel's *not enforced by flannel*); a LoadBalancer Service's
        ``loadBalancer.ingress`` names the address every node answers for it
        (:func:`svcstatus.on_node_cluster`, as a cloud provider writes it)."""
        policy = policy_status(self.refs.spec)
        marked = []
        for k, b in (self._bodies or {}).items():
            status = policy if k.kind == "NetworkPolicy" else \
                svcstatus.on_node_cluster(b) if k.kind == "Service" else None
            if status is not None and b.get("status") != status:
                marked.append({**b, "status": status})
        if marked:
            desired.put(self.store, self.refs.cluster_id, marked)
            if self._bodies is not None:
                self._bodies.update({objects.key_of(b): b for b in marked})

    def _report_services(self, want: Desired, report: Report) -> None:
        known = self._reported   # (ns, name) → cluster IP, as the last pass reported them
        report.made += sorted(f"service {k[0]}/{k[1]} {ip}" for k, ip in self.vips.items() if known.get(k) != ip)
        report.deleted += sorted(f"service {k[0]}/{k[1]}" for k, ip in known.items() if self.vips.get(k) != ip)
        self._reported = dict(self.vips)

    def pod_statuses(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every pod's status (``netbay k8s pods``): a Docker-runtime pod's from its containers,
        a network-only pod's Running once its netbay pod is plugged."""
        self.refs = with_nodes(self.api, self.refs)
        want = objects.desired(desired.load(self.store, self.refs.cluster_id), self._daemon_nodes())
        out = self.dockerpods.statuses(want)
        have = self._list()
        for key in sorted(set(want.pods) - set(out)):
            out[key] = podstatus.sandbox_pod((have.get(key) or {}).get("status") == "ACTIVE")
        return out

    # -- pods → netbay pods on the nodes ----------------------------------------------------
    def _list(self) -> dict[tuple[str, str], dict[str, Any]]:
        found = self.api.call("GET", PODS, cluster_id=self.refs.cluster_id)["pods"]
        out = {}
        for p in found:
            owner = (p.get("labels") or {}).get(K8S_LABEL)
            if owner and "/" in owner:
                ns, name = owner.split("/", 1)
                out[(ns, name)] = p
        return out

    def _daemon_nodes(self) -> tuple[str, ...]:
        """Where a DaemonSet puts a pod each: the minions (the masters if there are none)."""
        minions = tuple(str(n["name"]) for n in self.refs.nodes if n.get("role") == "minion")
        return minions or tuple(str(n["name"]) for n in self.refs.nodes)

    def _node_for(self, pod: objects.PodWant) -> str | None:
        """``spec.nodeName``, else None: the API places it on the least-loaded minion."""
        return pod.node or None

    def _pods(self, want: Desired, report: Report, full: bool = True) -> dict[tuple[str, str], dict[str, Any]]:
        """Each wanted pod's netbay pod, made or deleted to match. A pass that is not
        ``full`` (an apply) whose pods are the last pass's, all plugged, lists nothing:
        a Service's change costs no call; one that adds or drops pods starts from the
        netbay pods the last pass left (as a kuryr controller's ``Known``) — a pod made
        meanwhile by another (its name taken: 409) sends it back to a list."""
        last = self._last_pods
        if not full and last is not None and last[0] == want.pods:
            return dict(last[1])
        self._last_pods = None
        known, self._made = (None if full else self._made), None   # none while a pass is under way
        try:
            out = self._converge_pods(want, report, known)
        except ApiError as exc:
            if known is None or exc.status != 409:
                raise
            out = self._converge_pods(want, report, None)
        self._made = dict(out)
        if all(p["status"] == "ACTIVE" for p in out.values()):
            self._last_pods = (dict(want.pods), dict(out))
        return out

    def _converge_pods(self, want: Desired, report: Report, known: Mapping[tuple[str, str], dict[str, Any]] | None
                       ) -> dict[tuple[str, str], dict[str, Any]]:
        have = self._list() if known is None else dict(known)
        out: dict[tuple[str, str], dict[str, Any]] = {}
        fresh = []
        for key, pod in sorted(want.pods.items()):
            made = have.pop(key, None)
            runtime = RUNTIME if self.dockerpods.wants(pod) else ""
            if made is not None and ((pod.node and made["node"] != pod.node)   # moved to another node
                                     or (made.get("runtime") or "") != runtime):   # or to another runtime
                stale = made["id"]
                gone_ok(lambda: self.api.call("DELETE", f"{PODS}/{stale}"))
                forget_pod(self.names, stale)
                made = None
            if made is None:
                body: dict[str, Any] = {"name": f"{key[0]}.{key[1]}", "cluster_id": self.refs.cluster_id,
                                        "labels": {K8S_LABEL: f"{key[0]}/{key[1]}",
                                                   "netbay-k8s-uid": str(uuid.uuid5(POD_NS, f"{key[0]}/{key[1]}"))}}
                node = self._node_for(pod)
                if node:
                    body["node"] = node
                if runtime:   # the agent leaves it unplugged: its sandbox container is plugged here
                    body["runtime"] = runtime
                made = self.api.call("POST", PODS, {"pod": body})["pod"]
                fresh.append(key)
                report.made.append(f"pod {key[0]}/{key[1]} {made['address']} on {made['node']}")
            out[key] = made
        for key, p in have.items():
            gone_ok(lambda: self.api.call("DELETE", f"{PODS}/{p['id']}"))
            forget_pod(self.names, p["id"])
            report.deleted.append(f"pod {key[0]}/{key[1]}")
        self._await(out, [k for k, p in out.items() if p["status"] != "ACTIVE"], report)
        self._pod_node = {p["id"]: self._node_ns.get(p["node"], "") for p in out.values()}
        self._nodes_of = {key: p["node"] for key, p in out.items()}
        return out

    def _await(self, pods: dict[tuple[str, str], dict[str, Any]], keys: list[tuple[str, str]],
               report: Report) -> None:
        """Until the agent has plugged the new pods (bounded, :func:`netbay.k8s.nodeplug.wait`);
        a pod still not ACTIVE is reported (an Event) and left out of the Services' backends."""
        todo = nodeplug.wait(self.api, self.refs.cluster_id, lambda p: self._node_ns.get(p.get("node") or ""),
                             self.names, pods, keys, self.wait)
        for key in todo + [k for k in keys if pods[k]["status"] == "ERROR"]:
            reason = pods[key].get("status_reason") or pods[key]["status"]
            report.events.append(f"Warning FailedCreatePodSandBox pod/{key[0]}/{key[1]}: {reason}")

    # -- NetworkPolicy ----------------------------------------------------------------------
    def _policies(self, want: Desired, pods: Mapping[tuple[str, str], dict[str, Any]], report: Report) -> None:
        if self.policy is None:
            for body in want.policies:
                meta = body.get("metadata") or {}
                report.events.append(f"Warning NetworkPolicy {meta.get('namespace') or 'default'}/{meta.get('name')}: "
                                     f"{not_enforced(self.refs.driver)}")
            return
        if not want.policies and not self.policy.cluster.policies:
            return   # nothing to enforce, nothing enforced: a Service alone costs no rebuild
        leases6 = self.refs.leases6
        self.policy.sync(policy_cluster(want, pods, self.cluster_ips, self.node_addresses(leases6),
                                        ("IPv4", "IPv6") if leases6 else ("IPv4",)))

    def node_addresses(self, leases6: Iterable[str] = ()) -> list[str]:
        """Where a node's own traffic to pods comes from: its underlay address, its lease's
        first address (calico's tunnel) and gateway (flannel's bridge), and the same two of
        its IPv6 lease ``leases6`` (calico's IPv6 tunnel address) — always let through, as
        kuryr's node addresses are. Neither is ever a pod's (pods start at a lease's
        second host)."""
        out = {f"{str(n['address']).split('/')[0]}/32" for n in self.refs.nodes if n.get("address")}
        for lease in (*self.refs.leases.values(), *leases6):
            block = ipaddress.ip_network(lease)
            host = block.max_prefixlen
            out |= {f"{block.network_address}/{host}", f"{block.network_address + 1}/{host}"}
        return sorted(out)


# With the names callers import from here since before their homes (noderefs, nodepolicy, proxyrules).
__all__ = ["NodeClusterRefs", "NodeController", "network_driver", "SERVICE_RANGE", "cluster_ips", "find", "not_enforced",
           "policy_status", "proxy_rules"]
