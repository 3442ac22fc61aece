"""Services on every node of a flannel or calico cluster: kube-proxy's job, in nftables.

What kube-proxy's nftables mode programs, in each node's namespace (one table,
``ip netbay-k8s-proxy``), through libnftables in-process (no ``nft`` fork):

* ``service-ips`` — one verdict map of ``cluster IP . protocol . port`` → the
  Service port's chain; ``node-ports`` — ``protocol . nodePort`` → the same chain
  (node ports numbered by :func:`netbay.k8s.nodeports.plan`, as on a kuryr cluster);
* a chain per Service port: ``dnat to numgen random mod N map { i : backend . port }``
  (no backend: ``drop``, nothing answers);
* the hooks: ``prerouting`` (pods' traffic, and node ports on the node's own
  addresses) and ``output`` (the node's own) look up the maps; ``postrouting``
  masquerades what came in through a node port (the reply must come back through the
  node that translated it), what a bridged pod sent to a Service whose backend
  is on its own bridge (else the reply would be bridged past the translation), and a
  pod reaching itself through its Service (``hairpin``: each backend's ``addr . addr``;
  a packet from a pod's own address would be a martian to it).

A change costs one transaction per node and only the elements and chains of the
Service ports that changed (:meth:`KubeProxy.converge` diffs against what it applied),
so a Service's cluster IP answers in the same time with 10 Services or 1,000; a node
seen for the first time (a new node, a restarted controller) gets its table whole.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from netbay.dataplane import links, netns
from netbay.dataplane.nft import Nft
from netbay.drivers.node import BRIDGE

log = logging.getLogger(__name__)

TABLE = "netbay-k8s-proxy"
NODEPORT_MARK = 0x4000


@dataclass(frozen=True)
class ServicePortRule:
    """One Service port as the nodes answer it."""
    key: str                                  # "ns/name/PROTO/port": names its chain
    cluster_ip: str
    protocol: str                             # "TCP" | "UDP"
    port: int
    backends: tuple[tuple[str, int], ...]     # (pod address, target port), sorted
    node_port: int | None = None

    @property
    def chain(self) -> str:
        return "s-" + hashlib.sha1(self.key.encode()).hexdigest()[:16]


def _chain_body(rule: ServicePortRule) -> str:
    proto = rule.protocol.lower()
    if not rule.backends:
        return "drop"
    targets = ", ".join(f"{i} : {ip} . {port}" for i, (ip, port) in enumerate(rule.backends))
    return f"meta l4proto {proto} dnat ip to numgen random mod {len(rule.backends)} map {{ {targets} }}"


def _elements(rule: ServicePortRule) -> list[tuple[str, str]]:
    """(map, element) pairs pointing at the rule's chain."""
    proto = rule.protocol.lower()
    out = [("service-ips", f"{rule.cluster_ip} . {proto} . {rule.port} : goto {rule.chain}")]
    if rule.node_port:
        out.append(("node-ports", f"{proto} . {rule.node_port} : goto {rule.chain}"))
    return out


def _keys(rule: ServicePortRule) -> list[tuple[str, str]]:
    return [(m, e.split(" : ")[0]) for m, e in _elements(rule)]


def _skeleton() -> list[str]:
    t = f"ip {TABLE}"
    return [
        f"add table {t}", f"delete table {t}", f"add table {t}",
        f"add map {t} service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict ; }}",
        f"add map {t} node-ports {{ type inet_proto . inet_service : verdict ; }}",
        f"add set {t} hairpin {{ type ipv4_addr . ipv4_addr ; }}",
        f"add chain {t} node-ports-in",
        f"add rule {t} node-ports-in meta mark set mark or {NODEPORT_MARK:#x}",
        f"add rule {t} node-ports-in meta l4proto . th dport vmap @node-ports",
        f"add rule {t} node-ports-in meta mark set mark and {~NODEPORT_MARK & 0xffffffff:#x}",
        f"add chain {t} prerouting {{ type nat hook prerouting priority -100 ; policy accept ; }}",
        f"add rule {t} prerouting ip daddr . meta l4proto . th dport vmap @service-ips",
        f"add rule {t} prerouting fib daddr type local jump node-ports-in",
        f"add chain {t} output {{ type nat hook output priority -100 ; policy accept ; }}",
        f"add rule {t} output ip daddr . meta l4proto . th dport vmap @service-ips",
        f"add chain {t} postrouting {{ type nat hook postrouting priority 100 ; policy accept ; }}",
        f"add rule {t} postrouting meta mark and {NODEPORT_MARK:#x} == {NODEPORT_MARK:#x} masquerade",
        f'add rule {t} postrouting ct status dnat iifname "{BRIDGE}" oifname "{BRIDGE}" masquerade',
        f"add rule {t} postrouting ct status dnat ip saddr . ip daddr @hairpin masquerade",
    ]


