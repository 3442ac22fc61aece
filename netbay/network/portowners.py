"""Which device owners make a port a service's (a router's leg or gateway, a floating
IP's): such ports are made and removed through their service's API, not the Port API."""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from netbay.store.models import FloatingIP, Port, Router

# Ports a router or floating IP owns: removed through their own API, not the Port API.
ROUTER_INTERFACE_OWNERS = {
    "network:router_interface",
    "network:router_interface_distributed",
    "network:ha_router_replicated_interface",
    "network:router_centralized_snat",
}
ROUTER_GATEWAY = "network:router_gateway"
FLOATINGIP_OWNER = "network:floatingip"


def owned_by_service(session: Session, port: Port) -> bool:
    """A router interface/gateway of a router, or a floating IP's port, that still exists."""
    owner = port.device_owner
    if owner in ROUTER_INTERFACE_OWNERS or owner == ROUTER_GATEWAY:
        return session.scalar(select(Router.id).where(Router.id == port.device_id)) is not None
    if owner == FLOATINGIP_OWNER:
        return session.scalar(select(FloatingIP.id).where(
            or_(FloatingIP.id == port.device_id, FloatingIP.floating_port_id == port.id))) is not None
    return False
