"""The HTTP contract Magnum's and Zun's APIs share, in one place for both.

Request ids, microversion negotiation (``OpenStack-API-Version: <service> 1.x``, the
range in every ``/v1`` answer, 406 outside it), the ``{"errors": [{"request_id",
"code", "status", "title", "detail", "links"}]}`` error format for everything under
their prefixes (unknown paths and unexpected failures included), query parameters
checked for NUL, bodies parsed as JSON and writes in one retried transaction.
:mod:`netbay.api.containerinfra` (Magnum) and :mod:`netbay.api.container` (Zun) mount
their routes behind :class:`Guard` with their own service name and range.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import get_route_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from netbay.api.responses import JSONResponse
from netbay.api.urls import public_root
from netbay.errors import BadRequest, NetbayError

log = logging.getLogger("netbay.api.versioned")

SERVICE = "container-infra"
MIN_VERSION = (1, 1)
MAX_VERSION = (1, 9)
VERSION_HEADER = "OpenStack-API-Version"


def version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


# --- errors ------------------------------------------------------------------------------------


def error_body(status: int, message: str, *, code: str | None = None, request_id: str = "",
               **extra: Any) -> dict[str, Any]:
    title = message.split(". ", 1)[0].rstrip(".")
    item = {"request_id": request_id, "code": code or ("server" if status >= 500 else "client"),
            "status": status, "title": title, "detail": message, "links": []}
    item.update(extra)
    return {"errors": [item]}


def error_response(request_id: str, status: int, message: str, headers: dict[str, str] | None = None,
                   **extra: Any) -> JSONResponse:
    return JSONResponse(error_body(status, message, request_id=request_id, **extra), status_code=status,
                        headers=headers)


def request_id(request: Request) -> str:
    return request.scope.get("netbay.request_id", "")


def install_errors(sub: FastAPI) -> None:
    @sub.exception_handler(NetbayError)
    async def _netbay(request: Request, exc: NetbayError) -> JSONResponse:
        headers = {}
        if exc.status == 401:
            base = str(request.base_url).rstrip("/")
            headers["WWW-Authenticate"] = f'Keystone uri="{base}/identity/v3"'
        return error_response(request_id(request), exc.status, exc.message, headers)

    @sub.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = "The resource could not be found."
        elif exc.status_code == 405:
            message = f"The method {request.method} is not allowed for this resource."
        else:
            message = exc.detail if isinstance(exc.detail, str) else "Request failed."
        return error_response(request_id(request), exc.status_code, message, dict(exc.headers or {}))

    @sub.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(request_id(request), 400, "Invalid request.")


class Guard:
    """Request ids, the version contract, and a Magnum-format 500 for anything unexpected."""

    def __init__(self, app: ASGIApp, *, service: str = SERVICE, min_version: tuple[int, int] = MIN_VERSION,
                 max_version: tuple[int, int] = MAX_VERSION, vendor: str = "magnum") -> None:
        """``service`` and its range: Magnum's by default; the container API (Zun) passes its own."""
        self.app = app
        self.service, self.min_version, self.max_version, self.vendor = service, min_version, max_version, vendor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"req-{uuid.uuid4()}"
        scope["netbay.request_id"] = request_id
        path = get_route_path(scope)
        versioned = path == "/v1" or path.startswith("/v1/")
        extra = [(b"x-openstack-request-id", request_id.encode())]
        if versioned:
            service, low, high = self.service, self.min_version, self.max_version
            extra += [(b"openstack-api-minimum-version", f"{service} {version_text(low)}".encode()),
                      (b"openstack-api-maximum-version", f"{service} {version_text(high)}".encode()),
                      (b"vary", VERSION_HEADER.encode())]
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            try:
                version = negotiate(headers.get(VERSION_HEADER.lower()), service, low, high)
            except NotAcceptable as exc:
                response = error_response(request_id, 406, str(exc), code=f"{self.vendor}.microversion-unsupported",
                                          max_version=version_text(high), min_version=version_text(low))
                response.raw_headers.extend(extra)
                await response(scope, receive, send)
                return
            scope["netbay.version"] = version
            extra.append((b"openstack-api-version", f"{service} {version_text(version)}".encode()))
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                response = error_response(request_id, 500,
                                          "Request Failed: internal server error while processing your request.")
                await response(scope, receive, sending)


