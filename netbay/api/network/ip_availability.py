"""``/v2.0/network-ip-availabilities`` (Neutron's ``network-ip-availability``): read-only,
counted by ``netbay.network.ip_availability``; ``fields=`` as on every Neutron list."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from netbay.api.auth import context
from netbay.api.responses import JSONResponse
from netbay.network import ip_availability
from netbay.network.resource import select_fields


def _query(request: Request) -> tuple[dict[str, list[str]], list[str]]:
    filters: dict[str, list[str]] = {}
    fields: list[str] = []
    for key, value in request.query_params.multi_items():
        if key == "fields":
            fields.extend(v for v in value.split(",") if v)
        else:
            filters.setdefault(key, []).append(value)
    return filters, fields


def list_availabilities(request: Request) -> Response:
    filters, fields = _query(request)
    with request.app.state.store.read() as s:
        items: list[dict[str, Any]] = ip_availability.availabilities(s, context(request), filters)
    return JSONResponse({"network_ip_availabilities": [select_fields(i, fields) for i in items]})


def show_availability(request: Request, network_id: str) -> Response:
    _, fields = _query(request)
    with request.app.state.store.read() as s:
        item = ip_availability.availability(s, context(request), network_id)
    return JSONResponse({"network_ip_availability": select_fields(item, fields)})


def mount(router: APIRouter) -> None:
    path = "/v2.0/network-ip-availabilities"
    router.add_api_route(path, list_availabilities, methods=["GET"], name="list_network_ip_availabilities")
    router.add_api_route(f"{path}/{{network_id}}", show_availability, methods=["GET"],
                         name="show_network_ip_availability")
