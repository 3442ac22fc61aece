"""Where Docker's ids live in netbay: tags, looked up through the API and cached.

Docker names a network by its NetworkID, an address pool by the PoolID this plugin
returned, an endpoint by its EndpointID. netbay keeps each on its resource:

- network: tag ``netbay.docker.net:<NetworkID>``;
- pool ``subnet:<id>``: that subnet; pool ``cidr:<cidr>``: the subnet tagged
  ``netbay.docker.pool:<cidr with _ for />`` (made or claimed by CreateNetwork; one per cidr);
- endpoint: the port whose ``device_id`` is the EndpointID, or the one tagged
  ``netbay.docker.ep:<EndpointID>`` (its device is the container, once Docker
  said which, or whatever the port's owner set).

The caches only save round trips: a restarted plugin finds everything again.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Any

from netbay.errors import NotFound
from netbay.plugins.libnetwork.resources import PluginError, Resources
from netbay.runtime import tags

OWN = tags.Owner("netbay.docker")
MADE = OWN.made                      # made by this plugin: deleted with the Docker network
PENDING = OWN.flag("pending")        # a subnet RequestPool named; CreateNetwork claims it
DEFAULT_POOL = OWN.flag("default")   # on a subnet pool (the user's): where a pool no --subnet names comes from
CONTAINER_OWNER = "compute:netbay"


def _slashless(cidr: str) -> str:
    """A tag is a URL path segment in the tag API: no ``/`` in it."""
    return cidr.replace("/", "_")


net_tag = OWN.family("net")                        # on a network: the Docker NetworkID it serves
pool_tag = OWN.family("pool", _slashless)          # on a subnet: the Docker pool (cidr) it holds
pending_pool_tag = OWN.family("pending", _slashless)
"""On a subnet pool RequestPool took a cidr from (CreateNetwork makes the subnet)."""
ep_tag = OWN.family("ep")                          # on a port: the Docker EndpointID it serves


BINDING = "netbay.docker.binding:"  # on a port's fabric end: its binding is still on its way


def binding_marks(owner: str) -> str:
    """Where the binding marks of the plugin ``owner`` (:func:`owner_tag`) start: a sweep
    finishes only its own plugin's bindings."""
    return f"{BINDING}{hashlib.sha1(owner.encode()).hexdigest()[:8]}:"


def binding_mark(owner: str, port_id: str, endpoint_id: str) -> str:
    return f"{binding_marks(owner)}{port_id}/{endpoint_id}"


def parse_binding_mark(note: str) -> tuple[str, str]:
    """(port id, EndpointID) of a :func:`binding_mark`."""
    port_id, _, endpoint_id = note[len(BINDING):].partition(":")[2].partition("/")
    return port_id, endpoint_id


def endpoint_of(port: dict[str, Any]) -> str:
    """The Docker endpoint a port serves ("" if none): its tag, else its device."""
    return ep_tag.value(port) or port.get("device_id") or ""


def cidr_pool(cidr: str) -> str:
    return f"cidr:{cidr}"


def subnet_pool(subnet_id: str) -> str:
    return f"subnet:{subnet_id}"


def plen(subnet: dict[str, Any]) -> int:
    return ipaddress.ip_network(subnet["cidr"], strict=False).prefixlen


def is_pool(subnet: dict[str, Any]) -> bool:
    """Does ``subnet`` hold a Docker network's pool (made or claimed by CreateNetwork)?"""
    return pool_tag.on(subnet)


def overlapping(subnets: list[dict[str, Any]], cidr: str, but: str | None = None) -> list[dict[str, Any]]:
    """The Docker pools among ``subnets`` (other than subnet ``but``) that share an address with ``cidr``."""
    mine = ipaddress.ip_network(cidr, strict=False)
    return [s for s in subnets if s["id"] != but and is_pool(s)
            and (other := ipaddress.ip_network(s["cidr"], strict=False)).version == mine.version
            and other.overlaps(mine)]


def overlap_refusal(cidr: str, other: dict[str, Any]) -> PluginError:
    """The one refusal of a pool another Docker network's overlaps (equal, wider or narrower)."""
    same = "is the pool" if str(ipaddress.ip_network(other["cidr"], strict=False)) == cidr else \
        f"overlaps the pool {other['cidr']}"
    return PluginError(f"netbay: pool {cidr} {same} of another Docker network (subnet {other['id']}); "
                       "Docker networks of this driver may not share addresses")


