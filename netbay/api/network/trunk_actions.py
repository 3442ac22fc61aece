"""A trunk's member actions: ``add_subports``, ``remove_subports`` (PUT) and
``get_subports`` (GET), with Neutron's bare bodies (``{"sub_ports": [...]}``,
no ``trunk`` wrapper); the rules live in ``netbay.network.trunks``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.network.bodies import read_json
from netbay.api.responses import JSONResponse
from netbay.network.registry import TRUNKS


async def add_subports(request: Request, trunk_id: str) -> Response:
    ctx, info = context(request), await read_json(request)
    store = request.app.state.store
    return JSONResponse(await run_in_threadpool(
        lambda: store.retrying(lambda s: TRUNKS.add_subports(s, ctx, trunk_id, info))))


async def remove_subports(request: Request, trunk_id: str) -> Response:
    ctx, info = context(request), await read_json(request)
    store = request.app.state.store
    return JSONResponse(await run_in_threadpool(
        lambda: store.retrying(lambda s: TRUNKS.remove_subports(s, ctx, trunk_id, info))))


def get_subports(request: Request, trunk_id: str) -> Response:
    ctx = context(request)
    with request.app.state.store.read() as s:
        return JSONResponse(TRUNKS.get_subports(s, ctx, trunk_id))


def mount(router: APIRouter) -> None:
    path = "/v2.0/trunks/{trunk_id}"
    router.add_api_route(f"{path}/add_subports", add_subports, methods=["PUT"], name="add_subports")
    router.add_api_route(f"{path}/remove_subports", remove_subports, methods=["PUT"], name="remove_subports")
    router.add_api_route(f"{path}/get_subports", get_subports, methods=["GET"], name="get_subports")
