"""The cluster's DNS records, as Kubernetes' DNS specification names them.

``<svc>.<ns>.svc.<domain>``: A → the cluster IP, or for a headless Service the
ready endpoints (its selected, plugged, Ready pods; without a selector its Endpoints'
addresses), each also named ``<a-b-c-d>.<svc>.<ns>.svc.<domain>``; SRV
``_<port>._<proto>.<svc>.<ns>.svc.<domain>`` for every named port, pointing at the
Service name (ClusterIP) or at each endpoint's name (headless). Names outside the
domain go to the upstream servers the file names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from netbay.k8s.dns.names import DOMAIN
from netbay.k8s.objects import Desired, ServiceWant, endpoint


def service_name(svc: ServiceWant, domain: str = DOMAIN) -> str:
    return f"{svc.name}.{svc.namespace}.svc.{domain}"


def endpoints(svc: ServiceWant, want: Desired, ports: Mapping[tuple[str, str], dict[str, Any]]) -> list[str]:
    """A headless Service's ready addresses, sorted."""
    if svc.selector is None:
        return sorted({ip for ip, _ in want.endpoints.get((svc.namespace, svc.name), [])})
    return sorted(port["fixed_ips"][0]["ip_address"] for (ns, name), port in ports.items()
                  if endpoint(svc, want.pods[(ns, name)]) and port.get("device_id"))


def build(want: Desired, ports: Mapping[tuple[str, str], dict[str, Any]],
          vips: Mapping[tuple[str, str], str], domain: str = DOMAIN,
          upstream: Sequence[str] = ()) -> dict[str, Any]:
    """``{"domain", "A": {name: [ip]}, "SRV": {name: [[priority, weight, port, target]]}, "upstream": [ip]}``
    (``upstream``: where the server forwards names outside ``domain``)."""
    a: dict[str, list[str]] = {}
    srv: dict[str, list[list[Any]]] = {}
    for key, svc in sorted(want.services.items()):
        name = service_name(svc, domain)
        if svc.headless:
            ips = endpoints(svc, want, ports)
            targets = [f"{ip.replace('.', '-')}.{name}" for ip in ips]
            for ip, target in zip(ips, targets):
                a[target] = [ip]
        elif key in vips:
            ips, targets = [vips[key]], [name]
        else:
            continue
        a[name] = ips
        for p in svc.ports:
            if p.name:
                srv[f"_{p.name}._{p.protocol.lower()}.{name}"] = [[0, 100, p.port, t] for t in targets]
    return {"domain": domain, "A": a, "SRV": srv, "upstream": list(upstream)}
