"""The CNI verbs on netbay: a pod's attachment is a port of the network backend
(:class:`netbay.backends.NetworkBackend`: netbay's own network service, or a cloud's
Neutron), plugged as every container port is (:mod:`netbay.runtime.attach`), its end
inside the runtime's namespace (:mod:`netbay.runtime.inside`). Nothing here knows
which backend answers: the port's ``device_owner`` is handed in with it
(``compute:netbay`` on netbay's own, kuryr's ``compute:kuryr`` on a cloud).

Which port (ADD): ``PORT_UUID`` from ``CNI_ARGS`` (made by a controller, as the
kuryr spec's API watcher does); else, when the config names a kuryr ``cluster``, the
port its mapping controller made for ``K8S_POD_NAMESPACE``/``K8S_POD_NAME``
(:mod:`netbay.k8s.podport`; on its own network, the pod's namespace's; none yet: try
again later, as kuryr's CNI waits for the pod's VIF); else the port on the network
whose ``device_id`` is the pod's ``K8S_POD_UID`` (pre-created the same way, kuryr's
convention); else a new one, tagged :data:`MADE`, with ``IPV4`` as its fixed IP when
given. ``PORT_TYPE`` (kuryr's VIF type) is honoured when it names what is plugged here
(``veth``/``bridge``) and refused by name otherwise. A given port keeps its owner where the agent already plugs it as a container's
(``compute:kuryr``: the controller still owns it). A kuryr cluster's pod's result
carries the cluster's DNS (its resolver, the namespace's search list). The attachment
is found again (DEL, CHECK, GC) by its tags — ``netbay.cni.ctr:<CNI_CONTAINERID>``,
``netbay.cni.if:<CNI_IFNAME>`` and ``netbay.cni.net:<config name>`` — so a restarted
daemon knows everything. With ``vifs`` (a cloud's ports bound on this host,
:mod:`netbay.runtime.vif`), the pair's host end is plugged with os-vif into the
cloud's Open vSwitch as the port's ``binding:vif_type``/``binding:vif_details`` say,
instead of into netbay's fabric; a type netbay cannot plug is refused by name before
the pair is made, the port released. DEL deletes a port it made and unbinds one it was given;
it succeeds when nothing is left to remove. The dataplane agent adopts the fabric
end (security groups, status ``ACTIVE``) as for any container port.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Mapping
from typing import Any

from netbay.backends import NetworkBackend
from netbay.backends.aio import ThreadedBackend
from netbay.dataplane.fabric import CONTAINER, KURYR_POD
from netbay.dataplane.rtnl import LinkError
from netbay.errors import NetbayError, NotFound
from netbay.k8s import podport
from netbay.k8s.dns import names as dnsnames
from netbay.plugins.cni import result as results
from netbay.plugins.cni.spec import (INTERNAL, INVALID_CONFIG, INVALID_ENV, NOT_AVAILABLE, TRY_AGAIN_LATER,
                                     UNSUPPORTED_FIELD, CniError, Request)
from netbay.runtime import inside, resolve, tags
from netbay.runtime.attach import Attacher, Plug
from netbay.runtime.claim import Claims
from netbay.runtime.kernel import KernelThread
from netbay.runtime.vif import OvsVifs, Unpluggable, Vif

log = logging.getLogger("netbay.cni")

OWN = tags.Owner("netbay.cni")
MADE = OWN.made
DEVICE_SET = OWN.flag("device")  # on a given port: its device_id was empty, ADD set it (Claims.device_set)
CACHE_TTL = 30.0
API_THREADS = 16           # backend calls in flight at once (the seam is synchronous)


ctr_tag = OWN.family("ctr")   # the container (CNI_CONTAINERID) a port serves
if_tag = OWN.family("if")     # its interface in the container (CNI_IFNAME)
net_tag = OWN.family("net")   # the network configuration's name


class Cni:
    """ADD / DEL / CHECK / STATUS / GC against one network backend and this host's fabric.

    The backend is synchronous (one seam for every controller); its calls run on a
    pool of their own (:class:`netbay.backends.aio.ThreadedBackend`), so parallel ADDs
    wait on the network service together while netlink keeps its one thread."""

    def __init__(self, network: NetworkBackend, attacher: Attacher, host: str | None = None,
                 owner: str = CONTAINER, vifs: OvsVifs | None = None) -> None:
        self.attacher, self.owner, self.vifs = attacher, owner, vifs
        self.backend = ThreadedBackend(lambda: network, API_THREADS)  # one backend, shared by the threads
        self.host = host or socket.gethostname()
        self.claims = Claims(self.backend, OWN, owner, self.host)
        self.kernel = KernelThread("netbay-cni")  # netlink work (sockets are per thread)
        self._networks: dict[str, tuple[float, dict[str, Any]]] = {}
        self._subnets: dict[str, tuple[float, dict[str, Any]]] = {}
        self._resolvers: dict[str, tuple[float, list[str]]] = {}   # cluster -> its resolver's addresses

    async def aclose(self) -> None:
        self.kernel.close()
        await self.backend.aclose()   # closes the network backend too

    async def handle(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """One call: ``{"result": …}`` (ADD), ``{}`` (others), or ``{"error": …}``."""
        version = None
        try:
            req = Request.parse(raw)
            version = req.version
            verb = {"ADD": self.add, "DEL": self.delete, "CHECK": self.check, "STATUS": self.status,
                    "GC": self.gc}.get(req.command)
            if verb is None:
                raise CniError(INVALID_ENV, f"unknown CNI_COMMAND: {req.command}")
            out = await verb(req)
            return {"result": out} if out is not None else {}
        except CniError as exc:
            self._networks.clear()  # a network deleted and made again under its name: look again

            return {"error": exc.body(version)}
        except NetbayError as exc:  # the network service's own message
            self._networks.clear()
            return {"error": CniError(INTERNAL, f"netbay: {exc.message}").body(version)}
        except LinkError as exc:
            return {"error": CniError(INTERNAL, exc.strerror or str(exc)).body(version)}
        except Exception as exc:  # the runtime must get an answer
            log.exception("%s failed", raw.get("command"))
            return {"error": CniError(INTERNAL, f"netbay-cni: {type(exc).__name__}: {exc}").body(version)}

    # -- lookups ------------------------------------------------------------------------

    async def network(self, ref: str, cached: bool = True) -> dict[str, Any]:
        hit = self._networks.get(ref)
        if cached and hit and time.monotonic() - hit[0] < CACHE_TTL:
            return hit[1]
        try:
            net = await resolve.find_async(self.backend, "network", ref)
        except resolve.Unresolved as exc:
            if not exc.count:
                raise CniError(INVALID_CONFIG, f"netbay: no network with id or name {ref!r}") from None
            raise CniError(INVALID_CONFIG, f"netbay: {exc.count} networks are named {ref!r}; give the id") from None
        self._networks[ref] = (time.monotonic(), net)
        return net

    async def subnet(self, subnet_id: str) -> dict[str, Any]:
        hit = self._subnets.get(subnet_id)
        if hit and time.monotonic() - hit[0] < CACHE_TTL:
            return hit[1]
        sub = await self.backend.show("subnet", subnet_id)
        self._subnets[subnet_id] = (time.monotonic(), sub)
        return sub

    async def cluster_dns(self, req: Request) -> dict[str, Any] | None:
        """A kuryr cluster's pod is told its cluster resolver (kubelet's ClusterFirst), its
        namespace's search list first; None: no cluster, or no resolver yet."""
        if not req.cluster:
            return None
        hit = self._resolvers.get(req.cluster)
        if hit and time.monotonic() - hit[0] < CACHE_TTL:
            addresses = hit[1]
        else:
            found = await self.backend.list("port", tags=f"{podport.cluster_tag(req.cluster)},{dnsnames.RESOLVER_TAG}")
            # every address of the first resolver port, IPv4 first (a dual-stack cluster's answers on both)
            fixed = (found[0].get("fixed_ips") or ()) if found else ()
            addresses = sorted((f["ip_address"] for f in fixed), key=lambda a: ":" in a)
            if not addresses:
                return None
            self._resolvers[req.cluster] = (time.monotonic(), addresses)
        return dnsnames.cni_dns(addresses, req.args.get("K8S_POD_NAMESPACE"))

    async def attached(self, req: Request) -> list[dict[str, Any]]:
        """The ports of this attachment (one, normally; none once it is gone)."""
        return await self.backend.list("port", tags=f"{ctr_tag(req.container_id)},{if_tag(req.ifname)},"
                                                  f"{net_tag(req.config['name'])}")

    async def addressing(self, port: Mapping[str, Any], gw: str | None = None
                         ) -> tuple[inside.Addressing, list[tuple[str, dict[str, Any]]]]:
        """The container end's addresses and routes, from the port's fixed IPs and subnets:
        every family the port has, a default route per family (via its first subnet's
        gateway, or ``GW`` when it is of that family)."""
        cidrs, routes, pairs = [], [], []
        defaults: set[int] = set()
        fixed_ips = list(port.get("fixed_ips") or ())
        ids = list(dict.fromkeys(f["subnet_id"] for f in fixed_ips))   # a dual-stack port's two: asked at once
        subnets = dict(zip(ids, await asyncio.gather(*(self.subnet(i) for i in ids))))
        for fixed in fixed_ips:
            sub = subnets[fixed["subnet_id"]]
            plen = ipaddress.ip_network(sub["cidr"], strict=False).prefixlen
            cidrs.append(f"{fixed['ip_address']}/{plen}")
            pairs.append((f"{fixed['ip_address']}/{plen}", sub))
            family = ipaddress.ip_address(fixed["ip_address"]).version
            gateway = (gw if gw and ipaddress.ip_address(gw).version == family else None) or sub.get("gateway_ip")
            if gateway and family not in defaults:
                routes.append(("0.0.0.0/0" if family == 4 else "::/0", gateway))
                defaults.add(family)
            routes += [(r["destination"], r["nexthop"]) for r in sub.get("host_routes") or ()]
        return inside.Addressing(tuple(cidrs), tuple(routes)), pairs

    # -- ADD ----------------------------------------------------------------------------

    async def add(self, req: Request) -> dict[str, Any]:
        t0 = time.perf_counter()
        if not req.cluster:
            req.network_ref   # noqa: B018 - a config naming no network is refused before anything runs
        req.port_type         # noqa: B018 - a PORT_TYPE netbay-cni cannot plug, likewise
        # The namespace is checked while the port is made (one API call, bound to this
        # host already); a refused check undoes the port, the runtime's link untouched.
        check = asyncio.ensure_future(self.kernel(self._free, req))
        try:
            port, made, net = await self._claim(req)
        except BaseException:
            await check   # its error first, as when it ran before the claim
            raise
        t1 = time.perf_counter()
        mtu = int(net.get("mtu") or 1500)
        try:
            await check
            vif = self._vif(port, mtu)
        except BaseException:
            await self._release(port, made, None)
            raise
        t2 = time.perf_counter()
        try:
            addressing, pairs = await self.addressing(port, req.args.get("GW"))
            # The agent adopts the fabric end once it appears (the port is bound), as
            # it adopts every container port: security groups, status ACTIVE. On a
            # cloud, os-vif plugs the host end into its Open vSwitch instead.
            await self.kernel(self._wire, vif or Plug(port["id"], net["id"], port["mac_address"], mtu), req,
                              addressing)
        except BaseException as exc:
            await self._release(port, made, req)
            if isinstance(exc, LinkError) and exc.errno == errno.ENODEV:
                # An agent resync swept the pair while ADD ran: all undone, the runtime calls again.
                raise CniError(TRY_AGAIN_LATER, f"{req.ifname} was removed while ADD ran (an agent resync "
                                                "raced it); try again") from None
            raise
        log.debug("ADD %s: port %.1f ms, namespace check after it %.1f ms, veth+addresses %.1f ms",
                  req.container_id[:12], (t1 - t0) * 1e3, (t2 - t1) * 1e3, (time.perf_counter() - t2) * 1e3)
        return results.render(req.version, req.ifname, port["mac_address"], mtu, req.netns, pairs,
                              list(addressing.routes), await self.cluster_dns(req))

    @staticmethod
    def _free(req: Request) -> None:
        """The runtime's namespace is there and ``ifname`` is free in it."""
        try:
            if inside.present(req.netns, req.ifname) is not None:
                raise CniError(INTERNAL, f"container veth name provided ({req.ifname}) already exists")
        except inside.NamespaceGone as exc:
            raise CniError(INTERNAL, exc.strerror) from None

    def _vif(self, port: Mapping[str, Any], mtu: int) -> Vif | None:
        """How to plug ``port`` on the cloud (None: into the fabric); a ``vif_type``
        netbay cannot plug is refused by name."""
        if self.vifs is None:
            return None
        try:
            return Vif.of(port, mtu)
        except Unpluggable as exc:
            raise CniError(INTERNAL, f"netbay-cni: {exc}") from None

    def _wire(self, plug: Plug | Vif, req: Request, addressing: inside.Addressing) -> None:
        """The pair straight into the runtime's namespace, its addresses and routes: one
        hop to the netlink thread."""
        if isinstance(plug, Vif):
            assert self.vifs is not None
            self.vifs.plug(plug, req.netns, req.ifname)
        else:
            self.attacher.plug(plug, req.netns, req.ifname)
        inside.configure(req.netns, req.ifname, addressing)   # ENODEV if it vanished meanwhile

    async def _claim(self, req: Request) -> tuple[dict[str, Any], bool, dict[str, Any]]:
        """The pod's port, claimed for this container and bound to this host in the
        same call (the agent adopts the fabric end when the plug makes it):
        (port, made here, its network)."""
        a = req.args
        ours = [ctr_tag(req.container_id), if_tag(req.ifname), net_tag(req.config["name"])]
        device = a.get("K8S_POD_UID") or req.container_id
        port, net = await self._given(req)
        if port is not None:
            self._same_ip(port, a.get("IPV4"))
            # a port the agent already plugs as a container's keeps its owner (its controller's)
            keep_owner = bool(port.get("device_id")) and port.get("device_owner") in (CONTAINER, KURYR_POD)
            return await self.claims.claim(port, device, ours, keep_owner=keep_owner), False, net
        body: dict[str, Any] = {"network_id": net["id"], "name": self._port_name(req)}
        if net.get("project_id"):
            body["project_id"] = net["project_id"]
        if a.get("IPV4"):
            try:
                body["fixed_ips"] = [{"ip_address": str(ipaddress.ip_interface(a["IPV4"]).ip)}]
            except ValueError:
                raise CniError(INVALID_ENV, f"IPV4={a['IPV4']!r} is not an address") from None
        return await self.claims.make(body, ours, device), True, net

    async def _given(self, req: Request) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """The port a controller made for this attachment (None: make one) and the network
        it is plugged on: the config's, or — with ``cluster`` and no ``network`` — the
        port's own (kuryr's subnet per namespace)."""
        a = req.args
        if a.get("PORT_UUID"):
            try:
                port = await self.backend.show("port", a["PORT_UUID"])
            except NotFound:
                raise CniError(INVALID_ENV, f"PORT_UUID {a['PORT_UUID']}: no such port") from None
            if req.cluster and not req.has_network:
                return port, await self.network(port["network_id"])
            net = await self.network(req.network_ref)
            if port["network_id"] != net["id"]:
                raise CniError(INVALID_ENV, f"PORT_UUID {port['id']} is on network {port['network_id']}, "
                                            f"not on {net['id']} ({req.network_ref})")
            return port, net
        if req.cluster and req.pod:
            port = await self._pods_port(req.cluster, *req.pod, a.get("K8S_POD_UID"))
            return port, await self.network(port["network_id"])
        net = await self.network(req.network_ref)
        if a.get("K8S_POD_UID"):
            found = await self.backend.list("port", network_id=net["id"], device_id=a["K8S_POD_UID"])
            return (found[0] if found else None), net
        return None, net

    async def _pods_port(self, cluster: str, namespace: str, name: str, uid: str | None) -> dict[str, Any]:
        """The port the kuryr cluster's mapping controller made for the pod. Not made yet,
        or still the older pod's of that name: code 11, the kubelet calls again."""
        for device in podport.device_ids(cluster, namespace, name, uid):
            found = await self.backend.list("port", device_id=device, device_owner=podport.POD_OWNER)
            if found:
                break
        else:
            raise CniError(TRY_AGAIN_LATER, f"kuryr cluster {cluster} has no port for pod {namespace}/{name} "
                                            "yet (its mapping controller makes it); try again later")
        port = found[0]
        older = podport.other_pod(port, uid)
        if older:
            raise CniError(TRY_AGAIN_LATER, f"port {port['id']} is pod {namespace}/{name}'s of UID {older}, not "
                                            f"{uid}: the mapping controller has not caught up; try again later")
        return port

    @staticmethod
    def _same_ip(port: Mapping[str, Any], ipv4: str | None) -> None:
        if not ipv4:
            return
        want = str(ipaddress.ip_interface(ipv4).ip)
        if want not in {f["ip_address"] for f in port.get("fixed_ips") or ()}:
            raise CniError(INVALID_ENV, f"IPV4={ipv4} is not an address of port {port['id']}")

    @staticmethod
    def _port_name(req: Request) -> str:
        a = req.args
        if a.get("K8S_POD_NAMESPACE") and a.get("K8S_POD_NAME"):
            return f"{a['K8S_POD_NAMESPACE']}/{a['K8S_POD_NAME']}"
        return f"cni-{a.get('K8S_POD_NAME') or req.container_id[:12]}"

    async def _release(self, port: Mapping[str, Any], made: bool, req: Request | None) -> None:
        """Undo an attachment: the pair (wherever it is), then the port or its binding."""
        await self.kernel(self._unwire, port["id"], req)
        await self.claims.give_back(port, made=made)

    def _unwire(self, port_id: str, req: Request | None) -> None:
        """The pair's container end (if ``req`` names it), then its host end: one hop to
        the netlink thread."""
        if req is not None and req.netns:
            inside.remove(req.netns, req.ifname)
        if self.vifs is not None:
            self.vifs.unplug(port_id)
        else:
            self.attacher.unplug(port_id, False)

    # -- DEL / CHECK / GC / STATUS ------------------------------------------------------------

    async def delete(self, req: Request) -> None:
        """The container's link is removed (it needs no port: found or not, a lost ADD or a
        pre-DEL crash included) while the API is asked for the attachment's ports; each
        port's host end is unplugged while the port is given back. A veth's deletion
        waits on the kernel (tens of ms under load), so overlapping it with the API's
        round trips is most of what DEL can save. Both halves finish before DEL answers."""
        unlink = asyncio.ensure_future(self.kernel(inside.remove, req.netns, req.ifname)) if req.netns else None
        try:
            for port in await self.attached(req):
                await _both(self.kernel(self._unwire, port["id"], None), self.claims.give_back(port, made=False))
        finally:
            if unlink is not None:
                await unlink
        return None

    async def check(self, req: Request) -> None:
        """The attachment as ADD left it: its port (one API call) is bound here with the
        prevResult's addresses; the container end has the port's MAC, addresses and
        routes; the host end is still plugged. The container end is read while the API
        answers (the kernel's half of CHECK off its path); the port's errors come first."""
        if not isinstance(req.config.get("prevResult"), dict):
            raise CniError(INTERNAL, "Required prevResult missing")
        inner = asyncio.ensure_future(self.kernel(inside.seen, req.netns, req.ifname))
        try:
            port, addressing = await self._checked_port(req)
        except BaseException:
            await asyncio.gather(inner, return_exceptions=True)   # its outcome no longer matters
            raise
        try:
            found = (await inner).problems(port["mac_address"], addressing)
        except inside.NamespaceGone as exc:
            raise CniError(INTERNAL, exc.strerror) from None
        if not await self.kernel(self.vifs.plugged if self.vifs else self.attacher.plugged, port["id"]):
            found.append(f"the port's {'host end is in no bridge' if self.vifs else 'fabric end is gone'} "
                         f"({port['id']})")
        if found:
            raise CniError(INTERNAL, "; ".join(found))
        return None

    async def _checked_port(self, req: Request) -> tuple[dict[str, Any], inside.Addressing]:
        """CHECK's API half: the attachment's port, bound to this host, whose addresses are
        the prevResult's; with the addressing the container end should have."""
        ports = await self.attached(req)
        if not ports:
            raise CniError(INTERNAL, f"netbay-cni: no port for container {req.container_id} "
                                     f"interface {req.ifname} on {req.config['name']}")
        port = ports[0]
        if port.get("binding:host_id") != self.host:
            raise CniError(INTERNAL, f"port {port['id']} is bound to {port.get('binding:host_id')!r}, "
                                     f"not to this host {self.host!r}")
        addressing, _pairs = await self.addressing(port, req.args.get("GW"))
        prev = {str(ipaddress.ip_interface(i["address"])) for i in req.config["prevResult"].get("ips") or ()
                if isinstance(i, dict) and i.get("address")}
        if prev != set(addressing.cidrs):
            raise CniError(INTERNAL, f"prevResult addresses {sorted(prev)} are not the port's "
                                     f"{sorted(addressing.cidrs)}")
        return port, addressing

    async def gc(self, req: Request) -> None:
        valid = req.config.get("cni.dev/valid-attachments")
        if valid is None:
            valid = []
        if not isinstance(valid, list):
            raise CniError(UNSUPPORTED_FIELD, "cni.dev/valid-attachments is not a list")
        keep = {(str(v.get("containerID")), str(v.get("ifname"))) for v in valid if isinstance(v, dict)}
        await self.claims.collect(await self.backend.list("port", tags=net_tag(req.config["name"])),
                                  lambda port: (ctr_tag.value(port), if_tag.value(port)) not in keep,
                                  lambda port: self._release(port, False, None))
        return None

    async def status(self, req: Request) -> None:
        try:
            if req.cluster and not req.has_network:   # the cluster's own resources (its service subnet)
                if not await self.backend.list("subnet", tags=podport.cluster_tag(req.cluster)):
                    raise CniError(NOT_AVAILABLE, f"no kuryr cluster {req.cluster}")
            else:
                await self.network(req.network_ref, cached=False)  # the API answers now
        except (CniError, NetbayError) as exc:
            why = exc.msg if isinstance(exc, CniError) else exc.message
            raise CniError(NOT_AVAILABLE, f"netbay-cni cannot serve ADD: {why}") from None
        return None


async def _both(first: Awaitable[Any], second: Awaitable[Any]) -> None:
    """Run both to their end; then the first one's error, if any."""
    results = await asyncio.gather(first, second, return_exceptions=True)
    for outcome in results:
        if isinstance(outcome, BaseException):
            raise outcome


__all__ = ["Cni", "MADE", "ctr_tag", "if_tag", "net_tag"]
