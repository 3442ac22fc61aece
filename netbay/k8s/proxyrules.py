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
import ipaddress
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netbay.k8s import nodeports, objects, services
from netbay.k8s.kubeproxy import ServicePortRule
from netbay.k8s.objects import Desired

SERVICE_RANGE = "10.254.0.0/16"   # Magnum's default service_cluster_ip_range for kubernetes


def external_addresses(svc: objects.ServiceWant) -> tuple[str, ...]:
    """Where else the nodes answer a Service (IPv4): its ``externalIPs`` and, of a
    LoadBalancer Service, ``spec.loadBalancerIP`` — on a node cluster no load balancer
    stands in front: kube-proxy answers the address on every node, as it does a cloud
    load balancer's."""
    lb = [svc.load_balancer_ip] if svc.type == "LoadBalancer" and svc.load_balancer_ip else []
    return tuple(sorted({a for a in (*svc.external_ips, *lb) if ":" not in a}))


@dataclass
class RulesMemo:
    """:func:`proxy_rules`' answer per Service, kept between passes: valid while the
    Service object (``objects.desired``'s memo keeps an unchanged one), its cluster IP
    and node ports, and the pods, Endpoints and addresses it was worked out from stay."""
    basis: tuple[Any, ...] = ()
    rules: dict[tuple[str, str], tuple[Any, ...]] = dataclasses.field(default_factory=dict)


def proxy_rules(want: Desired, vips: Mapping[tuple[str, str], str],
                addresses: Mapping[tuple[str, str], str], memo: RulesMemo | None = None) -> list[ServicePortRule]:
    """Every Service port as the nodes answer it: backends are the ready pods (the
    kuryr path's :func:`netbay.k8s.services.members`), node ports as kuryr numbers them.
    With ``memo``, a Service unchanged since the last pass keeps its rules (the same
    objects: the proxy's diff passes over them at once)."""
    memo = memo if memo is not None else RulesMemo()
    basis = (want.pods, want.endpoints, dict(addresses))
    if memo.basis != basis:
        memo.basis, memo.rules = basis, {}
    ports = {key: {"fixed_ips": [{"ip_address": ip, "subnet_id": ""}]} for key, ip in addresses.items()}
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
        hit = memo.rules.get(key)
        if hit is not None and hit[0] is svc and hit[1] == vip and hit[2] == nps:
            kept[key] = hit
            out += hit[3]
            continue
        mine = []
        for sp, node_port in zip(svc.ports, nps):
            alike = (svc.namespace, tuple(sorted((svc.selector or {}).items())), svc.publish_not_ready,
                     sp.name, sp.target) if svc.selector else None
            backends = seen.get(alike) if alike else None
            if backends is None:
                backends = tuple((m["address"], m["protocol_port"]) for m in services.members(svc, sp, want, ports))
                if alike:
                    seen[alike] = backends
            mine.append(ServicePortRule(f"{key[0]}/{key[1]}/{sp.protocol}/{sp.port}", vip, sp.protocol,
                                        sp.port, backends, node_port, external_addresses(svc)))
        kept[key] = (svc, vip, nps, mine)
        out += mine
    memo.rules = kept
    return out


__all__ = ["RulesMemo", "external_addresses", "proxy_rules"]


def cluster_ips(want: Desired, service_range: str = SERVICE_RANGE) -> dict[tuple[str, str], str]:
    """Each non-headless Service's cluster IP: its ``spec.clusterIP``, else one from the
    range by a hash of its name probed to the first free address (stable while the
    Services around it change; the range's first ten addresses stay free, as for DNS)."""
    net = ipaddress.ip_network(service_range)
    out = {key: svc.cluster_ip for key, svc in want.services.items()
           if svc.cluster_ip and svc.ports and not svc.headless}
    taken = {svc.cluster_ip for svc in want.services.values() if svc.cluster_ip and not svc.headless}
    span = net.num_addresses - 12
    for key in sorted(k for k, s in want.services.items() if not s.cluster_ip and s.ports):
        start = zlib.crc32(f"{key[0]}/{key[1]}".encode()) % span
        for i in range(span):
            ip = str(net.network_address + 11 + (start + i) % span)
            if ip not in taken:
                taken.add(ip)
                out[key] = ip
                break
    return out
