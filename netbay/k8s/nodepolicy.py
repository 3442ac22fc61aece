"""NetworkPolicy enforced in the nodes: Calico's (Felix's) job, in nftables.

The semantics are the kuryr path's (:func:`netbay.k8s.policy.translate`: the same
groups, rules and memberships, so the same truth tables hold); only enforcement
differs. Where kuryr hangs groups on pod ports, a calico pod is a routed address on
its node, and each node filters the traffic of *its own* pods as it forwards it —
one table per node namespace and IP family of the pods (``ip netbay-k8s-policy``, and
``ip6 netbay-k8s-policy`` beside it on a dual-stack cluster), rebuilt together in one
transaction when what they should hold changes:

* ``egress`` (forward hook, priority 0): ``ip saddr vmap`` of the node's isolated
  pods → the pod's egress chain; ``ingress`` (priority 1, after it: an accept in one
  base chain still passes the next) likewise on ``ip daddr``; replies of accepted
  connections pass both (``ct state established,related``);
* a pod's chain jumps to the chain of each group it is in and drops what none
  accepts; a group's chain holds its rules (a peer group is a set of pod addresses,
  an ``ipBlock`` a prefix, ports a range);
* a pod no policy isolates in a direction has no entry there: it stays open, as
  Kubernetes has it. The node's own traffic to its pods never crosses ``forward``.

Both families alike (Felix filters both): a dual-stack pod's IPv6 address keys the same
chains in the ``ip6`` table, peer groups are sets of the pods' IPv6 addresses there, an
``ipBlock`` lands in the table of its CIDR's family, and the nodes' IPv6 addresses are
let through as their IPv4 ones (:meth:`netbay.k8s.nodecluster.NodeController.node_addresses`).
Which tables a node gets is the cluster's ``families`` (an IPv4 cluster: the ``ip`` one
only). :class:`NodePolicy` offers the handlers of
:class:`netbay.k8s.policy.PolicyEngine` (``sync``, ``on_policy``, ``on_pod`` …), so
the same callers (and tests) drive either.

A driver that enforces nothing (flannel) accepts every policy and says so: the
status :func:`policy_status` gives it and the Warning :func:`not_enforced` words.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from netbay.dataplane import netns
from netbay.dataplane.nft import Nft
from netbay.drivers.spec import DriverSpec
from netbay.k8s import objects
from netbay.k8s.policy.model import Cluster, ContainerPort, Namespace, Pod, Service, ServicePort, policy_key
from netbay.k8s.policy.translate import OPEN_EGRESS, OPEN_INGRESS, Desired, Rule, translate

TABLE = "netbay-k8s-policy"
NOT_ENFORCED = "NotEnforced"
DIRECTIONS = {"egress": ("saddr", "daddr", 0), "ingress": ("daddr", "saddr", 1)}   # (pod's side, peer's, prio)
FAMILIES = {"IPv4": ("ip", "ipv4_addr"), "IPv6": ("ip6", "ipv6_addr")}   # (nft family, set type)



def not_enforced(driver: str) -> str:
    return (f"not enforced by {driver}: a {driver} cluster implements no NetworkPolicy (the policy is "
            "accepted and stored; traffic is not filtered)")


def policy_status(spec: DriverSpec) -> dict[str, Any]:
    """The status a NetworkPolicy gets on a cluster of ``spec``'s driver."""
    if spec.enforces_policy:
        return {"conditions": [{"type": "Enforced", "status": "True", "reason": "EnforcedByDriver",
                                "message": f"enforced by {spec.name}"}]}
    return {"conditions": [{"type": "Enforced", "status": "False", "reason": NOT_ENFORCED,
                            "message": not_enforced(spec.name)}]}


