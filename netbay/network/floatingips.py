"""Floating IPs: an address of an external network, NATed to a fixed IP.

The floating address itself is held by a port on the external network
(``device_owner`` ``network:floatingip``, ``device_id`` the floating IP), so
IPAM guards it like any other address. Associating picks the router that
joins the fixed IP's subnet to the floating network, as Neutron does.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound, policy_refused
from netbay.network import ipam
from netbay.network import ports
from netbay.network.networks import NETWORKS
from netbay.network.ports import PORTS, create_port, delete_port
from netbay.network.qos import check_policy
from netbay.network.resource import Filter, Resource, standard, to_int
from netbay.network.routers import ROUTER_GATEWAY, ROUTER_INTERFACE, UUID
from netbay.network.types import Body, DNSName, IPAddress, ProjectID, Tags, Text
from netbay.store.models import FloatingIP, IPAllocation, Network, Port, PortForwarding, Router, Subnet, Tag, new_id

FLOATINGIP_OWNER = "network:floatingip"


def bad_fip(msg: str) -> BadRequest:
    """Neutron's ``BadRequest(resource='floatingip', msg=...)``."""
    return BadRequest(f"Bad floatingip request: {msg}.", kind="BadRequest")


class FloatingIPCreate(Body):
    floating_network_id: UUID | None = None
    floating_ip_address: IPAddress | None = None
    subnet_id: UUID | None = None
    port_id: UUID | None = None
    fixed_ip_address: IPAddress | None = None
    description: Text = ""
    dns_name: DNSName = ""
    dns_domain: DNSName = ""
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None
    qos_policy_id: UUID | None = None


class FloatingIPUpdate(Body):
    port_id: UUID | None = None
    fixed_ip_address: IPAddress | None = None
    description: Text | None = None
    qos_policy_id: UUID | None = None


