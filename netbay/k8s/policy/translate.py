"""NetworkPolicy → security groups: a pure function of the cluster.

Neutron groups are allow-lists on a default-deny port, Kubernetes is default-allow
until a policy selects the pod, so every pod port gets (WHY each one):

* ``open-ingress`` / ``open-egress`` (allow all) while no policy isolates it in that
  direction — isolation is then just leaving the group;
* ``nodes`` (to and from the node addresses): a pod is always reachable from its node;
* ``policy:<ns>/<name>`` for every policy selecting it: that policy's rules;
* ``policy:<ns>/<name>:<PROTO>:<port-name>=<n>`` when an ingress rule names a port:
  a named port resolves per selected pod, so pods are grouped by what it resolves to;
* ``peer:…`` for every selector peer it matches: rules name peers by
  ``remote_group_id``, so a label change on a pod or a namespace moves ports between
  groups and never rewrites a rule (an egress named port makes a peer group per
  resolved number, for the same reason).

``ipBlock`` becomes prefixes (``cidr`` minus every ``except``); a Service whose pods an
egress rule reaches adds its cluster IP on the Service's ports. Stateful groups let
replies through, and a pod reaching itself never leaves its namespace.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from lightkube.models.networking_v1 import NetworkPolicy

from netbay.k8s.policy.index import PodIndex
from netbay.k8s.policy.model import Cluster, Pod, policy_key
from netbay.k8s.policy.selectors import EVERYTHING, Selector

OPEN_INGRESS, OPEN_EGRESS, NODES = "open-ingress", "open-egress", "nodes"
PROTOCOLS = ("TCP", "UDP", "SCTP")


class Rule(NamedTuple):
    """One security group rule; ``remote`` is a group key of this translation."""
    direction: str
    ethertype: str = "IPv4"
    protocol: str | None = None
    port_min: int | None = None
    port_max: int | None = None
    remote_ip_prefix: str | None = None
    remote: str | None = None


@dataclass
class Desired:
    groups: dict[str, frozenset[Rule]]
    members: dict[str, frozenset[str]]  # pod key -> group keys
    peers: dict[str, _Peer] = field(default_factory=dict)  # the peer groups, by key
    # whether rules depend on pods (named ports, Services): then a pod change needs a
    # whole translation; otherwise only that pod's memberships move (:func:`relabel`)
    pod_dependent: bool = True


@dataclass(frozen=True)
class _Peer:
    """A selector peer: pods matching ``pods`` in namespaces matching ``namespaces`` (or,
    without a namespace selector, in ``home`` only); ``named`` narrows to pods whose
    named port resolves to a number."""
    home: str | None
    namespaces: Selector | None
    pods: Selector | None
    named: tuple[str, str, int] | None = None

    @property
    def key(self) -> str:
        body = json.dumps([self.home, self.namespaces and self.namespaces.json(),
                           self.pods and self.pods.json(), self.named])
        return "peer:" + hashlib.sha1(body.encode()).hexdigest()[:16]

    def has(self, pod: Pod, ns_labels: dict[str, dict[str, str]]) -> bool:
        if self.namespaces is None:
            if pod.namespace != self.home:
                return False
        elif not self.namespaces.matches(ns_labels[pod.namespace]):
            return False
        if not (self.pods or EVERYTHING).matches(pod.labels):
            return False
        return not self.named or pod.named_port(self.named[0], self.named[1]) == self.named[2]


def _ethertype(cidr: str) -> str:
    return "IPv6" if ipaddress.ip_network(cidr, strict=False).version == 6 else "IPv4"


def ip_block(cidr: str, excepts: Iterable[str] | None) -> list[str]:
    """``cidr`` minus the ``except`` prefixes, as a list of prefixes (refuses an except
    outside the block, as the API server does)."""
    block = ipaddress.ip_network(cidr, strict=False)
    nets = [block]
    for ex in excepts or ():
        cut = ipaddress.ip_network(ex, strict=False)
        if cut.version != nets[0].version or not cut.subnet_of(block):  # type: ignore[arg-type]  # same version
            raise ValueError(f"ipBlock except {ex} is not inside {cidr}")
        out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for n in nets:
            if cut.subnet_of(n):  # type: ignore[arg-type]  # one version throughout (checked above)
                out.extend(n.address_exclude(cut))  # type: ignore[arg-type]
            elif not n.subnet_of(cut):  # type: ignore[arg-type]
                out.append(n)
        nets = out
    return sorted(str(n) for n in nets)


def _types(policy: NetworkPolicy) -> set[str]:
    spec = policy.spec
    if spec.policyTypes:
        return set(spec.policyTypes)
    return {"Ingress", "Egress"} if spec.egress else {"Ingress"}


class _Translation:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.groups: dict[str, set[Rule]] = defaultdict(set)
        self.members: dict[str, set[str]] = {k: {NODES} for k in cluster.pods}
        self._peer_pods: dict[_Peer, list[Pod]] = {}
        self.peer_groups: dict[str, _Peer] = {}
        self.pod_dependent = False
        self.by_ns: dict[str, list[Pod]] = defaultdict(list)
        for p in cluster.pods.values():
            self.by_ns[p.namespace].append(p)
        self.ns_labels = {n: cluster.namespace_labels(n) for n in {*cluster.namespaces, *self.by_ns}}

    # -- selection ---------------------------------------------------------------------
    def selected(self, policy: NetworkPolicy) -> list[Pod]:
        ns = policy.metadata.namespace or "default"
        sel = Selector.of(policy.spec.podSelector) or EVERYTHING
        return [p for p in self.by_ns.get(ns, ()) if sel.matches(p.labels)]

    def peer_pods(self, peer: _Peer) -> list[Pod]:
        if peer not in self._peer_pods:
            if peer.namespaces is None:
                scope = self.by_ns.get(peer.home or "", [])
            else:
                scope = [p for n, ps in self.by_ns.items() if peer.namespaces.matches(self.ns_labels[n]) for p in ps]
            self._peer_pods[peer] = [p for p in scope if peer.has(p, self.ns_labels)]
        return self._peer_pods[peer]

    def use_peer(self, peer: _Peer) -> str:
        key = peer.key
        self.peer_groups[key] = peer
        self.groups.setdefault(key, set())
        for p in self.peer_pods(peer):
            self.members[p.key].add(key)
        return key

    # -- rules -------------------------------------------------------------------------
    def policy(self, policy: NetworkPolicy) -> None:
        pkey = policy_key(policy)
        ns = policy.metadata.namespace or "default"
        gkey = f"policy:{pkey}"
        self.groups.setdefault(gkey, set())
        selected = self.selected(policy)
        types = _types(policy)
        for p in selected:
            self.members[p.key].add(gkey)
            if "Ingress" in types:
                self.members[p.key].discard(OPEN_INGRESS)
            if "Egress" in types:
                self.members[p.key].discard(OPEN_EGRESS)
        if "Ingress" in types:
            for rule in policy.spec.ingress or []:
                self.rule("ingress", ns, gkey, selected, rule.from_, rule.ports)
        if "Egress" in types:
            for rule in policy.spec.egress or []:
                self.rule("egress", ns, gkey, selected, rule.to, rule.ports)

    def rule(self, direction: str, ns: str, gkey: str, selected: list[Pod], peers: Any, ports: Any) -> None:
        for port in ports or [None]:
            proto = (port.protocol if port is not None and port.protocol else "TCP").upper()
            if proto not in PROTOCOLS:
                raise ValueError(f"unsupported NetworkPolicy protocol {proto!r}")
            number = port.port if port is not None else None
            if isinstance(number, str) and number.isdigit():
                number = int(number)
            if port is None:
                self.peers(direction, ns, gkey, peers, None, None, None, None)
            elif number is None:
                self.peers(direction, ns, gkey, peers, proto, None, None, None)
            elif isinstance(number, int):
                self.peers(direction, ns, gkey, peers, proto, number, port.endPort or number, None)
            elif direction == "ingress":  # named: resolved on each selected pod
                self.pod_dependent = True
                for n in sorted({m for q in selected if (m := q.named_port(number, proto)) is not None}):
                    sub = f"{gkey}:{proto}:{number}={n}"
                    self.groups.setdefault(sub, set())
                    for q in selected:
                        if q.named_port(number, proto) == n:
                            self.members[q.key].add(sub)
                    self.peers(direction, ns, sub, peers, proto, n, n, None)
            else:  # egress, named: resolved on each destination pod
                self.peers(direction, ns, gkey, peers, proto, None, None, number)

    def peers(self, direction: str, ns: str, gkey: str, peers: Any, proto: str | None,
              lo: int | None, hi: int | None, named: str | None) -> None:
        out = self.groups[gkey]
        lproto = proto.lower() if proto else None
        for peer in peers or [None]:
            if peer is None or (peer.ipBlock is None and peer.podSelector is None
                                and peer.namespaceSelector is None):
                if named:  # any destination, port by name: every pod that has it
                    peer_any = _Peer(None, EVERYTHING, EVERYTHING)
                    self._named_peer(out, direction, peer_any, proto, named)
                    continue
                out.add(Rule(direction, "IPv4", lproto, lo, hi))
                out.add(Rule(direction, "IPv6", lproto, lo, hi))
                continue
            if peer.ipBlock is not None:
                if named:
                    continue  # a port name means nothing outside the cluster (kuryr: unsupported)
                for cidr in ip_block(peer.ipBlock.cidr, peer.ipBlock.except_):
                    out.add(Rule(direction, _ethertype(cidr), lproto, lo, hi, cidr))
                continue
            sel = _Peer(None if peer.namespaceSelector is not None else ns,
                        Selector.of(peer.namespaceSelector), Selector.of(peer.podSelector))
            if named:
                self._named_peer(out, direction, sel, proto, named)
                continue
            peer_key = self.use_peer(sel)
            for family in self.c.families:
                out.add(Rule(direction, family, lproto, lo, hi, None, peer_key))
            if direction == "egress":
                self.services(out, sel, proto, lo, hi)

    def _named_peer(self, out: set[Rule], direction: str, sel: _Peer, proto: str | None, name: str) -> None:
        assert proto is not None, "a named port comes with its protocol"
        self.pod_dependent = True
        numbers = {m for p in self.peer_pods(sel) if (m := p.named_port(name, proto)) is not None}
        for n in sorted(numbers):
            key = self.use_peer(_Peer(sel.home, sel.namespaces, sel.pods, (name, proto, n)))
            for family in self.c.families:
                out.add(Rule(direction, family, proto.lower(), n, n, None, key))
        self.services(out, sel, proto, None, None, name)

    def services(self, out: set[Rule], sel: _Peer, proto: str | None, lo: int | None, hi: int | None,
                 named: str | None = None) -> None:
        """Egress to pods also reaches the cluster IPs of the Services in front of them."""
        self.pod_dependent = self.pod_dependent or bool(self.c.services)
        reached = {p.key for p in self.peer_pods(sel)}
        for svc in self.c.services.values():
            endpoints = [p for p in self.c.pods.values()
                         if p.namespace == svc.namespace and svc.selector
                         and all(p.labels.get(k) == v for k, v in svc.selector.items())]
            if not any(p.key in reached for p in endpoints):
                continue
            for sp in svc.ports:
                if proto is not None and sp.protocol != proto:
                    continue
                targets = {sp.target_port} if isinstance(sp.target_port, int) else \
                    {m for p in endpoints if (m := p.named_port(sp.target_port, sp.protocol)) is not None}
                if named is not None:
                    ok = sp.target_port == named
                else:
                    ok = lo is None or hi is None or any(lo <= t <= hi for t in targets)  # both or neither
                for ip in (svc.cluster_ip, *svc.more_ips) if ok else ():
                    host = ipaddress.ip_network(ip)   # /32 or /128
                    out.add(Rule("egress", _ethertype(ip), sp.protocol.lower(), sp.port, sp.port, str(host)))


def translate(cluster: Cluster) -> Desired:
    """The groups (with their rules) and each pod's group memberships for ``cluster``."""
    t = _Translation(cluster)
    t.groups[OPEN_INGRESS] = {Rule("ingress", "IPv4"), Rule("ingress", "IPv6")}
    t.groups[OPEN_EGRESS] = {Rule("egress", "IPv4"), Rule("egress", "IPv6")}
    nodes = t.groups[NODES]
    for cidr in cluster.nodes:
        net = str(ipaddress.ip_network(cidr, strict=False))
        nodes.add(Rule("ingress", _ethertype(net), remote_ip_prefix=net))
        nodes.add(Rule("egress", _ethertype(net), remote_ip_prefix=net))
    for k in t.members:
        t.members[k] |= {OPEN_INGRESS, OPEN_EGRESS}
    for key in sorted(cluster.policies):
        t.policy(cluster.policies[key])
    return Desired({k: frozenset(v) for k, v in t.groups.items()},
                   {k: frozenset(v) for k, v in t.members.items()}, t.peer_groups, t.pod_dependent)


