"""Error bodies in each API family's own format, chosen by path.

Neutron: ``{"NeutronError": {"type", "message", "detail"}}``; Keystone:
``{"error": {"code", "title", "message"}}``; Octavia (``/load-balancer``):
``{"faultcode", "faultstring", "debuginfo"}``; Nova (``/compute``):
``{"itemNotFound": {"code", "message"}}``. Nothing escapes as a bare 500
without a body in the family's format. Magnum's and Zun's mounted sub-apps render
their own (:mod:`netbay.api.versioned`); :func:`refuse_body` answers for them
too, since it answers before routing.
"""

from __future__ import annotations

import logging
import uuid
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from netbay.api.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from netbay.api import container, magnumhttp, versioned
from netbay.errors import BadRequest, NetbayError

log = logging.getLogger("netbay.api")

_HTTP_KINDS = {400: "HTTPBadRequest", 401: "HTTPUnauthorized", 403: "HTTPForbidden",
               404: "HTTPNotFound", 405: "HTTPMethodNotAllowed", 409: "HTTPConflict",
               413: "HTTPRequestEntityTooLarge", 415: "HTTPUnsupportedMediaType",
               500: "HTTPInternalServerError"}


_NOVA_KINDS = {400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
               405: "badMethod", 406: "notAcceptable", 409: "conflictingRequest", 413: "overLimit"}


def render(request: Request, status: int, kind: str, message: str, detail: str = "") -> JSONResponse:
    path = request.url.path
    headers = {}
    body: dict[str, Any]
    if status == 401:
        headers["WWW-Authenticate"] = f'Keystone uri="{str(request.base_url).rstrip("/")}/identity/v3"'
    if path.startswith("/identity"):
        title = HTTPStatus(status).phrase
        body = {"error": {"code": status, "title": title, "message": message}}
    elif path.startswith("/load-balancer"):
        body = {"faultcode": "Server" if status >= 500 else "Client", "faultstring": message, "debuginfo": None}
    elif path.startswith("/compute"):
        body = {_NOVA_KINDS.get(status, "computeFault"): {"code": status, "message": message}}
    else:
        envelope = "NotImplementedError" if status == 501 else "NeutronError"   # as Neutron's fault wrapper
        body = {envelope: {"type": kind, "message": message, "detail": detail}}
    return JSONResponse(body, status_code=status, headers=headers)


def refuse_body(scope: Scope, message: str) -> JSONResponse:
    """The 413 of :class:`netbay.bodylimit.BodyLimit` for a declared length over the
    limit, sent before routing: in the format of the API the path belongs to."""
    request = Request(scope)
    path = request.url.path
    if any(path == p or path.startswith(p + "/") for p in (magnumhttp.PREFIX, container.PREFIX)):
        request_id = f"req-{uuid.uuid4()}"
        return versioned.error_response(request_id, 413, message, {"x-openstack-request-id": request_id})
    return render(request, 413, _HTTP_KINDS[413], message)


def install(app: FastAPI) -> None:
    @app.exception_handler(NetbayError)
    async def _netbay(request: Request, exc: NetbayError) -> JSONResponse:
        return render(request, exc.status, exc.kind, exc.message, exc.detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404 and message == "Not Found":
            message = "The resource could not be found."
        return render(request, exc.status_code, _HTTP_KINDS.get(exc.status_code, "HTTPError"), message)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "request"
        bad = BadRequest(f"Invalid input for {where}. Reason: {first.get('msg', 'invalid')}.")
        return render(request, 400, bad.kind, bad.message)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return render(request, 500, "HTTPInternalServerError",
                      "Request Failed: internal server error while processing your request.")