class FloatingIPs(Resource):
    member = "floatingip"
    collection = "floatingips"
    model = FloatingIP
    create_body = FloatingIPCreate
    update_body = FloatingIPUpdate
    readonly = Resource.readonly | {
        "router_id", "port_details", "qos_network_policy_id", "port_forwardings",
    }
    filters = {
        "floating_ip_address": Filter(FloatingIP.floating_ip_address),
        "floating_network_id": Filter(FloatingIP.floating_network_id),
        "router_id": Filter(FloatingIP.router_id),
        "port_id": Filter(FloatingIP.fixed_port_id, sortable=False),
        "fixed_ip_address": Filter(FloatingIP.fixed_ip_address),
        "status": Filter(FloatingIP.status),
        "project_id": Filter(FloatingIP.project_id),
        "tenant_id": Filter(FloatingIP.project_id),
        "description": Filter(FloatingIP.description),
        "revision_number": Filter(FloatingIP.revision_number, to_int),
        "created_at": Filter(FloatingIP.created_at),
        "updated_at": Filter(FloatingIP.updated_at),
    }

    def render(self, session: Session, obj: FloatingIP, tags: list[str]) -> dict[str, Any]:
        common = standard(obj, tags)
        common.pop("name")  # floating IPs have no name in Neutron
        return {
            **common,
            "floating_ip_address": obj.floating_ip_address,
            "floating_network_id": obj.floating_network_id,
            "router_id": obj.router_id,
            "port_id": obj.fixed_port_id,
            "fixed_ip_address": obj.fixed_ip_address,
            "status": obj.status,
            "port_details": _port_details(session, obj.fixed_port_id),
            "dns_domain": obj.dns_domain,
            "dns_name": obj.dns_name,
            "qos_policy_id": obj.qos_policy_id,
            "qos_network_policy_id": None,
            "port_forwardings": forwardings_of(session, obj.id),
        }

    # -- create / update / delete ----------------------------------------------------

    def create(self, session: Session, ctx: Context, body: FloatingIPCreate) -> FloatingIP:
        given = body.given()
        tags = given.pop("tags", None) or []
        project_id = self.owner_for_create(ctx, given)
        if body.floating_network_id is None:
            raise BadRequest("Failed to parse request. Required attribute 'floating_network_id' not specified")
        if body.floating_ip_address is not None and not ctx.is_admin:
            raise policy_refused("create_floatingip", "floating_ip_address")
        if body.fixed_ip_address is not None and body.port_id is None:
            raise bad_fip("fixed_ip_address cannot be specified without a port_id")
        network = session.get(Network, body.floating_network_id)
        if network is None or not network.external:
            raise bad_fip(f"Network {body.floating_network_id} is not a valid external network")
        if not ctx.is_admin:  # external, but maybe not for this project (an RBAC policy's target)
            NETWORKS.get(session, ctx, network.id)
        v4_subnets = [s for s in network.subnets if s.ip_version == 4]
        if not v4_subnets:
            raise bad_fip(f"Network {network.id} does not contain any IPv4 subnet")
        check_policy(session, ctx, body.qos_policy_id)
        fip = FloatingIP(id=new_id(), project_id=project_id, floating_network_id=network.id,
                         description=body.description, status="DOWN", dns_name=body.dns_name,
                         dns_domain=body.dns_domain, qos_policy_id=body.qos_policy_id)
        port = create_port(session, project_id="", network=network,
                           fixed_ips=[_floating_address(session, network, v4_subnets, body)],
                           device_id=fip.id, device_owner=FLOATINGIP_OWNER, name="")
        fip.floating_port_id = port.id
        fip.floating_ip_address = port.fixed_ips[0].ip_address
        session.add(fip)
        session.flush()
        if body.port_id is not None:
            self._associate(session, ctx, fip, body.port_id, body.fixed_ip_address)
        if tags:
            self.set_tags(session, fip, tags)
            fip.revision_number = 0
        PORTS.record(session, port, "create")
        self.record(session, fip, "create")
        return fip

    def update(self, session: Session, ctx: Context, obj_id: str, body: FloatingIPUpdate) -> FloatingIP:
        fip = self.get_owned(session, ctx, obj_id)
        given = body.given()
        if given.get("fixed_ip_address") is not None and given.get("port_id") is None:
            raise bad_fip("fixed_ip_address cannot be specified without a port_id")
        # Neutron's ``_check_and_get_fip_assoc``: ``port_id`` null, or an empty body,
        # disassociates; a body of other attributes only (a description) keeps the association.
        if body.port_id is not None:
            _refuse_if_forwarding(session, fip)
            self._associate(session, ctx, fip, body.port_id, body.fixed_ip_address)
        elif "port_id" in given or not given:
            _disassociate(fip)
        if "description" in given:
            fip.description = body.description
        if "qos_policy_id" in given:  # the limits follow the floating IP (its router's work)
            check_policy(session, ctx, body.qos_policy_id)
            fip.qos_policy_id = body.qos_policy_id
        self.touch(fip)
        self.record(session, fip, "update")
        return fip

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        fip = self.get_owned(session, ctx, obj_id, "delete_floatingip")
        _refuse_if_forwarding(session, fip)
        self.remove(session, fip)

    def remove_unassociated(self, session: Session, network_id: str) -> None:
        """An external network is going: its floating IPs that no port holds go with it
        (Neutron's ``delete_disassociated_floatingips``); associated ones stay and block."""
        for fip in list(session.scalars(select(FloatingIP).where(
                FloatingIP.floating_network_id == network_id, FloatingIP.fixed_port_id.is_(None)))):
            self.remove(session, fip)

    def remove(self, session: Session, fip: FloatingIP) -> None:
        port = session.get(Port, fip.floating_port_id)
        session.execute(Tag.__table__.delete().where(Tag.resource_id == fip.id))
        self.record(session, fip, "delete", None)
        session.delete(fip)
        session.flush()
        if port is not None:
            delete_port(session, port)

    # -- association --------------------------------------------------------------------

    def _associate(self, session: Session, ctx: Context, fip: FloatingIP, port_id: str,
                   fixed_ip_address: str | None) -> None:
        """Point ``fip`` at a fixed IP of ``port_id`` through a router that reaches it."""
        # Locked: two floating IPs racing for one fixed IP are serialized here.
        port: Port = PORTS.get(session, ctx, port_id, for_update=True)
        if port.project_id != fip.project_id and not ctx.is_admin:
            raise bad_fip(f"Cannot process floating IP association with Port {port.id}, "
                          "since that port is owned by a different tenant")
        subnet_id, address = _internal_address(port, fixed_ip_address)
        router_id = _router_for(session, port, subnet_id, fip.floating_network_id)
        if port.id != fip.fixed_port_id or address != fip.fixed_ip_address:
            taken = session.scalars(select(FloatingIP.id).where(
                FloatingIP.fixed_port_id == port.id, FloatingIP.fixed_ip_address == address,
                FloatingIP.floating_network_id == fip.floating_network_id, FloatingIP.id != fip.id)).first()
            if taken:
                raise Conflict(
                    f"Cannot associate floating IP {fip.floating_ip_address} ({fip.id}) with port "
                    f"{port.id} using fixed IP {address}, as that fixed IP already has a floating IP "
                    f"on external network {fip.floating_network_id}.",
                    kind="FloatingIPPortAlreadyAssociated")
        if (fip.fixed_port_id, fip.fixed_ip_address, fip.router_id) != (port.id, address, router_id):
            # DOWN until the dataplane reports the new NAT in place (as Neutron's L3 agent does).
            fip.status = "DOWN"
        fip.fixed_port_id, fip.fixed_ip_address, fip.router_id = port.id, address, router_id


