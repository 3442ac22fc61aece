"""Docker networks on a cluster's nodes: ``-o netbay.cluster=C [-o netbay.node=N]``.

A container on such a network is placed on a cluster node exactly as a pod is: a
pod row (``runtime: docker``) takes its address from the node's lease under the
cluster's lock — so containers and pods never collide — and its veth is a port of
the node's pod bridge (:func:`netbay.drivers.pods.plug_for_runtime`, the node end
:func:`~netbay.drivers.pods.attach` would make), so it reaches pods and containers
on every node over the cluster's driver (flannel, or the docker overlay). Docker
moves the inner end into the container and gives it the address and gateway
answered here. The addresses are the node's, not an IPAM pool's: such a network is
made with ``--ipam-driver null`` (Docker then asks the driver for the address).

Where Docker's ids live (a restarted plugin finds them again): the cluster's private
network carries ``netbay.docker.net:<NetworkID>`` and
``netbay.docker.place:<NetworkID>:<cluster>:<node>``; an endpoint is the pod named
``docker-<EndpointID>``, labelled ``netbay.docker.by=<plugin>@<host>`` so that this
plugin's sweep (:mod:`netbay.plugins.libnetwork.gc`) collects its own pods only.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from netbay.dataplane.names import Names
from netbay.plugins.libnetwork.directory import net_tag
from netbay.client.aio import AsyncApi
from netbay.errors import NetbayError, NotFound
from netbay.plugins.libnetwork.resources import PluginError, Resources
from netbay.plugins.libnetwork.options import NetworkOptions

PLACE = "netbay.docker.place:"
NULL_POOL = "0.0.0.0/0"   # what Docker's null IPAM driver hands a network
OWNER_LABEL = "netbay.docker.by"   # on an endpoint's pod: which plugin made it (owner_tag's value)


def place_tag(nid: str, cluster: str, node: str) -> str:
    return f"{PLACE}{nid}:{cluster}:{node}"


def placement(net: dict[str, Any], nid: str) -> tuple[str, str] | None:
    """(cluster, node or "") if ``net`` carries Docker network ``nid`` onto a cluster."""
    head = f"{PLACE}{nid}:"
    for tag in net.get("tags") or ():
        if tag.startswith(head):
            cluster, _, node = tag[len(head):].partition(":")
            return cluster, node
    return None


def pod_name(eid: str) -> str:
    return f"docker-{eid}"


def inner_name(eid: str) -> str:
    """The container end in the host namespace until Docker moves it (not ``nbc…``:
    those are fabric ports, swept against netbay's port list)."""
    return "nbk" + eid[:12]


@dataclass(frozen=True)
class Placed:
    pod: dict[str, Any]
    node_ns: str
    prefixlen: int
    gateway: str


class ClusterNetworks:
    def __init__(self, api: AsyncApi | None, neutron: Resources, names: Names, kernel: Callable[..., Awaitable[Any]],
                 owner: str) -> None:
        """``api``: netbay's own APIs (pods, cluster networks); None where the network
        backend is a cloud's Neutron: clusters are netbay's, so the option is refused."""
        self.api, self.neutron, self.names, self.kernel, self.owner = api, neutron, names, kernel, owner
        self.placed: dict[str, Placed] = {}   # EndpointID -> where its container is

    async def _call(self, method: str, path: str, **kw: Any) -> Any:
        return await self._netbay().call(method, f"/netbay/v1{path}", **kw)

    def _netbay(self) -> AsyncApi:
        if self.api is None:
            raise PluginError(f"netbay: -o netbay.cluster places containers on a netbay cluster's nodes: it needs "
                              f"netbay's own network backend, and this driver's is {self.neutron.name} (a cloud's "
                              "Neutron); use -o netbay.network or a plain --subnet")
        return self.api

    async def clusternet(self, cluster: str, *, by_name: bool = False) -> dict[str, Any]:
        """The cluster's container network; ``by_name``: ``cluster`` may be its name too."""
        try:
            return (await self._call("GET", f"/clusternets/{quote(cluster, safe='')}"))["clusternet"]
        except NotFound:
            pass
        if by_name:
            try:
                found = await self._netbay().call("GET", f"/container-infra/v1/clusters/{quote(cluster, safe='')}")
                return (await self._call("GET", f"/clusternets/{found['uuid']}"))["clusternet"]
            except NotFound:
                pass
        raise PluginError(f"netbay: cluster {cluster} has no container network (unknown cluster, or "
                          "not built yet)")

    @staticmethod
    def driver(cnet: dict[str, Any]) -> Any:
        from netbay.drivers import registry

        if not registry.takes_containers(cnet["driver"]):
            raise PluginError(f"netbay: containers on {cnet['driver']} clusters are not supported yet "
                              "(routed pods); use a flannel or docker-driver cluster")
        return registry.make(cnet["driver"], cnet.get("config") or {})

    # -- networks ----------------------------------------------------------------------------

    async def create_network(self, nid: str, opts: NetworkOptions, v4: list[dict[str, Any]]) -> dict[str, Any]:
        """Check the cluster (and node), then tag its private network with the placement."""
        self._netbay()
        if opts.network:
            raise PluginError("netbay: -o netbay.cluster and -o netbay.network exclude each other")
        if any(d.get("Pool") not in (None, "", NULL_POOL) for d in v4):
            raise PluginError("netbay: a cluster network takes its addresses from the node's lease: "
                              "create it with --ipam-driver null")
        assert opts.cluster is not None
        cnet = await self.clusternet(opts.cluster, by_name=True)
        self.driver(cnet)
        nodes = cnet.get("nodes") or []
        node = ""
        if opts.node:
            found = next((n for n in nodes if opts.node in (n["name"], n["sandbox_id"])), None)
            if found is None:
                raise PluginError(f"netbay: cluster {opts.cluster} has no node {opts.node}")
            node = found["name"]
        if not nodes:
            raise PluginError(f"netbay: cluster {opts.cluster} has no nodes yet")
        private = (await self.neutron.show("port", nodes[0]["port_id"]))["network_id"]
        for tag in (net_tag(nid), place_tag(nid, cnet["id"], node), self.owner):
            await self.neutron.add_tag("network", private, tag)
        return await self.neutron.show("network", private)

    async def delete_network(self, nid: str, net: dict[str, Any]) -> None:
        for tag in net.get("tags") or ():
            if tag.startswith(f"{PLACE}{nid}:") or tag == net_tag(nid):
                await self.neutron.remove_tag("network", net["id"], tag)
        others = [other for other in net_tag.values(net) if other != nid]
        if not others:
            await self.neutron.remove_tag("network", net["id"], self.owner)

    # -- endpoints ---------------------------------------------------------------------------

    async def create_endpoint(self, nid: str, eid: str, where: tuple[str, str], iface: dict[str, Any]) -> dict[str, Any]:
        if iface.get("Address"):
            raise PluginError("netbay: a cluster network takes its addresses from the node's lease: "
                              "create it with --ipam-driver null")
        cluster, node = where
        pod = await self._pod(cluster, node, eid)
        try:
            placed, cnet, entry = await self._locate(pod)
            from netbay.drivers import pods
            from netbay.drivers.node import Node

            bridged = await self.kernel(self.driver(cnet).bridged,
                                        Node(placed.node_ns, entry["address"], entry["lease"]))
            await self.kernel(functools.partial(pods.plug_for_runtime, placed.node_ns, pod_name(eid),
                                                inner_name(eid), bridged, mac=iface.get("MacAddress") or None))
        except BaseException:
            await self._call("DELETE", f"/pods/{pod['id']}")
            raise
        self.placed[eid] = placed
        return {"Interface": {"Address": f"{pod['address']}/{placed.prefixlen}"}}

    async def _pod(self, cluster: str, node: str, eid: str) -> dict[str, Any]:
        """The endpoint's pod: made (the address), or found (Docker's retry)."""
        body = {"name": pod_name(eid), "cluster_id": cluster, "runtime": "docker", "labels": self.owner_label,
                **({"node": node} if node else {})}
        try:
            return (await self._call("POST", "/pods", json={"pod": body}))["pod"]
        except NetbayError as exc:
            found = await self.find_pod(eid, cluster)
            if found is None:
                raise PluginError(f"netbay: no address on cluster {cluster}: {exc}") from None
            return found

    @property
    def owner_label(self) -> dict[str, str]:
        return {OWNER_LABEL: self.owner.partition(":")[2]}

    async def own_pods(self) -> list[dict[str, Any]]:
        """The endpoints' pods this plugin made (on any cluster)."""
        if self.api is None:
            return []
        found = (await self._call("GET", "/pods", params={"runtime": "docker"}))["pods"]
        mine = self.owner_label[OWNER_LABEL]
        return [p for p in found if (p.get("labels") or {}).get(OWNER_LABEL) == mine
                and p["name"].startswith(pod_name(""))]

    async def find_pod(self, eid: str, cluster: str | None = None) -> dict[str, Any] | None:
        params = {"name": pod_name(eid), **({"cluster_id": cluster} if cluster else {})}
        found = (await self._call("GET", "/pods", params=params))["pods"]
        return found[0] if found else None

    async def _locate(self, pod: dict[str, Any]) -> tuple[Placed, dict[str, Any], dict[str, Any]]:
        """Where the pod is: (placement, its cluster network, its node's entry)."""
        cnet = await self.clusternet(pod["cluster_id"])
        entry = next((n for n in cnet["nodes"] if n["name"] == pod["node"]), None)
        if entry is None or not entry.get("lease"):
            raise PluginError(f"netbay: node {pod['node']} left cluster {pod['cluster_id']}")
        drv = self.driver(cnet)
        prefix = drv.prefixlen if hasattr(drv, "prefixlen") else ipaddress.ip_network(entry["lease"]).prefixlen
        gateway = str(ipaddress.ip_network(entry["lease"]).network_address + 1)
        return Placed(pod, self.names.sandbox(entry["sandbox_id"]), prefix, gateway), cnet, entry

    async def endpoint(self, eid: str) -> Placed | None:
        placed = self.placed.get(eid)
        if placed is None:
            pod = await self.find_pod(eid)
            if pod is None:
                return None
            placed = self.placed[eid] = (await self._locate(pod))[0]
        return placed

    async def join(self, eid: str) -> dict[str, Any]:
        placed = await self.endpoint(eid)
        if placed is None:
            raise PluginError(f"netbay: no pod for endpoint {eid[:12]}")
        return {"InterfaceName": {"SrcName": inner_name(eid), "DstPrefix": "eth"}, "Gateway": placed.gateway,
                "DisableGatewayService": True, "StaticRoutes": []}

    async def delete_endpoint(self, eid: str) -> None:
        placed = await self.endpoint(eid)
        self.placed.pop(eid, None)
        if placed is None:
            return
        await self.release(placed.pod, placed.node_ns)

    async def release(self, pod: dict[str, Any], node_ns: str | None = None) -> None:
        """Unplug an endpoint's pod (the veth, the namespace's name) and delete its row.
        ``node_ns`` unknown (the sweep; the node may have left): the node's namespace by its
        sandbox, and no veth to remove where the namespace is gone."""
        from netbay.dataplane import netns
        from netbay.drivers import pods

        eid = pod["name"][len(pod_name("")):]
        await self.kernel(pods.detach, node_ns or self.names.sandbox(pod["sandbox_id"]), pod_name(eid))
        await self.kernel(netns.delete, self.names.pod(pod["id"]))   # the name only (see name_netns)
        try:
            await self._call("DELETE", f"/pods/{pod['id']}")
        except NotFound:
            pass


__all__ = ["ClusterNetworks", "inner_name", "placement", "place_tag", "pod_name"]
