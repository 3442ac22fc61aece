"""Routers: L3 between a project's subnets, and NAT to an external network.

A router owns ports, told apart by ``device_owner``: one gateway port on an
external network (``router.gw_port_id``) and one interface port per attached
subnet, holding that subnet's gateway IP. Routers have no table of their own
ports; a port belongs to router R when its ``device_id`` is R.
"""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any, cast

from pydantic import model_validator
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound, invalid_input, policy_refused
from netbay.network.networks import NETWORKS
from netbay.network.ports import PORTS, assign_ips, create_port, delete_port
from netbay.network.resource import Filter, Resource, standard, to_bool, to_int
from netbay.network.subnets import SUBNETS
from netbay.network.types import CIDR, UUID, Body, Bool, IPAddress, Name, ProjectID, Tags, Text
from netbay.store.models import CREATED_REVISION, FloatingIP, IPAllocation, Network, Port, Router, Subnet, Tag

ROUTER_INTERFACE = "network:router_interface"
ROUTER_GATEWAY = "network:router_gateway"


def bad_router(msg: str) -> BadRequest:
    """Neutron's ``BadRequest(resource='router', msg=...)``."""
    return BadRequest(f"Bad router request: {msg}.", kind="BadRequest")


class ExternalFixedIP(Body):
    subnet_id: UUID | None = None
    ip_address: IPAddress | None = None


class GatewayInfo(Body):
    """``external_gateway_info``: ``{}`` (or null) clears the gateway."""

    network_id: UUID | None = None
    enable_snat: Bool | None = None
    external_fixed_ips: list[ExternalFixedIP] | None = None

    @model_validator(mode="after")
    def _network_required(self) -> GatewayInfo:
        if self.model_fields_set and self.network_id is None:
            raise ValueError("Validation of dictionary's keys failed. Expected keys: {'network_id'} "
                             f"Provided keys: {sorted(self.model_fields_set)}")
        seen: set[str] = set()
        for fixed in self.external_fixed_ips or []:
            if fixed.ip_address in seen:
                raise ValueError(f"Duplicate IP address '{fixed.ip_address}'")
            if fixed.ip_address:
                seen.add(fixed.ip_address)
        return self

    @property
    def clears(self) -> bool:
        return self.network_id is None


class Route(Body):
    destination: CIDR
    nexthop: IPAddress


class RouterCreate(Body):
    name: Name = ""
    description: Text = ""
    admin_state_up: Bool = True
    external_gateway_info: GatewayInfo | None = None
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class RouterUpdate(Body):
    name: Name | None = None
    description: Text | None = None
    admin_state_up: Bool | None = None
    external_gateway_info: GatewayInfo | None = None
    routes: list[Route] | None = None