def relabel(cluster: Cluster, desired: Desired, pod: Pod) -> Desired | None:
    """``desired`` after ``pod`` (already in ``cluster``) changed its labels only: its
    memberships are recomputed, nothing else (O(policies + peer groups), not O(pods)).
    None when rules depend on pods and a whole translation is needed."""
    if desired.pod_dependent:
        return None
    ns_labels = {pod.namespace: cluster.namespace_labels(pod.namespace)}
    members = _members_of(cluster, desired.peers, pod, ns_labels)
    return Desired(desired.groups, {**desired.members, pod.key: members}, desired.peers, False)


def repolicy(cluster: Cluster, desired: Desired, changed: Iterable[NetworkPolicy],
             index: PodIndex | None = None) -> tuple[Desired, set[str]] | None:
    """``desired`` after the policies ``changed`` (each old and new version) were
    added, replaced or deleted in ``cluster``, and the pods whose groups moved. The
    rules come from a translation without pods (O(policies)); memberships are
    recomputed only for the pods a changed policy selects and the pods of the peer
    groups that came or went, found through ``index`` (the cluster's pods by label,
    kept by the caller; built here without one) — so a new policy costs no O(pods)
    work. None when rules depend on pods and a whole translation is needed."""
    if desired.pod_dependent:
        return None
    rules = translate(Cluster(cluster.namespaces, {}, cluster.policies, cluster.services, cluster.nodes,
                                 cluster.families))
    if rules.pod_dependent:
        return None
    if index is None:
        index = PodIndex(cluster.pods.values())
    selectors = {(p.metadata.namespace or "default", Selector.of(p.spec.podSelector) or EVERYTHING) for p in changed}
    moved = [peer for key, peer in (*rules.peers.items(), *desired.peers.items())
             if (key in rules.peers) != (key in desired.peers)]
    ns_labels = {n: cluster.namespace_labels(n) for n in {*cluster.namespaces, *index.namespaces}}
    affected = {pod.key for ns, sel in selectors for pod in index.candidates((ns,), sel) if sel.matches(pod.labels)}
    for peer in moved:
        scope = (peer.home or "",) if peer.namespaces is None else \
            [n for n, labels in ns_labels.items() if peer.namespaces.matches(labels)]
        affected.update(pod.key for pod in index.candidates(scope, peer.pods or EVERYTHING) if peer.has(pod, ns_labels))
    members = {key: _members_of(cluster, rules.peers, cluster.pods[key], ns_labels) for key in affected}
    return Desired(rules.groups, {**desired.members, **members}, rules.peers, False), affected


def _members_of(cluster: Cluster, peers: dict[str, _Peer], pod: Pod,
                ns_labels: dict[str, dict[str, str]]) -> frozenset[str]:
    """One pod's groups, when rules do not depend on pods (O(policies + peer groups))."""
    members = {NODES, OPEN_INGRESS, OPEN_EGRESS}
    for key in sorted(cluster.policies):
        policy = cluster.policies[key]
        if (policy.metadata.namespace or "default") != pod.namespace:
            continue
        if not (Selector.of(policy.spec.podSelector) or EVERYTHING).matches(pod.labels):
            continue
        members.add(f"policy:{key}")
        types = _types(policy)
        if "Ingress" in types:
            members.discard(OPEN_INGRESS)
        if "Egress" in types:
            members.discard(OPEN_EGRESS)
    members |= {key for key, peer in peers.items() if peer.has(pod, ns_labels)}
    return frozenset(members)


__all__ = ["Desired", "NODES", "OPEN_EGRESS", "OPEN_INGRESS", "Rule", "ip_block", "relabel", "repolicy",
           "translate"]