@dataclass(frozen=True)
class Endpoint:
    """What Join and EndpointOperInfo answer from."""
    endpoint_id: str
    port_id: str
    network_id: str
    ifname: str
    gateway: str | None
    routes: tuple[tuple[str, str], ...] = ()
    made: bool = True          # the plugin made the port (ReleaseAddress deletes it)
    gateway6: str | None = None  # a dual-stack or IPv6-only endpoint's IPv6 gateway (Join's GatewayIPv6)


def owner_tag(plugin: str, host: str) -> str:
    """Which plugin (name and host) made a port or took a network: a plugin's sweep only
    ever collects its own."""
    return OWN.family("by")(f"{plugin}@{host}")


class Directory:
    def __init__(self, neutron: Resources, owner: str, device_owner: str = CONTAINER_OWNER) -> None:
        self.neutron, self.owner = neutron, owner
        self.device_owner = device_owner  # of the ports made and bound here (the backend's convention)
        self.subnets: dict[str, dict[str, Any]] = {}    # PoolID -> subnet
        self.networks: dict[str, dict[str, Any]] = {}   # Docker NetworkID -> netbay network
        self.endpoints: dict[str, Endpoint] = {}        # EndpointID -> Endpoint
        self.reserved: dict[tuple[str, str], dict[str, Any]] = {}  # (network, address) -> port, until bound
        self.spared: dict[str, float] = {}  # port id -> until when (monotonic) the sweep leaves it alone

    async def subnet_of_pool(self, pool_id: str, *, missing_ok: bool = False) -> dict[str, Any] | None:
        cached = self.subnets.get(pool_id)
        if cached is not None:
            return cached
        kind, _, ref = pool_id.partition(":")
        subnet = None
        if kind == "subnet":
            try:
                subnet = await self.neutron.show("subnet", ref)
            except NotFound:
                subnet = None
        elif kind == "cidr":
            found = await self.neutron.list("subnet", tags=pool_tag(ref))
            subnet = found[0] if len(found) == 1 else None
            if len(found) > 1:
                raise PluginError(f"netbay: {len(found)} subnets hold Docker pool {ref}")
        else:
            raise PluginError(f"netbay: unknown pool id {pool_id!r}")
        if subnet is None:
            if missing_ok:
                return None
            raise PluginError(f"netbay: no subnet for pool {pool_id} (its Docker network is not made yet)")
        self.subnets[pool_id] = subnet
        return subnet

    async def pools_over(self, cidr: str, but: str | None = None) -> list[dict[str, Any]]:
        """The Docker pools (subnets, any plugin's) other than subnet ``but`` overlapping ``cidr``.
        Listed whole: the tag API matches a tag exactly, and an overlap is no single tag."""
        return overlapping(await self.neutron.list("subnet"), cidr, but)

    async def network(self, network_id: str, *, missing_ok: bool = False) -> dict[str, Any] | None:
        cached = self.networks.get(network_id)
        if cached is not None:
            return cached
        found = await self.neutron.list("network", tags=net_tag(network_id))
        if not found:
            if missing_ok:
                return None
            raise PluginError(f"netbay: no netbay network for Docker network {network_id[:12]}")
        self.networks[network_id] = found[0]
        return found[0]

    async def endpoint_port(self, endpoint_id: str) -> dict[str, Any] | None:
        found = await self.neutron.list("port", device_id=endpoint_id)
        if not found:
            found = await self.neutron.list("port", tags=ep_tag(endpoint_id))
        return found[0] if found else None

    async def port_at(self, network_id: str, address: str, *, take: bool = False) -> dict[str, Any] | None:
        """The port holding ``address`` on ``network_id`` (addresses are unique there);
        ``take``: the one RequestAddress just made here, without asking, if it did."""
        if take and (reserved := self.reserved.pop((network_id, address), None)) is not None:
            return reserved
        found = await self.neutron.list("port", network_id=network_id, fixed_ips=f"ip_address={address}")
        return found[0] if found else None

    def forget_network(self, network_id: str) -> None:
        self.networks.pop(network_id, None)
        for eid in [e for e, ep in self.endpoints.items() if ep.network_id == network_id]:
            self.endpoints.pop(eid, None)

    def forget_pool(self, pool_id: str) -> None:
        self.subnets.pop(pool_id, None)


__all__ = ["BINDING", "CONTAINER_OWNER", "DEFAULT_POOL", "MADE", "PENDING", "Directory", "Endpoint", "binding_mark", "binding_marks",
           "cidr_pool",
           "endpoint_of", "ep_tag", "is_pool", "overlap_refusal", "overlapping", "parse_binding_mark",
           "net_tag", "owner_tag",
           "pending_pool_tag", "plen", "pool_tag", "subnet_pool"]
