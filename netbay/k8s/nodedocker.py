"""Docker-runtime pods on a flannel or calico cluster: the kuryr path's
:class:`netbay.k8s.dockerpods.DockerPods`, run against the node cluster's wiring.

A pod with the annotation ``netbay.io/runtime: docker`` runs whole, as on a kuryr
cluster (sandbox, init containers in order, every container joined to the sandbox:
:mod:`.podrun`); what differs is only where its network comes from. Its netbay pod is
made with ``runtime: docker`` — an address from its node's lease, which the agent
leaves unplugged (a runtime plugs it) — and :class:`NodeSandboxes` gives DockerPods
the interface of :class:`netbay.k8s.sandbox.PodSandboxes`: the sandbox container's
namespace is named ``<prefix>p-<pod id>`` (the netbay pod's namespace, so policy,
``netbay k8s exec`` and DNS files find it as a sandbox pod's) and plugged into its node
by the cluster's driver (``attach_pod``: flannel's bridge, calico's routed veth), as the
agent plugs a network-only pod. :func:`as_ports` shapes the netbay pods as DockerPods
reads a kuryr pod's port and segment.
"""

from __future__ import annotations

import ipaddress
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.dataplane.rtnl import rtnl
from netbay.drivers import pods as podlinks
from netbay.drivers.node import Node
from netbay.k8s.dns.podfiles import etc_dir
from netbay.k8s.sandbox import IFNAME, PodPort

RUNTIME = "docker"


@dataclass(frozen=True)
class DnsView:
    """What DockerPods reads of a cluster's DNS (``ctrl.discovery``): its resolver's
    address (``resolver.address``) and domain, for the sandbox's ``--dns`` options."""
    resolver: Any    # netbay.k8s.dns.nodes.NodeResolver
    domain: str


@dataclass(frozen=True)
class Placement:
    node: Node
    driver: Any   # the cluster's driver object (netbay.drivers.registry.make)


class NodeSandboxes:
    """:class:`netbay.k8s.sandbox.PodSandboxes`' interface, keyed by netbay pod id:
    ``placement`` (pod id → its node and the driver) is the controller's, set each pass."""

    local = True

    def __init__(self, names: Names) -> None:
        self.names = names
        self.placement: dict[str, Placement] = {}

    def ensure_network(self, network_id: str, mtu: int) -> None:
        """Nothing to make: a node cluster's pods join their node's own bridge (the
        driver's), made when the node was set up."""
        return None

    def ns(self, pod_id: str) -> str:
        return self.names.pod(pod_id)

    def plugged(self, pod_id: str) -> bool:
        ns = self.ns(pod_id)
        return netns.exists(ns) and rtnl(ns).link(IFNAME) is not None

    def plug(self, port: PodPort) -> str:
        """The pod's namespace (the sandbox container's, already named) on its node."""
        at = self.placement[port.port_id]
        ns = self.ns(port.port_id)
        at.driver.attach_pod(at.node, ns, port.cidr.split("/")[0])
        return ns

    def unplug(self, pod_id: str) -> None:
        at = self.placement.get(pod_id)
        ns = self.ns(pod_id)
        if at is not None:
            podlinks.detach(at.node.ns, ns)
        netns.delete(ns)   # the name (the sandbox container holds the namespace itself)
        shutil.rmtree(etc_dir(ns), ignore_errors=True)


def placements(names: Names, driver_name: str, config: Mapping[str, Any], nodes: Any,
               pods: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, Placement]:
    """Each Docker-runtime pod's node and the cluster's driver (built as the agent builds it)."""
    from netbay.drivers import registry

    mine = [p for p in pods.values() if p.get("runtime") == RUNTIME]
    if not mine:
        return {}
    driver = registry.make(driver_name, dict(config))
    by_name = {n["name"]: Node(names.sandbox(n["sandbox_id"]), n["address"], n["lease"])
               for n in nodes if n.get("lease")}
    return {p["id"]: Placement(by_name[p["node"]], driver) for p in mine if p.get("node") in by_name}


def as_ports(pods: Mapping[tuple[str, str], Mapping[str, Any]], leases: Mapping[str, str]
             ) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, tuple[dict, dict]]]:
    """(ports, segments) as DockerPods reads a kuryr cluster's: each pod a "port" (its id,
    address) on its node's "network" (the node's lease: the pod's prefix and gateway)."""
    ports, segments = {}, {}
    for key, p in pods.items():
        lease = leases.get(p.get("node") or "")
        if not lease or not p.get("address"):
            continue
        net_id = f"node/{p['node']}"
        gateway = str(ipaddress.ip_network(lease).network_address + 1)
        segments[net_id] = ({"id": net_id, "mtu": 1500}, {"id": net_id, "cidr": lease, "gateway_ip": gateway})
        ports[key] = {"id": p["id"], "network_id": net_id, "mac_address": None, "device_id": p["id"],
                      "fixed_ips": [{"ip_address": p["address"], "subnet_id": net_id}]}
    return ports, segments


__all__ = ["DnsView", "NodeSandboxes", "Placement", "RUNTIME", "as_ports", "placements"]
