"""Cluster IPs on a flannel or calico cluster, of every IP family a Service has.

A node cluster's service ranges: Magnum's IPv4 ``service_cluster_ip_range`` and, on a
dual-stack cluster, the IPv6 range its driver's label names (``flannel_service_cidr_ipv6``,
``calico_service_cidr_ipv6``; the config's ``service6``). Each Service gets its families
as the API server resolves them (:func:`netbay.k8s.families.resolve`: ``ipFamilyPolicy``,
``ipFamilies``, ``clusterIPs``), and of each family its given address or one from that
family's range by a hash of its name probed to the first free address — stable while
the Services around it change; each range's first ten addresses stay free (DNS).
"""

from __future__ import annotations

import ipaddress
import logging
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from netbay.k8s.families import FamilyError, family_of, resolve
from netbay.k8s.objects import Desired, ServiceWant

log = logging.getLogger(__name__)

SERVICE_RANGE = "10.254.0.0/16"   # Magnum's default service_cluster_ip_range for kubernetes
IPV4_ONLY = ("IPv4",)


def families_of(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The cluster's IP families from its driver's stored config (IPv4 first)."""
    return ("IPv4", "IPv6") if config.get("service6") else IPV4_ONLY


def ranges_of(config: Mapping[str, Any], service_range: str = SERVICE_RANGE) -> dict[str, str]:
    """Family → the service range its cluster IPs come from."""
    out = {"IPv4": service_range}
    if config.get("service6"):
        out["IPv6"] = str(config["service6"])
    return out


def label_of(driver: str) -> str:
    """The label that makes a ``driver`` cluster's Services dual-stack (for refusals)."""
    return f"{driver}_service_cidr_ipv6"


def service_families(svc: ServiceWant, families: Sequence[str], label: str = "") -> tuple[str, ...]:
    """The families ``svc`` gets cluster IPs of, primary first (:class:`FamilyError`). A
    Service that says nothing of families on an IPv4 cluster costs no resolution (the
    common case, on every pass)."""
    if (tuple(families) == IPV4_ONLY and not svc.ip_families and svc.ip_family_policy is None
            and all("." in ip for ip in svc.cluster_ips)):
        return IPV4_ONLY
    return resolve(svc, families, label) if label else resolve(svc, families)


def allocate(want: Desired, ranges: Mapping[str, str], label: str = "") -> dict[tuple[str, str], tuple[str, ...]]:
    """Each non-headless Service with ports → its cluster IPs, primary first. A Service
    whose families the cluster cannot give is left out (the manifest source refused it;
    a watched one is logged). A pinned IPv4 Service that says nothing of families (every
    Service of an IPv4 cluster once allocated) costs one look: a pass visits them all."""
    families = tuple(f for f in ("IPv4", "IPv6") if f in ranges)
    plain = families == IPV4_ONLY
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    taken: set[str] = set()
    pending = []
    for key, svc in want.services.items():
        ip, ips = svc.cluster_ip, svc.cluster_ips
        if ip == "None":   # headless
            continue
        if ip:
            taken.update(ips)
        if not svc.ports:
            continue
        if plain and ip and len(ips) == 1 and "." in ip and not svc.ip_families and svc.ip_family_policy is None:
            out[key] = ips
        else:
            pending.append(key)
    nets = {family: ipaddress.ip_network(cidr) for family, cidr in ranges.items()}
    for key in sorted(pending):
        svc = want.services[key]
        try:
            asked = service_families(svc, families, label)
        except FamilyError as exc:
            log.warning("k8s: %s", exc)
            continue
        given = {family_of(ip): ip for ip in svc.cluster_ips if ip != "None"}
        got = tuple(given.get(family) or _free(nets[family], key, taken) for family in asked)
        out[key] = tuple(ip for ip in got if ip)
    return out


def pinned(spec: Mapping[str, Any], ips: Sequence[str]) -> dict[str, Any]:
    """A Service's ``spec`` with its cluster IPs written in (``clusterIPs`` too where it has
    more than one, or had the field), as the API server stores them."""
    out = {**spec, "clusterIP": ips[0]}
    if len(ips) > 1 or spec.get("clusterIPs"):
        out["clusterIPs"] = list(ips)
    return out


def _free(net: ipaddress.IPv4Network | ipaddress.IPv6Network, key: tuple[str, str], taken: set[str]) -> str:
    """An address of ``net`` by a hash of the Service's name, probed to the first free one
    ("" when the range is full)."""
    span = min(net.num_addresses - 12, 1 << 32)
    start = zlib.crc32(f"{key[0]}/{key[1]}".encode()) % span
    for i in range(span):
        ip = str(net.network_address + 11 + (start + i) % span)
        if ip not in taken:
            taken.add(ip)
            return ip
    return ""


__all__ = ["IPV4_ONLY", "SERVICE_RANGE", "allocate", "families_of", "label_of", "pinned", "ranges_of",
           "service_families"]
