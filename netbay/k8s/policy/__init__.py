"""Kubernetes NetworkPolicy on netbay security groups (issue 12, item 5).

For the mapping controller (``netbay/k8s/``), where a pod is a netbay port and a
namespace is a network::

    from netbay.k8s.policy import PolicyEngine, Cluster, Namespace, Pod, ContainerPort, Service

    engine = PolicyEngine(net, tag=f"k8s-policy:{cluster_id}")   # a netbay.backends.NetworkBackend
    engine.sync(Cluster.of(namespaces, pods, policies, services, nodes=["10.0.0.5/32"]))
    engine.on_pod(Pod("x", "a", port_id, "10.1.0.5", {"pod": "a"},
                      (ContainerPort("serve-80-tcp", 80, "TCP"),)))      # add or label change
    engine.on_namespace(Namespace("x", {"ns": "x"}))                   # label change
    engine.on_policy(policy)            # a lightkube networking_v1.NetworkPolicy
    engine.on_policy_deleted("x", "deny-all")
    engine.on_service(Service("x", "web", "10.96.0.10", {"app": "web"}, (ServicePort(80, 8080),)))
    engine.close(delete=True)           # cluster deletion: every group it made goes

Handlers return the number of API calls the change needed. ``sync`` after a restart
adopts the tagged groups by name and deletes the rest. Every pod port passed in is
managed: its ``security_groups`` are replaced by the engine's. A cluster needs a group
per policy and per distinct peer selector plus four, and a rule per (peer, port): raise
the project's ``security_group`` / ``security_group_rule`` quotas (Neutron's defaults,
10 and 100, fit a handful of policies; kuryr asked for ≥ 100 and 500). :func:`load_policies`
parses manifests with lightkube's codecs.

Semantics and how they map onto groups: :mod:`netbay.k8s.policy.translate`.
"""

from __future__ import annotations

from lightkube.codecs import load_all_yaml
from lightkube.models.networking_v1 import NetworkPolicy

from netbay.k8s.policy.engine import PolicyEngine
from netbay.k8s.policy.model import Cluster, ContainerPort, Namespace, Pod, Service, ServicePort
from netbay.k8s.policy.translate import translate


def load_policies(text: str) -> list[NetworkPolicy]:
    """The NetworkPolicy objects of a YAML manifest (other kinds are skipped)."""
    import lightkube.resources.networking_v1 as res  # registers the kinds with the codec

    return [obj for obj in load_all_yaml(text) if isinstance(obj, res.NetworkPolicy)]


__all__ = ["Cluster", "ContainerPort", "Namespace", "Pod", "PolicyEngine", "Service", "ServicePort",
           "load_policies", "translate"]