class Routers(Resource):
    member = "router"
    collection = "routers"
    model = Router
    create_body = RouterCreate
    update_body = RouterUpdate
    readonly = Resource.readonly | {
        "routes", "distributed", "ha", "flavor_id", "availability_zone_hints",
        "availability_zones", "gw_port_id",
    }
    filters = {
        "name": Filter(Router.name),
        "description": Filter(Router.description),
        "project_id": Filter(Router.project_id),
        "tenant_id": Filter(Router.project_id),
        "admin_state_up": Filter(Router.admin_state_up, to_bool),
        "status": Filter(Router.status),
        "enable_snat": Filter(Router.enable_snat, to_bool, sortable=False),
        "revision_number": Filter(Router.revision_number, to_int),
        "created_at": Filter(Router.created_at),
        "updated_at": Filter(Router.updated_at),
    }

    def render(self, session: Session, obj: Router, tags: list[str]) -> dict[str, Any]:
        return {
            **standard(obj, tags),
            "admin_state_up": obj.admin_state_up,
            "status": obj.status,
            "external_gateway_info": self._gateway_info(session, obj),
            "routes": list(obj.routes or []),
            "distributed": False,
            "ha": False,
            "flavor_id": None,
            "availability_zone_hints": [],
            "availability_zones": ["nova"],
        }

    @staticmethod
    def _gateway_info(session: Session, router: Router) -> dict[str, Any] | None:
        port = session.get(Port, router.gw_port_id) if router.gw_port_id else None
        if port is None:
            return None
        return {
            "network_id": port.network_id,
            "enable_snat": router.enable_snat,
            "external_fixed_ips": [{"subnet_id": ip.subnet_id, "ip_address": ip.ip_address}
                                   for ip in port.fixed_ips],
        }

    # -- create / update / delete ----------------------------------------------------

    def create(self, session: Session, ctx: Context, body: RouterCreate) -> Router:
        given = body.given()
        tags = given.pop("tags", None) or []
        given.pop("external_gateway_info", None)
        project_id = self.owner_for_create(ctx, given)
        router = Router(project_id=project_id, routes=[], **given)
        session.add(router)
        session.flush()
        info = body.external_gateway_info
        gateway = info is not None and not info.clears
        if info is not None and gateway:
            self._set_gateway(session, ctx, router, info, "create")
        if tags:
            self.set_tags(session, router, tags)
        # Neutron 29 sets a gateway given on create as an update of the new router: one more.
        router.revision_number = CREATED_REVISION + gateway
        self.record(session, router, "create")
        return router

    def update(self, session: Session, ctx: Context, obj_id: str, body: RouterUpdate) -> Router:
        router = self.get_owned(session, ctx, obj_id)
        given = body.given()
        if "routes" in given:
            routes = [r.model_dump() for r in body.routes or []]
            self._validate_routes(session, router, routes)
            router.routes = routes
        if "external_gateway_info" in given:
            info = body.external_gateway_info
            if info is None or info.clears:
                self._clear_gateway(session, router)
            else:
                self._set_gateway(session, ctx, router, info, "update")
        for key in ("name", "description", "admin_state_up"):
            if key in given:
                setattr(router, key, given[key])
        self.touch(router)
        self.record(session, router, "update")
        return router

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        router = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        if self.interfaces(session, router.id):
            raise Conflict(f"Router {router.id} still has ports", kind="RouterInUse")
        self._clear_gateway(session, router)
        session.execute(Tag.__table__.delete().where(Tag.resource_id == router.id))
        self.record(session, router, "delete", None)
        session.delete(router)
        session.flush()

    # -- gateway ------------------------------------------------------------------------

    def _set_gateway(self, session: Session, ctx: Context, router: Router, info: GatewayInfo,
                     action: str) -> None:
        """Attach, move or re-address the gateway; ``enable_snat`` defaults to true as in Neutron."""
        given = info.model_fields_set
        if not ctx.is_admin and ({"enable_snat", "external_fixed_ips"} & given):
            asked = tuple(k for k in ("network_id", "enable_snat", "external_fixed_ips") if k in given)
            raise policy_refused(f"{action}_router", "external_gateway_info", asked)
        network: Network = NETWORKS.get(session, ctx, info.network_id)
        if not network.external:
            raise bad_router(f"Network {network.id} is not an external network")
        ext_ips = [ip.model_dump(exclude_none=True) for ip in info.external_fixed_ips or []]
        self._check_not_gateway_ip(session, network.id, ext_ips)
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
        self._clear_gateway(session, router, keep_snat=True)
        self._check_new_subnets(session, router, list(network.subnets))
        # Neutron leaves the gateway port's tenant empty: it is hidden from the project.
        port = create_port(session, project_id="", network=network, fixed_ips=ext_ips or None,
                           device_id=router.id, device_owner=ROUTER_GATEWAY, name="")
        router.gw_port_id = port.id
        PORTS.record(session, port, "create")

    def _clear_gateway(self, session: Session, router: Router, *, keep_snat: bool = False) -> None:
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

    @staticmethod
    def _check_not_gateway_ip(session: Session, network_id: str, ext_ips: list[dict[str, Any]]) -> None:
        gateways = set(session.scalars(select(Subnet.gateway_ip).where(
            Subnet.network_id == network_id, Subnet.gateway_ip.is_not(None))))
        for ext_ip in ext_ips:
            if ext_ip.get("ip_address") in gateways:
                raise bad_router(f"External IP {ext_ip['ip_address']} is the same as the gateway IP")

    # -- routes ---------------------------------------------------------------------------

    def _validate_routes(self, session: Session, router: Router, routes: list[dict[str, str]]) -> None:
        seen: set[tuple[str, str]] = set()
        for route in routes:
            key = (route["destination"], route["nexthop"])
            if key in seen:
                raise invalid_input("routes", f"Duplicate hostroute '{route}'")
            seen.add(key)
        cidrs, own_ips = [], set()
        for alloc, subnet in session.execute(
            select(IPAllocation, Subnet).join(Subnet, Subnet.id == IPAllocation.subnet_id)
            .join(Port, Port.id == IPAllocation.port_id).where(Port.device_id == router.id)
        ):
            cidrs.append(ipaddress.ip_network(subnet.cidr))
            own_ips.add(alloc.ip_address)
        for route in routes:
            nexthop = ipaddress.ip_address(route["nexthop"])
            if not any(nexthop.version == c.version and nexthop in c for c in cidrs):
                raise BadRequest(f"Invalid format for routes: {routes}, the nexthop is not connected "
                                 "with router", kind="InvalidRoutes")
            if str(nexthop) in own_ips:
                raise BadRequest(f"Invalid format for routes: {routes}, the nexthop is used by router",
                                 kind="InvalidRoutes")

    # -- interfaces -----------------------------------------------------------------------

    @staticmethod
    def interfaces(session: Session, router_id: str) -> list[Port]:
        return list(session.scalars(select(Port).where(
            Port.device_id == router_id, Port.device_owner == ROUTER_INTERFACE).order_by(Port.created_at)))

    @staticmethod
    def _subnets_on_router(session: Session, router_id: str, *, owner: str | None = None) -> set[str]:
        stmt = (select(IPAllocation.subnet_id).join(Port, Port.id == IPAllocation.port_id)
                .where(Port.device_id == router_id))
        if owner:
            stmt = stmt.where(Port.device_owner == owner)
        return set(session.scalars(stmt))

    def _check_new_subnets(self, session: Session, router: Router, subnets: list[Subnet]) -> None:
        """No second port on a subnet, no CIDRs that overlap those of the router's other
        ports, its gateway's included (Neutron's ``_check_for_dup_router_subnets``)."""
        on_router = self._subnets_on_router(session, router.id)
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

    def add_interface(self, session: Session, ctx: Context, router_id: str, info: Any) -> dict[str, Any]:
        """``PUT /routers/{id}/add_router_interface`` with ``subnet_id`` or ``port_id``."""
        port_id, subnet_id = _interface_ids(info, for_removal=False)
        router = self.get_owned(session, ctx, router_id)
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
            self._check_new_subnets(session, router, subnets)
            if len([s for s in subnets if s.ip_version == 4]) > 1:
                raise bad_router("Cannot have multiple IPv4 subnets on router port")
            port.device_id, port.device_owner = router.id, ROUTER_INTERFACE
            PORTS.touch(port)
            PORTS.record(session, port, "update")
        else:
            subnet = SUBNETS.get(session, ctx, subnet_id)
            if not subnet.gateway_ip:
                raise bad_router("Subnet for router interface must have a gateway IP")
            self._check_new_subnets(session, router, [subnet])
            network = session.get_one(Network, subnet.network_id)
            port = create_port(session, project_id=router.project_id, network=network,
                               fixed_ips=[{"subnet_id": subnet.id, "ip_address": subnet.gateway_ip}],
                               device_id=router.id, device_owner=ROUTER_INTERFACE, name="",
                               allow_gateway=True, security_groups=[])
            PORTS.record(session, port, "create")
            subnets = [subnet]
        self.touch(router)
        self.record(session, router, "update")
        return _interface_info(router, port, [s.id for s in subnets])

    def remove_interface(self, session: Session, ctx: Context, router_id: str, info: Any) -> dict[str, Any]:
        """``PUT /routers/{id}/remove_router_interface``: deletes the interface port."""
        port_id, subnet_id = _interface_ids(info, for_removal=True)
        router = self.get_owned(session, ctx, router_id)
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
            subnet = SUBNETS.get(session, ctx, subnet_id)
            port = next((p for p in self.interfaces(session, router.id)
                         if any(ip.subnet_id == subnet.id for ip in p.fixed_ips)), None)
            if port is None:
                raise NotFound(f"Router {router.id} has no interface on subnet {subnet.id}",
                               kind="RouterInterfaceNotFoundForSubnet")
            subnet_ids = [ip.subnet_id for ip in port.fixed_ips]
        for sid in subnet_ids:
            self._confirm_not_in_use(session, router, session.get_one(Subnet, sid))
        result = _interface_info(router, port, subnet_ids)
        delete_port(session, port)
        self.touch(router)
        self.record(session, router, "update")
        return result

    @staticmethod
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


