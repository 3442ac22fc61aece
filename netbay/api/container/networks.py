"""Zun's container networks (``/v1/networks``): create from a netbay network, list,
show, delete — 409 while containers are attached."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.container.common import links, neutron, runner
from netbay.api import versioned
from netbay.api.responses import JSONResponse
from netbay.containers import networks


def mount(sub: FastAPI) -> None:
    def shown(request: Request, net: Any) -> dict[str, Any]:
        out = networks.render(net)
        out["links"] = links(request, "networks", net.id)
        return out

    def listing(request: Request) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse({"networks": [shown(request, n) for n in networks.listing(s, ctx)]})

    def show(request: Request, ident: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse(shown(request, networks.get(s, ctx, ident)))

    async def create(request: Request) -> Response:
        backend = neutron(request)
        body = await versioned.body(request)
        out = await run_in_threadpool(networks.create, request.app.state.store, backend, body)
        out["links"] = links(request, "networks", out["uuid"])
        return JSONResponse(out, status_code=200)

    async def delete(request: Request, ident: str) -> Response:
        ctx = context(request)
        network_id, last = await versioned.write(request, lambda s: networks.delete(s, ctx, ident))
        if last:
            await run_in_threadpool(runner(request).remove_network, network_id)
        return Response(status_code=204)

    sub.add_api_route("/v1/networks", listing, methods=["GET"], name="list_networks")
    sub.add_api_route("/v1/networks", create, methods=["POST"], name="create_network")
    sub.add_api_route("/v1/networks/{ident}", show, methods=["GET"], name="show_network")
    sub.add_api_route("/v1/networks/{ident}", delete, methods=["DELETE"], status_code=204, name="delete_network")
