"""Subnet leases: each node's share of a container network (flannel's subnet manager).

Pure functions over plain data, no I/O. A network config is flannel's
``{"Network": CIDR, "SubnetLen": N}`` (optionally ``SubnetMin``/``SubnetMax``); a
lease set is a plain ``dict`` ``{node id: subnet CIDR}``, what the integrator
persists (JSON as is) and hands back on the next call.

* :func:`allocate` — the whole set for a list of nodes: every node that already
  holds a valid lease keeps it (stable across restarts and scaling), nodes that
  are gone lose theirs, new nodes get the lowest free subnets (in node-id order,
  deterministic). Not enough room raises :class:`LeasesExhausted` saying how many
  fit, and nothing is changed.
* :func:`acquire` / :func:`release` — one node at a time.

As in flannel, ``SubnetMin`` defaults to the *second* subnet of the network (the
first, ``10.100.0.0/24`` for the default config, is kept free) and ``SubnetMax``
to the last one. Calico blocks use every block of the pool: pass
``subnet_min=`` the pool's first block (see :func:`block_config`).

A network may be IPv6 (flannel's ``IPv6Network`` / ``IPv6SubnetLen``, 64 by
default): a dual-stack node holds one lease of each family, and :func:`paired`
gives the IPv6 one as the subnet of the same number as its IPv4 lease, so the pair
is as stable as the IPv4 lease and nothing more is stored.

    >>> cfg = NetworkConfig("10.100.0.0/16", 24)
    >>> allocate(cfg, ["m0", "n0"], {})
    {'m0': '10.100.1.0/24', 'n0': '10.100.2.0/24'}
    >>> capacity(cfg)
    255
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "NetworkConfig", "LeaseError", "LeasesExhausted", "allocate", "acquire", "release",
    "capacity", "gateway", "host", "same_host", "block_config", "paired",
]

Leases = dict[str, str]


class LeaseError(ValueError):
    """A network config or lease set that cannot be used."""


class LeasesExhausted(LeaseError):
    """More nodes than subnets: ``capacity`` subnets fit, ``needed`` were asked for."""

    def __init__(self, config: NetworkConfig, capacity: int, needed: int) -> None:
        self.config = config
        self.capacity = capacity
        self.needed = needed
        super().__init__(
            f"network {config.network} with /{config.subnet_len} subnets has room for "
            f"{capacity} node lease(s) (from {config.first} to {config.last}); "
            f"{needed} needed — use a larger network or a longer subnet length")


@dataclass(frozen=True)
class NetworkConfig:
    """Flannel's network config: ``network`` split into ``/subnet_len`` leases."""

    network: str
    subnet_len: int = 24
    subnet_min: str | None = None   # first lease (default: the second subnet)
    subnet_max: str | None = None   # last lease (default: the last subnet)

    def __post_init__(self) -> None:
        try:
            net = ipaddress.ip_network(self.network, strict=True)
        except ValueError as exc:
            raise LeaseError(f"invalid network {self.network!r}: {exc}") from None
        longest = net.max_prefixlen - 2
        if not isinstance(self.subnet_len, int) or not net.prefixlen < self.subnet_len <= longest:
            raise LeaseError(f"subnet length /{self.subnet_len} must be longer than the network's "
                             f"/{net.prefixlen} and at most /{longest} (a gateway and a pod)")
        for which in ("subnet_min", "subnet_max"):
            value = getattr(self, which)
            if value is None:
                continue
            try:
                sub = ipaddress.ip_network(value, strict=True)
            except ValueError as exc:
                raise LeaseError(f"invalid {which} {value!r}: {exc}") from None
            if sub.prefixlen != self.subnet_len or not sub.subnet_of(net):
                raise LeaseError(f"{which} {value} is not a /{self.subnet_len} of {self.network}")

    @property
    def net(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.network)

    @property
    def _size(self) -> int:
        return 1 << (self.net.max_prefixlen - self.subnet_len)

    @property
    def _count(self) -> int:
        return 1 << (self.subnet_len - self.net.prefixlen)

    def _index(self, subnet: str) -> int:
        return (int(ipaddress.ip_network(subnet).network_address)
                - int(self.net.network_address)) // self._size

    @property
    def first_index(self) -> int:
        return self._index(self.subnet_min) if self.subnet_min else min(1, self._count - 1)

    @property
    def last_index(self) -> int:
        return self._index(self.subnet_max) if self.subnet_max else self._count - 1

    def subnet(self, i: int) -> str:
        addr = ipaddress.ip_address(int(self.net.network_address) + i * self._size)
        return f"{addr}/{self.subnet_len}"

    @property
    def first(self) -> str:
        return self.subnet(self.first_index)

    @property
    def last(self) -> str:
        return self.subnet(self.last_index)

    def valid(self, subnet: str) -> bool:
        """Whether ``subnet`` is a lease this config can hand out."""
        try:
            sub = ipaddress.ip_network(subnet, strict=True)
        except ValueError:
            return False
        net = self.net
        if sub.version != net.version or sub.prefixlen != self.subnet_len or not sub.subnet_of(net):
            return False
        return self.first_index <= self._index(subnet) <= self.last_index