def policy_cluster(want: objects.Desired, pods: Mapping[tuple[str, str], dict[str, Any]],
                   cluster_ips: Mapping[tuple[str, str], tuple[str, ...]], nodes: list[str],
                   families: tuple[str, ...] = ("IPv4",)) -> Cluster:
    """The policy model of a node cluster's pass: its namespaces, its pods at their
    netbay pods' addresses (both families' on a dual-stack pod network, ``families``),
    its policies, and the Services that have a cluster IP (each family's, primary first)."""
    from lightkube import codecs
    from lightkube.models.networking_v1 import NetworkPolicy

    return Cluster.of(
        [Namespace(n, dict(labels)) for n, labels in want.namespaces.items()],
        [Pod(ns, name, p["id"], p["address"], dict(want.pods[(ns, name)].labels),
             tuple(ContainerPort(k, v) for k, v in want.pods[(ns, name)].ports.items()),
             (p["address6"],) if p.get("address6") else ())
         for (ns, name), p in pods.items()],
        [cast(NetworkPolicy, codecs.from_dict(b)) for b in want.policies],
        [Service(s.namespace, s.name, cluster_ips[key][0], dict(s.selector or {}),
                 tuple(ServicePort(p.port, p.target, p.protocol) for p in s.ports), cluster_ips[key][1:])
         for key, s in want.services.items() if cluster_ips.get(key)],
        nodes=nodes, families=families)

def _name(prefix: str, key: str) -> str:
    return f"{prefix}-" + hashlib.sha1(key.encode()).hexdigest()[:12]


def _match(rule: Rule, family: str, peer_field: str, sets: Mapping[str, str]) -> str | None:
    """The nft match of one rule in ``family``'s table (None: it cannot match a packet of
    that family — an ``ipBlock`` of the other one, a remote group's twin)."""
    if rule.ethertype != family:
        return None
    nf = FAMILIES[family][0]
    parts = []
    if rule.remote_ip_prefix:
        parts.append(f"{nf} {peer_field} {rule.remote_ip_prefix}")
    if rule.remote:
        parts.append(f"{nf} {peer_field} @{sets[rule.remote]}")
    if rule.protocol:
        if rule.port_min is not None:
            ports = str(rule.port_min) if rule.port_max in (None, rule.port_min) else f"{rule.port_min}-{rule.port_max}"
            parts.append(f"{rule.protocol} dport {ports}")
        else:
            parts.append(f"meta l4proto {rule.protocol}")
    return " ".join(parts)


def ruleset(desired: Desired, cluster: Cluster, local: Iterable[str]) -> str:
    """The node's tables for its pods ``local`` (pod keys), as one nft transaction: a table
    per family the cluster's pods have (``ip``; ``ip6`` too on a dual-stack cluster)."""
    local = sorted(local)
    return "".join(_table(desired, cluster, local, family) for family in cluster.families if family in FAMILIES)


def _table(desired: Desired, cluster: Cluster, local: list[str], family: str) -> str:
    """One family's table: the same chains and sets, keyed on the pods' addresses of it."""
    nf, addr_type = FAMILIES[family]
    t = f"{nf} {TABLE}"
    ips = {k: p.ips_of(family) for k, p in cluster.pods.items()}
    sets = {g: _name("p", g) for g in desired.peers}
    members: dict[str, list[str]] = defaultdict(list)   # only the peer groups' become sets
    for key, groups in desired.members.items():
        for g in groups:
            if g in sets:
                members[g].extend(ips[key])
    lines = [f"add table {t}", f"delete table {t}", f"add table {t}"]
    for g, name in sorted(sets.items()):
        lines.append(f"add set {t} {name} {{ type {addr_type} ; }}")
        if members.get(g):
            lines.append(f"add element {t} {name} {{ {', '.join(sorted(set(members[g])))} }}")
    chains: set[str] = set()
    for direction, (own, peer, prio) in DIRECTIONS.items():
        opener = OPEN_EGRESS if direction == "egress" else OPEN_INGRESS
        lines += [f"add chain {t} {direction} {{ type filter hook forward priority {prio} ; policy accept ; }}",
                  f"add rule {t} {direction} ct state established,related accept"]
        entries = []
        for key in local:
            groups = desired.members.get(key, frozenset())
            if opener in groups or not ips[key]:
                continue
            pod_chain = _name(direction[:2], key)
            lines.append(f"add chain {t} {pod_chain}")
            for g in sorted(groups):
                if not any(r.direction == direction for r in desired.groups.get(g, ())):
                    continue
                gchain = _name(f"g{direction[:2]}", g)
                if gchain not in chains:
                    chains.add(gchain)
                    lines.append(f"add chain {t} {gchain}")
                    for r in sorted(desired.groups[g], key=repr):
                        m = _match(r, family, peer, sets) if r.direction == direction else None
                        if m is not None:
                            lines.append(f"add rule {t} {gchain} {m} accept".replace("  ", " "))
                lines.append(f"add rule {t} {pod_chain} jump {gchain}")
            lines.append(f"add rule {t} {pod_chain} drop")
            entries += [f"{ip} : goto {pod_chain}" for ip in ips[key]]
        if entries:
            lines.append(f"add rule {t} {direction} {nf} {own} vmap {{ {', '.join(entries)} }}")
    return "\n".join(lines) + "\n"


