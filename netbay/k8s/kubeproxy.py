"""Services on every node of a flannel or calico cluster: kube-proxy's job, in nftables.

What kube-proxy does, in each node's namespace (one table, ``ip netbay-k8s-proxy``),
through libnftables in-process (no ``nft`` fork), with one map per job and no chain
per Service — so adding the 1,000th Service costs what adding the 10th does:

* ``service-backends`` — ``cluster IP . protocol . port . slot`` → ``backend . port``:
  each Service port fills :data:`SLOTS` slots round-robin over its ready backends, and
  a connection's first packet draws its slot (``numgen random mod SLOTS``, kept in the
  packet mark) before one ``dnat`` looks the whole key up;
* ``nodeport-backends`` — ``protocol . nodePort . slot`` → the same backends (node
  ports numbered by :func:`netbay.k8s.nodeports.plan`, as on a kuryr cluster), for
  packets to one of the node's own addresses, from elsewhere or from the node itself;
  their slots carry :data:`NODEPORT_MARK`;
* ``external-backends`` — ``address . protocol . port . slot`` → the same backends, for
  a Service's ``externalIPs`` and its load-balancer address (a LoadBalancer Service's
  ``spec.loadBalancerIP``): whatever brings such a packet to a node (a route outside
  the cluster, a router) gets it answered there, masqueraded as a node port's is
  (:data:`NODEPORT_MARK` slots);
* ``no-endpoints`` — a Service port without a ready backend: dropped, nothing answers;
* ``postrouting`` masquerades what came in through a node port (the reply must come
  back through the node that translated it), what a bridged pod sent to a backend on
  its own bridge, and a pod reaching itself through its Service (``hairpin``: each
  backend's ``addr . addr``).

Maps are declared with their size (a growing hash table is resized in the kernel on
the way, costing more the larger it is). A change sends only the elements that
changed (:func:`commands`), every deletion before any addition, as one transaction per
node over a libnftables context kept open per node; a node seen first (a new node, a
restarted controller) gets its table whole. Up to :data:`SLOTS` backends of a Service
port take connections.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from netbay.dataplane import links, netns
from netbay.dataplane.nft import Nft
from netbay.drivers.node import BRIDGE

log = logging.getLogger(__name__)

TABLE = "netbay-k8s-proxy"
SLOTS = 64
NODEPORT_MARK = 0x4000
SIZE = 1 << 18          # service-backends: 4,096 Service ports × SLOTS
SMALL = 1 << 16


@dataclass(frozen=True)
class ServicePortRule:
    """One Service port as the nodes answer it."""
    key: str                                  # "ns/name/PROTO/port"
    cluster_ip: str
    protocol: str                             # "TCP" | "UDP"
    port: int
    backends: tuple[tuple[str, int], ...]     # (pod address, target port), sorted
    node_port: int | None = None
    external: tuple[str, ...] = ()            # externalIPs and the load-balancer address, sorted


Element = tuple[str, str]   # (map or set, key); an IPv6 rule's map or set is named "ip6:<name>"

V6 = "ip6:"   # the prefix of an IPv6 rule's maps and sets: they live in the ``ip6`` table


def is_v6(rule: ServicePortRule) -> bool:
    """Whether the rule answers an IPv6 cluster IP (its elements go to the ``ip6`` table)."""
    return ":" in rule.cluster_ip


def elements(rule: ServicePortRule) -> dict[Element, str | None]:
    """The rule's elements: (map or set, key) → value (None in a set)."""
    proto = rule.protocol.lower()
    at = V6 if is_v6(rule) else ""
    if not rule.backends:
        return {(f"{at}no-endpoints", f"{ip} . {proto} . {rule.port}"): None
                for ip in (rule.cluster_ip, *rule.external)}
    out: dict[Element, str | None] = {}
    for slot in range(SLOTS):
        ip, port = rule.backends[slot % len(rule.backends)]
        out[(f"{at}service-backends", f"{rule.cluster_ip} . {proto} . {rule.port} . {slot}")] = f"{ip} . {port}"
        if rule.node_port:
            out[(f"{at}nodeport-backends", f"{proto} . {rule.node_port} . {NODEPORT_MARK + slot:#x}")] = \
                f"{ip} . {port}"
        for ext in rule.external:
            out[(f"{at}external-backends", f"{ext} . {proto} . {rule.port} . {NODEPORT_MARK + slot:#x}")] = \
                f"{ip} . {port}"
    return out


