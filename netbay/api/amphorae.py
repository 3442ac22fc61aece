"""Octavia's amphora admin API under ``/load-balancer/v2/octavia/amphorae``: list
(``?loadbalancer_id=``, ``fields``, ``limit``/``marker``), show, delete, failover,
config and stats of the haproxy namespaces that realize load balancers (``netbay.lbaas.amphorae``).

Octavia's default policy gives these to load-balancer admins only (``admin``,
``load-balancer_admin``); a global observer, who may read every load balancer, is
refused here as there.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context, token
from netbay.api.policy import LB_ADMIN, OCTAVIA_DENIED, implied
from netbay.api.responses import JSONResponse
from netbay.context import Context
from netbay.errors import BadRequest, Forbidden
from netbay.lbaas import amphorae

PATH = "/octavia/amphorae"


def _admin(request: Request) -> Context:
    """The caller, if a load-balancer admin by its own roles (not a global observer's reach)."""
    ctx = context(request)
    tok = token(request)
    if tok is not None and not implied(tok.context.roles) & LB_ADMIN:
        raise Forbidden(OCTAVIA_DENIED)
    return ctx


def _query(request: Request) -> tuple[dict[str, list[str]], list[str], int | None, str | None]:
    filters: dict[str, list[str]] = {}
    fields: list[str] = []
    limit = marker = None
    for key, value in request.query_params.multi_items():
        if key == "fields":
            fields.extend(v for v in value.split(",") if v)
        elif key == "limit":
            if not value.isdigit():
                raise BadRequest(f"Supplied pagination limit '{value}' is not valid.")
            limit = int(value)
        elif key == "marker":
            marker = value
        elif key not in {"sort", "sort_key", "sort_dir", "page_reverse"}:
            filters.setdefault(key, []).append(value)
    return filters, fields, limit, marker


def list_amphorae(request: Request) -> Response:
    _admin(request)
    filters, fields, limit, marker = _query(request)
    with request.app.state.store.read() as s:
        items = amphorae.listing(s, filters, fields, limit, marker)
    return JSONResponse({"amphorae": items, "amphorae_links": []})


def show_amphora(request: Request, amphora_id: str) -> Response:
    _admin(request)
    fields = _query(request)[1]
    with request.app.state.store.read() as s:
        return JSONResponse({"amphora": amphorae.show(s, amphora_id, fields)})


def amphora_stats(request: Request, amphora_id: str) -> dict[str, Any]:
    _admin(request)
    with request.app.state.store.read() as s:
        return {"amphora_stats": amphorae.stats(s, amphora_id)}


async def failover_amphora(request: Request, amphora_id: str) -> Response:
    ctx = _admin(request)
    store = request.app.state.store
    await run_in_threadpool(lambda: store.retrying(lambda s: amphorae.fail_over(s, ctx, amphora_id)))
    return Response(status_code=202)


def delete_amphora(request: Request, amphora_id: str) -> Response:
    _admin(request)
    request.app.state.store.retrying(lambda s: amphorae.delete(s, amphora_id))
    return Response(status_code=204)


def configure_amphora(request: Request, amphora_id: str) -> Response:
    """API 2.7's agent configuration refresh: netbay's namespaces have no agent of their
    own to reconfigure (the dataplane agent reads its configuration at start), so there
    is nothing to push: accepted once the amphora exists."""
    _admin(request)
    with request.app.state.store.read() as s:
        amphorae.find(s, amphora_id)
    return Response(status_code=202)


def install(app: FastAPI) -> None:
    api = APIRouter(tags=["load-balancer"])
    api.add_api_route(PATH, list_amphorae, methods=["GET"], name="list_amphorae")
    api.add_api_route(PATH + "/{amphora_id}", show_amphora, methods=["GET"], name="show_amphora")
    api.add_api_route(PATH + "/{amphora_id}", delete_amphora, methods=["DELETE"], name="delete_amphora",
                      status_code=204)
    api.add_api_route(PATH + "/{amphora_id}/stats", amphora_stats, methods=["GET"], name="show_amphora_stats")
    api.add_api_route(PATH + "/{amphora_id}/failover", failover_amphora, methods=["PUT"],
                      name="failover_amphora", status_code=202)
    api.add_api_route(PATH + "/{amphora_id}/config", configure_amphora, methods=["PUT"],
                      name="configure_amphora", status_code=202)
    app.include_router(api, prefix="/load-balancer/v2")
    app.include_router(api, prefix="/load-balancer/v2.0", include_in_schema=False)


__all__ = ["install"]