def disassociate_port(session: Session, port_id: str) -> None:
    """A fixed port is going away: its floating IPs stay, unassociated (as in Neutron)."""
    for fip in session.scalars(select(FloatingIP).where(FloatingIP.fixed_port_id == port_id)):
        _disassociate(fip)
        FLOATINGIPS.touch(fip)
        FLOATINGIPS.record(session, fip, "update")
    session.flush()


def forwardings_of(session: Session, fip_id: str) -> list[dict[str, Any]]:
    """A floating IP's port forwardings as Neutron shows them on the floating IP (no
    description); the forwardings themselves are :mod:`netbay.network.portforwardings`."""
    rows = session.scalars(select(PortForwarding).where(PortForwarding.floatingip_id == fip_id)
                           .order_by(PortForwarding.protocol, PortForwarding.external_port, PortForwarding.id))
    return [_forwarding(pf) for pf in rows]


def _forwarding(pf: PortForwarding) -> dict[str, Any]:
    """Neutron's keys; a side spanning a port range shows no single port (as in Neutron)
    but its ``*_port_range`` (netbay's addition: the dataplane agent reads it here)."""
    out: dict[str, Any] = {"id": pf.id, "internal_ip_address": pf.internal_ip_address, "protocol": pf.protocol,
                           "internal_port_id": pf.internal_port_id}
    for side, first, last in (("internal", pf.internal_port, pf.internal_port_end),
                              ("external", pf.external_port, pf.external_port_end)):
        if first == last:
            out[f"{side}_port"] = first
        else:
            out[f"{side}_port_range"] = f"{first}:{last}"
    return out


def _refuse_if_forwarding(session: Session, fip: FloatingIP) -> None:
    """A floating IP forwarding ports is neither associated with a port nor deleted."""
    if session.scalars(select(PortForwarding.id).where(PortForwarding.floatingip_id == fip.id)).first():
        raise Conflict(f"Floating IP {fip.id} in use by Port Forwarding resources.",
                       kind="FipInUseByPortForwarding")


def _disassociate(fip: FloatingIP) -> None:
    fip.fixed_port_id = fip.fixed_ip_address = fip.router_id = None
    fip.status = "DOWN"


def _floating_address(session: Session, network: Network, v4_subnets: list[Subnet],
                      body: FloatingIPCreate) -> dict[str, Any]:
    """The fixed_ips request of the floating port: an IPv4 address, asked for or the next free."""
    exhausted = BadRequest(f"Unable to find any IP address on external network {network.id}.",
                           kind="ExternalIpAddressExhausted")
    if body.floating_ip_address is not None or body.subnet_id is not None:
        request = {k: v for k, v in (("subnet_id", body.subnet_id),
                                     ("ip_address", body.floating_ip_address)) if v is not None}
        subnet = next((s for s in network.subnets if s.id == body.subnet_id), None)
        if body.floating_ip_address and ipaddress.ip_address(body.floating_ip_address).version != 4:
            raise exhausted
        if subnet is not None and subnet.ip_version != 4:
            raise exhausted
        return request
    for subnet in v4_subnets:
        try:
            ipam.allocate(session, subnet)  # room left: the port's own insert then takes an address,
            return {"subnet_id": subnet.id}  # skipping one another process takes meanwhile
        except Conflict as exc:
            if exc.kind != "IpAddressGenerationFailure":
                raise
    raise exhausted


