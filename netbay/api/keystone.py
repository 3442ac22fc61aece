"""Keystone's admin API (v3 subset): domains, projects, users, roles, role assignments.

Enough for ``openstack project create``, ``user create``, ``role add`` and tooling
that provisions throw-away projects and users. Admin-only (as Keystone's default
policy), except reading one's own user and project and changing one's own
password. Errors render as Keystone's ``{"error": {…}}`` (``netbay.api.errors``).
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Depends, Request, Response

from netbay.api.auth import context
from netbay.api.responses import JSONResponse
from netbay.context import Context
from netbay.errors import BadRequest, Forbidden, NotFound, Unauthorized
from netbay.identity import directory
from netbay.identity.service import check_password, hash_password
from netbay.store.models import Project, Role, User
from netbay.api.urls import public_root

def no_nul_in_query(request: Request) -> None:
    """A NUL in a filter is bad input here, not a database error (PostgreSQL's text refuses it)."""
    for key, value in request.query_params.multi_items():
        if "\x00" in key or "\x00" in value:
            raise BadRequest(f"Invalid input for field '{key}': it contains a NUL character")


router = APIRouter(prefix="/v3", dependencies=[Depends(no_nul_in_query)])  # included by netbay.api.identity under /identity

DOMAIN = {"id": "default", "name": "Default", "description": "The default domain", "enabled": True,
          "tags": [], "options": {}}


def _url(request: Request, path: str) -> str:
    return f"{public_root(request)}/identity/v3/{path}"


def _allowed(request: Request, action: str, *, own: bool = False) -> Context:
    """The caller, if admin (or ``own`` says the request is about the caller itself)."""
    ctx = context(request)
    if not (ctx.is_admin or own):
        raise Forbidden(f"You are not authorized to perform the requested action: identity:{action}.")
    return ctx


def _body(raw: bytes, key: str) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("Malformed request body") from None
    if not isinstance(body, dict) or not isinstance(body.get(key), dict):
        raise BadRequest(f"Invalid input for field '{key}': '{key}' is a required property")
    return body[key]


def _field(obj: dict[str, Any], name: str, kind: type | tuple[type, ...], *, required: bool = False) -> Any:
    if name not in obj:
        if required:
            raise BadRequest(f"Invalid input for field '{name}': '{name}' is a required property")
        return None
    value = obj[name]
    if not isinstance(value, kind) or (kind is str and isinstance(value, str) and required and not value.strip()):
        shown = orjson.dumps(value).decode()
        raise BadRequest(f"Invalid input for field '{name}': {shown} is not a valid value")
    return value


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.lower() not in ("0", "false", "no", "off")


def _listing(request: Request, key: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: items, "links": {"self": str(request.url), "next": None, "previous": None}}


# -- bodies ------------------------------------------------------------------------------


def project_body(request: Request, p: Project) -> dict[str, Any]:
    return {"id": p.id, "name": p.name, "domain_id": p.domain_id, "description": p.description,
            "enabled": p.enabled, "parent_id": p.domain_id, "is_domain": False, "tags": [], "options": {},
            "links": {"self": _url(request, f"projects/{p.id}")}}


def user_body(request: Request, u: User) -> dict[str, Any]:
    body = {"id": u.id, "name": u.name, "domain_id": u.domain_id, "enabled": u.enabled,
            "password_expires_at": None, "options": {}, "links": {"self": _url(request, f"users/{u.id}")}}
    if u.default_project_id:
        body["default_project_id"] = u.default_project_id
    return body


def role_body(request: Request, r: Role) -> dict[str, Any]:
    return {"id": r.id, "name": r.name, "domain_id": None, "description": r.description or None,
            "options": {"immutable": True} if directory.is_immutable(r) else {},
            "links": {"self": _url(request, f"roles/{r.id}")}}


# -- domains -----------------------------------------------------------------------------


@router.get("/domains")
def list_domains(request: Request, name: str | None = None, enabled: str | None = None) -> dict[str, Any]:
    context(request)
    shown = name in (None, "Default") and _flag(enabled) in (None, True)
    return _listing(request, "domains", [{**DOMAIN, "links": {"self": _url(request, "domains/default")}}]
                    if shown else [])


@router.get("/domains/{domain_id}")
def get_domain(request: Request, domain_id: str) -> dict[str, Any]:
    context(request)
    if domain_id != "default":
        raise NotFound(f"Could not find domain: {domain_id}.")
    return {"domain": {**DOMAIN, "links": {"self": _url(request, "domains/default")}}}


# -- projects ----------------------------------------------------------------------------


@router.get("/projects")
def list_projects(request: Request, name: str | None = None, enabled: str | None = None,
                  domain_id: str | None = None) -> dict[str, Any]:
    _allowed(request, "list_projects")
    with request.app.state.store.read() as s:
        found = [] if domain_id not in (None, "default") else directory.projects(s, name=name,
                                                                                  enabled=_flag(enabled))
        return _listing(request, "projects", [project_body(request, p) for p in found])


@router.post("/projects", status_code=201)
async def create_project(request: Request) -> Response:
    _allowed(request, "create_project")
    obj = _body(await request.body(), "project")
    name = _field(obj, "name", str, required=True)
    directory.check_domain(_field(obj, "domain_id", (str, type(None))))
    description = _field(obj, "description", (str, type(None))) or ""
    enabled = _field(obj, "enabled", bool)
    with request.app.state.store.write() as s:
        p = directory.create_project(s, name, description, True if enabled is None else enabled)
        return JSONResponse({"project": project_body(request, p)}, status_code=201)


@router.get("/projects/{project_id}")
def get_project(request: Request, project_id: str) -> dict[str, Any]:
    ctx = context(request)
    _allowed(request, "get_project", own=ctx.project_id == project_id)
    with request.app.state.store.read() as s:
        return {"project": project_body(request, directory.project(s, project_id))}


@router.patch("/projects/{project_id}")
async def update_project(request: Request, project_id: str) -> dict[str, Any]:
    _allowed(request, "update_project")
    obj = _body(await request.body(), "project")
    changes = {k: _field(obj, k, t, required=k == "name") for k, t in
               (("name", str), ("description", (str, type(None))), ("enabled", bool)) if k in obj}
    with request.app.state.store.write() as s:
        p = directory.update_project(s, project_id, changes)
        body = {"project": project_body(request, p)}
    return body


@router.delete("/projects/{project_id}", status_code=204)
def delete_project(request: Request, project_id: str) -> Response:
    _allowed(request, "delete_project")
    with request.app.state.store.write() as s:
        directory.delete_project(s, project_id)
    return Response(status_code=204)


# -- users ---------------------------------------------------------------------------------


@router.get("/users")
def list_users(request: Request, name: str | None = None, enabled: str | None = None,
               domain_id: str | None = None) -> dict[str, Any]:
    _allowed(request, "list_users")
    with request.app.state.store.read() as s:
        found = [] if domain_id not in (None, "default") else directory.users(s, name=name, enabled=_flag(enabled))
        return _listing(request, "users", [user_body(request, u) for u in found])


@router.post("/users", status_code=201)
async def create_user(request: Request) -> Response:
    _allowed(request, "create_user")
    obj = _body(await request.body(), "user")
    name = _field(obj, "name", str, required=True)
    directory.check_domain(_field(obj, "domain_id", (str, type(None))))
    password = _field(obj, "password", (str, type(None)))
    enabled = _field(obj, "enabled", bool)
    project_id = _field(obj, "default_project_id", (str, type(None)))
    hashed = hash_password(password) if password else ""  # no password: cannot authenticate
    with request.app.state.store.write() as s:
        u = directory.create_user(s, name, hashed, enabled=True if enabled is None else enabled,
                                  default_project_id=project_id)
        return JSONResponse({"user": user_body(request, u)}, status_code=201)


@router.get("/users/{user_id}")
def get_user(request: Request, user_id: str) -> dict[str, Any]:
    _allowed(request, "get_user", own=context(request).user_id == user_id)
    with request.app.state.store.read() as s:
        return {"user": user_body(request, directory.user(s, user_id))}


@router.patch("/users/{user_id}")
async def update_user(request: Request, user_id: str) -> dict[str, Any]:
    _allowed(request, "update_user")
    obj = _body(await request.body(), "user")
    changes = {k: _field(obj, k, t, required=k == "name") for k, t in
               (("name", str), ("enabled", bool), ("default_project_id", (str, type(None)))) if k in obj}
    if "password" in obj:
        password = _field(obj, "password", (str, type(None)))
        changes["password_hash"] = hash_password(password) if password else ""
    with request.app.state.store.write() as s:
        u = directory.update_user(s, user_id, changes)
        body = {"user": user_body(request, u)}
    return body


@router.post("/users/{user_id}/password", status_code=204)
async def change_password(request: Request, user_id: str) -> Response:
    """A user changes their own password (``openstack user password set``)."""
    _allowed(request, "change_password", own=context(request).user_id == user_id)
    obj = _body(await request.body(), "user")
    new = _field(obj, "password", str, required=True)
    original = _field(obj, "original_password", str, required=True)
    with request.app.state.store.write() as s:
        u = directory.user(s, user_id)
        if not check_password(original, u.password_hash):
            raise Unauthorized("The request you have made requires authentication.")
        directory.update_user(s, user_id, {"password_hash": hash_password(new)})
    return Response(status_code=204)


@router.delete("/users/{user_id}", status_code=204)
def delete_user(request: Request, user_id: str) -> Response:
    _allowed(request, "delete_user")
    with request.app.state.store.write() as s:
        directory.delete_user(s, user_id)
    return Response(status_code=204)


@router.get("/users/{user_id}/projects")
def user_projects(request: Request, user_id: str) -> dict[str, Any]:
    _allowed(request, "list_user_projects", own=context(request).user_id == user_id)
    with request.app.state.store.read() as s:
        directory.user(s, user_id)
        ids = {p for _, p, _ in directory.assignments(s, user_id=user_id)}
        return _listing(request, "projects", [project_body(request, p) for p in directory.projects(s, ids=ids)])


# -- roles ---------------------------------------------------------------------------------


@router.get("/roles")
def list_roles(request: Request, name: str | None = None) -> dict[str, Any]:
    _allowed(request, "list_roles")
    with request.app.state.store.read() as s:
        return _listing(request, "roles", [role_body(request, r) for r in directory.roles(s, name=name)])


@router.post("/roles", status_code=201)
async def create_role(request: Request) -> Response:
    _allowed(request, "create_role")
    obj = _body(await request.body(), "role")
    name = _field(obj, "name", str, required=True)
    description = _field(obj, "description", (str, type(None))) or ""
    with request.app.state.store.write() as s:
        return JSONResponse({"role": role_body(request, directory.create_role(s, name, description))},
                            status_code=201)


@router.get("/roles/{role_id}")
def get_role(request: Request, role_id: str) -> dict[str, Any]:
    _allowed(request, "get_role")
    with request.app.state.store.read() as s:
        return {"role": role_body(request, directory.role(s, role_id))}


@router.delete("/roles/{role_id}", status_code=204)
def delete_role(request: Request, role_id: str) -> Response:
    _allowed(request, "delete_role")
    with request.app.state.store.write() as s:
        directory.delete_role(s, role_id)
    return Response(status_code=204)


# -- role assignments ------------------------------------------------------------------


@router.get("/projects/{project_id}/users/{user_id}/roles")
def list_grants(request: Request, project_id: str, user_id: str) -> dict[str, Any]:
    _allowed(request, "list_grants")
    with request.app.state.store.read() as s:
        directory.project(s, project_id), directory.user(s, user_id)
        rows = directory.assignments(s, user_id=user_id, project_id=project_id)
        return _listing(request, "roles", [role_body(request, r) for _, _, r in rows])


@router.put("/projects/{project_id}/users/{user_id}/roles/{role_id}", status_code=204)
def grant(request: Request, project_id: str, user_id: str, role_id: str) -> Response:
    _allowed(request, "create_grant")
    with request.app.state.store.write() as s:
        directory.grant(s, project_id, user_id, role_id)
    return Response(status_code=204)


@router.api_route("/projects/{project_id}/users/{user_id}/roles/{role_id}", methods=["GET", "HEAD"],
                  status_code=204)
def check_grant(request: Request, project_id: str, user_id: str, role_id: str) -> Response:
    _allowed(request, "check_grant")
    with request.app.state.store.read() as s:
        if not directory.has_grant(s, project_id, user_id, role_id):
            raise NotFound(f"Could not find role assignment with role: {role_id}, user or group: {user_id}, "
                           f"project, domain, or system: {project_id}.")
    return Response(status_code=204)


@router.delete("/projects/{project_id}/users/{user_id}/roles/{role_id}", status_code=204)
def revoke(request: Request, project_id: str, user_id: str, role_id: str) -> Response:
    _allowed(request, "revoke_grant")
    with request.app.state.store.write() as s:
        directory.revoke(s, project_id, user_id, role_id)
    return Response(status_code=204)


@router.get("/role_assignments")
def role_assignments(request: Request) -> dict[str, Any]:
    """Keystone's filters: ``user.id``, ``role.id``, ``scope.project.id``, ``effective``,
    ``include_names``; group, domain and system scopes hold no assignments here."""
    q = request.query_params
    ctx = context(request)
    _allowed(request, "list_role_assignments", own=q.get("user.id") == ctx.user_id)
    if any(k in q for k in ("group.id", "scope.domain.id", "scope.system", "scope.OS-INHERIT:inherited_to")):
        return _listing(request, "role_assignments", [])
    names = "include_names" in q and _flag(q["include_names"] or "true")
    with request.app.state.store.read() as s:
        rows = directory.assignments(s, user_id=q.get("user.id"), project_id=q.get("scope.project.id"),
                                     role_id=q.get("role.id"), effective="effective" in q)
        users = {u.id: u.name for u in directory.users(s)} if names else {}
        projects = {p.id: p.name for p in directory.projects(s)} if names else {}
    out = []
    for user_id, project_id, r in rows:
        item: dict[str, Any] = {
            "role": {"id": r.id}, "user": {"id": user_id}, "scope": {"project": {"id": project_id}},
            "links": {"assignment": _url(request, f"projects/{project_id}/users/{user_id}/roles/{r.id}")}}
        if names:
            item["role"]["name"] = r.name
            item["user"].update(name=users.get(user_id, ""), domain={"id": "default", "name": "Default"})
            item["scope"]["project"].update(name=projects.get(project_id, ""),
                                            domain={"id": "default", "name": "Default"})
        out.append(item)
    return _listing(request, "role_assignments", out)