def _skeleton(family: str = "ip") -> list[str]:
    """The table of one family (``ip``, or ``ip6`` on a dual-stack cluster): the same
    maps and chains, keyed on that family's addresses."""
    t = f"{family} {TABLE}"
    addr = "ipv6_addr" if family == "ip6" else "ipv4_addr"
    mark = f"{NODEPORT_MARK:#x}"
    return [
        f"add table {t}", f"delete table {t}", f"add table {t}",
        f"add map {t} service-backends {{ type {addr} . inet_proto . inet_service . mark : "
        f"{addr} . inet_service ; size {SIZE} ; }}",
        f"add map {t} nodeport-backends {{ type inet_proto . inet_service . mark : {addr} . inet_service ; "
        f"size {SIZE} ; }}",
        f"add map {t} external-backends {{ type {addr} . inet_proto . inet_service . mark : "
        f"{addr} . inet_service ; size {SMALL} ; }}",
        f"add set {t} no-endpoints {{ type {addr} . inet_proto . inet_service ; size {SMALL} ; }}",
        f"add set {t} hairpin {{ type {addr} . {addr} ; size {SMALL} ; }}",
        f"add chain {t} services",
        f"add rule {t} services {family} daddr . meta l4proto . th dport @no-endpoints drop",
        f"add rule {t} services meta mark set numgen random mod {SLOTS}",
        f"add rule {t} services dnat {family} to {family} daddr . meta l4proto . th dport . meta mark "
        "map @service-backends",
        f"add rule {t} services meta mark set 0",
        f"add chain {t} node-ports",
        f"add rule {t} node-ports meta mark set numgen random mod {SLOTS} offset {mark}",
        f"add rule {t} node-ports dnat {family} to meta l4proto . th dport . meta mark map @nodeport-backends",
        f"add rule {t} node-ports meta mark set 0",
        f"add chain {t} externals",
        f"add rule {t} externals meta mark set numgen random mod {SLOTS} offset {mark}",
        f"add rule {t} externals dnat {family} to {family} daddr . meta l4proto . th dport . meta mark "
        "map @external-backends",
        f"add rule {t} externals meta mark set 0",
        f"add chain {t} prerouting {{ type nat hook prerouting priority -100 ; policy accept ; }}",
        f"add rule {t} prerouting jump services",
        f"add rule {t} prerouting jump externals",
        f"add rule {t} prerouting fib daddr type local jump node-ports",
        f"add chain {t} output {{ type nat hook output priority -100 ; policy accept ; }}",
        f"add rule {t} output jump services",
        f"add rule {t} output jump externals",
        f"add rule {t} output fib daddr type local jump node-ports",
        f"add chain {t} postrouting {{ type nat hook postrouting priority 100 ; policy accept ; }}",
        f"add rule {t} postrouting meta mark and {mark} == {mark} masquerade",
        f'add rule {t} postrouting ct status dnat iifname "{BRIDGE}" oifname "{BRIDGE}" masquerade',
        f"add rule {t} postrouting ct status dnat {family} saddr . {family} daddr @hairpin masquerade",
    ]


def _hairpin(ips: Iterable[str]) -> dict[Element, str | None]:
    return {(f"{V6 if ':' in ip else ''}hairpin", f"{ip} . {ip}"): None for ip in ips}


def _grouped(verb: str, items: dict[Element, str | None]) -> list[str]:
    """One command per map or set: ``verb element ip T name { k : v, … }`` (``ip6`` for
    an IPv6 rule's)."""
    by: dict[str, list[str]] = {}
    for (name, key), value in sorted(items.items()):
        by.setdefault(name, []).append(key if value is None or verb == "delete" else f"{key} : {value}")
    return [f"{verb} element {'ip6' if name.startswith(V6) else 'ip'} {TABLE} {name.removeprefix(V6)} "
            f"{{ {', '.join(keys)} }}" for name, keys in by.items()]


def whole(rules: Mapping[str, ServicePortRule], ipv6: bool = False) -> list[str]:
    """The table holding ``rules``, made afresh (a node seen for the first time); with
    ``ipv6`` (a dual-stack cluster) the ``ip6`` table beside it."""
    items = {e: v for r in rules.values() for e, v in elements(r).items()}
    return _skeleton() + (_skeleton("ip6") if ipv6 else []) + _grouped("add", {**items, **_hairpin(ip for r in rules.values() for ip, _ in r.backends)})


