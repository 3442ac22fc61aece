"""A router's gateway: the one port it has on an external network
(``router.gw_port_id``), through which it SNATs and its floating IPs reach out."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import Conflict, policy_refused
from netbay.network.networks import NETWORKS
from netbay.network.ports import PORTS, assign_ips, create_port, delete_port
from netbay.network.routerbodies import ROUTER_GATEWAY, GatewayInfo, bad_router
from netbay.network.routerinterfaces import check_new_subnets
from netbay.store.models import FloatingIP, Network, Port, Router, Subnet


def gateway_info(session: Session, router: Router) -> dict[str, Any] | None:
    """``external_gateway_info`` as Neutron shows it; None without a gateway."""
    port = session.get(Port, router.gw_port_id) if router.gw_port_id else None
    if port is None:
        return None
    return {
        "network_id": port.network_id,
        "enable_snat": router.enable_snat,
        "external_fixed_ips": [{"subnet_id": ip.subnet_id, "ip_address": ip.ip_address}
                               for ip in port.fixed_ips],
    }


def set_gateway(session: Session, ctx: Context, router: Router, info: GatewayInfo, action: str) -> None:
    """Attach, move or re-address the gateway; ``enable_snat`` defaults to true as in Neutron."""
    given = info.model_fields_set
    if not ctx.is_admin and ({"enable_snat", "external_fixed_ips"} & given):
        asked = tuple(k for k in ("network_id", "enable_snat", "external_fixed_ips") if k in given)
        raise policy_refused(f"{action}_router", "external_gateway_info", asked)
    network: Network = NETWORKS.get(session, ctx, cast(str, info.network_id))  # set: not info.clears
    if not network.external:
        raise bad_router(f"Network {network.id} is not an external network")
    ext_ips = [ip.model_dump(exclude_none=True) for ip in info.external_fixed_ips or []]
    _check_not_gateway_ip(session, network.id, ext_ips)
    router.enable_snat = True if info.enable_snat is None else info.enable_snat
    current = session.get(Port, router.gw_port_id) if router.gw_port_id else None
    if current is not None and current.network_id == network.id:
        if ext_ips and _addresses_differ(current, ext_ips):
            for alloc in list(current.fixed_ips):
                current.fixed_ips.remove(alloc)
            session.flush()
            assign_ips(session, current, ext_ips)
            PORTS.touch(current)
            PORTS.record(session, current, "update")
        return
    clear_gateway(session, router, keep_snat=True)
    check_new_subnets(session, router, list(network.subnets))
    # Neutron leaves the gateway port's tenant empty: it is hidden from the project.
    port = create_port(session, project_id="", network=network, fixed_ips=ext_ips or None,
                       device_id=router.id, device_owner=ROUTER_GATEWAY, name="")
    router.gw_port_id = port.id
    PORTS.record(session, port, "create")


def clear_gateway(session: Session, router: Router, *, keep_snat: bool = False) -> None:
    """Drop the gateway port unless floating IPs still reach the outside through it."""
    if router.gw_port_id is None:
        return
    port = session.get(Port, router.gw_port_id)
    in_use = session.scalar(select(func.count()).select_from(FloatingIP)
                            .where(FloatingIP.router_id == router.id))
    if in_use:
        raise Conflict(
            f"Gateway cannot be updated for router {router.id}, since a gateway to external "
            f"network {port.network_id if port else ''} is required by one or more floating IPs.",
            kind="RouterExternalGatewayInUseByFloatingIp")
    router.gw_port_id = None
    if not keep_snat:
        router.enable_snat = True
    session.flush()
    if port is not None:
        delete_port(session, port)


def _check_not_gateway_ip(session: Session, network_id: str, ext_ips: list[dict[str, Any]]) -> None:
    gateways = set(session.scalars(select(Subnet.gateway_ip).where(
        Subnet.network_id == network_id, Subnet.gateway_ip.is_not(None))))
    for ext_ip in ext_ips:
        if ext_ip.get("ip_address") in gateways:
            raise bad_router(f"External IP {ext_ip['ip_address']} is the same as the gateway IP")


def _addresses_differ(port: Port, ext_ips: list[dict[str, Any]]) -> bool:
    """Neutron's ``_check_for_external_ip_change``: asked-for subnets or addresses differ."""
    subnets = {ip.subnet_id for ip in port.fixed_ips}
    wanted_subnets = {e["subnet_id"] for e in ext_ips if e.get("subnet_id")}
    if wanted_subnets and wanted_subnets != subnets:
        return True
    addresses = {ip.ip_address for ip in port.fixed_ips}
    wanted = {e["ip_address"] for e in ext_ips if e.get("ip_address")}
    return bool(wanted) and wanted != addresses
