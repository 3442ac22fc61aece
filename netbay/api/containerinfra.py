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
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api import clusterops
from netbay.api.auth import context
from netbay.api.magnumhttp import PREFIX, links as _links
from netbay.api.versioned import (MAX_VERSION, MIN_VERSION, Guard, mount_discovery, body as _body, install_errors,
                                  params as _params, version as _version,
                                  write as _write)
from netbay.api.urls import public_root
from netbay.api.responses import JSONResponse
from netbay.coe import clusters, common, matrix, stackview, templates
from netbay.coe.coes import CoeConfig
from netbay.coe.conductor import Conductor, NoConductor
from netbay.errors import NotFound

log = logging.getLogger("netbay.api.containerinfra")

ZERO_NODES_VERSION = (1, 10)  # Magnum's: node_count 0 from here on (not served yet)


def _listing(request: Request, collection: str, items: list[dict[str, Any]], next_marker: str | None,
             p: common.Paging) -> JSONResponse:
    for item in items:
        item["links"] = _links(request, collection, item["uuid"])
    body: dict[str, Any] = {collection: items}
    if next_marker:
        query = {"limit": p.limit, "sort_key": p.sort_key, "sort_dir": p.sort_dir, "marker": next_marker}
        body["next"] = f"{public_root(request)}{request.url.path}?{urlencode(query)}"
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


def _mount_discovery(sub: FastAPI) -> None:
    mount_discovery(sub, prefix=PREFIX, name="OpenStack Magnum API (netbay)",
                    description="Magnum-compatible container infrastructure: cluster templates and clusters "
                                "whose networking netbay builds on this machine.",
                    media_type="application/vnd.openstack.magnum.v1+json",
                    collections=("clustertemplates", "clusters", "baymodels", "bays", "certificates", "mservices",
                                 "network-drivers"),
                    low=MIN_VERSION, high=MAX_VERSION, route_name="container_infra")

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

    sub.add_api_route("/v1/network-drivers", drivers_all, methods=["GET"], name="list_network_drivers")
    sub.add_api_route("/v1/network-drivers/{name}", driver_one, methods=["GET"], name="show_network_driver")


def create_subapp(parent: FastAPI, config: CoeConfig | None = None, conductor: Conductor | None = None) -> FastAPI:
    sub = FastAPI(title="netbay container-infra", openapi_url="/openapi.json", docs_url=None, redoc_url=None)
    sub.state = parent.state
    parent.state.coe_config = config or CoeConfig.from_env()
    parent.state.coe_conductor = conductor or NoConductor()
    install_errors(sub)
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
        return Response(status_code=307, headers={"Location": f"{public_root(request)}{PREFIX}/"})

    app.add_api_route(PREFIX, bare, methods=["GET"], include_in_schema=False)
    app.mount(PREFIX, sub)
