"""What the CNI daemon knows an attachment by and reads about it: its tags
(``netbay.cni.ctr:<CNI_CONTAINERID>``, ``netbay.cni.if:<CNI_IFNAME>``,
``netbay.cni.net:<config name>``: a restarted daemon finds its ports by them), the
network, subnets and cluster resolver it uses (cached briefly), and the addresses and
routes its container end should have (:mod:`.service` puts the verbs together)."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from netbay.backends.aio import ThreadedBackend
from netbay.k8s import podport
from netbay.k8s.dns import names as dnsnames
from netbay.plugins.cni.spec import INVALID_CONFIG, CniError, Request
from netbay.runtime import inside, resolve, tags
from netbay.runtime.attach import Attacher
from netbay.runtime.claim import Claims
from netbay.runtime.kernel import KernelThread
from netbay.runtime.vif import OvsVifs

if TYPE_CHECKING:
    from netbay.plugins.cni.watch import PortWatch

OWN = tags.Owner("netbay.cni")
MADE = OWN.made
DEVICE_SET = OWN.flag("device")  # on a given port: its device_id was empty, ADD set it (Claims.device_set)
CACHE_TTL = 30.0


ctr_tag = OWN.family("ctr")   # the container (CNI_CONTAINERID) a port serves
if_tag = OWN.family("if")     # its interface in the container (CNI_IFNAME)
net_tag = OWN.family("net")   # the network configuration's name


def key_of(port: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The attachment a port serves, (container, ifname, config name), from its tags."""
    key = (ctr_tag.value(port), if_tag.value(port), net_tag.value(port))
    return key if all(key) else None


def request_key(req: Request) -> tuple[str, str, str]:
    return req.container_id, req.ifname, str(req.config["name"])


class Lookups:
    """The daemon's state (set by :class:`netbay.plugins.cni.service.Cni`) and its reads."""

    attacher: Attacher
    owner: str
    vifs: OvsVifs | None
    backend: ThreadedBackend
    host: str
    claims: Claims
    kernel: KernelThread
    watch: PortWatch | None   # CHECK's ports, current to the change feed (None: every CHECK asks the API)
    _networks: dict[str, tuple[float, dict[str, Any]]]
    _subnets: dict[str, tuple[float, dict[str, Any]]]
    _resolvers: dict[str, tuple[float, list[str]]]

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


__all__ = ["CACHE_TTL", "DEVICE_SET", "MADE", "OWN", "Lookups", "ctr_tag", "if_tag", "key_of", "net_tag",
           "request_key"]
