"""Keystone's application credentials API: ``/v3/users/{user_id}/application_credentials``.

A user makes them for themselves, bound to the project and roles of the token that
asks (``openstack application credential create``); the owner or an admin lists,
shows and deletes them. As in Keystone, a token that a *restricted* application
credential made (``unrestricted`` false, the default) may list and show but not
create or delete credentials: a credential cannot mint a successor that outlives it
or remove its user's others. Logging in with one is in ``netbay.api.identity``.
"""

from __future__ import annotations

from datetime import datetime, UTC
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy import select

from netbay.api.auth import context, token
from netbay.api.keystone import _allowed, _body, _field, _listing, _url, no_nul_in_query
from netbay.api.responses import JSONResponse
from netbay.errors import BadRequest, Forbidden
from netbay.identity import appcreds
from netbay.store.models import ApplicationCredential, Role

router = APIRouter(prefix="/v3/users/{user_id}/application_credentials", dependencies=[Depends(no_nul_in_query)])


def _body_of(request: Request, c: ApplicationCredential, ids: dict[str, str]) -> dict[str, Any]:
    return {"id": c.id, "name": c.name, "description": c.description or None, "project_id": c.project_id,
            "user_id": c.user_id,
            "roles": [{"id": ids.get(r, r), "name": r, "domain_id": None} for r in c.roles],
            "expires_at": c.expires_at.strftime("%Y-%m-%dT%H:%M:%S.000000") if c.expires_at else None,
            "unrestricted": c.unrestricted, "access_rules": [],
            "links": {"self": _url(request, f"users/{c.user_id}/application_credentials/{c.id}")}}


def _unrestricted_only(request: Request) -> None:
    """Keystone's ``_check_unrestricted_application_credential``."""
    held = token(request)
    if held is not None and held.credential_id is not None and not held.unrestricted:
        raise Forbidden("You are not authorized to perform the requested action: Using method "
                        "'application_credential' is not allowed for managing additional "
                        "application credentials.")


def _role_ids(s: Any) -> dict[str, str]:
    return dict(s.execute(select(Role.name, Role.id)).all())


def _expiry(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"Invalid input for field 'expires_at': {value!r} is not a 'date-time'") from None
    if parsed.tzinfo is not None:  # stored naive, in UTC
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


@router.post("", status_code=201)
async def create(request: Request, user_id: str) -> Response:
    ctx = context(request)
    if ctx.user_id != user_id:
        raise Forbidden("You are not authorized to perform the requested action: "
                        "identity:create_application_credential.")
    _unrestricted_only(request)
    obj = _body(await request.body(), "application_credential")
    roles = _field(obj, "roles", (list, type(None)))
    if roles and not all(isinstance(r, dict) for r in roles):
        raise BadRequest("Invalid input for field 'roles': each role is an object with an id or a name")
    with request.app.state.store.write() as s:
        cred, secret = appcreds.create(
            s, user_id=user_id, project_id=ctx.project_id, holder_roles=ctx.roles,
            name=_field(obj, "name", str, required=True), secret=_field(obj, "secret", (str, type(None))),
            description=_field(obj, "description", (str, type(None))) or "",
            expires_at=_expiry(obj.get("expires_at")), roles=roles,
            unrestricted=bool(_field(obj, "unrestricted", bool)))
        body = _body_of(request, cred, _role_ids(s))
    return JSONResponse({"application_credential": {**body, "secret": secret}}, status_code=201)


@router.get("")
def list_owned(request: Request, user_id: str, name: str | None = None) -> dict[str, Any]:
    _allowed(request, "list_application_credentials", own=context(request).user_id == user_id)
    with request.app.state.store.read() as s:
        ids = _role_ids(s)
        return _listing(request, "application_credentials",
                        [_body_of(request, c, ids) for c in appcreds.owned(s, user_id, name=name)])


@router.get("/{cred_id}")
def show(request: Request, user_id: str, cred_id: str) -> dict[str, Any]:
    _allowed(request, "get_application_credential", own=context(request).user_id == user_id)
    with request.app.state.store.read() as s:
        return {"application_credential": _body_of(request, appcreds.one(s, user_id, cred_id), _role_ids(s))}


@router.delete("/{cred_id}", status_code=204)
def delete(request: Request, user_id: str, cred_id: str) -> Response:
    _allowed(request, "delete_application_credential", own=context(request).user_id == user_id)
    _unrestricted_only(request)
    with request.app.state.store.write() as s:
        s.delete(appcreds.one(s, user_id, cred_id))
    return Response(status_code=204)