def _interface_ids(info: Any, *, for_removal: bool) -> tuple[str | None, str | None]:
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


def _interface_info(router: Router, port: Port, subnet_ids: list[str]) -> dict[str, Any]:
    return {
        "id": router.id,
        "tenant_id": port.project_id,
        "project_id": port.project_id,
        "port_id": port.id,
        "network_id": port.network_id,
        "subnet_id": subnet_ids[0] if subnet_ids else None,
        "subnet_ids": subnet_ids,
        "tags": [],
    }


def _addresses_differ(port: Port, ext_ips: list[dict[str, Any]]) -> bool:
    """Neutron's ``_check_for_external_ip_change``: asked-for subnets or addresses differ."""
    subnets = {ip.subnet_id for ip in port.fixed_ips}
    wanted_subnets = {e["subnet_id"] for e in ext_ips if e.get("subnet_id")}
    if wanted_subnets and wanted_subnets != subnets:
        return True
    addresses = {ip.ip_address for ip in port.fixed_ips}
    wanted = {e["ip_address"] for e in ext_ips if e.get("ip_address")}
    return bool(wanted) and wanted != addresses


ROUTERS = Routers()

__all__ = ["ROUTERS", "ROUTER_GATEWAY", "ROUTER_INTERFACE", "RouterCreate", "RouterUpdate", "Routers", "bad_router"]
