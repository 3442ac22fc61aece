"""A node driver's IPv6 service range (``<driver>_service_cidr_ipv6``): its checks.

Kubernetes' second ``--service-cluster-ip-range``: /108 or longer (its allocator's
bitmap holds 2^20 addresses at most), apart from the pods' IPv6 network, and only
beside one (a dual-stack Service's IPv6 cluster IP needs pods with IPv6 addresses).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

# Kubernetes refuses a larger IPv6 service range (its allocator's bitmap: 2^20 addresses at most).
MAX_SERVICE_BITS_IPV6 = 20


def check(values: Mapping[str, str], service_key: str, pods_key: str) -> str | None:
    """Why label ``service_key`` (an IPv6 service range) cannot be used beside ``pods_key``
    (the driver's IPv6 pod network), or None."""
    service6, pods6 = values[service_key], values[pods_key]
    if not service6:
        return None
    if not pods6:
        return (f"Label {service_key}={service6} asks for dual-stack Services, whose IPv6 cluster IPs "
                f"lead to the pods' IPv6 addresses: set {pods_key} too (an IPv6 network), or neither.")
    return fits(service_key, service6, pods_key, pods6)


def fits(service_key: str, service6: str, pods_key: str, pods6: str) -> str | None:
    """Why IPv6 service range ``service6`` (label ``service_key``) cannot be used beside the
    pods' IPv6 network ``pods6`` (label ``pods_key``): too large, or overlapping it."""
    service, pods = ipaddress.ip_network(service6), ipaddress.ip_network(pods6)
    if service.max_prefixlen - service.prefixlen > MAX_SERVICE_BITS_IPV6:
        return (f"Label {service_key}={service} is too large: an IPv6 service range is "
                f"/{service.max_prefixlen - MAX_SERVICE_BITS_IPV6} or longer, as Kubernetes' "
                "--service-cluster-ip-range requires.")
    if pods.overlaps(service):
        return (f"Labels {pods_key}={pods} and {service_key}={service} overlap: cluster IPs and pod "
                "addresses must come from different ranges.")
    return None


__all__ = ["MAX_SERVICE_BITS_IPV6", "check", "fits"]
