"""CreateNetwork: the netbay network found or made for a Docker network, and each
pool's subnet made or claimed, tagged and checked against every other Docker pool,
with every step it made undone when a later one fails."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable
from functools import partial
from typing import Any

from netbay.errors import NetbayError
from netbay.plugins.libnetwork.clusters import ClusterNetworks
from netbay.plugins.libnetwork.directory import (MADE, OWN, PENDING, Directory, net_tag, overlap_refusal,
                                                 pending_pool_tag, pool_tag)
from netbay.plugins.libnetwork.options import NetworkOptions, network_pools
from netbay.plugins.libnetwork.resources import PluginError, Resources


class NetworkCreation:
    """CreateNetwork's half of :class:`netbay.plugins.libnetwork.network.NetworkDriver`
    (a mixin: the driver owns the attributes)."""

    neutron: Resources
    dir: Directory
    clusters: ClusterNetworks
    _creating: asyncio.Lock

    async def create_network(self, req: dict[str, Any]) -> dict[str, Any]:
        """Where a pool's uniqueness is decided: RequestPool only answers first (Docker asks
        for several networks' pools before any CreateNetwork, so its check cannot decide);
        here the pool's subnet is made or claimed and tagged, and here it is checked against
        every Docker pool in the network service (any host's, any plugin's), equal or
        overlapping alike. One lock per plugin makes this process's check-and-make atomic:
        of six ``docker network create --subnet S`` at once exactly one wins, the others get
        the refusal a later one gets. Plugins are one process per name, but several names or
        hosts share one service, which no lock here covers: after tagging, the check runs
        again, and a pool that finds another loses (undone, refused). Two processes racing
        may then both lose (Docker's user runs the command again), never both win: two
        subnets holding one pool would break every ``docker run`` on either."""
        nid = req["NetworkID"]
        opts = NetworkOptions.parse(req.get("Options"))
        if opts.cluster:
            if req.get("IPv6Data"):
                raise PluginError("netbay: IPv6 pools are not supported on a cluster's nodes (-o netbay.cluster "
                                  "places containers on the cluster's IPv4 pod network)")
            self.dir.networks[nid] = await self.clusters.create_network(nid, opts, req.get("IPv4Data") or [])
            return {}
        pools = network_pools(req)
        async with self._creating:
            existing = await self.dir.network(nid, missing_ok=True)
            if existing is not None:  # a retry: done, or cut short by a crash (finish it)
                tagged = [await self.neutron.list("subnet", network_id=existing["id"], tags=pool_tag(cidr))
                          for cidr, _gw in pools]
                if all(tagged):
                    return {}
                opts = NetworkOptions(network=existing["id"])
            undo: list[Callable[[], Any]] = []
            try:
                await self._create_network(nid, opts, pools, undo)
            except BaseException:
                for step in reversed(undo):
                    try:
                        await step()
                    except NetbayError:
                        pass
                self.dir.forget_network(nid)
                raise
        return {}

    async def _create_network(self, nid: str, opts: NetworkOptions, pools: list[tuple[str, str | None]],
                              undo: list[Callable[[], Any]]) -> None:
        """The network (found or made), then each pool's subnet (one per family)."""
        neutron = self.neutron
        cidrs = [cidr for cidr, _gw in pools]
        pending = [s for s in await neutron.list("subnet", tags=PENDING) if s["cidr"] in cidrs]
        if opts.network:
            net = await neutron.find("network", opts.network)
            elsewhere = [s for s in pending if s["network_id"] != net["id"]]
            pending = [s for s in pending if s["network_id"] == net["id"]]
            here = {s["cidr"] for s in pending}
            if stray := [s for s in elsewhere if s["cidr"] not in here]:
                raise PluginError(f"netbay: subnet {stray[0]['id']} (--ipam-opt) is not on network "
                                  f"{net['id']} (-o)")
        elif len({s["network_id"] for s in pending}) > 1 or len(pending) > len(cidrs):
            raise PluginError(f"netbay: {len(pending)} subnets on {len({s['network_id'] for s in pending})} "
                              f"networks are named for the pools {', '.join(cidrs)}; "
                              "say which network with -o netbay.network=<id>")
        elif pending:
            net = await neutron.show("network", pending[0]["network_id"])
        else:
            net = await neutron.create("network", {"name": f"docker-{nid[:12]}",
                                                   "tags": [MADE, net_tag(nid), self.dir.owner]})
            undo.append(lambda: neutron.delete("network", net["id"]))
        if not OWN.made_it(net):
            for tag in (net_tag(nid), self.dir.owner):
                await neutron.add_tag("network", net["id"], tag)
                undo.append(partial(neutron.remove_tag, "network", net["id"], tag))
        for cidr, gateway in pools:
            await self._pool_subnet(net, cidr, gateway, [s for s in pending if s["cidr"] == cidr], undo)
        self.dir.networks[nid] = net

    async def _pool_subnet(self, net: dict[str, Any], cidr: str, gateway: str | None, pending: list[dict[str, Any]],
                           undo: list[Callable[[], Any]]) -> None:
        """The subnet holding pool ``cidr`` on ``net``: the one RequestPool named, one of that
        CIDR there, or a new one; tagged with the pool, checked against every other pool."""
        neutron = self.neutron
        subnet: dict[str, Any] | None
        if pending:
            subnet = pending[0]
        else:
            same = [s for s in await neutron.list("subnet", network_id=net["id"]) if s["cidr"] == cidr]
            subnet = same[0] if same else None
        if taken := await self.dir.pools_over(cidr, but=subnet["id"] if subnet else None):
            raise overlap_refusal(cidr, taken[0])
        if subnet is None:
            subnet = await self._make_subnet(net, cidr, gateway, undo)
        if pool_tag(cidr) not in (subnet.get("tags") or ()):
            await neutron.add_tag("subnet", subnet["id"], pool_tag(cidr))
            undo.append(lambda: neutron.remove_tag("subnet", subnet["id"], pool_tag(cidr)))
        if taken := await self.dir.pools_over(cidr, but=subnet["id"]):
            raise overlap_refusal(cidr, taken[0])  # another plugin process decided at the same moment
        if PENDING in (subnet.get("tags") or ()):
            await neutron.remove_tag("subnet", subnet["id"], PENDING)

    async def _make_subnet(self, net: dict[str, Any], cidr: str, gateway: str | None,
                           undo: list[Callable[[], Any]]) -> dict[str, Any]:
        neutron = self.neutron
        body: dict[str, Any] = {"network_id": net["id"], "cidr": cidr, "ip_version": ipaddress.ip_network(cidr).version,
                                "name": f"docker-{cidr}", "tags": [MADE, pool_tag(cidr)]}
        if gateway:
            body["gateway_ip"] = gateway
        pools = await neutron.list("subnetpool", tags=pending_pool_tag(cidr))
        if pools:
            body["subnetpool_id"] = pools[0]["id"]
        subnet = await neutron.create("subnet", body)
        undo.append(lambda: neutron.delete("subnet", subnet["id"]))
        if pools:
            await neutron.remove_tag("subnetpool", pools[0]["id"], pending_pool_tag(cidr))
        return subnet
