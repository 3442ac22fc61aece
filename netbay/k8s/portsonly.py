"""The pod runtime where netbay has no dataplane: the pod's port is all there is.

On a cloud's Neutron netbay's kernel dataplane does not wire ports (the cloud's own
agents would, where it has them; the test cloud has none), so sandboxes — network
namespaces plugged into netbay's local fabric — are an embedded-only runtime. Here
a pod is realized as kuryr's controller left it for the kubelet's CNI: a port on its
namespace's network, ``device_owner=compute:kuryr``, bound to its node
(``binding:host_id``) with a device id, in the pod security groups; nothing is
plugged on this host. So nothing local follows the pods either — no cluster DNS
resolver, no resolv.conf or Service variables, no node-port tables: those need the
node runtime that plugs the port.
"""

from __future__ import annotations

from typing import Any


class BoundPorts:
    """Same calls as :class:`netbay.k8s.sandbox.PodSandboxes`, none of them local."""

    local = False   # no pod lives on this host: ports are bound to their nodes

    def ns(self, port_id: str) -> str:
        return ""

    def existing(self) -> set[str]:
        return set()

    def plugged(self, port_id: str) -> bool:
        return True   # a bound port is a realized pod here

    def plug(self, port: Any) -> str:
        return ""

    def ensure_network(self, network_id: str, mtu: int) -> None:
        return None

    def unplug(self, port_id: str) -> None:
        return None


class NoDiscovery:
    """Cluster DNS and Service variables need pods on this host: none here."""

    def before_services(self, want: Any, full: bool) -> None:
        return None

    def after_services(self, want: Any, ports: Any, vips: Any) -> None:
        return None


__all__ = ["BoundPorts", "NoDiscovery"]
