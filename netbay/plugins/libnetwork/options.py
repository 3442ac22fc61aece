"""The options ``docker network create`` passes: ``-o`` (CreateNetwork) and
``--ipam-opt`` (RequestPool), with netbay's names and kuryr-libnetwork's; and
CreateNetwork's pools (``--subnet``, one per family).

An option this driver does not know is refused with a message naming the ones it
takes (a typo must not silently make a new network).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netbay.plugins.libnetwork.resources import PluginError

NETWORK_KEYS = {"netbay.network": "network", "neutron.net.uuid": "network", "neutron.net.name": "network",
                "netbay.cluster": "cluster", "netbay.node": "node"}
IGNORED_NETWORK_KEYS = {"neutron.net.shared", "neutron.subnet.uuid", "neutron.subnet.name",
                        "neutron.pool.uuid", "neutron.pool.name"}   # the pool comes as --ipam-opt
POOL_KEYS = {"netbay.subnet": "subnet", "neutron.subnet.uuid": "subnet", "neutron.subnet.name": "subnet",
             "netbay.subnetpool": "subnetpool", "neutron.pool.uuid": "subnetpool", "neutron.pool.name": "subnetpool",
             # kuryr-libnetwork's IPv6 keys (a dual-stack network names one of each family)
             "netbay.subnet.v6": "subnet_v6", "neutron.subnet.v6.uuid": "subnet_v6",
             "neutron.subnet.v6.name": "subnet_v6", "netbay.subnetpool.v6": "subnetpool_v6",
             "neutron.pool.v6.uuid": "subnetpool_v6", "neutron.pool.v6.name": "subnetpool_v6"}
IGNORED_POOL_KEYS = {"neutron.net.shared"}


def _check(given: Mapping[str, Any], known: Mapping[str, str], ignored: set[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in given.items():
        if key in known:
            if not isinstance(value, str) or not value:
                raise PluginError(f"netbay: option {key} needs a value")
            out[known[key]] = value
        elif key not in ignored and not key.startswith("com.docker."):
            raise PluginError(f"netbay: unknown {flag} option {key!r} (this driver takes "
                              f"{', '.join(sorted(known))})")
    return out


@dataclass(frozen=True)
class NetworkOptions:
    network: str | None = None      # an existing netbay network (id or name)
    cluster: str | None = None      # a cluster whose nodes the containers are placed on
    node: str | None = None         # one node of it (default: the least-loaded minion)

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> NetworkOptions:
        generic = (options or {}).get("com.docker.network.generic") or {}
        if not isinstance(generic, Mapping):
            raise PluginError("netbay: CreateNetwork: the -o options (com.docker.network.generic) must be an object")
        found = cls(**_check(generic, NETWORK_KEYS, IGNORED_NETWORK_KEYS, "-o"))
        if found.node and not found.cluster:
            raise PluginError("netbay: -o netbay.node needs -o netbay.cluster")
        return found


@dataclass(frozen=True)
class PoolOptions:
    """``subnet``/``subnetpool`` serve the pool of their own family (Docker hands every
    ``--ipam-opt`` to both families' RequestPool); the ``_v6`` ones, kuryr's
    ``neutron.*.v6.*``, the IPv6 pool only."""
    subnet: str | None = None       # an existing netbay subnet (id or name)
    subnetpool: str | None = None   # a netbay subnet pool the new subnet comes from
    subnet_v6: str | None = None
    subnetpool_v6: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> PoolOptions:
        found = _check(options or {}, POOL_KEYS, IGNORED_POOL_KEYS, "--ipam-opt")
        return cls(**found)


def network_pools(req: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """(CIDR, gateway) of CreateNetwork's pools: at most one per family, at least one."""
    pools = []
    for key in ("IPv4Data", "IPv6Data"):
        data = req.get(key) or []
        if len(data) > 1:
            raise PluginError(f"netbay: a netbay Docker network takes one {key[:4]} pool, not {len(data)}")
        for i, pool in enumerate(data):
            try:
                cidr = str(ipaddress.ip_network(pool["Pool"], strict=False))
            except ValueError:
                raise PluginError(f"netbay: CreateNetwork: {key}[{i}]: Pool {pool['Pool']!r} is not a CIDR") from None
            pools.append((cidr, (pool.get("Gateway") or "").split("/")[0] or None))
    if not pools:
        raise PluginError("netbay: a netbay Docker network needs a pool (--subnet)")
    return pools


__all__ = ["NetworkOptions", "PoolOptions", "network_pools"]
