"""Every check Neutron makes on a subnet, with Neutron's wording and in its order: what
a request says (``check_attrs``), then what the network already holds (overlaps,
subnet pool affinity) and a gateway a router interface holds."""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.errors import BadRequest, Conflict, invalid_operation
from netbay.network import ipam
from netbay.store.models import IPAllocation, Network, Port, Subnet

MAX_DNS_NAMESERVERS = 5
MAX_HOST_ROUTES = 20
IPV6_MODES = ("dhcpv6-stateful", "dhcpv6-stateless", "slaac")
AUTO_ADDRESS_MODES = ("slaac", "dhcpv6-stateless")
ROUTER_INTERFACE_OWNERS = ("network:router_interface", "network:router_interface_distributed",
                           "network:ha_router_replicated_interface")


def bad_request(message: str) -> BadRequest:
    return BadRequest(f"Bad subnets request: {message}.", kind="BadRequest")


def required(attribute: str) -> BadRequest:
    return BadRequest(f"Failed to parse request. Required attribute '{attribute}' not specified")


def match_version(version: int, address: str, name: str) -> None:
    if ipaddress.ip_network(address, strict=False).version != version:
        raise invalid_operation(f"{name} '{address}' does not match the ip_version '{version}'")


def check_attrs(s: dict[str, Any], version: int, cidr: str, current: Subnet | None = None) -> None:
    """What Neutron's ``_validate_subnet`` checks of a create or update request."""
    match_version(version, cidr, "cidr")
    net = ipaddress.ip_network(cidr)
    dhcp_was_enabled = current.enable_dhcp if current is not None else False
    if s.get("enable_dhcp") and not dhcp_was_enabled:
        if (version == 4 and net.prefixlen > 30) or (version == 6 and net.prefixlen > 126):
            raise invalid_operation("Subnet has a prefix length that is incompatible with DHCP service enabled")
        if net.is_multicast:
            raise invalid_operation("Multicast IP subnet is not supported if enable_dhcp is True")
        if net.is_loopback:
            raise invalid_operation("Loopback IP subnet is not supported if enable_dhcp is True")
        if version == 4 and int(net.network_address) == 0:
            raise invalid_operation("First IP '0.0.0.0' of network is not supported if enable_dhcp is True")
    if s.get("gateway_ip") is not None:
        match_version(version, s["gateway_ip"], "gateway_ip")
        if not ipam.gateway_valid(cidr, s["gateway_ip"]):
            raise invalid_operation("Gateway is not valid on subnet")
    subnet_name = current.id if current is not None else "new subnet"
    servers = s.get("dns_nameservers") or []
    if len(servers) > MAX_DNS_NAMESERVERS:
        raise BadRequest(f"Unable to complete operation for {subnet_name}. The number of DNS nameservers "
                         f"exceeds the limit {MAX_DNS_NAMESERVERS}.", kind="DNSNameServersExhausted")
    for server in servers:
        match_version(version, server, "dns_nameserver")
    routes = s.get("host_routes") or []
    if len(routes) > MAX_HOST_ROUTES:
        raise BadRequest(f"Unable to complete operation for {subnet_name}. The number of host routes "
                         f"exceeds the limit {MAX_HOST_ROUTES}.", kind="HostRoutesExhausted")
    for route in routes:
        match_version(version, route["nexthop"], "nexthop")
        match_version(version, route["destination"], "destination")
    ra_mode, address_mode = s.get("ipv6_ra_mode"), s.get("ipv6_address_mode")
    if version == 4:
        if ra_mode is not None:
            raise invalid_operation("ipv6_ra_mode is not valid when ip_version is 4")
        if address_mode is not None:
            raise invalid_operation("ipv6_address_mode is not valid when ip_version is 4")
        return
    if current is not None:
        if s.get("enable_dhcp") is False and (current.ipv6_ra_mode or current.ipv6_address_mode):
            raise invalid_operation("Cannot disable enable_dhcp with ipv6 attributes set")
        return
    if (ra_mode or address_mode) and not s.get("enable_dhcp"):
        raise invalid_operation("ipv6_ra_mode or ipv6_address_mode cannot be set when enable_dhcp is set to False")
    if ra_mode and address_mode and ra_mode != address_mode:
        raise invalid_operation(f"ipv6_ra_mode set to '{ra_mode}' with ipv6_address_mode set to '{address_mode}' "
                                "is not valid. If both attributes are set, they must be the same value")
    if (ra_mode in AUTO_ADDRESS_MODES or address_mode in AUTO_ADDRESS_MODES) and net.prefixlen != 64:
        raise invalid_operation(f"Invalid CIDR {cidr} for IPv6 address mode. OpenStack uses the EUI-64 address "
                                "format, which requires the prefix to be /64")


def check_overlap(session: Session, network: Network, cidr: str) -> None:
    new = ipaddress.ip_network(cidr)
    if new.prefixlen == 0:
        raise invalid_operation("0 is not allowed as CIDR prefix length")
    for existing in session.scalars(select(Subnet.cidr).where(Subnet.network_id == network.id)):
        old = ipaddress.ip_network(existing)
        if old.version == new.version and old.overlaps(new):
            raise invalid_operation(f"Requested subnet with cidr: {cidr} for network: {network.id} overlaps "
                                    "with another subnet")


def check_affinity(session: Session, network: Network, version: int, pool_id: str | None) -> None:
    """Subnets of one IP version on a network all come from the same pool, or none does."""
    others = session.scalars(select(Subnet.subnetpool_id).where(
        Subnet.network_id == network.id, Subnet.ip_version == version))
    if any(other != pool_id for other in others):
        raise BadRequest("Subnets hosted on the same network must be allocated from the same subnet pool.",
                         kind="NetworkSubnetPoolAffinityError")


def check_gateway_free(session: Session, subnet: Subnet) -> None:
    """A router interface holding the old gateway pins it (Neutron's GatewayIpInUse)."""
    port_id = session.scalar(
        select(IPAllocation.port_id).join(Port, Port.id == IPAllocation.port_id).where(
            IPAllocation.subnet_id == subnet.id, IPAllocation.ip_address == subnet.gateway_ip,
            Port.device_owner.in_(ROUTER_INTERFACE_OWNERS)))
    if port_id:
        raise Conflict(f"Current gateway ip {subnet.gateway_ip} already in use by port {port_id}. "
                       "Unable to update.", kind="GatewayIpInUse")
