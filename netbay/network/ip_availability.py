"""How many addresses each network's subnets have and use (Neutron's
``network-ip-availability``), counted from IPAM's own rows: a subnet's total is the
size of its allocation pools (its whole CIDR when it has none, as Neutron counts),
its use the addresses allocated on it, whatever owns them (the gateway's router
port, DHCP, floating IPs, plain ports). With ``network-ip-availability-details``
each subnet and network also has ``ip_availability_details``: the CIDR's size (less an
IPv4 subnet's network and broadcast addresses), its pools' size, and the addresses used
in the subnet and within its pools, as Neutron's ``IpAvailabilityDetailsDbMixin``
counts them. Admins only, as Neutron's policy has it: to
others a list is empty and a network's availability is not found (``HTTPNotFound``),
as Neutron's controller answers what its policy filters out.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, NotFound, not_found
from netbay.network.resource import to_int
from netbay.store.models import IPAllocation, Network, Subnet

# The filters Neutron's list takes (``SUPPORTED_FILTERS``), by their columns.
FILTERS: dict[str, Any] = {
    "network_id": Network.id, "network_name": Network.name, "tenant_id": Network.project_id,
    "project_id": Network.project_id, "ip_version": Subnet.ip_version,
}
# network-ip-availability-details: each subnet's and network's counts, by these keys.
DETAILS = "ip_availability_details"
_DETAIL_KEYS = ("total_ips_in_subnet", "total_ips_in_allocation_pool", "used_ips_in_subnet",
                "used_ips_in_allocation_pool")


def availabilities(session: Session, ctx: Context, filters: dict[str, list[str]]) -> list[dict[str, Any]]:
    if not ctx.is_admin:
        return []
    stmt = select(Network.id, Network.name, Network.project_id, Subnet).outerjoin(
        Subnet, Subnet.network_id == Network.id).order_by(Network.id, Subnet.created_at)
    for name, values in filters.items():
        column = FILTERS.get(name)
        if column is None:
            continue  # Neutron ignores the filters it does not know here
        stmt = stmt.where(column.in_([to_int(v) for v in values] if name == "ip_version" else values))
    rows = list(session.execute(stmt))
    subnet_ids = [subnet.id for *_, subnet in rows if subnet is not None]
    addresses: dict[str, list[str]] = {}
    allocations = select(IPAllocation.subnet_id, IPAllocation.ip_address)
    if len(subnet_ids) <= 1000:   # beyond, every allocation (a bound IN list on any database)
        allocations = allocations.where(IPAllocation.subnet_id.in_(subnet_ids))
    for subnet_id, address in session.execute(allocations):
        addresses.setdefault(subnet_id, []).append(address)
    result: dict[str, dict[str, Any]] = {}
    for net_id, net_name, project_id, subnet in rows:
        net = result.setdefault(net_id, {
            "network_id": net_id, "network_name": net_name, "tenant_id": project_id, "project_id": project_id,
            "subnet_ip_availability": [], "used_ips": 0, "total_ips": 0, DETAILS: dict.fromkeys(_DETAIL_KEYS, 0)})
        if subnet is None:
            continue
        used = addresses.get(subnet.id, [])
        details = _details(subnet, used)
        row: dict[str, Any] = {"subnet_id": subnet.id, "subnet_name": subnet.name, "cidr": subnet.cidr,
               "ip_version": subnet.ip_version, "used_ips": len(used), "total_ips": _total(subnet),
               DETAILS: details}
        net["subnet_ip_availability"].append(row)
        net["used_ips"] += row["used_ips"]
        net["total_ips"] += row["total_ips"]
        for key in _DETAIL_KEYS:
            net[DETAILS][key] += details[key]
    return list(result.values())


def _details(subnet: Subnet, used: list[str]) -> dict[str, int]:
    """One subnet's ``ip_availability_details`` (neutron's IpAvailabilityDetailsDbMixin)."""
    size = ipaddress.ip_network(subnet.cidr).num_addresses - (2 if subnet.ip_version == 4 else 0)
    pools = [(int(ipaddress.ip_address(p["start"])), int(ipaddress.ip_address(p["end"])))
             for p in subnet.allocation_pools or () if p.get("start") and p.get("end")]
    in_pools = sum(1 for a in used if any(first <= int(ipaddress.ip_address(a)) <= last for first, last in pools))
    return {"total_ips_in_subnet": size, "total_ips_in_allocation_pool": sum(last - first + 1 for first, last in pools),
            "used_ips_in_subnet": len(used), "used_ips_in_allocation_pool": in_pools}


def availability(session: Session, ctx: Context, network_id: str) -> dict[str, Any]:
    if not ctx.is_admin:
        raise NotFound("The resource could not be found.")
    found = availabilities(session, ctx, {"network_id": [network_id]})
    if not found:
        raise not_found("network", network_id)
    return found[0]


def _total(subnet: Subnet) -> int:
    if not subnet.allocation_pools:
        return ipaddress.ip_network(subnet.cidr).num_addresses
    total = 0
    for pool in subnet.allocation_pools:
        try:
            total += int(ipaddress.ip_address(pool["end"])) - int(ipaddress.ip_address(pool["start"])) + 1
        except (KeyError, ValueError) as exc:  # never stored so; a clear error if it were
            raise BadRequest(f"subnet {subnet.id} has an unreadable allocation pool {pool}") from exc
    return total


__all__ = ["availabilities", "availability"]
