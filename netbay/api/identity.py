"""A Keystone v3-compatible subset: version discovery, password tokens, catalog."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from netbay.api.responses import JSONResponse
from sqlalchemy import select

from netbay.api import appcreds, keystone
from netbay.errors import BadRequest, Forbidden, NotFound, Unauthorized
from netbay.identity import appcreds as appcreds_auth
from netbay.identity.tokens import Token
from netbay.store.models import ApplicationCredential, Project, Role, User
from netbay.api.urls import public_root

router = APIRouter(prefix="/identity", tags=["identity"])
router.include_router(keystone.router)  # the admin API: projects, users, roles, assignments
router.include_router(appcreds.router)

# service type -> (name, path under the server's base URL)
SERVICES: dict[str, tuple[str, str]] = {
    "identity": ("keystone", "/identity"),
    "network": ("neutron", "/network"),
    "load-balancer": ("octavia", "/load-balancer"),
    # Magnum's catalog URL carries the version: clients append /clustertemplates to it.
    "container-infra": ("magnum", "/container-infra/v1"),
    "compute": ("nova", "/compute/v2.1"),  # os-keypairs only (netbay/api/compute.py)
    # So does Zun's (zunclient strips its /v1 prefix and discovers versions one level up).
    "container": ("zun", "/container/v1"),
}


def _version(request: Request) -> dict[str, Any]:
    return {
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": f"{public_root(request)}/identity/v3/"}],
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
    base = public_root(request)
    out = []
    for service_type, (name, path) in SERVICES.items():
        url = base + path + ("/v3" if service_type == "identity" else "")
        endpoints = [
            {"id": f"{name}-{iface}", "interface": iface, "region": "RegionOne", "region_id": "RegionOne", "url": url}
            for iface in ("public", "internal", "admin")
        ]
        out.append({"id": name, "type": service_type, "name": name, "endpoints": endpoints})
    return out


def role_ids(session: Any, names: tuple[str, ...]) -> dict[str, str]:
    return dict(session.execute(select(Role.name, Role.id).where(Role.name.in_(names))).all())


def token_body(request: Request, token: Token, user: User, project: Project,
               ids: dict[str, str], credential: Any = None) -> dict[str, Any]:
    domain = {"id": "default", "name": "Default"}
    extra = {} if credential is None else {"application_credential": {
        "id": credential.id, "name": credential.name, "restricted": not credential.unrestricted}}
    return {
        "token": {
            **extra,
            "methods": ["application_credential" if credential is not None else "password"],
            "user": {"id": user.id, "name": user.name, "domain": domain, "password_expires_at": None},
            "project": {"id": project.id, "name": project.name, "domain": domain},
            "roles": [{"id": ids.get(r, r), "name": r} for r in token.context.roles],
            "is_domain": False,
            "issued_at": _ts(token.issued_at),
            "expires_at": _ts(token.expires_at),
            "audit_ids": [token.audit_id],
            "catalog": catalog(request),
        }
    }


def _appcred_request(body: Any) -> dict[str, Any] | None:
    """The application credential of Keystone's auth body (by id, or by name and user),
    None when the body asks for another method; 400 when it is malformed."""
    try:
        identity = body["auth"]["identity"]
        if "application_credential" not in identity["methods"]:
            return None
        cred = identity["application_credential"]
        user = cred.get("user") or {}
        fields = {"cred_id": cred.get("id"), "name": cred.get("name"), "secret": cred["secret"],
                  "user_id": user.get("id"), "user_name": user.get("name")}
    except (KeyError, TypeError, AttributeError):
        raise BadRequest("Expecting to find auth.identity.application_credential with a secret "
                         "in the request.") from None
    if not all(v is None or isinstance(v, str) for v in fields.values()) or not (
            fields["cred_id"] or (fields["name"] and (fields["user_id"] or fields["user_name"]))):
        raise BadRequest("Expecting to find application credential id, or name and user, in the request.")
    return fields


def _password_request(body: Any) -> dict[str, Any]:
    """Pull user and scope out of Keystone's nested auth body, or answer 400."""
    try:
        auth = body["auth"]
        methods = auth["identity"]["methods"]
        if "password" not in methods:
            raise Unauthorized("Only password and application_credential authentication are supported.")
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
    state = request.app.state
    cred_fields = _appcred_request(body) if isinstance(body, dict) else None
    if cred_fields is not None:
        def login() -> tuple[Token, Any, dict[str, str]]:
            with state.store.read() as s:
                who = appcreds_auth.authenticate(s, **cred_fields)
                token = state.tokens.issue(who.user.id, who.project.id, who.roles, who.user.password_epoch,
                                           who.credential)
                return token, who, role_ids(s, who.roles)

        token, who, ids = await run_in_threadpool(login)
        return JSONResponse(token_body(request, token, who.user, who.project, ids, who.credential),
                            status_code=201, headers={"X-Subject-Token": token.value})
    fields = _password_request(body)

    def work() -> tuple[Token, User, Project, dict[str, str]]:
        with state.store.read() as s:
            who = state.identity.authenticate(s, **fields)
            token = state.tokens.issue(who.user.id, who.project.id, who.roles, who.user.password_epoch)
            return token, who.user, who.project, role_ids(s, who.roles)

    token, user, project, ids = await run_in_threadpool(work)
    return JSONResponse(token_body(request, token, user, project, ids), status_code=201,
                          headers={"X-Subject-Token": token.value})


# Keystone's default token policy: who may act on the token named by X-Subject-Token.
# ``service`` may validate (keystonemiddleware in other services) but not check or revoke.
_TOKEN_RULES = {"GET": ("identity:validate_token", {"admin", "service"}),
                "HEAD": ("identity:check_token", {"admin"}),
                "DELETE": ("identity:revoke_token", {"admin"})}


def _subject(request: Request) -> Token:
    """The token named by X-Subject-Token, once the caller may act on it (Keystone's
    order: the caller's token 401, the subject 404, then the policy 403)."""
    state = request.app.state
    caller = request.headers.get("X-Auth-Token")
    if not caller:
        raise Unauthorized("The request you have made requires authentication.")
    who = state.tokens.verify(caller).context
    subject = request.headers.get("X-Subject-Token")
    if not subject:
        raise NotFound("No token in the request")
    try:
        token = state.tokens.verify(subject)
    except Unauthorized:
        raise NotFound("Failed to validate token") from None
    action, roles = _TOKEN_RULES[request.method]
    if who.user_id != token.context.user_id and not roles & set(who.roles):
        raise Forbidden(f"You are not authorized to perform the requested action: {action}.")
    return token


@router.api_route("/v3/auth/tokens", methods=["GET", "HEAD"])
def validate_token(request: Request) -> Response:
    """``GET`` answers the token's body, ``HEAD`` only whether it is valid (200, else 404)."""
    token = _subject(request)
    headers = {"X-Subject-Token": token.value}
    if request.method == "HEAD":
        return Response(status_code=200, headers=headers)
    with request.app.state.store.read() as s:
        user = s.get(User, token.context.user_id)
        project = s.get(Project, token.context.project_id)
        ids = role_ids(s, token.context.roles)
        credential = s.get(ApplicationCredential, token.credential_id) if token.credential_id else None
    if user is None or project is None:
        raise NotFound("Failed to validate token")
    return JSONResponse(token_body(request, token, user, project, ids, credential), headers=headers)


@router.delete("/v3/auth/tokens", status_code=204)
def revoke_token(request: Request) -> Response:
    """``openstack token revoke``: the token is refused from now on, by every process."""
    request.app.state.tokens.revoke(_subject(request))
    return Response(status_code=204)


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
