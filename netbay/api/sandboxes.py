"""``/netbay/v1/sandboxes``: create, list, show and delete sandboxes.

Neutron conventions throughout (``{"sandbox": {...}}`` bodies, ``fields``,
filters, sorting and paging on lists, ``NeutronError`` bodies), so a client of
the network API needs nothing new to use it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from netbay.api.responses import JSONResponse

from netbay.api.auth import context
from netbay.api.network import parse_list_query
from netbay.api.network.bodies import parse_member, read_json
from netbay.network.sandboxes import SANDBOXES

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])


@router.get("/sandboxes")
def list_sandboxes(request: Request) -> Response:
    ctx = context(request)
    query = parse_list_query(request)
    with request.app.state.store.read() as s:
        page = SANDBOXES.list(s, ctx, query)
    body: dict[str, Any] = {"sandboxes": page.items}
    return JSONResponse(body)


@router.get("/sandboxes/{sandbox_id}")
def show_sandbox(request: Request, sandbox_id: str) -> Response:
    ctx = context(request)
    fields = parse_list_query(request).fields
    with request.app.state.store.read() as s:
        return JSONResponse({"sandbox": SANDBOXES.show(s, ctx, sandbox_id, fields)})


@router.post("/sandboxes", status_code=201)
async def create_sandbox(request: Request) -> Response:
    ctx = context(request)
    body = parse_member(await read_json(request), SANDBOXES, "POST")

    def create(s):  # noqa: ANN001, ANN202
        obj = SANDBOXES.create(s, ctx, body)
        s.flush()
        return SANDBOXES.render(s, obj, [])

    item = await run_in_threadpool(lambda: request.app.state.store.retrying(create))
    return JSONResponse({"sandbox": item}, status_code=201)


@router.delete("/sandboxes/{sandbox_id}", status_code=204)
def delete_sandbox(request: Request, sandbox_id: str) -> Response:
    ctx = context(request)
    with request.app.state.store.write() as s:
        SANDBOXES.delete(s, ctx, sandbox_id)
    return Response(status_code=204)