def _backend_ips(rules: Iterable[ServicePortRule]) -> set[str]:
    return {ip for r in rules for ip, _ in r.backends}


def _hairpin(verb: str, ips: Iterable[str]) -> list[str]:
    ips = sorted(ips)
    return [f"{verb} element ip {TABLE} hairpin {{ {', '.join(f'{ip} . {ip}' for ip in ips)} }}"] if ips else []


def _add(rule: ServicePortRule) -> list[str]:
    t = f"ip {TABLE}"
    return [f"add chain {t} {rule.chain}", f"add rule {t} {rule.chain} {_chain_body(rule)}",
            *(f"add element {t} {m} {{ {e} }}" for m, e in _elements(rule))]


def _remove(rule: ServicePortRule) -> list[str]:
    t = f"ip {TABLE}"
    return [*(f"delete element {t} {m} {{ {k} }}" for m, k in _keys(rule)), f"delete chain {t} {rule.chain}"]


def commands(before: Mapping[str, ServicePortRule] | None, after: Mapping[str, ServicePortRule]) -> list[str]:
    """The nft commands taking a node from ``before`` (None: unknown, rebuild) to ``after``."""
    if before is None:
        return _skeleton() + [c for key in sorted(after) for c in _add(after[key])] + \
            _hairpin("add", _backend_ips(after.values()))
    t = f"ip {TABLE}"
    had, has = _backend_ips(before.values()), _backend_ips(after.values())
    # every deletion before any addition: a cluster IP or node port one Service port
    # gives up may be another's in the same transaction
    out: list[str] = _hairpin("delete", had - has)
    adds: list[str] = []
    for key in sorted(before.keys() - after.keys()):
        out += _remove(before[key])
    for key in sorted(after):
        new, old = after[key], before.get(key)
        if old is None:
            adds += _add(new)
        elif old != new:
            if _elements(old) != _elements(new):
                out += [f"delete element {t} {m} {{ {k} }}" for m, k in _keys(old)]
                adds += [f"add element {t} {m} {{ {e} }}" for m, e in _elements(new)]
            if old.backends != new.backends:
                out += [f"flush chain {t} {new.chain}", f"add rule {t} {new.chain} {_chain_body(new)}"]
    return out + adds + _hairpin("add", has - had)


class KubeProxy:
    """Keeps every node's table equal to the Service ports (only the difference is sent)."""

    def __init__(self) -> None:
        self.applied: dict[str, dict[str, ServicePortRule]] = {}

    def converge(self, node_namespaces: Iterable[str], rules: Iterable[ServicePortRule]) -> int:
        """Program each node; returns how many nodes changed."""
        want = {r.key: r for r in rules}
        changed = 0
        for ns in node_namespaces:
            before = self.applied.get(ns)
            if before == want or not netns.exists(ns):
                continue
            todo = commands(before, want)
            if todo:
                if before is None:
                    links.sysctl(ns, "net.ipv4.ip_forward", 1)   # the translated packet is forwarded
                with Nft(ns) as nft:
                    nft.run("\n".join(todo) + "\n")
                changed += 1
            self.applied[ns] = dict(want)
        return changed

    def remove(self, node_namespaces: Iterable[str]) -> None:
        """Drop the table from the nodes (the cluster's last Service went, or the cluster)."""
        for ns in node_namespaces:
            self.applied.pop(ns, None)
            if not netns.exists(ns):
                continue
            with Nft(ns) as nft:
                if ("ip", TABLE) in nft.tables():
                    nft.run(f"delete table ip {TABLE}")


__all__ = ["KubeProxy", "NODEPORT_MARK", "ServicePortRule", "TABLE", "commands"]