class NotAcceptable(Exception):
    pass


def negotiate(header: str | None, service: str = SERVICE, low: tuple[int, int] = MIN_VERSION,
              high: tuple[int, int] = MAX_VERSION) -> tuple[int, int]:
    """The version a request asks for (Magnum's rules, which Zun shares), or ``NotAcceptable``."""
    if header is None or not header.strip():
        return low
    entries = [e.strip() for e in header.split(",") if e.strip()]
    mine = [e for e in entries if e.split()[0].lower() == service] if entries else []
    entry = mine[0] if mine else (entries[0] if entries else "")
    parts = entry.split()
    if len(parts) != 2 or parts[0].lower() != service:
        raise NotAcceptable(f"Invalid service type for {VERSION_HEADER} header")
    if parts[1].lower() == "latest":
        return high
    try:
        major, minor = (int(p) for p in parts[1].split("."))
    except ValueError:
        raise NotAcceptable(f"Invalid value for {VERSION_HEADER} header") from None
    requested = (major, minor)
    supported = f"[{version_text(low)}, {version_text(high)}]"
    if major != low[0]:
        raise NotAcceptable(f"Mutually exclusive versions requested. Version {version_text(requested)} requested but "
                            f"not supported by this service. The supported version range is: {supported}.")
    if not low <= requested <= high:
        raise NotAcceptable(f"Version {version_text(requested)} was requested but the minor version is not supported "
                            f"by this service. The supported version range is: {supported}.")
    return requested


# --- helpers -----------------------------------------------------------------------------------


def version(request: Request) -> tuple[int, int]:
    return request.scope.get("netbay.version", MIN_VERSION)


def params(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if "\x00" in key or "\x00" in value:
            raise BadRequest("Query parameters must not contain NUL characters.")
        out[key] = value
    return out


async def body(request: Request) -> Any:
    """The body as JSON; its size is capped while it is read (:mod:`netbay.bodylimit`)."""
    raw = await request.body()
    if not raw.strip():
        raise BadRequest("Request body is empty: a JSON document is required.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"Invalid JSON in request body: {exc}.") from None


async def write(request: Request, work: Callable[[Any], Any]) -> Any:
    """``work(session)`` in one retried transaction, off the event loop."""
    store = request.app.state.store
    return await run_in_threadpool(lambda: store.retrying(work))


def mount_discovery(sub: FastAPI, *, prefix: str, name: str, description: str, media_type: str,
                    collections: tuple[str, ...], low: tuple[int, int], high: tuple[int, int],
                    route_name: str) -> None:
    """The version document at ``/`` and the ``/v1`` root listing ``collections``, as
    Magnum and Zun answer them (their shapes are the same; names and types differ)."""
    def entry(request: Request) -> dict[str, Any]:
        return {"id": "v1", "status": "CURRENT", "min_version": version_text(low), "max_version": version_text(high),
                "links": [{"href": f"{public_root(request)}{prefix}/v1/", "rel": "self"}]}

    def root(request: Request) -> dict[str, Any]:
        current = entry(request)
        return {"name": name, "description": description, "versions": [current], "default_version": current}

    def v1(request: Request) -> dict[str, Any]:
        base = f"{public_root(request)}{prefix}"
        out: dict[str, Any] = {"id": "v1", "media_types": [{"base": "application/json", "type": media_type}],
                               "links": [{"href": f"{base}/v1/", "rel": "self"}]}
        for collection in collections:
            out[collection.replace("-", "_")] = [{"href": f"{base}/v1/{collection}/", "rel": "self"},
                                                 {"href": f"{base}/{collection}/", "rel": "bookmark"}]
        return out

    sub.add_api_route("/", root, methods=["GET"], name=f"{route_name}_versions")
    sub.add_api_route("/v1", v1, methods=["GET"], name=f"{route_name}_v1")
    sub.add_api_route("/v1/", v1, methods=["GET"], include_in_schema=False)
