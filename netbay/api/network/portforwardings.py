"""``/v2.0/floatingips/{id}/port_forwardings``: Neutron's floating IP port forwardings,
a sub-collection (list, show, create, update, delete); the rules live in
``netbay.network.portforwardings``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.network.bodies import parse_member, read_json
from netbay.api.responses import JSONResponse
from netbay.network.portforwardings import PORT_FORWARDINGS, PortForwardingCreate, PortForwardingUpdate
from netbay.network.resource import ListQuery, Page

_PF = PORT_FORWARDINGS


def mount(router: APIRouter, parse_query: Callable[[Request], ListQuery],
          listing: Callable[[Request, str, Page, ListQuery], dict[str, Any]]) -> None:
    """The routes; ``parse_query`` and ``listing`` are the network API's own (Neutron's
    list parameters and links), handed in so that this module does not import its package."""

    def list_all(request: Request, floatingip_id: str) -> Response:
        ctx, query = context(request), parse_query(request)
        query.filters["floatingip_id"] = [floatingip_id]
        with request.app.state.store.read() as s:
            _PF.floatingip(s, ctx, floatingip_id)
            return JSONResponse(listing(request, "port_forwardings", _PF.list(s, ctx, query), query))

    def show(request: Request, floatingip_id: str, pf_id: str) -> Response:
        ctx, query = context(request), parse_query(request)
        with request.app.state.store.read() as s:
            return JSONResponse({"port_forwarding": _PF.show_one(s, ctx, floatingip_id, pf_id, query.fields)})

    async def create(request: Request, floatingip_id: str) -> Response:
        ctx, raw = context(request), await read_json(request)
        body = parse_member(raw, _PF, "POST")
        assert isinstance(body, PortForwardingCreate)
        result = await run_in_threadpool(lambda: request.app.state.store.retrying(
            lambda s: _PF.create_one(s, ctx, floatingip_id, body)))
        return JSONResponse({"port_forwarding": result}, status_code=201)

    async def update(request: Request, floatingip_id: str, pf_id: str) -> Response:
        ctx, raw = context(request), await read_json(request)
        body = parse_member(raw, _PF, "PUT")
        assert isinstance(body, PortForwardingUpdate)
        result = await run_in_threadpool(lambda: request.app.state.store.retrying(
            lambda s: _PF.update_one(s, ctx, floatingip_id, pf_id, body)))
        return JSONResponse({"port_forwarding": result})

    async def delete(request: Request, floatingip_id: str, pf_id: str) -> Response:
        ctx = context(request)
        await run_in_threadpool(lambda: request.app.state.store.retrying(
            lambda s: _PF.delete_one(s, ctx, floatingip_id, pf_id)))
        return Response(status_code=204)

    path = "/v2.0/floatingips/{floatingip_id}/port_forwardings"
    router.add_api_route(path, list_all, methods=["GET"], name="list_port_forwardings")
    router.add_api_route(path, create, methods=["POST"], name="create_port_forwarding", status_code=201)
    router.add_api_route(path + "/{pf_id}", show, methods=["GET"], name="show_port_forwarding")
    router.add_api_route(path + "/{pf_id}", update, methods=["PUT"], name="update_port_forwarding")
    router.add_api_route(path + "/{pf_id}", delete, methods=["DELETE"], name="delete_port_forwarding",
                         status_code=204)
