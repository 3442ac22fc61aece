"""IpamDriver: a Docker address pool is a netbay subnet, an address is a netbay port.

Both families: a dual-stack Docker network has one pool of each, and Docker asks each
for the endpoint's address with the same MAC; the second request adds its address to
the port the first made (one port per endpoint, as Neutron's dual-stack ports are).

RequestPool resolves (``--ipam-opt netbay.subnet=`` / ``netbay.subnetpool=``) but
makes nothing: the subnet is made or claimed by CreateNetwork, which alone knows
the netbay network (``-o``). An endpoint's RequestAddress makes the port itself
(owner ``compute:netbay``, Docker's MAC, tagged as made here) so the address is
netbay's from the start, and has its pair plugged ahead (``prepare``); CreateEndpoint
binds it. Gateway and auxiliary
addresses are only answered (the gateway is the subnet's).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from netbay.errors import NetbayError
from netbay.plugins.libnetwork.calls import address as valid_address
from netbay.plugins.libnetwork.directory import (DEFAULT_POOL, MADE, OWN, PENDING, Directory, cidr_pool, endpoint_of, overlap_refusal,
                                                 pending_pool_tag, plen, subnet_pool)
from netbay.plugins.libnetwork.journal import REPLAYING
from netbay.plugins.libnetwork.resources import PluginError, Resources
from netbay.plugins.libnetwork.options import PoolOptions
from netbay.runtime.claim import Claims

LOCAL_SPACE = "netbay"
GLOBAL_SPACE = "netbay-global"
GATEWAY = "com.docker.network.gateway"
MAC_OPTION = "com.docker.network.endpoint.macaddress"
MAX_PREFIX_SCAN = 65536
ADOPTED_GRACE = 60.0  # a half-made port a resend adopted: CreateEndpoint takes it well within this


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise PluginError(f"netbay: invalid pool {cidr!r}") from None


Prepare = Callable[[dict[str, Any], dict[str, Any]], Awaitable[None]]
Unprepare = Callable[[str], Awaitable[None]]


async def _nothing(*_args: Any) -> None:
    return None


def _family(obj: dict[str, Any]) -> int:
    """4 or 6: a subnet's or subnet pool's IP version (from its CIDR or first prefix if unsaid)."""
    if obj.get("ip_version") in (4, 6):
        return int(obj["ip_version"])
    first = obj.get("cidr") or next(iter(obj.get("prefixes") or ()), "0.0.0.0/0")
    return _network(first).version


def _no_pool(family: int) -> str:
    """The refusal of a pool request that names no pool of its family."""
    if family == 4:
        # Docker asks a remote driver for an IPv4 pool even with --ipv4=false or an IPv6 --subnet alone.
        return ("netbay: this driver needs an IPv4 pool: --subnet <cidr> (or --ipam-opt netbay.subnet=<id> or "
                f"netbay.subnetpool=<id> of IPv4, or an IPv4 subnet pool tagged {DEFAULT_POOL}); Docker asks a "
                "remote driver for IPv4 even with --ipv4=false, so an IPv6 network needs one too")
    return ("netbay: --ipv6 needs an IPv6 pool from this driver: --subnet <IPv6 cidr> (or --ipam-opt "
            f"netbay.subnet=<id> or netbay.subnetpool=<id> of IPv6, their .v6 keys, or an IPv6 subnet pool "
            f"tagged {DEFAULT_POOL})")


class Ipam:
    def __init__(self, neutron: Resources, directory: Directory, claims: Claims, prepare: Prepare = _nothing,
                 unprepare: Unprepare = _nothing) -> None:
        """``claims``: the network driver's (ports are made with them, and CreateEndpoint
        claims them); ``prepare(port, subnet)``: what the network driver does ahead for an
        endpoint's port (plugs its pair); ``unprepare(port_id)`` undoes it when Docker
        releases the address unused."""
        self.neutron, self.dir, self.claims = neutron, directory, claims
        self.prepare, self.unprepare = prepare, unprepare

    async def capabilities(self, _req: dict[str, Any]) -> dict[str, Any]:
        # Docker makes the endpoint's MAC before RequestAddress and sends it: the port gets it.
        return {"RequiresMACAddress": True, "RequiresRequestReplay": False}

    async def default_address_spaces(self, _req: dict[str, Any]) -> dict[str, Any]:
        return {"LocalDefaultAddressSpace": LOCAL_SPACE, "GlobalDefaultAddressSpace": GLOBAL_SPACE}

    # -- pools -------------------------------------------------------------------------------

    async def request_pool(self, req: dict[str, Any]) -> dict[str, Any]:
        family = 6 if req.get("V6") else 4
        if req.get("SubPool"):
            raise PluginError("netbay: --ip-range is not supported: netbay allocates from the whole subnet")
        opts = PoolOptions.parse(req.get("Options"))
        asked = str(_network(req["Pool"])) if req.get("Pool") else ""
        if asked and _network(asked).version != family:
            raise PluginError(f"netbay: {asked} is not an IPv{family} pool")
        subnet = await self._named("subnet", opts.subnet_v6 if family == 6 else None, opts.subnet, family)
        if subnet is not None:
            if asked and asked != str(_network(subnet["cidr"])):
                raise PluginError(f"netbay: subnet {subnet['id']} is {subnet['cidr']}, not {asked}")
            await self.neutron.add_tag("subnet", subnet["id"], PENDING)
            return {"PoolID": subnet_pool(subnet["id"]), "Pool": subnet["cidr"], "Data": {}}
        pool = await self._named("subnetpool", opts.subnetpool_v6 if family == 6 else None, opts.subnetpool, family)
        if pool is None and not asked:
            pool = await self._default_pool(family)
        if pool is not None:
            asked = asked or await self._free_prefix(pool, family)
            if not any(_network(asked).subnet_of(_network(p)) for p in pool.get("prefixes") or ()
                       if _network(p).version == _network(asked).version):
                raise PluginError(f"netbay: {asked} is not within subnet pool {pool['id']} "
                                  f"({', '.join(pool.get('prefixes') or ())})")
            await self.neutron.add_tag("subnetpool", pool["id"], pending_pool_tag(asked))
        if not asked:
            raise PluginError(_no_pool(family))
        taken = await self.dir.pools_over(asked)
        if taken:  # a first answer; CreateNetwork decides for good (two may be asked at once)
            raise overlap_refusal(asked, taken[0])
        return {"PoolID": cidr_pool(asked), "Pool": asked, "Data": {}}

    async def _named(self, collection: str, own: str | None, shared: str | None, family: int
                     ) -> dict[str, Any] | None:
        """The subnet or subnet pool an ``--ipam-opt`` names for this family's pool: ``own``
        (a ``.v6`` key) must be of it; ``shared`` (``netbay.subnet``/``netbay.subnetpool``,
        which Docker hands both families' calls) serves the family it is of, and only it."""
        if own:
            found = await self.neutron.find(collection, own)
            if _family(found) != family:
                raise PluginError(f"netbay: {collection} {found['id']} is IPv{_family(found)}, "
                                  f"not IPv{family} (--ipam-opt …v6 names the IPv6 pool)")
            return found
        if shared:
            found = await self.neutron.find(collection, shared)
            return found if _family(found) == family else None
        return None

    async def _default_pool(self, family: int) -> dict[str, Any] | None:
        """The subnet pool of this family tagged :data:`DEFAULT_POOL` (kuryr-libnetwork's
        default subnet pool; Docker's own default address pools): a pool no ``--subnet``
        names comes from it. Docker asks a remote driver for an IPv4 pool even with
        ``--ipv4=false``, so an IPv6 network needs one (or an IPv4 ``--subnet``)."""
        found = [p for p in await self.neutron.list("subnetpool", tags=DEFAULT_POOL) if _family(p) == family]
        return found[0] if found else None

    async def _free_prefix(self, pool: dict[str, Any], family: int = 4) -> str:
        size = int(pool.get("default_prefixlen") or (24 if family == 4 else 64))
        used = [_network(s["cidr"]) for s in await self.neutron.list("subnet", subnetpool_id=pool["id"])]
        scanned = 0
        for prefix in pool.get("prefixes") or ():
            net = _network(prefix)
            if net.version != family or size < net.prefixlen:
                continue
            for candidate in net.subnets(new_prefix=size):
                scanned += 1
                if scanned > MAX_PREFIX_SCAN:
                    break
                if not any(candidate.version == u.version and candidate.overlaps(u) for u in used):
                    return str(candidate)
        raise PluginError(f"netbay: subnet pool {pool['id']} has no free IPv{family} /{size}")

    async def release_pool(self, req: dict[str, Any]) -> dict[str, Any]:
        pool_id = req.get("PoolID") or ""
        kind, _, ref = pool_id.partition(":")
        self.dir.forget_pool(pool_id)
        if kind == "subnet":
            await self._quietly_untag("subnet", ref, PENDING)
        elif kind == "cidr":
            for pool in await self.neutron.list("subnetpool", tags=pending_pool_tag(ref)):
                await self._quietly_untag("subnetpool", pool["id"], pending_pool_tag(ref))
        return {}

    async def _quietly_untag(self, collection: str, obj_id: str, tag: str) -> None:
        try:
            await self.neutron.remove_tag(collection, obj_id, tag)
        except NetbayError:
            pass  # gone with its network: nothing to release

    # -- addresses ---------------------------------------------------------------------------

    async def request_address(self, req: dict[str, Any]) -> dict[str, Any]:
        pool_id, address = req["PoolID"], req.get("Address") or ""
        if address:
            valid_address("RequestAddress: Address", address)
        opts = req.get("Options") or {}
        if opts.get("RequestAddressType") == GATEWAY:
            return {"Address": await self._gateway(pool_id, address), "Data": {}}
        mac = opts.get(MAC_OPTION)
        if mac is not None and not isinstance(mac, str):
            raise PluginError(f"netbay: RequestAddress: option {MAC_OPTION} must be a MAC address string")
        if not mac:  # an auxiliary address (--aux-address): Docker's to keep, nothing to make
            if not address:
                raise PluginError("netbay: RequestAddress: neither an endpoint's MAC nor an address was given "
                                  "(an auxiliary address needs its address)")
            if pool_id.startswith("cidr:"):
                return {"Address": f"{address}/{_network(pool_id.partition(':')[2]).prefixlen}", "Data": {}}
            subnet = await self.dir.subnet_of_pool(pool_id)
            assert subnet is not None
            return {"Address": f"{address}/{plen(subnet)}", "Data": {}}
        subnet = await self.dir.subnet_of_pool(pool_id)
        assert subnet is not None
        # A resend after a restart: this plugin's unbound ports of that MAC, asked once for both uses.
        mine = await self._made_for(subnet, mac) if REPLAYING.get() and not address else None
        sibling = None if address else self._sibling(subnet, mac, mine)
        if sibling is not None:   # the endpoint's other family: the same port, one more address
            port = await self._add_address(sibling, subnet)
        else:
            port = await self._port(subnet, address, mac, mine)
            try:
                await self.prepare(port, subnet)
            except Exception:
                if OWN.made_it(port):
                    await self.claims.give_back(port)
                raise
        ip = next(f["ip_address"] for f in port["fixed_ips"] if f["subnet_id"] == subnet["id"])
        if len(self.dir.reserved) > 4096:  # never bound (Docker rolled back): forget the oldest
            self.dir.reserved.pop(next(iter(self.dir.reserved)))
        for fixed in port["fixed_ips"]:   # every address of it names the port as it is now
            self.dir.reserved[(subnet["network_id"], fixed["ip_address"])] = port
        return {"Address": f"{ip}/{plen(subnet)}", "Data": {}}

    async def _made_for(self, subnet: dict[str, Any], mac: str) -> list[dict[str, Any]]:
        """The ports this plugin made for ``mac`` on ``subnet``'s network that no endpoint has
        (bound to nothing): a crash's half-made allocations, for Docker's resend."""
        return [p for p in await self.neutron.list("port", network_id=subnet["network_id"], mac_address=mac,
                                                   tags=f"{MADE},{self.dir.owner}")
                if not p.get("binding:host_id") and not endpoint_of(p)]

    def _sibling(self, subnet: dict[str, Any], mac: str, mine: list[dict[str, Any]] | None) -> dict[str, Any] | None:
        """The port RequestAddress just made for this endpoint's other family (a dual-stack
        network: Docker asks each pool for an address, with the same MAC), unbound and with
        no address on ``subnet`` yet; None: this is the endpoint's first address. After a
        restart (Docker resending) it is among ``mine``; otherwise the reservations know it."""
        def fits(port: dict[str, Any]) -> bool:
            return (port["network_id"] == subnet["network_id"] and (port.get("mac_address") or "").lower() == mac.lower()
                    and not port.get("binding:host_id") and not endpoint_of(port)
                    and not any(f["subnet_id"] == subnet["id"] for f in port.get("fixed_ips") or ()))
        found = next((p for p in reversed(self.dir.reserved.values()) if fits(p)), None)
        return found if found is not None else next((p for p in mine or () if fits(p)), None)

    async def _add_address(self, port: dict[str, Any], subnet: dict[str, Any]) -> dict[str, Any]:
        fixed = [{"subnet_id": f["subnet_id"], "ip_address": f["ip_address"]} for f in port["fixed_ips"]]
        return await self.neutron.update("port", port["id"], {"fixed_ips": [*fixed, {"subnet_id": subnet["id"]}]})

    async def _gateway(self, pool_id: str, address: str) -> str:
        subnet = await self.dir.subnet_of_pool(pool_id, missing_ok=True)
        if subnet is not None:
            gw = subnet.get("gateway_ip")
            if address and gw and address != gw:
                raise PluginError(f"netbay: the gateway of subnet {subnet['id']} is {gw}, not {address}")
            gw = gw or address
            if not gw:
                # Docker asks every pool for a gateway; a subnet without one (Neutron allows it,
                # Zun runs containers on it) answers its network address, which no port holds:
                # Join gives no route to it, so the container has no default route.
                gw = str(_network(subnet["cidr"]).network_address)
            return f"{gw}/{plen(subnet)}"
        net = _network(pool_id.partition(":")[2])
        if address and ipaddress.ip_address(address) not in net:
            raise PluginError(f"netbay: gateway {address} is not within {net}")
        return f"{address or next(iter(net.hosts()))}/{net.prefixlen}"

    async def _port(self, subnet: dict[str, Any], address: str, mac: str,
                    mine: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The endpoint's port: an existing unbound one with that address (given by its
        owner, e.g. the container API), a crash's half-made one among ``mine`` (Docker's
        resend), else a new one."""
        if address:
            have = await self.dir.port_at(subnet["network_id"], address)
            if have is not None:
                if have.get("device_owner") not in ("", self.dir.device_owner) or have.get("binding:host_id"):
                    raise PluginError(f"netbay: address {address} is in use by port {have['id']}")
                if (have.get("mac_address") or "").lower() != mac.lower():
                    have = await self.neutron.update("port", have["id"], {"mac_address": mac})
                return have
        elif (half := self._half_made(subnet, mine or ())) is not None:
            self.dir.spared[half["id"]] = time.monotonic() + ADOPTED_GRACE  # old, and no endpoint's yet
            return half
        fixed: dict[str, str] = {"subnet_id": subnet["id"]}
        if address:
            fixed["ip_address"] = address
        return await self.claims.make({"network_id": subnet["network_id"], "fixed_ips": [fixed], "mac_address": mac,
                                       "name": "docker"}, [self.dir.owner])

    @staticmethod
    def _half_made(subnet: dict[str, Any], mine: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
        """The port a RequestAddress cut short by a crash made (one of ``mine``, with an address
        on ``subnet``): Docker's resend finishes that call with it rather than make a second one."""
        return next((p for p in mine if any(f["subnet_id"] == subnet["id"] for f in p.get("fixed_ips") or ())), None)

    async def release_address(self, req: dict[str, Any]) -> dict[str, Any]:
        pool_id, address = req.get("PoolID") or "", req.get("Address") or ""
        subnet = await self.dir.subnet_of_pool(pool_id, missing_ok=True)
        if subnet is None or not address or address == subnet.get("gateway_ip"):
            return {}
        self.dir.reserved.pop((subnet["network_id"], address.split("/")[0]), None)
        port = await self.dir.port_at(subnet["network_id"], address.split("/")[0])
        if port is not None:
            await self.unprepare(port["id"])
        if port is not None and OWN.made_it(port):
            await self.claims.give_back(port)
        return {}


__all__ = ["Ipam", "LOCAL_SPACE", "GLOBAL_SPACE"]
