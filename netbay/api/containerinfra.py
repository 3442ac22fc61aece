"""The Magnum-compatible container-infra API v1 under ``/container-infra``.

A mounted sub-application, so that everything under the prefix — unknown paths,
wrong methods, unexpected failures included — answers in Magnum's error format
``{"errors": [{"request_id", "code", "status", "title", "detail", "links"}]}``
(``title`` is the message up to its first sentence end). It shares the main
app's state (store, tokens).

Microversions: ``OpenStack-API-Version: container-infra 1.x`` (or ``latest``),
1.1 when absent, 1.1–1.9 served (Train's range); every ``/v1`` answer carries the
minimum, maximum and served version; anything else is a 406. Bays follow 1.1's
synchronous contract (201 / 200 with the bay) below 1.2 and answer 202
``{"uuid"}`` from 1.2, as Magnum's do.

Routes: ``clustertemplates`` and ``baymodels``, ``clusters`` and ``bays``
(list, ``/detail``, show by uuid or name, create, JSON-patch, delete) and
``network-drivers`` (netbay: the Network Driver and Label Matrices);
``mservices`` and ``certificates`` are mounted from ``netbay.api.clusterops``. The
rules live in ``netbay.coe``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import get_route_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from netbay.api import clusterops
from netbay.api.auth import context
from netbay.api.magnumhttp import PREFIX, base as _base, body as _body, links as _links, write as _write
from netbay.api.responses import JSONResponse
from netbay.coe import clusters, common, matrix, stackview, templates
from netbay.coe.coes import CoeConfig
from netbay.coe.conductor import Conductor, NoConductor
from netbay.errors import BadRequest, NetbayError, NotFound

log = logging.getLogger("netbay.api.containerinfra")

SERVICE = "container-infra"
MIN_VERSION = (1, 1)
MAX_VERSION = (1, 9)
VERSION_HEADER = "OpenStack-API-Version"
ZERO_NODES_VERSION = (1, 10)  # Magnum's: node_count 0 from here on (not served yet)


def _v(version: tuple[int, int]) -> str:
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


def _request_id(request: Request) -> str:
    return request.scope.get("netbay.request_id", "")


def _install_errors(sub: FastAPI) -> None:
    @sub.exception_handler(NetbayError)
    async def _netbay(request: Request, exc: NetbayError) -> JSONResponse:
        headers = {}
        if exc.status == 401:
            base = str(request.base_url).rstrip("/")
            headers["WWW-Authenticate"] = f'Keystone uri="{base}/identity/v3"'
        return error_response(_request_id(request), exc.status, exc.message, headers)

    @sub.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = "The resource could not be found."
        elif exc.status_code == 405:
            message = f"The method {request.method} is not allowed for this resource."
        else:
            message = exc.detail if isinstance(exc.detail, str) else "Request failed."
        return error_response(_request_id(request), exc.status_code, message, dict(exc.headers or {}))

    @sub.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(_request_id(request), 400, "Invalid request.")


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
            extra += [(b"openstack-api-minimum-version", f"{service} {_v(low)}".encode()),
                      (b"openstack-api-maximum-version", f"{service} {_v(high)}".encode()),
                      (b"vary", VERSION_HEADER.encode())]
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            try:
                version = negotiate(headers.get(VERSION_HEADER.lower()), service, low, high)
            except NotAcceptable as exc:
                response = error_response(request_id, 406, str(exc), code=f"{self.vendor}.microversion-unsupported",
                                          max_version=_v(high), min_version=_v(low))
                response.raw_headers.extend(extra)
                await response(scope, receive, send)
                return
            scope["netbay.version"] = version
            extra.append((b"openstack-api-version", f"{service} {_v(version)}".encode()))
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
    supported = f"[{_v(low)}, {_v(high)}]"
    if major != low[0]:
        raise NotAcceptable(f"Mutually exclusive versions requested. Version {_v(requested)} requested but "
                            f"not supported by this service. The supported version range is: {supported}.")
    if not low <= requested <= high:
        raise NotAcceptable(f"Version {_v(requested)} was requested but the minor version is not supported "
                            f"by this service. The supported version range is: {supported}.")
    return requested


# --- helpers -----------------------------------------------------------------------------------


def _version(request: Request) -> tuple[int, int]:
    return request.scope.get("netbay.version", MIN_VERSION)


def _params(request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if "\x00" in key or "\x00" in value:
            raise BadRequest("Query parameters must not contain NUL characters.")
        out[key] = value
    return out


def _listing(request: Request, collection: str, items: list[dict[str, Any]], next_marker: str | None,
             p: common.Paging) -> JSONResponse:
    for item in items:
        item["links"] = _links(request, collection, item["uuid"])
    body: dict[str, Any] = {collection: items}
    if next_marker:
        query = {"limit": p.limit, "sort_key": p.sort_key, "sort_dir": p.sort_dir, "marker": next_marker}
        body["next"] = f"{_base(request)}{request.url.path}?{urlencode(query)}"
    return JSONResponse(body)


def _config(request: Request) -> CoeConfig:
    return request.app.state.coe_config


def _conductor(request: Request) -> Conductor:
    return request.app.state.coe_conductor


def _names(request: Request) -> Any:
    """Where a template's or cluster's network names are looked up: the conductor's
    backend as the caller sees it (a member names only what its project may use)."""
    net = _conductor(request).names()
    return None if net is None else net.for_context(context(request))


# --- cluster templates / baymodels --------------------------------------------------------------


def _mount_templates(sub: FastAPI, collection: str, legacy: bool) -> None:
    path = f"/v1/{collection}"
    argument = "baymodel" if legacy else "cluster_template"

    def shown(request: Request, template: Any) -> dict[str, Any]:
        out = templates.render(template)
        out["links"] = _links(request, collection, out["uuid"])
        return out

    def listing(request: Request) -> Response:
        ctx = context(request)
        p = common.paging(_params(request))
        with request.app.state.store.read() as s:
            items, nxt = templates.list_page(s, ctx, p)
        return _listing(request, collection, items, nxt, p)

    def show(request: Request, ident: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse(shown(request, templates.get(s, ctx, ident)))

    async def create(request: Request) -> Response:
        ctx = context(request)
        body = await _body(request)
        config = _config(request)
        net = await run_in_threadpool(_names, request)
        out = await _write(request, lambda s: shown(
            request, templates.create(s, ctx, config, body, legacy=legacy, argument=argument, net=net)))
        return JSONResponse(out, status_code=201, headers={"Location": out["links"][0]["href"]})

    async def update(request: Request, ident: str) -> Response:
        ctx = context(request)
        body = await _body(request)
        config = _config(request)
        net = await run_in_threadpool(_names, request)
        out = await _write(request, lambda s: shown(
            request, templates.update(s, ctx, config, ident, body, legacy=legacy, net=net)))
        return JSONResponse(out)

    async def delete(request: Request, ident: str) -> Response:
        ctx = context(request)
        await _write(request, lambda s: templates.delete(s, ctx, ident))
        return Response(status_code=204)

    sub.add_api_route(path, listing, methods=["GET"], name=f"list_{collection}")
    sub.add_api_route(path + "/detail", listing, methods=["GET"], name=f"detail_{collection}")
    sub.add_api_route(path, create, methods=["POST"], status_code=201, name=f"create_{argument}")
    sub.add_api_route(path + "/{ident}", show, methods=["GET"], name=f"show_{argument}")
    sub.add_api_route(path + "/{ident}", update, methods=["PATCH"], name=f"update_{argument}")
    sub.add_api_route(path + "/{ident}", delete, methods=["DELETE"], status_code=204,
                      name=f"delete_{argument}")


# --- clusters / bays -----------------------------------------------------------------------------


def _mount_clusters(sub: FastAPI, collection: str, legacy: bool) -> None:
    path = f"/v1/{collection}"
    member = "bay" if legacy else "cluster"

    def shown(request: Request, session: Any, cluster: Any) -> dict[str, Any]:
        out = clusters.render(session, cluster, legacy=legacy)
        out["links"] = _links(request, collection, out["uuid"])
        return out

    def lister(detail: bool) -> Callable[[Request], Response]:
        def listing(request: Request) -> Response:
            ctx = context(request)
            p = common.paging(_params(request))
            with request.app.state.store.read() as s:
                items, nxt = clusters.list_page(s, ctx, p, detail=detail, legacy=legacy)
            return _listing(request, collection, items, nxt, p)

        return listing

    def show(request: Request, ident: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse(shown(request, s, clusters.get(s, ctx, ident)))

    def synchronous(request: Request) -> bool:
        """Bays below 1.2 answer with the bay itself (Magnum's pre-async contract)."""
        return legacy and _version(request) < (1, 2)

    async def create(request: Request) -> Response:
        ctx = context(request)
        body = await _body(request)
        zero = _version(request) >= ZERO_NODES_VERSION
        net = await run_in_threadpool(_names, request)
        out = await _write(request, lambda s: shown(request, s, clusters.create(s, ctx, body, legacy=legacy,
                                                                                 zero_nodes=zero, net=net)))
        _conductor(request).cluster_changed(out["uuid"], "create")
        if synchronous(request):
            return JSONResponse(out, status_code=201, headers={"Location": out["links"][0]["href"]})
        return JSONResponse({"uuid": out["uuid"]}, status_code=202)

    async def update(request: Request, ident: str) -> Response:
        ctx = context(request)
        body = await _body(request)
        zero = _version(request) >= ZERO_NODES_VERSION
        net = await run_in_threadpool(_names, request)
        out = await _write(request, lambda s: shown(request, s, clusters.update(s, ctx, ident, body, legacy=legacy,
                                                                                  zero_nodes=zero, net=net)))
        _conductor(request).cluster_changed(out["uuid"], "update")
        if synchronous(request):
            return JSONResponse(out)
        return JSONResponse({"uuid": out["uuid"]}, status_code=202)

    async def delete(request: Request, ident: str) -> Response:
        ctx = context(request)
        teardown = _conductor(request).builds
        cluster_id = await _write(request, lambda s: clusters.delete(s, ctx, ident, teardown=teardown))
        _conductor(request).cluster_changed(cluster_id, "delete")
        return Response(status_code=204)

    sub.add_api_route(path, lister(False), methods=["GET"], name=f"list_{collection}")
    sub.add_api_route(path + "/detail", lister(True), methods=["GET"], name=f"detail_{collection}")
    sub.add_api_route(path, create, methods=["POST"], status_code=202, name=f"create_{member}")
    sub.add_api_route(path + "/{ident}", show, methods=["GET"], name=f"show_{member}")
    sub.add_api_route(path + "/{ident}", update, methods=["PATCH"], status_code=202, name=f"update_{member}")
    sub.add_api_route(path + "/{ident}", delete, methods=["DELETE"], status_code=204, name=f"delete_{member}")
    if legacy:
        return

    def view(what: Callable[[Any, Any], dict[str, Any]]) -> Callable[[Request, str], Response]:
        def handler(request: Request, ident: str) -> Response:
            ctx = context(request)
            with request.app.state.store.read() as s:
                return JSONResponse(what(s, clusters.get(s, ctx, ident)))
        return handler

    # netbay's own: the HOT export of the cluster's graph, and its resources as built.
    sub.add_api_route(path + "/{ident}/template", view(stackview.export), methods=["GET"],
                      name="export_cluster_template")
    sub.add_api_route(path + "/{ident}/resources", view(stackview.resources), methods=["GET"],
                      name="list_cluster_resources")


# --- discovery and the driver matrices ------------------------------------------------------------


def _version_entry(request: Request) -> dict[str, Any]:
    return {"id": "v1", "status": "CURRENT", "min_version": _v(MIN_VERSION), "max_version": _v(MAX_VERSION),
            "links": [{"href": f"{_base(request)}{PREFIX}/v1/", "rel": "self"}]}


def _mount_discovery(sub: FastAPI) -> None:
    def root(request: Request) -> dict[str, Any]:
        entry = _version_entry(request)
        return {"name": "OpenStack Magnum API (netbay)",
                "description": "Magnum-compatible container infrastructure: cluster templates and clusters "
                               "whose networking netbay builds on this machine.",
                "versions": [entry], "default_version": entry}

    def v1(request: Request) -> dict[str, Any]:
        base = f"{_base(request)}{PREFIX}"
        out: dict[str, Any] = {
            "id": "v1",
            "media_types": [{"base": "application/json", "type": "application/vnd.openstack.magnum.v1+json"}],
            "links": [{"href": f"{base}/v1/", "rel": "self"}],
        }
        for name in ("clustertemplates", "clusters", "baymodels", "bays", "certificates", "mservices",
                     "network-drivers"):
            out[name.replace("-", "_")] = [{"href": f"{base}/v1/{name}/", "rel": "self"},
                                           {"href": f"{base}/{name}/", "rel": "bookmark"}]
        return out

    def drivers_all(request: Request) -> dict[str, Any]:
        context(request)
        return matrix.document(_config(request))

    def driver_one(request: Request, name: str) -> dict[str, Any]:
        context(request)
        config = _config(request)
        for d in matrix.document(config)["network_drivers"]:
            if d["name"] == name:
                return {"network_driver": d}
        raise NotFound(f"Network driver {name} could not be found.")

    sub.add_api_route("/", root, methods=["GET"], name="container_infra_versions")
    sub.add_api_route("/v1", v1, methods=["GET"], name="container_infra_v1")
    sub.add_api_route("/v1/", v1, methods=["GET"], include_in_schema=False)
    sub.add_api_route("/v1/network-drivers", drivers_all, methods=["GET"], name="list_network_drivers")
    sub.add_api_route("/v1/network-drivers/{name}", driver_one, methods=["GET"], name="show_network_driver")


def create_subapp(parent: FastAPI, config: CoeConfig | None = None, conductor: Conductor | None = None) -> FastAPI:
    sub = FastAPI(title="netbay container-infra", openapi_url="/openapi.json", docs_url=None, redoc_url=None)
    sub.state = parent.state
    parent.state.coe_config = config or CoeConfig.from_env()
    parent.state.coe_conductor = conductor or NoConductor()
    _install_errors(sub)
    _mount_discovery(sub)
    _mount_templates(sub, "clustertemplates", legacy=False)
    _mount_templates(sub, "baymodels", legacy=True)
    _mount_clusters(sub, "clusters", legacy=False)
    _mount_clusters(sub, "bays", legacy=True)
    clusterops.mount(sub)   # mservices and certificates
    sub.add_middleware(Guard)
    return sub


def install(app: FastAPI, conductor: Conductor | None = None) -> None:
    """Mount the API at ``/container-infra`` and accept cluster status reports."""
    from netbay.api import status

    status.register("clusters", clusters.set_status)
    sub = create_subapp(app, conductor=conductor)

    def bare(request: Request) -> Response:
        return Response(status_code=307, headers={"Location": f"{_base(request)}{PREFIX}/"})

    app.add_api_route(PREFIX, bare, methods=["GET"], include_in_schema=False)
    app.mount(PREFIX, sub)