def block_config(pool: str, block_len: int = 26) -> NetworkConfig:
    """Calico's IPAM blocks: every ``/block_len`` of ``pool``, the first one included."""
    net = ipaddress.ip_network(pool, strict=True)
    return NetworkConfig(pool, block_len, subnet_min=f"{net.network_address}/{block_len}")


def paired(config6: NetworkConfig, config4: NetworkConfig, lease4: str) -> str:
    """The IPv6 lease of the node holding IPv4 ``lease4``: ``config6``'s subnet of the
    same number (:class:`LeaseError` when ``config6`` has no such subnet)."""
    if not config4.valid(lease4):
        raise LeaseError(f"{lease4} is not a lease of {config4.network}/{config4.subnet_len}")
    index = config4._index(lease4)
    if not config6.first_index <= index <= config6.last_index:
        raise LeaseError(f"IPv6 network {config6.network} with /{config6.subnet_len} subnets has no "
                         f"subnet number {index} to pair with {lease4}: use a shorter IPv6 network prefix")
    return config6.subnet(index)


def capacity(config: NetworkConfig) -> int:
    """How many leases ``config`` can hand out."""
    return max(0, config.last_index - config.first_index + 1)


def gateway(subnet: str) -> str:
    """The lease's gateway: its first address (``10.100.3.1`` for ``10.100.3.0/24``)."""
    return host(subnet, 1)


def host(subnet: str, n: int) -> str:
    """The ``n``-th address of ``subnet`` (``n`` ≥ 1, not broadcast; for IPv6 the last
    address is excluded alike)."""
    net = ipaddress.ip_network(subnet)
    if not 1 <= n < net.num_addresses - 1:
        raise LeaseError(f"{subnet} has no host number {n} (1..{net.num_addresses - 2})")
    return str(net.network_address + n)


def same_host(address: str, lease: str, other: str) -> str:
    """The address of ``other`` with ``address``'s host number in ``lease``: a dual-stack
    pod's IPv6 address from its IPv4 one (``10.100.3.5`` → ``fd00:10:0:3::5``)."""
    return host(other, int(ipaddress.ip_address(address)) - int(ipaddress.ip_network(lease).network_address))


def _free(config: NetworkConfig, used: set[int]) -> Iterable[int]:
    for i in range(config.first_index, config.last_index + 1):
        if i not in used:
            yield i


def allocate(config: NetworkConfig, nodes: Iterable[str], leases: Mapping[str, str]) -> Leases:
    """The lease set for exactly ``nodes``, given the current ``leases``.

    Kept: a node's lease when it is valid in ``config`` and not held twice (the node
    first in id order keeps a duplicated one). Released: leases of nodes not listed.
    Assigned: the lowest free subnets, to new nodes in id order. Raises
    :class:`LeasesExhausted` (nothing changed) when they do not fit.
    """
    wanted = sorted(set(nodes))
    out: Leases = {}
    used: set[int] = set()
    for node in wanted:
        sub = leases.get(node)
        if sub is not None and config.valid(sub) and config._index(sub) not in used:
            out[node] = str(ipaddress.ip_network(sub))
            used.add(config._index(sub))
    missing = [n for n in wanted if n not in out]
    cap = capacity(config)
    if len(used) + len(missing) > cap:
        raise LeasesExhausted(config, cap, len(wanted))
    free = iter(_free(config, used))
    for node in missing:
        out[node] = config.subnet(next(free))
    return {n: out[n] for n in wanted}


def acquire(config: NetworkConfig, leases: Mapping[str, str], node: str) -> Leases:
    """``leases`` plus one for ``node`` (unchanged if it holds a valid one)."""
    return allocate(config, [*leases, node], leases)


def release(leases: Mapping[str, str], node: str) -> Leases:
    """``leases`` without ``node``'s."""
    return {n: s for n, s in leases.items() if n != node}
