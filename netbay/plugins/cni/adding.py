"""CNI ADD: the pod's port found or made, claimed and bound to this host, its pair
plugged into the fabric (or a cloud's Open vSwitch) and addressed inside the
runtime's namespace; and undoing that (a failed ADD, DEL, GC). Which port is used is
said in :mod:`.service`."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import time
from collections.abc import Mapping
from typing import Any

from netbay.dataplane.fabric import CONTAINER, KURYR_POD
from netbay.dataplane.rtnl import LinkError
from netbay.errors import NotFound
from netbay.k8s import podport
from netbay.plugins.cni import result as results
from netbay.plugins.cni.attachment import Lookups, ctr_tag, if_tag, net_tag
from netbay.plugins.cni.spec import INTERNAL, INVALID_ENV, TRY_AGAIN_LATER, CniError, Request
from netbay.runtime import inside
from netbay.runtime.attach import Plug
from netbay.runtime.vif import Unpluggable, Vif

log = logging.getLogger("netbay.cni")


class Adding(Lookups):
    """ADD and its undoing."""

    async def add(self, req: Request) -> dict[str, Any]:
        t0 = time.perf_counter()
        if not req.cluster:
            req.network_ref   # noqa: B018 - a config naming no network is refused before anything runs
        req.port_type         # noqa: B018 - a PORT_TYPE netbay-cni cannot plug, likewise
        ticket = self.watch.ticket() if self.watch else None
        try:
            given, net = await self._given(req)   # a new port's network: cached, no API call
        except BaseException:
            await self.kernel(self._free, req)    # the namespace's error first, as the reference plugins'
            raise
        mtu = int(net.get("mtu") or 1500)
        # While the API makes (or binds) the port, the namespace is checked and, into the
        # fabric, the pair made under a provisional name (Attacher.prepare): after the
        # answer only its naming and addresses remain. A refused check undoes the port,
        # the runtime's link untouched; a refused port undoes the pair.
        prepared = asyncio.ensure_future(self.kernel(self._prepare, req, net["id"], mtu))
        try:
            port, made = await self._claim(req, given, net)
        except BaseException:
            if await prepared is not None:   # its error first, as when it ran before the claim
                await self.kernel(inside.remove, req.netns, req.ifname)
            raise
        t1 = time.perf_counter()
        provisional: str | None = None
        try:
            provisional = await prepared
            vif = self._vif(port, mtu)
        except BaseException:
            await self._release(port, made, req if provisional is not None else None)
            raise
        t2 = time.perf_counter()
        try:
            addressing, pairs = await self.addressing(port, req.args.get("GW"))
            # The agent adopts the fabric end once it appears (the port is bound), as
            # it adopts every container port: security groups, status ACTIVE. On a
            # cloud, os-vif plugs the host end into its Open vSwitch instead.
            await self.kernel(self._wire, vif or Plug(port["id"], net["id"], port["mac_address"], mtu), req,
                              addressing, provisional)
        except BaseException as exc:
            await self._release(port, made, req)
            if isinstance(exc, LinkError) and exc.errno == errno.ENODEV:
                # The pair was removed while ADD ran (an agent resync, the namespace going): all undone,
                # the runtime calls again.
                raise CniError(TRY_AGAIN_LATER, f"{req.ifname} was removed while ADD ran (an agent resync "
                                                "raced it); try again") from None
            raise
        if self.watch is not None:   # CHECK will find it there
            self.watch.put(port, ticket)
        log.debug("ADD %s: port %.1f ms, pair ready after it %.1f ms, naming+addresses %.1f ms",
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
            raise CniError(INTERNAL, exc.strerror or str(exc)) from None

    def _prepare(self, req: Request, network_id: str, mtu: int) -> str | None:
        """:meth:`_free`, then (into the fabric) the pair under a provisional name: that
        name, or None when nothing was made (a cloud's port is plugged by os-vif)."""
        self._free(req)
        if self.vifs is not None:
            return None
        return self.attacher.prepare(network_id, mtu, req.netns, req.ifname)

    def _vif(self, port: Mapping[str, Any], mtu: int) -> Vif | None:
        """How to plug ``port`` on the cloud (None: into the fabric); a ``vif_type``
        netbay cannot plug is refused by name."""
        if self.vifs is None:
            return None
        try:
            return Vif.of(port, mtu)
        except Unpluggable as exc:
            raise CniError(INTERNAL, f"netbay-cni: {exc}") from None

    def _wire(self, plug: Plug | Vif, req: Request, addressing: inside.Addressing,
              provisional: str | None = None) -> None:
        """The pair straight into the runtime's namespace (or the prepared one named for
        the port), its MAC, addresses and routes: one hop to the netlink thread."""
        mac = None
        if isinstance(plug, Vif):
            assert self.vifs is not None
            self.vifs.plug(plug, req.netns, req.ifname)
        elif provisional is not None:
            self.attacher.claim(provisional, plug.port_id)
            mac = plug.mac or None
        else:
            self.attacher.plug(plug, req.netns, req.ifname)
        inside.configure(req.netns, req.ifname, addressing, mac=mac)   # ENODEV if it vanished meanwhile

    async def _claim(self, req: Request, port: dict[str, Any] | None, net: dict[str, Any]
                     ) -> tuple[dict[str, Any], bool]:
        """The pod's port (``port``: the one :meth:`_given` found, else a new one on
        ``net``), claimed for this container and bound to this host in the same call (the
        agent adopts the fabric end when the plug makes it): (port, made here)."""
        a = req.args
        ours = [ctr_tag(req.container_id), if_tag(req.ifname), net_tag(req.config["name"])]
        device = a.get("K8S_POD_UID") or req.container_id
        if port is not None:
            self._same_ip(port, a.get("IPV4"))
            # a port the agent already plugs as a container's keeps its owner (its controller's)
            keep_owner = bool(port.get("device_id")) and port.get("device_owner") in (CONTAINER, KURYR_POD)
            return await self.claims.claim(port, device, ours, keep_owner=keep_owner), False
        body: dict[str, Any] = {"network_id": net["id"], "name": self._port_name(req)}
        if net.get("project_id"):
            body["project_id"] = net["project_id"]
        if a.get("IPV4"):
            try:
                body["fixed_ips"] = [{"ip_address": str(ipaddress.ip_interface(a["IPV4"]).ip)}]
            except ValueError:
                raise CniError(INVALID_ENV, f"IPV4={a['IPV4']!r} is not an address") from None
        return await self.claims.make(body, ours, device), True

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
        if self.watch is not None:
            self.watch.forget(port["id"])
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


__all__ = ["Adding"]
