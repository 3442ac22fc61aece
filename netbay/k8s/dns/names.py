"""What a pod is told of its cluster's DNS, in one place: the domain, the search list
and options (Kubernetes' ClusterFirst policy), and the tag that finds the resolver's
port. Standard library only: the CNI daemon reads it for every ADD's ``dns``."""

from __future__ import annotations

from collections.abc import Sequence

DOMAIN = "cluster.local"
OPTIONS = ("ndots:5",)           # short names try the search list first, as kubelet writes it
RESOLVER_TAG = "netbay-k8s=dns"  # on the resolver's port, beside the cluster's tag


def search(namespace: str, domain: str = DOMAIN) -> list[str]:
    """A pod's search list: its namespace's Services, every Service, the domain."""
    return [f"{namespace}.svc.{domain}", f"svc.{domain}", domain]


def cni_dns(nameservers: Sequence[str], namespace: str | None, domain: str = DOMAIN) -> dict[str, object]:
    """The CNI result's ``dns`` for a pod of the cluster (its namespace unknown: the
    search list starts at the Services). ``nameservers``: the resolver's addresses,
    IPv4 first (a dual-stack cluster's resolver answers on both, as a dual-stack
    ``kube-dns`` Service does)."""
    return {"nameservers": list(nameservers), "domain": domain,
            "search": search(namespace, domain) if namespace else search("", domain)[1:],
            "options": list(OPTIONS)}


__all__ = ["DOMAIN", "OPTIONS", "RESOLVER_TAG", "cni_dns", "search"]
