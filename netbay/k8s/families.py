"""A Service's IP families: Kubernetes' ``ipFamilyPolicy`` / ``ipFamilies`` rules.

The API server's defaulting and validation (``pkg/registry/core/service``), against
the cluster's families (``ClusterRefs.families``: IPv4, or IPv4 and IPv6 for a
dual-stack kuryr cluster; a flannel or calico cluster's, :mod:`netbay.k8s.nodeips`): no policy is ``SingleStack`` unless two families or two
cluster IPs are given (then ``RequireDualStack``); ``PreferDualStack`` gets both
families where the cluster has them, one where it has one; ``RequireDualStack`` on a
single-stack cluster, a family the cluster has not, ``SingleStack`` with two
families, are refused with Kubernetes' messages. Each family gets a cluster IP (a load
balancer's VIP on that family's service subnet, :mod:`netbay.k8s.services`).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence

from netbay.k8s.objects import ServiceWant

POLICIES = ("SingleStack", "PreferDualStack", "RequireDualStack")
FAMILIES = ("IPv4", "IPv6")


class FamilyError(ValueError):
    """A Service's families the cluster cannot give it (the message: Kubernetes' field error)."""


@functools.lru_cache(maxsize=1 << 16)
def family_of(address: str) -> str:
    """"IPv4" or "IPv6" for an address (cached: every pass asks it of every cluster IP and
    endpoint, and ``ipaddress`` parses at some 20 µs a call)."""
    return "IPv6" if ipaddress.ip_address(address).version == 6 else "IPv4"


def address_of(port: dict, family: str) -> tuple[str, str] | None:
    """(address, subnet id) of ``port``'s first fixed IP of ``family``, or None."""
    for fixed in port.get("fixed_ips") or ():
        if family_of(fixed["ip_address"]) == family:
            return fixed["ip_address"], fixed["subnet_id"]
    return None


def resolve(svc: ServiceWant, cluster: Sequence[str], label: str = "kuryr_service_cidr_ipv6") -> tuple[str, ...]:
    """The families ``svc`` gets cluster IPs of, primary first (:class:`FamilyError`);
    ``label``: the one that makes the cluster dual-stack (named in the refusal)."""
    where = f"Service {svc.namespace}/{svc.name}"

    def refuse(text: str) -> FamilyError:
        return FamilyError(f"{where}: {text}")

    policy = svc.ip_family_policy
    if policy is not None and policy not in POLICIES:
        raise refuse(f'spec.ipFamilyPolicy: Unsupported value: "{policy}": supported values: '
                     + ", ".join(f'"{p}"' for p in sorted(POLICIES)))
    asked: list[str] = []
    for i, family in enumerate(svc.ip_families):
        if family not in FAMILIES:
            raise refuse(f'spec.ipFamilies[{i}]: Unsupported value: "{family}": supported values: "IPv4", "IPv6"')
        if family in asked:
            raise refuse(f'spec.ipFamilies[{i}]: Duplicate value: "{family}"')
        asked.append(family)
    ips = [ip for ip in svc.cluster_ips if ip != "None"]
    for i, ip in enumerate(ips):
        family = family_of(ip)
        if i < len(asked) and asked[i] != family:
            raise refuse(f'spec.ipFamilies[{i}]: Invalid value: "{asked[i]}": must match the family of '
                         f"spec.clusterIPs[{i}] ({ip}, {family})")
        if i >= len(asked):
            asked.append(family)
    if len(set(map(family_of, ips))) < len(ips):
        raise refuse(f"spec.clusterIPs: Invalid value: {ips}: may specify no more than one IP for each IP family")
    if policy is None:
        policy = "RequireDualStack" if len(asked) == 2 else "SingleStack"
    if policy == "SingleStack" and len(asked) > 1:
        raise refuse('spec.ipFamilyPolicy: Invalid value: "SingleStack": must be \'RequireDualStack\' or '
                     "'PreferDualStack' when multiple 'ipFamilies' are specified")
    if policy == "RequireDualStack" and len(cluster) < 2:
        raise refuse('spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured '
                      "for dual-stack services (its network driver has no IPv6 service range: label "
                      f"{label})")
    for i, family in enumerate(asked):
        if family not in cluster:
            raise refuse(f'spec.ipFamilies[{i}]: Invalid value: "{family}": not configured on this cluster '
                         f"(its service range is {'/'.join(cluster)} only)")
    if not asked:
        asked = [cluster[0]]
    if policy != "SingleStack" and len(asked) == 1 and len(cluster) == 2:
        asked.append(next(f for f in cluster if f != asked[0]))
    return tuple(asked)


__all__ = ["FAMILIES", "POLICIES", "FamilyError", "address_of", "family_of", "resolve"]
