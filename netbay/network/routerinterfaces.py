"""A router's interfaces: one port per attached subnet, holding that subnet's gateway IP
(``add_router_interface`` / ``remove_router_interface``), and the checks Neutron makes
on the subnets a router reaches."""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound
from netbay.network.ports import PORTS, create_port
from netbay.network.routerbodies import ROUTER_INTERFACE, bad_router
from netbay.network.subnets import SUBNETS
from netbay.store.models import FloatingIP, IPAllocation, Network, Port, Router, Subnet


def interfaces(session: Session, router_id: str) -> list[Port]:
    return list(session.scalars(select(Port).where(
        Port.device_id == router_id, Port.device_owner == ROUTER_INTERFACE).order_by(Port.created_at)))


def subnets_on_router(session: Session, router_id: str, *, owner: str | None = None) -> set[str]:
    stmt = (select(IPAllocation.subnet_id).join(Port, Port.id == IPAllocation.port_id)
            .where(Port.device_id == router_id))
    if owner:
        stmt = stmt.where(Port.device_owner == owner)
    return set(session.scalars(stmt))


def check_new_subnets(session: Session, router: Router, subnets: list[Subnet]) -> None:
    """No second port on a subnet, no CIDRs that overlap those of the router's other
    ports, its gateway's included (Neutron's ``_check_for_dup_router_subnets``)."""
    on_router = subnets_on_router(session, router.id)
    for subnet in subnets:
        if subnet.id in on_router:
            raise bad_router(f"Router already has a port on subnet {subnet.id}")
    existing = list(session.scalars(select(Subnet).where(Subnet.id.in_(on_router)))) if on_router else []
    for old in existing:
        old_net = ipaddress.ip_network(old.cidr)
        for new in subnets:
            new_net = ipaddress.ip_network(new.cidr)
            if old_net.version == new_net.version and old_net.overlaps(new_net):
                raise bad_router(f"Cidr {new.cidr} of subnet {new.id} overlaps with cidr "
                                 f"{old.cidr} of subnet {old.id}")


def add_interface(session: Session, ctx: Context, router: Router, port_id: str | None,
                  subnet_id: str | None) -> dict[str, Any]:
    """The port (given, or made on the subnet's gateway IP) attached to ``router``."""
    if port_id:
        port = PORTS.get(session, ctx, port_id, for_update=True)
        if port.device_id:
            raise Conflict(f"Unable to complete operation on port {port.id} for network "
                           f"{port.network_id}. Port already has an attached device {port.device_id}.",
                           kind="PortInUse")
        if not port.fixed_ips:
            raise bad_router("Router port must have at least one fixed IP")
        subnets = list(session.scalars(select(Subnet).where(
            Subnet.id.in_([ip.subnet_id for ip in port.fixed_ips]))))
        check_new_subnets(session, router, subnets)
        if len([s for s in subnets if s.ip_version == 4]) > 1:
            raise bad_router("Cannot have multiple IPv4 subnets on router port")
        port.device_id, port.device_owner = router.id, ROUTER_INTERFACE
        PORTS.touch(port)
        PORTS.record(session, port, "update")
    else:
        subnet = SUBNETS.get(session, ctx, cast(str, subnet_id))  # given: interface_ids asks for one
        if not subnet.gateway_ip:
            raise bad_router("Subnet for router interface must have a gateway IP")
        check_new_subnets(session, router, [subnet])
        network = session.get_one(Network, subnet.network_id)
        port = create_port(session, project_id=router.project_id, network=network,
                           fixed_ips=[{"subnet_id": subnet.id, "ip_address": subnet.gateway_ip}],
                           device_id=router.id, device_owner=ROUTER_INTERFACE, name="",
                           allow_gateway=True, security_groups=[])
        PORTS.record(session, port, "create")
        subnets = [subnet]
    return interface_info(router, port, [s.id for s in subnets], added=True)


