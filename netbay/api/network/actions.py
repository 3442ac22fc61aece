"""Member actions beyond CRUD: a router's add/remove_router_interface and
add/remove_extraroutes, a subnet pool's add/remove_prefixes, an address group's
add/remove_addresses.

The interface body is Neutron's bare ``{"subnet_id": ...}`` or ``{"port_id": ...}``
(no ``router`` wrapper), the extra routes' ``{"router": {"routes": [...]}}``; the
rules live in ``netbay.network.routers`` and ``netbay.network.extraroutes``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from netbay.api.responses import JSONResponse
from sqlalchemy.orm import Session

from netbay.api.auth import context
from netbay.api.network.bodies import read_json
from netbay.context import Context
from netbay.network.extraroutes import add_extraroutes, remove_extraroutes
from netbay.network.registry import ADDRESS_GROUPS, ROUTERS
from netbay.network.subnetpool_prefixes import add_prefixes, remove_prefixes

_UUID = {"type": "string", "format": "uuid"}
_INTERFACE_SCHEMA = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object",
    "description": "Exactly one of subnet_id or port_id (both allowed on removal).",
    "properties": {"subnet_id": _UUID, "port_id": _UUID},
}}}}}
_ROUTES_SCHEMA = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["router"],
    "properties": {"router": {"type": "object", "properties": {"routes": {"type": "array", "items": {
        "type": "object", "properties": {"destination": {"type": "string"}, "nexthop": {"type": "string"}}}}}}},
}}}}}

Action = Callable[[Session, Context, str, Any], dict[str, Any]]


_PREFIXES_SCHEMA = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "properties": {"prefixes": {"type": "array", "items": {"type": "string"}}},
}}}}}


async def _run(request: Request, run: Action, item_id: str) -> Response:
    ctx = context(request)
    info = await read_json(request)
    store = request.app.state.store
    return JSONResponse(await run_in_threadpool(lambda: store.retrying(lambda s: run(s, ctx, item_id, info))))


def _action(run: Action) -> Callable[[Request, str], Any]:
    async def handler(request: Request, router_id: str) -> Response:
        return await _run(request, run, router_id)

    return handler


def _pool_action(run: Action) -> Callable[[Request, str], Any]:
    async def handler(request: Request, subnetpool_id: str) -> Response:
        return await _run(request, run, subnetpool_id)

    return handler


def mount(router: APIRouter) -> None:
    path = "/v2.0/routers/{router_id}"
    router.add_api_route(f"{path}/add_router_interface", _action(ROUTERS.add_interface), methods=["PUT"],
                         name="add_router_interface", openapi_extra=_INTERFACE_SCHEMA)
    router.add_api_route(f"{path}/remove_router_interface", _action(ROUTERS.remove_interface),
                         methods=["PUT"], name="remove_router_interface", openapi_extra=_INTERFACE_SCHEMA)
    pools = "/v2.0/subnetpools/{subnetpool_id}"
    router.add_api_route(f"{pools}/add_prefixes", _pool_action(add_prefixes), methods=["PUT"],
                         name="add_prefixes", openapi_extra=_PREFIXES_SCHEMA)
    router.add_api_route(f"{pools}/remove_prefixes", _pool_action(remove_prefixes), methods=["PUT"],
                         name="remove_prefixes", openapi_extra=_PREFIXES_SCHEMA)
    router.add_api_route(f"{path}/add_extraroutes", _action(add_extraroutes), methods=["PUT"],
                         name="add_extraroutes", openapi_extra=_ROUTES_SCHEMA)
    router.add_api_route(f"{path}/remove_extraroutes", _action(remove_extraroutes), methods=["PUT"],
                         name="remove_extraroutes", openapi_extra=_ROUTES_SCHEMA)
    groups = "/v2.0/address-groups/{router_id}"   # the handler's path parameter is shared
    router.add_api_route(f"{groups}/add_addresses", _action(
        lambda s, ctx, gid, info: ADDRESS_GROUPS.change_addresses(s, ctx, gid, info, add=True)),
        methods=["PUT"], name="add_addresses")
    router.add_api_route(f"{groups}/remove_addresses", _action(
        lambda s, ctx, gid, info: ADDRESS_GROUPS.change_addresses(s, ctx, gid, info, add=False)),
        methods=["PUT"], name="remove_addresses")