def _internal_address(port: Port, fixed_ip_address: str | None) -> tuple[str, str]:
    """The (subnet, IPv4 address) of ``port`` a floating IP maps to."""
    if fixed_ip_address is not None:
        if ipaddress.ip_address(fixed_ip_address).version != 4:
            raise bad_fip(f"Cannot process floating IP association with {fixed_ip_address}, "
                          "since that is not an IPv4 address")
        for ip in port.fixed_ips:
            if ip.ip_address == fixed_ip_address:
                return ip.subnet_id, ip.ip_address
        raise bad_fip(f"Port {port.id} does not have fixed ip {fixed_ip_address}")
    v4 = [ip for ip in port.fixed_ips if ipaddress.ip_address(ip.ip_address).version == 4]
    if not v4:
        raise bad_fip(f"Cannot add floating IP to port {port.id} that has no fixed IPv4 addresses")
    if len(v4) > 1:
        raise bad_fip(f"Port {port.id} has multiple fixed IPv4 addresses.  Must provide a specific "
                      "IPv4 address when assigning a floating IP")
    return v4[0].subnet_id, v4[0].ip_address


def _router_for(session: Session, port: Port, subnet_id: str, external_network_id: str) -> str:
    """A router with an interface on ``subnet_id`` and a gateway on the external network.

    Prefers the router whose interface holds the subnet's gateway IP, as Neutron does.
    """
    iface, gw = aliased(Port), aliased(Port)
    rows = session.execute(
        select(Router.id, IPAllocation.ip_address)
        .join(iface, iface.device_id == Router.id)
        .join(IPAllocation, IPAllocation.port_id == iface.id)
        .join(gw, gw.id == Router.gw_port_id)
        .where(iface.device_owner == ROUTER_INTERFACE, iface.network_id == port.network_id,
               IPAllocation.subnet_id == subnet_id, gw.network_id == external_network_id,
               gw.device_owner == ROUTER_GATEWAY)
        .order_by(Router.created_at, Router.id)
        # Holds the routers against a concurrent gateway or interface removal.
        .with_for_update(of=Router)
    ).all()
    if not rows:
        raise NotFound(f"External network {external_network_id} is not reachable from subnet {subnet_id}.  "
                       f"Therefore, cannot associate Port {port.id} with a Floating IP.",
                       kind="ExternalGatewayForFloatingIPNotFound")
    gateway_ip = session.scalar(select(Subnet.gateway_ip).where(Subnet.id == subnet_id))
    return next((rid for rid, ip in rows if ip == gateway_ip), rows[0][0])


def _port_details(session: Session, port_id: str | None) -> dict[str, Any] | None:
    port = session.get(Port, port_id) if port_id else None
    if port is None:
        return None
    return {
        "name": port.name,
        "network_id": port.network_id,
        "mac_address": port.mac_address,
        "admin_state_up": port.admin_state_up,
        "status": port.status,
        "device_id": port.device_id,
        "device_owner": port.device_owner,
    }


FLOATINGIPS = FloatingIPs()


def _remove_spare(session: Session, network: Network) -> None:
    if network.external:
        FLOATINGIPS.remove_unassociated(session, network.id)


# A port or an external network going away reaches its floating IPs (first, as Neutron does).
ports.on_delete.insert(0, disassociate_port)
NETWORKS.before_delete.append(_remove_spare)

__all__ = ["FLOATINGIPS", "FLOATINGIP_OWNER", "FloatingIPCreate", "FloatingIPUpdate", "FloatingIPs", "disassociate_port",
           "forwardings_of"]
