"""Neutron's quota API: ``/v2.0/quotas`` and a project's limits, defaults and usage.

The rules (defaults, validation, enforcement) live in ``netbay.network.quotas``;
``enforce_create`` is what the generic create route calls before a create.
"""

from __future__ import annotations


from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.network.bodies import read_json
from netbay.api.responses import JSONResponse
from netbay.errors import Forbidden
from netbay.network import quotas
from netbay.network.quotas import enforce_create  # noqa: F401  (the create routes import it from here)


def _store(request: Request):  # noqa: ANN202
    return request.app.state.store


def list_quotas(request: Request) -> Response:
    ctx = context(request)
    if not ctx.is_admin:
        raise Forbidden("User does not have admin privileges: Only admin can view or configure quota.",
                        kind="AdminRequired")
    with _store(request).read() as s:
        return JSONResponse({"quotas": quotas.projects(s)})


def my_tenant(request: Request) -> Response:
    return JSONResponse({"tenant": {"tenant_id": context(request).project_id}})


def my_project(request: Request) -> Response:
    return JSONResponse({"project": {"project_id": context(request).project_id}})


def show_quota(request: Request, project_id: str) -> Response:
    ctx = context(request)
    quotas.check_access(ctx, project_id, "get")
    with _store(request).read() as s:
        return JSONResponse({"quota": quotas.limits(s, project_id)})


def show_default(request: Request, project_id: str) -> Response:
    quotas.check_access(context(request), project_id, "get")
    return JSONResponse({"quota": dict(quotas.DEFAULTS)})


def show_details(request: Request, project_id: str) -> Response:
    quotas.check_access(context(request), project_id, "get")
    with _store(request).read() as s:
        return JSONResponse({"quota": quotas.details(s, project_id)})


async def update_quota(request: Request, project_id: str) -> Response:
    ctx = context(request)
    quotas.check_access(ctx, project_id, "update")
    body = await read_json(request)
    result = await run_in_threadpool(lambda: _store(request).retrying(
        lambda s: quotas.update(s, project_id, body)))
    return JSONResponse({"quota": result})


def delete_quota(request: Request, project_id: str) -> Response:
    quotas.check_access(context(request), project_id, "delete")
    with _store(request).write() as s:
        quotas.reset(s, project_id)
    return Response(status_code=204)


def mount(router: APIRouter) -> None:
    path = "/v2.0/quotas"
    router.add_api_route(path, list_quotas, methods=["GET"], name="list_quotas")
    router.add_api_route(f"{path}/tenant", my_tenant, methods=["GET"], name="show_quota_tenant")
    router.add_api_route(f"{path}/project", my_project, methods=["GET"], name="show_quota_project")
    router.add_api_route(path + "/{project_id}", show_quota, methods=["GET"], name="show_quota")
    router.add_api_route(path + "/{project_id}/default", show_default, methods=["GET"], name="show_quota_default")
    router.add_api_route(path + "/{project_id}/details", show_details, methods=["GET"], name="show_quota_details")
    router.add_api_route(path + "/{project_id}", update_quota, methods=["PUT"], name="update_quota")
    router.add_api_route(path + "/{project_id}", delete_quota, methods=["DELETE"], name="delete_quota",
                         status_code=204)
