"""IP address management: pools of a subnet and the next free address.

The pure functions (``default_gateway``, ``default_pools``, ``validate_pools``,
``gateway_valid``, ``first_free``) know nothing of the database and are
property-tested. ``assign`` hands a port its address and writes the allocation
row (``allocate`` only picks one); both run inside the caller's write
transaction and rely on the (subnet, address) primary key as the last word, so
no address is ever handed out twice. Within a process, transactions in flight
*claim* the addresses they picked, so concurrent allocators on one subnet pick
different addresses instead of queueing on a lock that is held until commit. An
address another process holds is skipped by ``assign``'s INSERT (``ON CONFLICT
DO NOTHING``), which then looks further; one it took meanwhile for ``allocate``
is refused by the primary key and ``Store.retrying`` runs the transaction again.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from sqlalchemy import Insert, event, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from netbay.errors import BadRequest, Conflict
from netbay.store.models import IPAllocation, Subnet

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class SubnetFacts:
    """A subnet as plain values (read with ``FACT_COLUMNS``): no ORM instance to build."""

    id: str
    network_id: str
    ip_version: int
    cidr: str
    gateway_ip: str | None
    allocation_pools: list[dict[str, str]]
    ipv6_address_mode: str | None
    ipv6_ra_mode: str | None
    service_types: list[str] | None


FACT_COLUMNS = tuple(getattr(Subnet, name) for name in SubnetFacts.__dataclass_fields__)
# What IPAM reads a subnet from: the ORM row or its facts (the same attributes).
SubnetLike = Subnet | SubnetFacts


def serves(subnet: SubnetLike, owner: str) -> bool:
    """Whether a port of ``owner`` may take an address on ``subnet`` automatically
    (Neutron's subnet service types: a typed subnet serves its device owners only)."""
    return not subnet.service_types or owner in subnet.service_types


def usable_range(net: Net) -> tuple[int, int]:
    """First and last address a host may hold (IPv4 drops network and broadcast)."""
    first, last = int(net.network_address), int(net.broadcast_address)
    if net.version == 4 and net.prefixlen < 31:
        return first + 1, last - 1
    if net.version == 6 and net.prefixlen < 127:
        return first + 1, last  # the subnet-router anycast address is reserved
    return first, last


def default_gateway(cidr: str) -> str | None:
    """The first usable address, or None when the subnet has room for one host only."""
    net = ipaddress.ip_network(cidr)
    first, last = usable_range(net)
    if last <= first:
        return None
    return str(type(net.network_address)(first))


def default_pools(cidr: str, gateway_ip: str | None) -> list[dict[str, str]]:
    """The whole usable range minus the gateway, as Neutron computes it."""
    net = ipaddress.ip_network(cidr)
    first, last = usable_range(net)
    ranges = [(first, last)]
    if gateway_ip is not None:
        gw = int(ipaddress.ip_address(gateway_ip))
        if first <= gw <= last:
            ranges = [(first, gw - 1), (gw + 1, last)]
    ranges = [(lo, hi) for lo, hi in ranges if lo <= hi]
    cls = type(net.network_address)
    return [{"start": str(cls(lo)), "end": str(cls(hi))} for lo, hi in ranges]


def validate_pools(cidr: str, gateway_ip: str | None, pools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Pools inside the CIDR's usable range, not overlapping each other or the gateway.

    Checked in Neutron's order and with its errors: ``InvalidAllocationPool``
    (unparsable, reversed or of the other IP version), ``OutOfBoundsAllocationPool``,
    then ``OverlappingAllocationPools`` and ``GatewayConflictWithAllocationPools``
    (both 409). Returns the pools normalized and sorted by start address.
    """
    net = ipaddress.ip_network(cidr)
    first, last = usable_range(net)
    spans: list[tuple[int, int, str]] = []
    for pool in pools:
        try:
            start = ipaddress.ip_address(pool["start"])
            end = ipaddress.ip_address(pool["end"])
        except (KeyError, TypeError, ValueError):
            raise BadRequest(f"The allocation pool {pool} is not valid.",
                             kind="InvalidAllocationPool") from None
        label = f"{start}-{end}"
        if start.version != end.version or int(start) > int(end) or start.version != net.version:
            raise BadRequest(f"The allocation pool {label} is not valid.", kind="InvalidAllocationPool")
        if int(start) < first or int(end) > last:
            raise BadRequest(f"The allocation pool {label} spans beyond the subnet cidr {cidr}.",
                             kind="OutOfBoundsAllocationPool")
        spans.append((int(start), int(end), label))
    for i, (lo_a, hi_a, label_a) in enumerate(spans):
        for lo_b, hi_b, label_b in spans[i + 1:]:
            if lo_a <= hi_b and lo_b <= hi_a:
                raise Conflict(f"Found overlapping allocation pools: {label_a} {label_b} for subnet {cidr}.",
                               kind="OverlappingAllocationPools")
    if gateway_ip is not None:
        gw = int(ipaddress.ip_address(gateway_ip))
        for lo, hi, label in spans:
            if lo <= gw <= hi:
                raise Conflict(f"Gateway ip {gateway_ip} conflicts with allocation pool {label}.",
                               kind="GatewayConflictWithAllocationPools")
    cls = type(net.network_address)
    return [{"start": str(cls(lo)), "end": str(cls(hi))} for lo, hi, _ in sorted(spans)]


def gateway_valid(cidr: str, gateway_ip: str) -> bool:
    """A gateway must lie in the subnet; in IPv4 not on its network or broadcast address.

    (IPv6 allows the subnet-router anycast address, as Neutron does.)
    """
    net = ipaddress.ip_network(cidr)
    ip = ipaddress.ip_address(gateway_ip)
    if ip.version != net.version or ip not in net:
        return False
    if net.version == 6:
        return True
    first, last = usable_range(net)
    return first <= int(ip) <= last


def pool_size(pools: Iterable[dict[str, str]]) -> int:
    """How many addresses ``pools`` hold (without walking them)."""
    return sum(as_int(p["end"]) - as_int(p["start"]) + 1 for p in pools)


def pool_addresses(pools: Iterable[dict[str, str]]) -> Iterator[int]:
    for pool in pools:
        yield from range(int(ipaddress.ip_address(pool["start"])), int(ipaddress.ip_address(pool["end"])) + 1)


def first_free(pools: list[dict[str, str]], taken: set[int]) -> int | None:
    """The lowest address in the pools that is not taken, or None when full."""
    for candidate in pool_addresses(pools):
        if candidate not in taken:
            return candidate
    return None


def in_subnet(subnet: SubnetLike, address: str) -> bool:
    ip = ipaddress.ip_address(address)
    net = ipaddress.ip_network(subnet.cidr)
    if ip.version != net.version or ip not in net:
        return False
    first, last = usable_range(net)
    return first <= int(ip) <= last


def as_int(address: str) -> int:
    """A stored (normalized) address as an integer, ten times faster than ``ipaddress``."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return int.from_bytes(socket.inet_pton(family, address), "big")


def allocate(session: Session, subnet: SubnetLike, requested: str | None = None, *,
             allow_gateway: bool = False) -> str:
    """Hand out ``requested`` or the next free address of ``subnet``.

    409 ``IpAddressAlreadyAllocated`` for a taken requested address,
    409 ``IpAddressGenerationFailure`` when the pools are exhausted.
    """
    if requested is not None:
        address = str(ipaddress.ip_address(requested))
        if not in_subnet(subnet, address):
            raise BadRequest(f"IP address {address} is not a valid IP for the specified subnet.",
                             kind="InvalidIpForSubnet")
        clash = session.get(IPAllocation, (subnet.id, address))
        if clash is not None or (address == subnet.gateway_ip and not allow_gateway):
            raise Conflict(f"IP address {address} already allocated in subnet {subnet.id}",
                           kind="IpAddressAlreadyAllocated")
        return address
    found = _scan(session, subnet)
    if found is None:
        raise Conflict(f"No more IP addresses available on network {subnet.network_id}.",
                       kind="IpAddressGenerationFailure")
    _hints[subnet.id] = found + 1
    cls = ipaddress.IPv4Address if subnet.ip_version == 4 else ipaddress.IPv6Address
    return str(cls(found))


def _insert_skipping_clash(dialect: str) -> Insert:
    table = IPAllocation.__table__
    make = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return make(table).on_conflict_do_nothing(index_elements=[table.c.subnet_id, table.c.ip_address]) \
        .returning(table.c.ip_address)


_INSERTS = {dialect: _insert_skipping_clash(dialect) for dialect in ("postgresql", "sqlite")}


def insert_allocation(session: Session, values: dict[str, Any]) -> bool:
    """INSERT an ``ip_allocations`` row unless its address is taken; True if it was inserted."""
    conn = session.connection()
    return conn.execute(_INSERTS[conn.dialect.name], values).first() is not None


Writer = Callable[[Session, dict[str, Any]], bool]


@dataclass(frozen=True)
class Holder:
    """Who an ``assign``ed address goes to: the ``ip_allocations`` row's other columns,
    and how the row is written (``insert_allocation``, or a statement that writes the
    port too, see ``portrows.PortWriter``)."""

    port_id: str
    network_id: str
    seq: int
    write: Writer = insert_allocation

    def take(self, session: Session, subnet: SubnetLike, address: str) -> bool:
        return self.write(session, {"subnet_id": subnet.id, "ip_address": address, "port_id": self.port_id,
                                    "network_id": self.network_id, "seq": self.seq})


def assign(session: Session, subnet: SubnetLike, holder: Holder, requested: str | None = None, *,
           allow_gateway: bool = False) -> str:
    """``allocate``, and INSERT the allocation row for ``holder`` (its port row must exist).

    The INSERT is also the probe: it skips a taken address (``ON CONFLICT DO NOTHING``)
    instead of failing the transaction, so the hinted address, free nearly always,
    costs one statement instead of a look-up and an insert. Same answers as
    ``allocate``: 409 ``IpAddressAlreadyAllocated`` / ``IpAddressGenerationFailure``.
    """
    if requested is not None:
        address = str(ipaddress.ip_address(requested))
        if not in_subnet(subnet, address):
            raise BadRequest(f"IP address {address} is not a valid IP for the specified subnet.",
                             kind="InvalidIpForSubnet")
        if (address == subnet.gateway_ip and not allow_gateway) or not holder.take(session, subnet, address):
            raise Conflict(f"IP address {address} already allocated in subnet {subnet.id}",
                           kind="IpAddressAlreadyAllocated")
        return address
    found = _scan(session, subnet, probe_hint=False)
    while found is not None:
        address = as_str(found, subnet.ip_version)
        if holder.take(session, subnet, address):
            _hints[subnet.id] = found + 1
            return address
        found = _scan(session, subnet)  # the hint was taken (another process): look up the next
    raise Conflict(f"No more IP addresses available on network {subnet.network_id}.",
                   kind="IpAddressGenerationFailure")


# Where the search for a free address of a subnet starts: the lowest address that
# may be free, as far as this process knows. Only a starting point: every
# candidate is checked against the database, and a full lap follows, so a stale
# hint (another process released something) costs order, never correctness.
_hints: dict[str, int] = {}
SCAN_BATCH = 64


@event.listens_for(IPAllocation, "after_delete")
def _released(_mapper: Any, _conn: Any, alloc: IPAllocation) -> None:
    hint = _hints.get(alloc.subnet_id)
    address = as_int(alloc.ip_address)
    if hint is not None and address < hint:
        _hints[alloc.subnet_id] = address


def _lap(pools: list[dict[str, str]], start: int) -> Iterator[int]:
    """Pool addresses from ``start`` upward, then from the first one up to ``start``."""
    spans = sorted((as_int(p["start"]), as_int(p["end"])) for p in pools)
    for lo, hi in spans:
        yield from range(max(lo, start), hi + 1)
    for lo, hi in spans:
        yield from range(lo, min(hi, start - 1) + 1)


def _scan(session: Session, subnet: SubnetLike, *, probe_hint: bool = True) -> int | None:
    """The first free, unclaimed address from the hint on, claimed for ``session``.

    Candidates are checked against the database in batches; the hint is usually
    right, so the first batch is the hinted address alone (one primary-key probe).
    ``probe_hint=False``: the first unclaimed candidate is returned unchecked (the
    caller's INSERT checks it).
    """
    gateway = as_int(subnet.gateway_ip) if subnet.gateway_ip else None
    candidates = (a for a in _lap(subnet.allocation_pools, _hints.get(subnet.id, 0))
                  if a != gateway and not _claimed(subnet.id, a))
    if not probe_hint:
        for address in candidates:
            if _claim(session, subnet.id, address):
                return address
        return None
    size = 1
    while batch := list(islice(candidates, size)):
        size = SCAN_BATCH
        names = [as_str(a, subnet.ip_version) for a in batch]
        # One name: a plain primary-key probe (an IN list is rendered afresh on every call).
        match = IPAllocation.ip_address == names[0] if len(names) == 1 else IPAllocation.ip_address.in_(names)
        taken = set(session.scalars(select(IPAllocation.ip_address).where(
            IPAllocation.subnet_id == subnet.id, match)))
        for address, name in zip(batch, names):
            if name not in taken and _claim(session, subnet.id, address):
                return address
    return None


def as_str(address: int, version: int) -> str:
    """The stored (normalized) form of an integer address."""
    if version == 4:
        return socket.inet_ntoa(address.to_bytes(4, "big"))
    return str(ipaddress.IPv6Address(address))


# subnet id -> addresses picked by this process's transactions still in flight.
_claims: dict[str, set[int]] = {}
_claims_lock = threading.Lock()
_CLAIMS = "netbay.ipam.claims"


def _claimed(subnet_id: str, address: int) -> bool:
    return address in _claims.get(subnet_id, ())


def _claim(session: Session, subnet_id: str, address: int) -> bool:
    """Reserve ``address`` until ``session``'s transaction ends; False if another has it."""
    with _claims_lock:
        held = _claims.setdefault(subnet_id, set())
        if address in held:
            return False
        held.add(address)
    session.info.setdefault(_CLAIMS, []).append((subnet_id, address))
    return True


@event.listens_for(Session, "after_transaction_end")
def _release_claims(session: Session, transaction: Any) -> None:
    """Committed addresses are now in the table, rolled-back ones free again."""
    if transaction.parent is not None or _CLAIMS not in session.info:
        return
    with _claims_lock:
        for subnet_id, address in session.info.pop(_CLAIMS):
            held = _claims.get(subnet_id)
            if held is not None:
                held.discard(address)
                if not held:
                    del _claims[subnet_id]
