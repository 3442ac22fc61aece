"""A port's fixed IPs, as Neutron's IPAM gives them: which subnets a port draws from,
the EUI-64 addresses of SLAAC subnets, and the changes an update makes (addresses
asked for again, a new MAC's derived addresses)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.errors import BadRequest, Conflict, invalid_operation
from netbay.network import ipam
from netbay.network.portowners import ROUTER_INTERFACE_OWNERS
from netbay.network.portrows import PortWriter
from netbay.store.models import IPAllocation, Port, Subnet


AUTO_ADDRESS_MODES = ("slaac", "dhcpv6-stateless")


def subnets_of(session: Session, network_id: str) -> list[Subnet]:
    return list(session.scalars(select(Subnet).where(Subnet.network_id == network_id).order_by(Subnet.created_at)))


def assign_ips(
    session: Session,
    port: Port,
    requests: list[dict[str, Any]] | None,
    *,
    allow_gateway: bool = False,
    start_seq: int = 0,
) -> None:
    """Give an existing (ORM) port more fixed IPs (see ``assign_addresses``)."""
    session.flush()
    if assign_addresses(session, port.id, port.network_id, port.mac_address, port.device_owner, requests,
                        allow_gateway=allow_gateway, start_seq=start_seq):
        session.expire(port, ["fixed_ips"])  # the rows were written with Core: load them again


def assign_addresses(
    session: Session,
    port_id: str,
    network_id: str,
    mac: str,
    owner: str,
    requests: list[dict[str, Any]] | None,
    *,
    allow_gateway: bool = False,
    subnets: Sequence[ipam.SubnetLike] | None = None,
    start_seq: int = 0,
    writer: PortWriter | None = None,
) -> list[tuple[str, str]]:
    """Allocate a port's addresses as Neutron's IPAM does; returns ``(subnet_id, address)``.

    ``requests=None``: one address from the IPv4 subnets and one from the
    stateful IPv6 subnets (the first with room), plus the EUI-64 address on
    every SLAAC / DHCPv6-stateless subnet. Otherwise one address per request;
    a request for an automatic-address subnet gets the EUI-64 address. The
    ``ip_allocations`` rows are written here (``ipam.assign``): the port's row must
    exist, or be written by ``writer`` with the first address. ``subnets`` are the
    network's, when the caller has them already.
    """
    if requests == []:
        return []
    if session.deleted or any(isinstance(obj, IPAllocation) for obj in session.new):
        session.flush()  # pending allocations and releases must be seen by IPAM
    given: list[tuple[str, str]] = []

    def give(subnet: ipam.SubnetLike, requested: str | None = None, gateway_ok: bool = False) -> None:
        holder = ipam.Holder(port_id, network_id, start_seq + len(given),
                             writer.write_address if writer else ipam.insert_allocation)
        given.append((subnet.id, ipam.assign(session, subnet, holder, requested, allow_gateway=gateway_ok)))

    auto = owner not in ROUTER_INTERFACE_OWNERS
    with session.no_autoflush:
        if subnets is None:
            subnets = subnets_of(session, network_id)
        if requests is None and any(s.service_types for s in subnets):
            serving = [s for s in subnets if ipam.serves(s, owner)]
            if not serving:
                raise BadRequest(f"No valid service subnet for the given device owner, network {network_id}, "
                                 f"service type {owner}.", kind="IpAddressGenerationFailureNoMatchingSubnet")
            subnets = serving
        if requests is None:
            for candidates in (
                [s for s in subnets if s.ip_version == 4],
                [s for s in subnets if s.ip_version == 6 and not (auto and is_auto_address(s))],
            ):
                if candidates:
                    _from_any(candidates, give)
            for subnet in subnets:
                if auto and is_auto_address(subnet):
                    give(subnet, eui64(subnet.cidr, mac))
            return given
        by_id = {s.id: s for s in subnets}
        for req in requests:
            subnet = _subnet_for(network_id, req, by_id, subnets)
            requested = req.get("ip_address")
            if auto and is_auto_address(subnet):
                derived = eui64(subnet.cidr, mac)
                if requested is not None and requested != derived:
                    raise invalid_operation(
                        f"IPv6 address {requested} cannot be directly assigned to a port on subnet {subnet.id} "
                        "since the subnet is configured for automatic addresses")
                requested = derived
            # A second request on a subnet finds the first one's row: another address, or a 409.
            give(subnet, requested, allow_gateway)
    return given


def is_auto_address(subnet: ipam.SubnetLike) -> bool:
    """SLAAC and DHCPv6-stateless subnets: hosts derive their address from the MAC."""
    return subnet.ip_version == 6 and (
        subnet.ipv6_address_mode in AUTO_ADDRESS_MODES or subnet.ipv6_ra_mode in AUTO_ADDRESS_MODES)


def eui64(cidr: str, mac: str) -> str:
    """The modified EUI-64 address of ``mac`` in a /64 (RFC 4291 appendix A)."""
    octets = bytes.fromhex(mac.replace(":", ""))
    iid = bytes([octets[0] ^ 0x02]) + octets[1:3] + b"\xff\xfe" + octets[3:]
    return str(ipaddress.ip_network(cidr).network_address + int.from_bytes(iid, "big"))


def _subnet_for(network_id: str, req: dict[str, Any], by_id: dict[str, ipam.SubnetLike],
                subnets: Sequence[ipam.SubnetLike]) -> ipam.SubnetLike:
    subnet_id, address = req.get("subnet_id"), req.get("ip_address")
    if subnet_id:
        subnet = by_id.get(subnet_id)
        if subnet is None:
            raise invalid_operation(f"Failed to create port on network {network_id}, "
                                    f"because fixed_ips included invalid subnet {subnet_id}")
        return subnet
    if address:
        subnet = next((s for s in subnets if ipam.in_subnet(s, address)), None)
        if subnet is None:
            raise BadRequest(
                f"IP address {address} is not a valid IP for any of the subnets on the specified network.",
                kind="InvalidIpForNetwork")
        return subnet
    raise BadRequest("Invalid input for fixed_ips. Reason: each entry needs subnet_id or ip_address.")


def _from_any(subnets: Sequence[ipam.SubnetLike], give: Callable[[ipam.SubnetLike], None]) -> None:
    """An address from the first subnet of one IP version that has room."""
    for subnet in subnets[:-1]:
        try:
            return give(subnet)
        except Conflict as exc:
            if exc.kind != "IpAddressGenerationFailure":
                raise
    give(subnets[-1])


def replace_ips(session: Session, port: Port, requests: list[dict[str, Any]]) -> None:
    """The port's addresses become exactly ``requests``, in one transaction.

    An address asked for again keeps its allocation; the others are released
    before new ones are allocated (so they can be handed out again at once).
    """
    kept: list[IPAllocation] = []
    new: list[dict[str, Any]] = []
    for req in requests:
        ip, subnet_id = req.get("ip_address"), req.get("subnet_id")
        match = next((a for a in port.fixed_ips if ip is not None and a.ip_address == ip
                      and subnet_id in (None, a.subnet_id) and a not in kept), None)
        if match is not None:
            kept.append(match)
        else:
            new.append(req)
    released = [a for a in port.fixed_ips if a not in kept]
    for alloc in released:
        port.fixed_ips.remove(alloc)
    if released:
        session.flush()
    start = max((a.seq for a in kept), default=-1) + 1
    if new:
        assign_ips(session, port, new, start_seq=start)


def rederive_auto_addresses(session: Session, port: Port) -> None:
    """After a MAC change, SLAAC addresses follow the new MAC (as in Neutron)."""
    if port.device_owner in ROUTER_INTERFACE_OWNERS or not port.fixed_ips:
        return
    subnets = {s.id: s for s in subnets_of(session, port.network_id)}
    stale = [(a, subnets[a.subnet_id]) for a in port.fixed_ips
             if is_auto_address(subnets[a.subnet_id])
             and a.ip_address != eui64(subnets[a.subnet_id].cidr, port.mac_address)]
    if not stale:
        return
    for alloc, _ in stale:
        port.fixed_ips.remove(alloc)
    session.flush()
    for alloc, subnet in stale:
        ipam.assign(session, subnet, ipam.Holder(port.id, port.network_id, alloc.seq),
                    eui64(subnet.cidr, port.mac_address))
    session.expire(port, ["fixed_ips"])
