"""How many addresses each network's subnets have and use (Neutron's
``network-ip-availability``), counted from IPAM's own rows: a subnet's total is the
size of its allocation pools (its whole CIDR when it has none, as Neutron counts),
its use the addresses allocated on it, whatever owns them (the gateway's router
port, DHCP, floating IPs, plain ports). Admins only, as Neutron's policy has it.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, not_found, policy_refused
from netbay.network.resource import to_int
from netbay.store.models import IPAllocation, Network, Subnet

# The filters Neutron's list takes (``SUPPORTED_FILTERS``), by their columns.
FILTERS: dict[str, Any] = {
    "network_id": Network.id, "network_name": Network.name, "tenant_id": Network.project_id,
    "project_id": Network.project_id, "ip_version": Subnet.ip_version,
}


def availabilities(session: Session, ctx: Context, filters: dict[str, list[str]]) -> list[dict[str, Any]]:
    if not ctx.is_admin:
        raise policy_refused("get_network_ip_availability")
    stmt = select(Network.id, Network.name, Network.project_id, Subnet).outerjoin(
        Subnet, Subnet.network_id == Network.id).order_by(Network.id, Subnet.created_at)
    for name, values in filters.items():
        column = FILTERS.get(name)
        if column is None:
            continue  # Neutron ignores the filters it does not know here
        stmt = stmt.where(column.in_([to_int(v) for v in values] if name == "ip_version" else values))
    used = dict(session.execute(select(IPAllocation.subnet_id, func.count()).group_by(IPAllocation.subnet_id)).all())
    result: dict[str, dict[str, Any]] = {}
    for net_id, net_name, project_id, subnet in session.execute(stmt):
        net = result.setdefault(net_id, {
            "network_id": net_id, "network_name": net_name, "tenant_id": project_id, "project_id": project_id,
            "subnet_ip_availability": [], "used_ips": 0, "total_ips": 0})
        if subnet is None:
            continue
        row = {"subnet_id": subnet.id, "subnet_name": subnet.name, "cidr": subnet.cidr,
               "ip_version": subnet.ip_version, "used_ips": used.get(subnet.id, 0), "total_ips": _total(subnet)}
        net["subnet_ip_availability"].append(row)
        net["used_ips"] += row["used_ips"]
        net["total_ips"] += row["total_ips"]
    return list(result.values())


def availability(session: Session, ctx: Context, network_id: str) -> dict[str, Any]:
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
