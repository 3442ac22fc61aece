"""Routers: L3 between a project's subnets, and NAT to an external network.

A router owns ports, told apart by ``device_owner``: one gateway port on an
external network (``router.gw_port_id``, :mod:`netbay.network.routergateway`) and one
interface port per attached subnet, holding that subnet's gateway IP
(:mod:`netbay.network.routerinterfaces`). Routers have no table of their own
ports; a port belongs to router R when its ``device_id`` is R.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, invalid_input
from netbay.network import quotas, routerinterfaces
from netbay.network.ports import delete_port
from netbay.network.resource import Filter, Resource, standard, to_bool, to_int
from netbay.network.routerbodies import (ROUTER_GATEWAY, ROUTER_INTERFACE, GatewayInfo, Route, RouterCreate,
                                         RouterUpdate, bad_router)
from netbay.network.routergateway import clear_gateway, gateway_info, set_gateway
from netbay.network.routerinterfaces import interface_ids, interface_info, interface_to_remove
from netbay.network.types import UUID
from netbay.store.models import CREATED_REVISION, IPAllocation, Port, Router, Subnet, Tag

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
            "external_gateway_info": gateway_info(session, obj),
            "routes": list(obj.routes or []),
            "distributed": False,
            "ha": False,
            "flavor_id": None,
            "availability_zone_hints": [],
            "availability_zones": ["nova"],
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
            set_gateway(session, ctx, router, info, "create")
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
            quotas.limit_check(session, "router_route", router.project_id, len(routes))
            router.routes = routes
        if "external_gateway_info" in given:
            info = body.external_gateway_info
            if info is None or info.clears:
                clear_gateway(session, router)
            else:
                set_gateway(session, ctx, router, info, "update")
        for key in ("name", "description", "admin_state_up"):
            if key in given:
                setattr(router, key, given[key])
        self.touch(router)
        self.record(session, router, "update")
        return router

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        router = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        if routerinterfaces.interfaces(session, router.id):
            raise Conflict(f"Router {router.id} still has ports", kind="RouterInUse")
        clear_gateway(session, router)
        session.execute(Tag.__table__.delete().where(Tag.resource_id == router.id))
        self.record(session, router, "delete", None)
        session.delete(router)
        session.flush()

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
        return routerinterfaces.interfaces(session, router_id)

    def add_interface(self, session: Session, ctx: Context, router_id: str, info: Any) -> dict[str, Any]:
        """``PUT /routers/{id}/add_router_interface`` with ``subnet_id`` or ``port_id``."""
        port_id, subnet_id = interface_ids(info, for_removal=False)
        router = self.get_owned(session, ctx, router_id)
        result = routerinterfaces.add_interface(session, ctx, router, port_id, subnet_id)
        self.touch(router)
        self.record(session, router, "update")
        return result

    def remove_interface(self, session: Session, ctx: Context, router_id: str, info: Any) -> dict[str, Any]:
        """``PUT /routers/{id}/remove_router_interface``: deletes the interface port."""
        port_id, subnet_id = interface_ids(info, for_removal=True)
        router = self.get_owned(session, ctx, router_id)
        port, subnet_ids = interface_to_remove(session, ctx, router, port_id, subnet_id)
        result = interface_info(router, port, subnet_ids)
        delete_port(session, port)
        self.touch(router)
        self.record(session, router, "update")
        return result


ROUTERS = Routers()

__all__ = ["ROUTERS", "ROUTER_GATEWAY", "ROUTER_INTERFACE", "UUID", "GatewayInfo", "Route", "RouterCreate",
           "RouterUpdate", "Routers", "bad_router"]
