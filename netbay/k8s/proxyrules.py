"""Service ports as every node of a flannel or calico cluster answers them (kube-proxy's input).

:func:`proxy_rules` turns the desired Services into :class:`~netbay.k8s.kubeproxy.ServicePortRule`
objects: a cluster IP, its node ports and further addresses (``externalIPs``, a
LoadBalancer Service's address) in front of the ready pods. A :class:`RulesMemo` kept
between passes makes a pass cost the Services that changed: an unchanged Service keeps
its very rule objects, which :func:`netbay.k8s.kubeproxy.commands` passes over at once.
:func:`cluster_ips` gives each Service the address its rules answer on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netbay.k8s import nodeports, objects, services
from netbay.k8s.families import family_of
from netbay.k8s.kubeproxy import ServicePortRule
from netbay.k8s.nodeips import SERVICE_RANGE, allocate
from netbay.k8s.objects import Desired



def external_addresses(svc: objects.ServiceWant, family: str = "IPv4") -> tuple[str, ...]:
    """Where else the nodes answer a Service (of ``family``): its ``externalIPs`` and, of a
    LoadBalancer Service, ``spec.loadBalancerIP`` — on a node cluster no load balancer
    stands in front: kube-proxy answers the address on every node, as it does a cloud
    load balancer's."""
    lb = [svc.load_balancer_ip] if svc.type == "LoadBalancer" and svc.load_balancer_ip else []
    v6 = family == "IPv6"
    return tuple(sorted({a for a in (*svc.external_ips, *lb) if (":" in a) == v6}))


@dataclass
class RulesMemo:
    """:func:`proxy_rules`' answer per Service, kept between passes: valid while the
    Service object (``objects.desired``'s memo keeps an unchanged one), its cluster IP
    and node ports, and the pods, Endpoints and addresses it was worked out from stay."""
    basis: tuple[Any, ...] = ()
    rules: dict[tuple[str, str], tuple[Any, ...]] = dataclasses.field(default_factory=dict)


def proxy_rules(want: Desired, vips: Mapping[tuple[str, str], str],
                addresses: Mapping[tuple[str, str], str], memo: RulesMemo | None = None, *,
                more_ips: Mapping[tuple[str, str], tuple[str, ...]] | None = None,
                addresses6: Mapping[tuple[str, str], str] | None = None) -> list[ServicePortRule]:
    """Every Service port as the nodes answer it: backends are the ready pods (the
    kuryr path's :func:`netbay.k8s.services.members`), node ports as kuryr numbers them.
    With ``memo``, a Service unchanged since the last pass keeps its rules (the same
    objects: the proxy's diff passes over them at once). Dual-stack: ``more_ips`` holds a
    Service's every cluster IP (primary first; the primary is ``vips``'), each answered by
    a rule of its own (key ``…@IPv6``) whose backends are the pods' addresses of its family
    (``addresses6``: the pods' IPv6 addresses), its node ports the primary's."""
    memo = memo if memo is not None else RulesMemo()
    more_ips, addresses6 = more_ips or {}, addresses6 or {}
    basis = (want.pods, want.endpoints, dict(addresses), dict(addresses6))
    if memo.basis != basis:
        memo.basis, memo.rules = basis, {}
    ports = {key: {"fixed_ips": [{"ip_address": ip, "subnet_id": ""},
                                 *([{"ip_address": addresses6[key], "subnet_id": ""}] if key in addresses6 else [])]}
             for key, ip in addresses.items()}
    node_ports = {(ip, port, proto): node_port for proto, node_port, ip, port in nodeports.plan(want, vips)}
    out = []
    kept: dict[tuple[str, str], tuple[Any, ...]] = {}
    seen: dict[tuple, tuple[tuple[str, int], ...]] = {}   # Services selecting alike share their backends
    for key, svc in want.services.items():   # order is no matter: the proxy keys its rules
        if key not in vips:
            continue
        vip = vips[key]
        nps = tuple(node_ports.get((vip, sp.port, sp.protocol)) for sp in svc.ports) if node_ports \
            else (None,) * len(svc.ports)
        ips = more_ips.get(key) or (vip,)
        hit = memo.rules.get(key)
        if hit is not None and hit[0] is svc and hit[1] == ips and hit[2] == nps:
            kept[key] = hit
            out += hit[3]
            continue
        mine = []
        for ip in ips:
            family = family_of(ip)
            at = "" if family == "IPv4" else f"@{family}"
            for sp, node_port in zip(svc.ports, nps):
                alike = (svc.namespace, tuple(sorted((svc.selector or {}).items())), svc.publish_not_ready,
                         sp.name, sp.target, family) if svc.selector else None
                backends = seen.get(alike) if alike else None
                if backends is None:
                    backends = tuple((m["address"], m["protocol_port"])
                                     for m in services.members(svc, sp, want, ports, family))
                    if alike:
                        seen[alike] = backends
                mine.append(ServicePortRule(f"{key[0]}/{key[1]}/{sp.protocol}/{sp.port}{at}", ip, sp.protocol,
                                            sp.port, backends, node_port, external_addresses(svc, family)))
        kept[key] = (svc, ips, nps, mine)
        out += mine
    memo.rules = kept
    return out


__all__ = ["RulesMemo", "external_addresses", "proxy_rules"]


def cluster_ips(want: Desired, service_range: str = SERVICE_RANGE) -> dict[tuple[str, str], str]:
    """Each non-headless Service's cluster IP on an IPv4 cluster: its ``spec.clusterIP``,
    else one from the range (:func:`netbay.k8s.nodeips.allocate`)."""
    return {key: ips[0] for key, ips in allocate(want, {"IPv4": service_range}).items()}
