"""The cluster's DNS records, as Kubernetes' DNS specification names them.

``<svc>.<ns>.svc.<domain>``: A → the cluster IP, or for a headless Service the
ready endpoints (its selected, plugged, Ready pods; without a selector its Endpoints'
addresses), each also named ``<a-b-c-d>.<svc>.<ns>.svc.<domain>``; SRV
``_<port>._<proto>.<svc>.<ns>.svc.<domain>`` for every named port, pointing at the
Service name (ClusterIP) or at each endpoint's name (headless). A dual-stack
Service's name also has AAAA → its IPv6 cluster IP (a headless one's: its
endpoints' IPv6 addresses). Names outside the domain go to the upstream servers the
file names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from netbay.k8s.dns.names import DOMAIN
from netbay.k8s.families import family_of
from netbay.k8s.objects import Desired, ServiceWant, endpoint


def service_name(svc: ServiceWant, domain: str = DOMAIN) -> str:
    return f"{svc.name}.{svc.namespace}.svc.{domain}"


def endpoints(svc: ServiceWant, want: Desired, ports: Mapping[tuple[str, str], dict[str, Any]],
              family: str = "IPv4") -> list[str]:
    """A headless Service's ready addresses of ``family``, sorted."""
    if svc.selector is None:
        return sorted({ip for ip, _ in want.endpoints.get((svc.namespace, svc.name), []) if family_of(ip) == family})
    return sorted(fixed["ip_address"] for (ns, name), port in ports.items()
                  if endpoint(svc, want.pods[(ns, name)]) and port.get("device_id")
                  for fixed in port.get("fixed_ips") or () if family_of(fixed["ip_address"]) == family)


def build(want: Desired, ports: Mapping[tuple[str, str], dict[str, Any]],
          vips: Mapping[tuple[str, str], str], domain: str = DOMAIN,
          upstream: Sequence[str] = (),
          cluster_ips: Mapping[tuple[str, str], Sequence[str]] | None = None) -> dict[str, Any]:
    """``{"domain", "A": {name: [ip]}, "AAAA": {name: [ip]}, "SRV": {name: [[priority, weight, port,
    target]]}, "upstream": [ip]}`` (``upstream``: where the server forwards names outside
    ``domain``; ``cluster_ips``: every family's cluster IPs, where a Service has more than ``vips``'s)."""
    a: dict[str, list[str]] = {}
    aaaa: dict[str, list[str]] = {}
    srv: dict[str, list[list[Any]]] = {}
    for key, svc in sorted(want.services.items()):
        name = service_name(svc, domain)
        if svc.headless:
            ips, ips6 = endpoints(svc, want, ports), endpoints(svc, want, ports, "IPv6")
            targets = [f"{ip.replace('.', '-')}.{name}" for ip in ips]
            for ip, target in zip(ips, targets):
                a[target] = [ip]
        elif key in vips:
            every = list((cluster_ips or {}).get(key) or [vips[key]])
            ips = [ip for ip in every if family_of(ip) == "IPv4"]
            ips6 = [ip for ip in every if family_of(ip) == "IPv6"]
            targets = [name]
        else:
            continue
        if ips or not ips6:   # (a headless Service without endpoints: an empty A, as before)
            a[name] = ips
        if ips6:
            aaaa[name] = ips6
        for p in svc.ports:
            if p.name:
                srv[f"_{p.name}._{p.protocol.lower()}.{name}"] = [[0, 100, p.port, t] for t in targets]
    out = {"domain": domain, "A": a, "SRV": srv, "upstream": list(upstream)}
    if aaaa:   # only then: an IPv4 cluster's records stay as they were
        out["AAAA"] = aaaa
    return out
