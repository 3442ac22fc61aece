"""A Nova-compatible ``os-keypairs`` under ``/compute/v2.1`` (catalog type ``compute``):
enough for ``openstack keypair create/list/show/delete`` and for Magnum's keypair check.

Microversions 2.1–2.10 (``OpenStack-API-Version: compute 2.x`` or
``X-OpenStack-Nova-API-Version``): from 2.2 keypairs have a ``type``, create
answers 201 and delete 204; from 2.10 an admin may act for another user
(``user_id``). Errors are Nova's ``{"badRequest": {"code", "message"}}`` bodies
(``netbay.api.errors``). The rules live in ``netbay.compute.keypairs``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.network.bodies import read_json
from netbay.api.responses import JSONResponse
from netbay.compute import keypairs
from netbay.context import Context
from netbay.errors import BadRequest, Forbidden, NetbayError
from netbay.api.urls import public_root

MIN_VERSION = (2, 1)
MAX_VERSION = (2, 10)

router = APIRouter(prefix="/compute", tags=["compute"])


class NotAcceptable(NetbayError):
    status = 406
    kind = "HTTPNotAcceptable"


def _v(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _version_doc(request: Request) -> dict[str, Any]:
    return {"id": "v2.1", "status": "CURRENT", "version": _v(MAX_VERSION), "min_version": _v(MIN_VERSION),
            "updated": "2013-07-23T11:33:21Z",
            "links": [{"rel": "self", "href": f"{public_root(request)}/compute/v2.1/"}],
            "media-types": [{"base": "application/json",
                             "type": "application/vnd.openstack.compute+json;version=2.1"}]}


def version_of(request: Request) -> tuple[int, int]:
    """The microversion asked for (2.1 when none), or a 406."""
    header = request.headers.get("OpenStack-API-Version", "")
    value = next((part.split()[1] for part in header.split(",")
                  if len(part.split()) == 2 and part.split()[0].lower() == "compute"), None)
    value = value or request.headers.get("X-OpenStack-Nova-API-Version")
    if not value:
        return MIN_VERSION
    if value.strip().lower() == "latest":
        return MAX_VERSION
    try:
        major, minor = (int(p) for p in value.strip().split("."))
    except ValueError:
        raise BadRequest(f"API Version String {value} is of invalid format. Must be of format "
                         "MajorNum.MinorNum.") from None
    if not MIN_VERSION <= (major, minor) <= MAX_VERSION:
        raise NotAcceptable(f"Version {value.strip()} is not supported by the API. Minimum is "
                            f"{_v(MIN_VERSION)} and maximum is {_v(MAX_VERSION)}.")
    return major, minor


def _answer(body: Any, version: tuple[int, int], status: int = 200) -> Response:
    headers = {"OpenStack-API-Version": f"compute {_v(version)}", "X-OpenStack-Nova-API-Version": _v(version),
               "Vary": "OpenStack-API-Version, X-OpenStack-Nova-API-Version"}
    if body is None:
        return Response(status_code=status, headers=headers)
    return JSONResponse(body, status_code=status, headers=headers)


def _user(request: Request, ctx: Context, version: tuple[int, int], given: Any = None,
          action: str = "index") -> str:
    """Whose keypairs: the caller's, or (2.10+, admin) the ``user_id`` asked for; a refusal
    names Nova's rule of the action (``os_compute_api:os-keypairs:create``…)."""
    wanted = given or request.query_params.get("user_id")
    if not wanted or version < (2, 10) or wanted == ctx.user_id:
        return ctx.user_id
    if not ctx.is_admin:
        raise Forbidden(f"Policy doesn't allow os_compute_api:os-keypairs:{action} to be performed.")
    return str(wanted)


@router.get("", include_in_schema=False)
@router.get("/")
def versions(request: Request) -> dict[str, Any]:
    return {"versions": [_version_doc(request)]}


@router.get("/v2.1")
@router.get("/v2.1/", include_in_schema=False)
def version(request: Request) -> dict[str, Any]:
    return {"version": _version_doc(request)}


@router.get("/v2.1/os-keypairs")
def list_keypairs(request: Request) -> Response:
    ctx, version = context(request), version_of(request)
    user = _user(request, ctx, version)
    with request.app.state.store.read() as s:
        rows = keypairs.listing(s, user)
        items = [{"keypair": keypairs.render(r, detail=False, typed=version >= (2, 2))} for r in rows]
    return _answer({"keypairs": items}, version)


@router.get("/v2.1/os-keypairs/{name}")
def show_keypair(request: Request, name: str) -> Response:
    ctx, version = context(request), version_of(request)
    user = _user(request, ctx, version, action="show")
    with request.app.state.store.read() as s:
        row = keypairs.get(s, user, name)
        return _answer({"keypair": keypairs.render(row, detail=True, typed=version >= (2, 2))}, version)


@router.post("/v2.1/os-keypairs")
async def create_keypair(request: Request) -> Response:
    ctx, version = context(request), version_of(request)
    raw = await read_json(request)
    body = raw.get("keypair") if isinstance(raw, dict) else None
    if not isinstance(body, dict):
        raise BadRequest("Invalid input for field/attribute keypair. Value: None. 'keypair' is a required property")
    allowed = {"name", "public_key"} | ({"type"} if version >= (2, 2) else set()) | \
        ({"user_id"} if version >= (2, 10) else set())
    extra = sorted(set(body) - allowed)
    if extra:
        raise BadRequest(f"Invalid input for field/attribute keypair. Additional properties are not allowed "
                         f"({', '.join(repr(k) for k in extra)} was unexpected)")
    user = _user(request, ctx, version, body.get("user_id"), action="create")

    def work(s: Any) -> dict[str, Any]:
        row, private = keypairs.create(s, user, body.get("name"), body.get("public_key"),
                                       body.get("type", "ssh"))
        out = keypairs.render(row, detail=False, typed=version >= (2, 2))
        out["user_id"] = row.user_id
        if private is not None:
            out["private_key"] = private
        return out

    store = request.app.state.store
    out = await run_in_threadpool(lambda: store.retrying(work))
    return _answer({"keypair": out}, version, 201 if version >= (2, 2) else 200)


@router.delete("/v2.1/os-keypairs/{name}")
async def delete_keypair(request: Request, name: str) -> Response:
    ctx, version = context(request), version_of(request)
    user = _user(request, ctx, version, action="delete")
    store = request.app.state.store
    await run_in_threadpool(lambda: store.retrying(lambda s: keypairs.delete(s, user, name)))
    return _answer(None, version, 204 if version >= (2, 2) else 202)


def install(app: FastAPI) -> None:
    app.include_router(router)
