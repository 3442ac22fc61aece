"""NetworkDriver: Docker networks on netbay networks, endpoints on netbay ports.

CreateNetwork finds or makes the netbay network (``-o netbay.network=``) and the
subnet of its pool, and tags them; whatever it made is undone if a later step
fails (Docker then releases the pool). CreateEndpoint plugs the port RequestAddress
made (:mod:`netbay.runtime.attach`, on one worker thread: no call waits on the
dataplane agent) and binds it; Join hands Docker the inner end. The binding (a
``PUT`` that waits its turn in a busy API) lands after CreateEndpoint's answer: a
mark on the port's fabric end stands for it until then, which a restarted plugin
finishes (:mod:`.gc`). Every verb is idempotent: Docker retries, and a restarted
plugin sees the same tags.

On a cloud (``vifs``, :mod:`netbay.runtime.vif`), kuryr-libnetwork's way instead:
CreateEndpoint binds the port to this host's chassis first, then plugs the pair's
host end with os-vif into the cloud's Open vSwitch as Neutron's
``binding:vif_type``/``binding:vif_details`` say (a type netbay cannot plug is refused
by name before the pair is made, the binding given back); no pair is made ahead at
RequestAddress and no binding mark is needed (the binding has landed before the plug).
A restarted plugin finishes a half-done plug from the host end's note
(:meth:`netbay.runtime.vif.OvsVifs.recover`, run at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from contextvars import ContextVar
from functools import partial
from typing import Any

from netbay.client.aio import AsyncApi
from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.errors import NetbayError, NotFound
from netbay.plugins.libnetwork.clusters import ClusterNetworks, placement
from netbay.plugins.libnetwork.directory import (MADE, OWN, Directory, Endpoint, binding_mark,
                                                 ep_tag, net_tag, pool_tag)
from netbay.plugins.libnetwork.dockerview import DockerView
from netbay.plugins.libnetwork.netcreate import NetworkCreation
from netbay.plugins.libnetwork.resources import PluginError, Resources
from netbay.runtime.attach import Attacher, Plug
from netbay.runtime.binding import unbind
from netbay.runtime.claim import Claims
from netbay.runtime.kernel import KernelThread
from netbay.runtime.vif import OvsVifs, Unpluggable, Vif

ANSWER_SENT: ContextVar[asyncio.Event | None] = ContextVar("netbay_libnetwork_answer_sent", default=None)
"""Set by the server for each call once Docker has its answer: work that follows an
answer (CreateEndpoint's binding) waits for it, so its HTTP client's CPU is not the call's."""
ANSWER_WAIT = 1.0
BIND_RETRY, BIND_ATTEMPTS = 0.1, 5  # a binding the API refused: again after 0.1, 0.3, 0.9, 2.7 s, then the sweep
log = logging.getLogger("netbay.libnetwork")


class NetworkDriver(NetworkCreation):
    def __init__(self, neutron: Resources, directory: Directory, attacher: Attacher, host: str | None = None,
                 docker: DockerView | None = None, netbay_api: AsyncApi | None = None,
                 vifs: OvsVifs | None = None) -> None:
        """``netbay_api``: netbay's own APIs, for placement on a netbay cluster's nodes
        (``-o netbay.cluster``); without them that option is refused by name. ``vifs``: a
        cloud's ports plugged with os-vif into its Open vSwitch (None: into the fabric)."""
        self.neutron, self.dir, self.attacher, self.docker = neutron, directory, attacher, docker
        self.vifs = vifs
        self.host = host or socket.gethostname()
        self.kernel = KernelThread("netbay-plug")  # netlink work, in order, on one thread
        self.claims = Claims(neutron.backend, OWN, directory.device_owner, self.host)
        self._background: set[asyncio.Task] = set()
        self.binding: dict[str, asyncio.Task] = {}  # port id -> CreateEndpoint's binding on its way
        self.prepared: dict[str, tuple[Plug, str]] = {}  # port id -> the pair RequestAddress made
        self._creating = asyncio.Lock()  # see create_network
        self.clusters = ClusterNetworks(netbay_api, neutron, attacher.names, self.kernel, directory.owner)

    async def capabilities(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {"Scope": "local", "ConnectivityScope": "local"}

    async def nothing(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {}

    # -- networks (CreateNetwork is NetworkCreation's, netcreate.py) -------------------------

    async def delete_network(self, req: dict[str, Any]) -> dict[str, Any]:
        nid = req["NetworkID"]
        net = await self.dir.network(nid, missing_ok=True)
        self.dir.forget_network(nid)
        if net is None:
            return {}
        if placement(net, nid):
            await self.clusters.delete_network(nid, net)
            return {}
        neutron = self.neutron
        for port in await neutron.list("port", network_id=net["id"], tags=MADE):  # leftovers of a crash
            await self.drop(port)
        if OWN.made_it(net):
            await neutron.delete("network", net["id"])
            return {}
        for subnet in await neutron.list("subnet", network_id=net["id"]):
            if OWN.made_it(subnet):
                await neutron.delete("subnet", subnet["id"])
                continue
            for pool in pool_tag.values(subnet):
                await neutron.remove_tag("subnet", subnet["id"], pool_tag.prefix + pool)
        await neutron.remove_tag("network", net["id"], net_tag(nid))
        if not [other for other in net_tag.values(net) if other != nid]:
            await neutron.remove_tag("network", net["id"], self.dir.owner)
        return {}

    # -- endpoints ---------------------------------------------------------------------------

    async def create_endpoint(self, req: dict[str, Any]) -> dict[str, Any]:
        nid, eid = req["NetworkID"], req["EndpointID"]
        iface = req.get("Interface") or {}
        on_cluster = placement(await self.dir.network(nid) or {}, nid)
        if on_cluster:
            return await self.clusters.create_endpoint(nid, eid, on_cluster, iface)
        address = (iface.get("Address") or iface.get("AddressIPv6") or "").split("/")[0]
        if not address:
            raise PluginError("netbay: an endpoint needs an address (IPv4 or IPv6) from the netbay IPAM driver")
        net = await self.dir.network(nid)
        assert net is not None
        port = await self.dir.port_at(net["id"], address, take=True)
        if port is None:
            raise PluginError(f"netbay: no port holds {address} on network {net['id']} "
                              "(use --ipam-driver with this driver)")
        for fixed in port.get("fixed_ips") or ():   # the other family's reservation is this port too
            self.dir.reserved.pop((net["id"], fixed["ip_address"]), None)
        mac = iface.get("MacAddress") or port["mac_address"]
        also = {"mac_address": mac} if (port.get("mac_address") or "").lower() != mac.lower() else {}
        if self.vifs is not None:
            port, ifname = await self._bind_and_plug(eid, port, also, int(net.get("mtu") or 1500))
            self.dir.endpoints[eid] = await self._endpoint(eid, port, ifname)
            return {"Interface": {} if iface.get("MacAddress") else {"MacAddress": port["mac_address"]}}
        early = not also  # only the binding is left: nothing the API could refuse
        plug = Plug(port["id"], net["id"], mac, int(net.get("mtu") or 1500))
        mark = binding_mark(self.dir.owner, port["id"], eid) if early else ""
        ready = self.prepared.pop(port["id"], None)
        if ready is not None and ready[0] == plug:
            ifname = ready[1]
            if mark:  # one small netlink request, here: never queued behind the worker's slow unplugs
                self.attacher.mark(port["id"], mark)
        else:
            ifname = await self.kernel(self._plug, plug, mark)
        try:
            if early:
                self.dir.endpoints[eid] = await self._endpoint(eid, port, ifname)
                self.binding[port["id"]] = self._later(self._bind_soon(eid, port))
                self.binding[port["id"]].add_done_callback(partial(self._bound, port["id"]))
            else:
                port = await self.bind(eid, port, also)
                self.dir.endpoints[eid] = await self._endpoint(eid, port, ifname)
        except BaseException:
            await self.kernel(self.unplug, port["id"])
            raise
        answer: dict[str, Any] = {}
        if not iface.get("MacAddress"):
            answer["MacAddress"] = port["mac_address"]
        return {"Interface": answer}

    async def _bind_and_plug(self, eid: str, port: dict[str, Any], also: dict[str, Any],
                             mtu: int) -> tuple[dict[str, Any], str]:
        """kuryr-libnetwork's CreateEndpoint on a cloud: bound to this host (Neutron's answer
        says how to plug it), then plugged with os-vif; (the port, the inner end's name). A
        ``vif_type`` netbay cannot plug: refused by name, nothing made, the binding given
        back (a port made for Docker's address goes with its ReleaseAddress)."""
        assert self.vifs is not None
        port = await self.bind(eid, port, also)
        try:
            vif = Vif.of(port, mtu)
        except Unpluggable as exc:
            if OWN.made_it(port):
                await self.neutron.update("port", port["id"], unbind(False))
            else:
                await self.claims.give_back(port, device=eid)
            raise PluginError(f"netbay: {exc}") from None
        try:
            return port, await self.kernel(self.vifs.plug, vif)
        except BaseException:
            await self.kernel(self.unplug, port["id"])
            raise

    def unplug(self, port_id: str) -> bool:
        """The port's pair gone, out of the cloud's bridge or the fabric (the netlink thread)."""
        if self.vifs is not None:
            netns.delete(self.attacher.names.container(port_id))   # the name Join gave its namespace
            return self.vifs.unplug(port_id)
        return self.attacher.unplug(port_id)

    async def prepare(self, port: dict[str, Any], subnet: dict[str, Any]) -> None:
        """RequestAddress's head start for CreateEndpoint: the pair is made there (RequestAddress
        has a port create to wait for anyway; CreateEndpoint has a latency target), when this
        plugin knows the port's network. Kept in :attr:`prepared` until CreateEndpoint. Not
        on a cloud: there the binding comes first (it says how to plug)."""
        if self.vifs is not None:
            return
        found = next(((nid, n) for nid, n in self.dir.networks.items() if n.get("id") == subnet["network_id"]), None)
        if found is None or placement(found[1], found[0]):
            return  # not known here yet (a restart: CreateEndpoint plugs it), or a cluster's
        net = found[1]
        plug = Plug(port["id"], net["id"], port["mac_address"], int(net.get("mtu") or 1500))
        if (ready := self.prepared.get(port["id"])) is not None and ready[0] == plug:
            return   # the endpoint's other family's address: the pair is made already
        self.prepared[port["id"]] = (plug, await self.kernel(self.attacher.plug, plug))

    async def unprepare(self, port_id: str) -> None:
        """Docker released an address no endpoint took (its rollback): the pair goes."""
        if self.prepared.pop(port_id, None) is not None:
            await self.kernel(self.unplug, port_id)

    def _plug(self, plug: Plug, mark: str) -> str:
        ifname = self.attacher.plug(plug)
        if mark:
            self.attacher.mark(plug.port_id, mark)
        return ifname

    async def bind(self, eid: str, port: dict[str, Any] | str, also: dict[str, Any] | None = None) -> dict[str, Any]:
        """Claim the port (a port id: as it is now) for endpoint ``eid`` on this host
        (:class:`netbay.runtime.claim.Claims`: bound, ``also`` in the same update, tagged
        with its endpoint — kuryr's convention: the port names its endpoint whoever its
        device is), then clear the binding mark."""
        if isinstance(port, str):
            port = await self.neutron.show("port", port)
        claimed = await self.claims.claim(port, eid, [ep_tag(eid)], also=also)
        if self.vifs is None:
            await self.kernel(self.attacher.mark, claimed["id"], "")
        return claimed

    async def drop(self, port: dict[str, Any]) -> None:
        """Unplug a port made here and delete it (a crash's leftover, an orphan)."""
        await self.kernel(self.unplug, port["id"])
        await self.claims.give_back(port, made=True)

    async def _bind_soon(self, eid: str, port: dict[str, Any]) -> None:
        """CreateEndpoint's binding, after Docker has its answer: the mark on the fabric end
        stands for it until it lands, so a plugin killed meanwhile finishes it at start
        (:meth:`netbay.plugins.libnetwork.gc.Collector.finish_bindings`)."""
        sent = ANSWER_SENT.get()
        if sent is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sent.wait(), ANSWER_WAIT)
        delay = BIND_RETRY
        for attempt in range(BIND_ATTEMPTS):
            try:
                await self.bind(eid, port)
                return
            except NotFound:
                return  # released meanwhile: nothing left to bind
            except Exception as exc:  # noqa: BLE001 - the mark stays; retried here, then by the sweep
                log.warning("port %s: binding (attempt %d): %s", port["id"], attempt + 1, exc)
            await asyncio.sleep(delay)
            delay *= 3

    def _bound(self, port_id: str, task: asyncio.Task) -> None:
        if self.binding.get(port_id) is task:
            del self.binding[port_id]

    async def _bind_landed(self, port_id: str) -> None:
        """Wait for CreateEndpoint's binding of ``port_id`` if it is still on its way."""
        pending = self.binding.get(port_id)
        if pending is not None:
            await asyncio.shield(pending)

    async def _endpoint(self, eid: str, port: dict[str, Any], ifname: str | None = None) -> Endpoint:
        gateways: dict[int, str] = {}   # IP version -> the first subnet's gateway
        routes = []
        for fixed in port.get("fixed_ips") or ():
            subnet = next((s for s in self.dir.subnets.values() if s["id"] == fixed["subnet_id"]), None)
            if subnet is None:
                subnet = await self.neutron.show("subnet", fixed["subnet_id"])
            if subnet.get("gateway_ip"):
                gateways.setdefault(ipaddress.ip_address(fixed["ip_address"]).version, subnet["gateway_ip"])
            routes += [(r["destination"], r["nexthop"]) for r in subnet.get("host_routes") or ()]
        return Endpoint(eid, port["id"], port["network_id"], ifname or Names.container_end(port["id"]),
                        gateways.get(4), tuple(routes), OWN.made_it(port), gateways.get(6))

    async def endpoint(self, eid: str) -> Endpoint:
        ep = self.dir.endpoints.get(eid)
        if ep is None:
            port = await self.dir.endpoint_port(eid)
            if port is None:
                raise PluginError(f"netbay: no port for endpoint {eid[:12]}")
            ep = self.dir.endpoints[eid] = await self._endpoint(eid, port)
        return ep

    async def join(self, req: dict[str, Any]) -> dict[str, Any]:
        if req["EndpointID"] in self.clusters.placed or await self._on_cluster(req):
            joined = await self.clusters.join(req["EndpointID"])
            placed = self.clusters.placed[req["EndpointID"]]
            if self.docker is not None and req.get("SandboxKey"):
                self._later(self.name_netns(req["NetworkID"], req["EndpointID"],
                                            self.attacher.names.pod(placed.pod["id"])))
            return joined
        ep = await self.endpoint(req["EndpointID"])
        answer: dict[str, Any] = {"InterfaceName": {"SrcName": ep.ifname, "DstPrefix": "eth"},
                                  "DisableGatewayService": True,
                                  "StaticRoutes": [{"Destination": d, "RouteType": 0, "NextHop": h}
                                                   for d, h in ep.routes]}
        if ep.gateway:
            answer["Gateway"] = ep.gateway
        if ep.gateway6:
            answer["GatewayIPv6"] = ep.gateway6
        if self.docker is not None and req.get("SandboxKey"):  # after the answer: Docker lists it once joined
            self._later(self._name_device(req["NetworkID"], ep))
        return answer

    def _later(self, work: Any) -> asyncio.Task:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def name_netns(self, nid: str, eid: str, name: str, cid: str | None = None) -> None:
        """Give the container's own namespace a netbay name (``ip netns attach``), off the
        call path, so that probes (``netbay cluster connectivity``) and ``pod exec`` can
        enter it; DeleteEndpoint takes the name away again."""
        assert self.docker is not None
        cid = cid or await self.docker.container_of(nid, eid)
        source = await self.docker.netns_of(cid) if cid else None
        if source is None:
            log.info("endpoint %s: its container's namespace not named (Docker did not list it)", eid[:12])
            return
        try:
            await self.kernel(netns.attach, name, source)
        except Exception as exc:  # noqa: BLE001 - a name for probes only; the network works without
            log.info("endpoint %s: namespace not named %s: %s", eid[:12], name, exc)

    async def _name_device(self, nid: str, ep: Endpoint) -> None:
        """Make the container the port's device (Docker tells no plugin call which it is);
        the endpoint stays findable by its tag."""
        assert self.docker is not None
        try:
            cid = await self.docker.container_of(nid, ep.endpoint_id)
            if cid is None:
                log.info("port %s: Docker did not list endpoint %s (the sweep names it)", ep.port_id,
                         ep.endpoint_id[:12])
                return
            await self.name_netns(nid, ep.endpoint_id, self.attacher.names.container(ep.port_id), cid)
            await self._bind_landed(ep.port_id)
            port = await self.neutron.show("port", ep.port_id)
            if port.get("device_id") != ep.endpoint_id:
                return  # its owner's device (the container API's), or gone
            await self.name_device(ep.port_id, ep.endpoint_id, cid)
        except NetbayError as exc:
            log.info("port %s: device not named: %s", ep.port_id, exc)

    async def name_device(self, port_id: str, eid: str, container_id: str) -> None:
        """The container as the port's device; the endpoint stays named by the tag :meth:`bind` set."""
        await self.neutron.update("port", port_id, {"device_id": container_id})

    async def endpoint_info(self, req: dict[str, Any]) -> dict[str, Any]:
        ep = self.dir.endpoints.get(req.get("EndpointID") or "")
        return {"Value": {"netbay.port": ep.port_id} if ep else {}}

    async def _on_cluster(self, req: dict[str, Any]) -> bool:
        nid = req.get("NetworkID") or ""
        return bool(nid) and placement(await self.dir.network(nid, missing_ok=True) or {}, nid) is not None

    async def delete_endpoint(self, req: dict[str, Any]) -> dict[str, Any]:
        eid = req["EndpointID"]
        if eid in self.clusters.placed or await self._on_cluster(req):
            await self.clusters.delete_endpoint(eid)
            return {}
        ep = self.dir.endpoints.pop(eid, None)
        if ep is not None and ep.made:  # no round trip: ReleaseAddress deletes the port next
            await self.kernel(self.unplug, ep.port_id)
            return {}
        if ep is not None:
            await self._bind_landed(ep.port_id)  # else it could land after the unbinding below
        port = await self.dir.endpoint_port(eid)
        if port is None:
            return {}
        await self.kernel(self.unplug, port["id"])
        if not OWN.made_it(port):  # a made one: ReleaseAddress deletes it next
            await self.claims.give_back(port, device=eid)
        return {}

    def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        self.kernel.close()


__all__ = ["ANSWER_SENT", "NetworkDriver"]
