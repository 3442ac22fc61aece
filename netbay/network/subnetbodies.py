"""The Subnet API's request bodies: field types checked and worded as Neutron's
(IP version, IPv6 modes, nameservers, host routes, service types, allocation pools)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

from netbay.errors import invalid_input, invalid_operation
from netbay.network.subnetchecks import IPV6_MODES
from netbay.network.subnetpools import NonNegative
from netbay.network.types import CIDR, ID, Body, Bool, IPAddress, Name, ProjectID, Tags, Text


def _ip_version(value: Any) -> Any:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or value not in (4, 6):
        raise ValueError(f"{value} is not in [4, 6]")
    return value


def _ipv6_mode(value: Any) -> Any:
    if value not in IPV6_MODES:
        raise ValueError(f"'{value}' is not in {list(IPV6_MODES)}")
    return value


def _none_to_empty(value: Any) -> Any:
    return [] if value is None else value


def _unique_nameservers(servers: list[str]) -> list[str]:
    seen: set[str] = set()
    for server in servers:
        if server in seen:
            raise ValueError(f"Duplicate nameserver '{server}'")
        seen.add(server)
    return servers


class AllocationPool(Body):
    start: IPAddress
    end: IPAddress


class HostRoute(Body):
    destination: CIDR
    nexthop: IPAddress


def _unique_routes(routes: list[HostRoute]) -> list[HostRoute]:
    seen: set[tuple[str, str]] = set()
    for route in routes:
        key = (route.destination, route.nexthop)
        if key in seen:
            raise ValueError(f"Duplicate hostroute '{route.model_dump()}'")
        seen.add(key)
    return routes


IPVersion = Annotated[int, BeforeValidator(_ip_version)]


IPv6Mode = Annotated[str, BeforeValidator(_ipv6_mode)]


Nameservers = Annotated[list[IPAddress], BeforeValidator(_none_to_empty), AfterValidator(_unique_nameservers)]


HostRoutes = Annotated[list[HostRoute], BeforeValidator(_none_to_empty), AfterValidator(_unique_routes)]


def _service_types(value: Any) -> Any:
    """neutron-lib's ``validate_subnet_service_types``: each a device owner (``network:``,
    ``neutron:`` or ``compute:`` something), as an ``InvalidInput`` in its words."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_input("service_types", f"'{value}' is not a list")
    for item in value:
        if not isinstance(item, str):
            raise invalid_operation(f"Subnet service type {item} is not a string")
        if not item.startswith(("network:", "neutron:", "compute:")):
            raise invalid_operation(f"Subnet service type {item} does not correspond to a valid device owner")
    return list(dict.fromkeys(value))


ServiceTypes = Annotated[list[str], BeforeValidator(_service_types)]


class SubnetCreate(Body):
    name: Name = ""
    description: Text = ""
    network_id: ID | None = None
    ip_version: IPVersion | None = None
    cidr: CIDR | None = None
    prefixlen: NonNegative | None = None
    subnetpool_id: ID | None = None
    use_default_subnetpool: Bool = False
    gateway_ip: IPAddress | None = None
    allocation_pools: list[AllocationPool] | None = None
    dns_nameservers: Nameservers = []
    host_routes: HostRoutes = []
    enable_dhcp: Bool = True
    ipv6_ra_mode: IPv6Mode | None = None
    ipv6_address_mode: IPv6Mode | None = None
    service_types: ServiceTypes = []
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class SubnetUpdate(Body):
    name: Name | None = None
    description: Text | None = None
    gateway_ip: IPAddress | None = None
    allocation_pools: list[AllocationPool] | None = None
    dns_nameservers: Nameservers | None = None
    host_routes: HostRoutes | None = None
    enable_dhcp: Bool | None = None
    service_types: ServiceTypes | None = None