def commands(before: Mapping[str, ServicePortRule], after: Mapping[str, ServicePortRule],
             backends: Counter[str] | None = None) -> list[str]:
    """The nft commands taking a node from ``before`` to ``after``: the elements that
    changed, every deletion first (a key one Service port gives up may be another's in
    the same transaction). ``backends``: how many Service ports use each backend address
    in ``before`` (counted here when not given), updated to ``after``'s — so a change
    costs the changed Service ports, not all of them."""
    if backends is None:
        backends = Counter(ip for r in before.values() for ip, _ in r.backends)
    gone: dict[Element, str | None] = {}
    new: dict[Element, str | None] = {}
    left: set[str] = set()
    came: set[str] = set()
    for key in before.keys() | after.keys():
        old_rule, new_rule = before.get(key), after.get(key)
        if old_rule is new_rule or old_rule == new_rule:
            continue
        old = elements(old_rule) if old_rule else {}
        now = elements(new_rule) if new_rule else {}
        gone.update({e: v for e, v in old.items() if e not in now or now[e] != v})
        new.update({e: v for e, v in now.items() if e not in old or old[e] != v})
        for ip, _ in old_rule.backends if old_rule else ():
            backends[ip] -= 1
            if backends[ip] == 0:
                left.add(ip)
        for ip, _ in new_rule.backends if new_rule else ():
            if backends[ip] == 0:
                came.add(ip)
            backends[ip] += 1
    gone.update(_hairpin(ip for ip in left - came if backends[ip] == 0))
    new.update(_hairpin(ip for ip in came - left if backends[ip] > 0))
    return _grouped("delete", gone) + _grouped("add", new)


class KubeProxy:
    """Keeps every node's table equal to the Service ports: the difference is worked out
    once per change and sent to every node that held the previous state; a node seen
    first gets its table whole."""

    def __init__(self, ipv6: bool = False) -> None:
        self.ipv6 = ipv6   # a dual-stack cluster's: the ``ip6`` table too
        self.rules: dict[str, ServicePortRule] = {}      # what every node in ``synced`` holds
        self.backends: Counter[str] = Counter()          # backend address → Service ports using it
        self.synced: set[str] = set()
        self._nft: dict[str, Nft] = {}   # a libnftables context per node, kept between passes

    def _context(self, ns: str) -> Nft:
        nft = self._nft.get(ns)
        if nft is None:
            nft = self._nft[ns] = Nft(ns)
        return nft

    def converge(self, node_namespaces: Iterable[str], rules: Iterable[ServicePortRule]) -> int:
        """Program each node; returns how many nodes changed."""
        want = {r.key: r for r in rules}
        counts = Counter(self.backends)
        delta = commands(self.rules, want, counts) if want != self.rules else []
        fresh: list[str] | None = None
        changed = 0
        for ns in node_namespaces:
            if not netns.exists(ns):
                self.synced.discard(ns)
                continue
            if ns in self.synced:
                todo = delta
            else:
                todo = fresh = fresh if fresh is not None else whole(want, self.ipv6)
                links.sysctl(ns, "net.ipv4.ip_forward", 1)   # the translated packet is forwarded
                if self.ipv6:
                    links.sysctl(ns, "net.ipv6.conf.all.forwarding", 1)
            if todo:
                try:
                    self._context(ns).run("\n".join(todo) + "\n")
                except Exception:
                    self.synced.clear()   # the nodes disagree now: each is rebuilt whole at the next pass
                    raise
                changed += 1
            self.synced.add(ns)
        self.rules, self.backends = want, counts
        return changed

    def remove(self, node_namespaces: Iterable[str]) -> None:
        """Drop the table from the nodes (the cluster's objects are gone)."""
        for ns in node_namespaces:
            self.synced.discard(ns)
            nft = self._nft.pop(ns, None)
            if nft is not None:
                nft.close()
            if not netns.exists(ns):
                continue
            with Nft(ns) as fresh:
                tables = fresh.tables()
                for family in ("ip", "ip6"):
                    if (family, TABLE) in tables:
                        fresh.run(f"delete table {family} {TABLE}")

    def close(self) -> None:
        for nft in self._nft.values():
            nft.close()
        self._nft.clear()


__all__ = ["KubeProxy", "NODEPORT_MARK", "SLOTS", "ServicePortRule", "TABLE", "V6", "commands", "elements", "is_v6",
           "whole"]
