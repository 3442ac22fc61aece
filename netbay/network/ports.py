"""Ports: a network attachment with a MAC, fixed IPs and security groups.

``create_port`` and ``delete_port`` are the one way any part of netbay makes or
removes a port (the Port API, router interfaces and gateways, floating IPs,
load balancer VIPs, cluster nodes, containers), so IPAM and default security
groups apply everywhere alike.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.errors import BadRequest, Conflict
from netbay.network import ipam
from netbay.network.resource import Resource
from netbay.network.types import Body
from netbay.store.models import IPAllocation, Network, Port, PortSecurityGroup, Subnet, Tag

MAC_PREFIX = "fa:16:3e"


def generate_mac() -> str:
    return MAC_PREFIX + "".join(f":{b:02x}" for b in secrets.token_bytes(3))


def _subnets_of(session: Session, network_id: str) -> list[Subnet]:
    return list(session.scalars(select(Subnet).where(Subnet.network_id == network_id).order_by(Subnet.created_at)))


def assign_ips(
    session: Session,
    port: Port,
    requests: list[dict[str, Any]] | None,
    *,
    allow_gateway: bool = False,
    start_seq: int = 0,
) -> None:
    """Allocate the port's fixed IPs: one per request, or one per IP version when None."""
    subnets = _subnets_of(session, port.network_id)
    addresses: list[tuple[Subnet, str]] = []
    if requests is None:
        for version in (4, 6):
            candidates = [s for s in subnets if s.ip_version == version]
            if candidates:
                addresses.append(_from_any(session, candidates))
    else:
        by_id = {s.id: s for s in subnets}
        for req in requests:
            subnet = _subnet_for(port, req, by_id, subnets)
            addresses.append((subnet, ipam.allocate(session, subnet, req.get("ip_address"),
                                                    allow_gateway=allow_gateway)))
    for seq, (subnet, ip) in enumerate(addresses, start=start_seq):
        port.fixed_ips.append(IPAllocation(subnet_id=subnet.id, ip_address=ip, port_id=port.id,
                                           network_id=port.network_id, seq=seq))
    session.flush()


def _subnet_for(port: Port, req: dict[str, Any], by_id: dict[str, Subnet], subnets: list[Subnet]) -> Subnet:
    subnet_id, address = req.get("subnet_id"), req.get("ip_address")
    if subnet_id:
        subnet = by_id.get(subnet_id)
        if subnet is None:
            raise BadRequest(
                f"Invalid input for operation: Failed to create port on network {port.network_id}, "
                f"because fixed_ips included invalid subnet {subnet_id}.", kind="InvalidInput")
        return subnet
    if address:
        subnet = next((s for s in subnets if ipam.in_subnet(s, address)), None)
        if subnet is None:
            raise BadRequest(
                f"IP address {address} is not a valid IP for any of the subnets on the specified network.",
                kind="InvalidIpForNetwork")
        return subnet
    raise BadRequest("Invalid input for fixed_ips. Reason: each entry needs subnet_id or ip_address.")


def _from_any(session: Session, subnets: list[Subnet]) -> tuple[Subnet, str]:
    """An address from the first subnet of one IP version that has room."""
    for subnet in subnets[:-1]:
        try:
            return subnet, ipam.allocate(session, subnet)
        except Conflict as exc:
            if exc.kind != "IpAddressGenerationFailure":
                raise
    return subnets[-1], ipam.allocate(session, subnets[-1])


def create_port(
    session: Session,
    *,
    project_id: str,
    network: Network,
    fixed_ips: list[dict[str, Any]] | None = None,
    mac_address: str | None = None,
    security_groups: list[str] | None = None,
    port_security_enabled: bool | None = None,
    allow_gateway: bool = False,
    **attrs: Any,
) -> Port:
    """Make a port with addresses and security groups, inside the caller's transaction.

    ``security_groups=None`` means the project's default group for ordinary
    ports and none for ports netbay owns (``device_owner`` ``network:*``).
    ``attrs`` are plain columns: name, description, device_id, device_owner,
    binding_host_id, admin_state_up, allowed_address_pairs.
    """
    from netbay.network.security_groups import ensure_default_group

    owner = attrs.get("device_owner", "") or ""
    if port_security_enabled is None:
        port_security_enabled = True
    if security_groups is None:
        security_groups = (
            [ensure_default_group(session, project_id).id]
            if port_security_enabled and not owner.startswith("network:") else []
        )
    if security_groups and not port_security_enabled:
        raise BadRequest("Port security must be enabled and port must have an IP address in order "
                         "to use security groups.", kind="PortSecurityAndIPRequiredForSecurityGroups")
    if attrs.get("allowed_address_pairs") and not port_security_enabled:
        raise Conflict("Port Security must be enabled in order to have allowed address pairs on a port.",
                       kind="AddressPairAndPortSecurityRequired")
    if mac_address is not None:
        taken = session.scalar(select(Port.id).where(Port.network_id == network.id, Port.mac_address == mac_address))
        if taken:
            raise Conflict(f"Unable to complete operation for network {network.id}. "
                           f"The mac address {mac_address} is in use.", kind="MacAddressInUse")
    port = Port(project_id=project_id, network_id=network.id, mac_address=mac_address or generate_mac(),
                port_security_enabled=port_security_enabled, **attrs)
    session.add(port)
    session.flush()
    assign_ips(session, port, fixed_ips, allow_gateway=allow_gateway)
    port.security_groups = [PortSecurityGroup(port_id=port.id, security_group_id=sg) for sg in dict.fromkeys(security_groups)]
    return port


def delete_port(session: Session, port: Port, resource: Resource | None = None) -> None:
    """Remove a port, its addresses and tags, and log the change."""
    from netbay.network.registry import PORTS

    (resource or PORTS).record(session, port, "delete", None)
    session.execute(Tag.__table__.delete().where(Tag.resource_id == port.id))
    session.delete(port)
    session.flush()


class PortCreate(Body):
    pass


class Ports(Resource):
    """PLACEHOLDER: the Port API resource is written on top of create_port/delete_port."""

    member = "port"
    collection = "ports"
    model = Port
    create_body = PortCreate
