"""A Keystone v3-compatible subset: version discovery, password tokens, catalog."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from netbay.api.responses import JSONResponse
from sqlalchemy import select

from netbay.errors import BadRequest, Unauthorized
from netbay.identity.tokens import Token
from netbay.store.models import Project, User

router = APIRouter(prefix="/identity", tags=["identity"])

# service type -> (name, path under the server's base URL)
SERVICES: dict[str, tuple[str, str]] = {
    "identity": ("keystone", "/identity"),
    "network": ("neutron", "/network"),
    "load-balancer": ("octavia", "/load-balancer"),
    # Magnum's catalog URL carries the version: clients append /clustertemplates to it.
    "container-infra": ("magnum", "/container-infra/v1"),
    # So does Zun's (zunclient strips its /v1 prefix and discovers versions one level up).
    "container": ("zun", "/container/v1"),
}


def _base(request: Request) -> str:
    return request.app.state.public_url or str(request.base_url).rstrip("/")


def _version(request: Request) -> dict[str, Any]:
    return {
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": f"{_base(request)}/identity/v3/"}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    }


@router.get("", include_in_schema=False)
@router.get("/")
def versions(request: Request) -> JSONResponse:
    return JSONResponse({"versions": {"values": [_version(request)]}}, status_code=300)


@router.get("/v3")
@router.get("/v3/", include_in_schema=False)
def version(request: Request) -> dict[str, Any]:
    return {"version": _version(request)}


def _ts(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def catalog(request: Request) -> list[dict[str, Any]]:
    base = _base(request)
    out = []
    for service_type, (name, path) in SERVICES.items():
        url = base + path + ("/v3" if service_type == "identity" else "")
        endpoints = [
            {"id": f"{name}-{iface}", "interface": iface, "region": "RegionOne", "region_id": "RegionOne", "url": url}
            for iface in ("public", "internal", "admin")
        ]
        out.append({"id": name, "type": service_type, "name": name, "endpoints": endpoints})
    return out


def token_body(request: Request, token: Token, user: User, project: Project) -> dict[str, Any]:
    domain = {"id": "default", "name": "Default"}
    return {
        "token": {
            "methods": ["password"],
            "user": {"id": user.id, "name": user.name, "domain": domain, "password_expires_at": None},
            "project": {"id": project.id, "name": project.name, "domain": domain},
            "roles": [{"id": r, "name": r} for r in token.context.roles],
            "is_domain": False,
            "issued_at": _ts(token.issued_at),
            "expires_at": _ts(token.expires_at),
            "audit_ids": [token.audit_id],
            "catalog": catalog(request),
        }
    }


def _password_request(body: Any) -> dict[str, Any]:
    """Pull user and scope out of Keystone's nested auth body, or answer 400."""
    try:
        auth = body["auth"]
        methods = auth["identity"]["methods"]
        if "password" not in methods:
            raise Unauthorized("Only password authentication is supported.")
        user = auth["identity"]["password"]["user"]
        password = user["password"]
        if not isinstance(password, str):
            raise TypeError
        scope = auth.get("scope") or {}
        project = scope.get("project") or {}
        if not isinstance(project, dict) or not isinstance(user, dict):
            raise TypeError
        fields = {
            "user_id": user.get("id"),
            "user_name": user.get("name"),
            "password": password,
            "project_id": project.get("id"),
            "project_name": project.get("name"),
        }
    except (KeyError, TypeError):
        raise BadRequest("Expecting to find auth.identity.password.user with a password in the request.") from None
    for key, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise BadRequest(f"Invalid input for field '{key}'.")
    if not (fields["user_id"] or fields["user_name"]):
        raise BadRequest("Expecting to find user id or name in the request.")
    return fields


@router.post("/v3/auth/tokens", status_code=201)
async def issue_token(request: Request) -> Response:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise BadRequest("Malformed request body") from None
    fields = _password_request(body)
    state = request.app.state

    def work() -> tuple[Token, User, Project]:
        with state.store.read() as s:
            who = state.identity.authenticate(s, **fields)
            token = state.tokens.issue(who.user.id, who.project.id, who.roles, who.user.password_epoch)
            return token, who.user, who.project

    token, user, project = await run_in_threadpool(work)
    return JSONResponse(token_body(request, token, user, project), status_code=201,
                          headers={"X-Subject-Token": token.value})


@router.get("/v3/auth/tokens")
def validate_token(request: Request) -> Response:
    state = request.app.state
    caller = request.headers.get("X-Auth-Token")
    subject = request.headers.get("X-Subject-Token")
    if not caller or not subject:
        raise Unauthorized("The request you have made requires authentication.")
    state.tokens.verify(caller)
    token = state.tokens.verify(subject)
    with state.store.read() as s:
        user = s.get(User, token.context.user_id)
        project = s.get(Project, token.context.project_id)
    if user is None or project is None:
        raise Unauthorized("The request you have made requires authentication.")
    return JSONResponse(token_body(request, token, user, project), headers={"X-Subject-Token": subject})


@router.get("/v3/auth/catalog")
def get_catalog(request: Request) -> dict[str, Any]:
    from netbay.api.auth import context

    context(request)
    return {"catalog": catalog(request), "links": {"self": str(request.url)}}


@router.get("/v3/auth/projects")
def my_projects(request: Request) -> dict[str, Any]:
    from netbay.api.auth import context

    ctx = context(request)
    with request.app.state.store.read() as s:
        from netbay.store.models import RoleAssignment

        ids = select(RoleAssignment.project_id).where(RoleAssignment.user_id == ctx.user_id)
        projects = s.scalars(select(Project).where(Project.id.in_(ids)))
        return {
            "projects": [
                {"id": p.id, "name": p.name, "domain_id": "default", "enabled": p.enabled,
                 "description": p.description, "is_domain": False, "parent_id": "default"}
                for p in projects
            ],
            "links": {"self": str(request.url), "next": None, "previous": None},
        }