def interface_to_remove(session: Session, ctx: Context, router: Router, port_id: str | None,
                        subnet_id: str | None) -> tuple[Port, list[str]]:
    """The interface port named by ``port_id`` or ``subnet_id``, and its subnets, once
    Neutron's checks allow its removal."""
    if port_id:
        port = session.scalars(select(Port).where(
            Port.id == port_id, Port.device_id == router.id,
            Port.device_owner == ROUTER_INTERFACE)).one_or_none()
        if port is None:
            raise NotFound(f"Router {router.id} does not have an interface with id {port_id}",
                           kind="RouterInterfaceNotFound")
        subnet_ids = [ip.subnet_id for ip in port.fixed_ips]
        if subnet_id and subnet_id not in subnet_ids:
            raise BadRequest(f"Subnet on port {port.id} does not match the requested subnet {subnet_id}.",
                             kind="SubnetMismatchForPort")
    else:
        subnet = SUBNETS.get(session, ctx, cast(str, subnet_id))  # given: interface_ids asks for one
        found = next((p for p in interfaces(session, router.id)
                      if any(ip.subnet_id == subnet.id for ip in p.fixed_ips)), None)
        if found is None:
            raise NotFound(f"Router {router.id} has no interface on subnet {subnet.id}",
                           kind="RouterInterfaceNotFoundForSubnet")
        port = found
        subnet_ids = [ip.subnet_id for ip in port.fixed_ips]
    for sid in subnet_ids:
        _confirm_not_in_use(session, router, session.get_one(Subnet, sid))
    return port, subnet_ids


def _confirm_not_in_use(session: Session, router: Router, subnet: Subnet) -> None:
    cidr = ipaddress.ip_network(subnet.cidr)
    for address in session.scalars(select(FloatingIP.fixed_ip_address).where(
            FloatingIP.router_id == router.id, FloatingIP.fixed_ip_address.is_not(None))):
        ip = ipaddress.ip_address(cast(str, address))  # not null: filtered above
        if ip.version == cidr.version and ip in cidr:
            raise Conflict(f"Router interface for subnet {subnet.id} on router {router.id} cannot be "
                           "deleted, as it is required by one or more floating IPs.",
                           kind="RouterInterfaceInUseByFloatingIP")
    for route in router.routes or []:
        nexthop = ipaddress.ip_address(route["nexthop"])
        if nexthop.version == cidr.version and nexthop in cidr:
            raise Conflict(f"Router interface for subnet {subnet.id} on router {router.id} cannot be "
                           "deleted, as it is required by one or more routes.",
                           kind="RouterInterfaceInUseByRoute")


def interface_ids(info: Any, *, for_removal: bool) -> tuple[str | None, str | None]:
    """Neutron's ``_validate_interface_info``: one of ``subnet_id``/``port_id``, as UUIDs."""
    if not isinstance(info, dict) or not ({"port_id", "subnet_id"} & info.keys()):
        raise bad_router("Either subnet_id or port_id must be specified")
    for key in ("port_id", "subnet_id"):
        if key in info:
            value = info[key]
            try:
                uuid.UUID(value if isinstance(value, str) else "")
            except ValueError:
                raise bad_router(f"'{value}' is not a valid UUID") from None
    if not for_removal and "port_id" in info and "subnet_id" in info:
        raise bad_router("Cannot specify both subnet-id and port-id")
    return info.get("port_id"), info.get("subnet_id")


def interface_info(router: Router, port: Port, subnet_ids: list[str], *, added: bool = False) -> dict[str, Any]:
    """The answer of ``add_router_interface`` / ``remove_router_interface`` as Neutron 29's
    ``_make_router_interface_info`` makes it: no ``tenant_id``, no ``tags``; the deprecated
    ``subnet_id`` is the port's last subnet on an add and its first on a removal."""
    return {
        "id": router.id,
        "project_id": port.project_id,
        "port_id": port.id,
        "network_id": port.network_id,
        "subnet_id": (subnet_ids[-1] if added else subnet_ids[0]) if subnet_ids else None,
        "subnet_ids": subnet_ids,
    }
