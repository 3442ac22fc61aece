"""NetworkPolicy: handed to :mod:`netbay.k8s.policy` (its translation into security
groups is that package's job) when it is installed; a no-op hook otherwise."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class PolicyHook:
    def __init__(self, net: Any, cluster_id: str) -> None:   # a NetworkBackend
        try:
            from netbay.k8s import policy
        except ImportError:
            self.policy, self.engine = None, None
            return
        self.policy = policy
        tag = f"k8s-policy:{cluster_id}"
        self.engine = policy.PolicyEngine(net, tag=tag)
        # Until a cluster has a NetworkPolicy, every pod is open (the cluster's default-allow
        # group) and the engine makes nothing: its groups would only cost security-group quota.
        # Groups an earlier process made (it died, or its policies went meanwhile) engage it
        # at once: the first pass adopts them and deletes what nothing wants.
        self.engaged = bool(net.list("security_group", tags=tag))

    @property
    def active(self) -> bool:
        return self.engine is not None

    def sync(self, namespaces: dict[str, Any], pods: list[dict[str, Any]], policies: list[dict[str, Any]],
             services: list[dict[str, Any]], nodes: list[str], families: tuple[str, ...] = ("IPv4",)) -> int:
        """The whole cluster, as the translation's model takes it; the API calls made."""
        if self.engine is None or not (policies or self.engaged):
            return 0
        self.engaged = True
        from lightkube import codecs

        p = self.policy
        assert p is not None, "set together with the engine"
        cluster = p.Cluster.of(
            [p.Namespace(n, dict(labels)) for n, labels in namespaces.items()],
            [p.Pod(x["namespace"], x["name"], x["port_id"], x["ip"], dict(x["labels"]),
                   tuple(p.ContainerPort(k, v) for k, v in x["ports"].items())) for x in pods],
            [codecs.from_dict(b) for b in policies],
            [p.Service(s["namespace"], s["name"], s["cluster_ip"], dict(s["selector"]),
                       tuple(p.ServicePort(port, target, proto) for port, target, proto in s["ports"]),
                       tuple(s.get("more_ips") or ()))
             for s in services],
            nodes=nodes, families=families)
        return self.engine.sync(cluster)

    def close(self, delete: bool = False) -> None:
        if self.engine is not None:
            self.engine.close(delete=delete)