class NodePolicy:
    """NetworkPolicy on the nodes of one cluster. ``node_of(pod)``: the namespace of
    the node a pod runs on (None: not on a node of this host)."""

    def __init__(self, node_of: Callable[[Pod], str | None]) -> None:
        self.node_of = node_of
        self.cluster = Cluster()
        self.desired: Desired | None = None
        self.applied: dict[str, str] = {}   # node namespace → its table's text

    # -- the PolicyEngine's handlers --------------------------------------------------------
    def sync(self, cluster: Cluster) -> int:
        self.cluster = cluster.copy()
        return self._apply()

    def on_policy(self, policy: Any) -> int:
        self.cluster.policies[policy_key(policy)] = policy
        return self._apply()

    def on_policy_deleted(self, namespace: str, name: str) -> int:
        self.cluster.policies.pop(f"{namespace}/{name}", None)
        return self._apply()

    def on_pod(self, pod: Pod) -> int:
        self.cluster.pods[pod.key] = pod
        return self._apply()

    def on_pod_deleted(self, namespace: str, name: str) -> int:
        self.cluster.pods.pop(f"{namespace}/{name}", None)
        return self._apply()

    def on_namespace(self, namespace: Namespace) -> int:
        self.cluster.namespaces[namespace.name] = namespace
        return self._apply()

    def on_service(self, service: Service) -> int:
        self.cluster.services[service.key] = service
        return self._apply()

    def on_service_deleted(self, namespace: str, name: str) -> int:
        self.cluster.services.pop(f"{namespace}/{name}", None)
        return self._apply()

    def close(self, delete: bool = False) -> None:
        if delete:
            for ns in list(self.applied):
                _drop(ns)
            self.applied.clear()

    # -- enforcement ------------------------------------------------------------------------
    def _apply(self) -> int:
        """Rebuild the tables whose text changed; returns how many nodes changed."""
        self.desired = translate(self.cluster)
        local: dict[str, list[str]] = defaultdict(list)
        for key, pod in self.cluster.pods.items():
            ns = self.node_of(pod)
            if ns:
                local[ns].append(key)
        changed = 0
        for ns in sorted(set(local) | set(self.applied)):
            if not netns.exists(ns):
                self.applied.pop(ns, None)
                continue
            if not self.cluster.policies:
                if self.applied.pop(ns, None) is not None:
                    _drop(ns)
                    changed += 1
                continue
            text = ruleset(self.desired, self.cluster, local.get(ns, ()))
            if self.applied.get(ns) == text:
                continue
            with Nft(ns) as nft:
                nft.run(text)
            self.applied[ns] = text
            changed += 1
        return changed


def _drop(ns: str) -> None:
    if not netns.exists(ns):
        return
    with Nft(ns) as nft:
        have = nft.tables()
        gone = [f"delete table {nf} {TABLE}" for nf, _ in FAMILIES.values() if (nf, TABLE) in have]
        if gone:
            nft.run("\n".join(gone) + "\n")


__all__ = ["NodePolicy", "TABLE", "ruleset"]
