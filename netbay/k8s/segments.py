"""Namespaces (or nodes) → networks: each segment of a kuryr cluster is a network with an
IPv4 subnet from the cluster's pool (and, dual-stack, an IPv6 one from the IPv6 pool),
on the cluster's router; segments nothing wants are deleted with their ports.

A mixin of :class:`netbay.k8s.controller.Controller`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from netbay.client import gone_ok
from netbay.k8s.objects import Desired, PodWant
from netbay.k8s.owned import Owned
from netbay.k8s.passes import Known, Report
from netbay.k8s.podport import POD_NS, POD_OWNER


class Segments(Owned):
    """The segments' networks, subnets and router interfaces."""

    subnets6: dict[str, dict[str, Any]]

    def _drop_port(self, port: dict[str, Any]) -> None:
        """A pod's port and its sandbox (:class:`netbay.k8s.podports.PodPorts`)."""
        raise NotImplementedError

    def segment_of(self, pod: PodWant) -> str:
        """The network a pod's port is on: its namespace's, or its node's."""
        if self.refs.subnet_driver == "node":
            return f"node/{self.node_of(pod)}"
        return f"ns/{pod.namespace}"

    def node_of(self, pod: PodWant) -> str:
        if pod.node:
            return pod.node
        nodes = self.refs.nodes or ("local",)
        return nodes[uuid.uuid5(POD_NS, f"{pod.namespace}/{pod.name}").int % len(nodes)]

    def _wanted_segments(self, want: Desired) -> set[str]:
        if self.refs.subnet_driver == "node":
            return {self.segment_of(p) for p in want.pods.values()}
        return {f"ns/{n}" for n in want.namespaces}

    def _segments(self, want: Desired, report: Report,
                  known: Known | None) -> tuple[dict[str, tuple[dict, dict]], list[dict]]:
        """name → (network, its IPv4 subnet) for every wanted segment, made where missing;
        on a dual-stack cluster each also has an IPv6 subnet from the IPv6 pool
        (``self.subnets6``). Also the segment networks there were at the start (what
        :meth:`_sweep_segments` looks through: the pass lists them once)."""
        if known is not None:
            found = [net for net, _ in known.segments.values()]
            nets = {name: net for name, (net, _) in known.segments.items()}
            subnets = {net["id"]: subnet for net, subnet in known.segments.values()}
            subnets6 = dict(known.subnets6)
            attached = {subnet["id"] for _, subnet in known.segments.values()} | \
                {subnet["id"] for subnet in subnets6.values()}
        else:
            found = self._list("network", "network")   # a duplicate name too: the sweep takes it
            nets = {n["name"]: n for n in found}
            mine = self._list("subnet", "network")
            subnets = {s["network_id"]: s for s in mine if s.get("ip_version", 4) == 4}
            subnets6 = {s["network_id"]: s for s in mine if s.get("ip_version") == 6}
            attached = {ip["subnet_id"] for p in self.net.list(
                "port", device_id=self.refs.router_id, device_owner="network:router_interface")
                for ip in p["fixed_ips"]}
        self.subnets6 = {}
        out = {}
        for name in sorted(self._wanted_segments(want)):
            net = nets.get(name)
            if net is None:
                net = self._make("network", {"name": name, "description": self._mark(), "_what": "network"})
                report.made.append(f"network {name}")
            subnet = subnets.get(net["id"])
            if subnet is None:
                subnet = self._make("subnet", {"name": name, "network_id": net["id"], "description": self._mark(),
                                               "subnetpool_id": self.refs.pool_id, "ip_version": 4,
                                               "_what": "network"})
                report.made.append(f"subnet {name} {subnet['cidr']}")
            if subnet["id"] not in attached:
                self._ensure_interface(subnet)
            if self.refs.pool6_id:
                subnet6 = subnets6.get(net["id"]) or self._make_subnet6(name, net, report)
                if subnet6["id"] not in attached:
                    self._ensure_interface(subnet6)
                self.subnets6[net["id"]] = subnet6
            out[name] = (net, subnet)
        return out, found

    def more_subnets(self, net_id: str) -> tuple[dict[str, Any], ...]:
        """A segment's subnets beside its IPv4 one (a dual-stack cluster's IPv6 subnet)."""
        return (self.subnets6[net_id],) if net_id in self.subnets6 else ()

    def _make_subnet6(self, name: str, net: dict[str, Any], report: Report) -> dict[str, Any]:
        """A dual-stack segment's IPv6 subnet, from the cluster's IPv6 pool (after the IPv4
        one: ports list their IPv4 address first)."""
        subnet = self._make("subnet", {"name": name, "network_id": net["id"], "description": self._mark(),
                                       "subnetpool_id": self.refs.pool6_id, "ip_version": 6,
                                       "_what": "network"})
        report.made.append(f"subnet {name} {subnet['cidr']}")
        return subnet

    def _ensure_interface(self, subnet: dict[str, Any]) -> None:
        self.net.add_router_interface(self.refs.router_id, subnet_id=subnet["id"])

    def _sweep_segments(self, segments: Mapping[str, Any], found: list[dict[str, Any]], report: Report) -> None:
        """Delete the networks of ``found`` (:meth:`_segments`) no segment wants; what the
        pass made is wanted."""
        wanted = {net["id"] for net, _ in segments.values()}
        for net in found:
            if net["id"] in wanted:
                continue
            for subnet in self.net.list("subnet", network_id=net["id"]):
                gone_ok(lambda: self.net.remove_router_interface(self.refs.router_id,
                                                                               subnet_id=subnet["id"]))
            for port in self.net.list("port", network_id=net["id"], device_owner=POD_OWNER):
                self._drop_port(port)
            gone_ok(lambda: self.net.delete("network", net["id"]))
            report.deleted.append(f"network {net['name']}")
