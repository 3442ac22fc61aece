"""Keystone's application credentials: a secret bound to one user, one project and a
subset of the user's roles there, for tooling that should not hold a password.

The secret is shown once at creation and stored hashed (as passwords are). A token
from one carries the credential's roles — and only while the user still holds them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.errors import BadRequest, Conflict, NotFound, Unauthorized
from netbay.identity import directory
from netbay.identity.roles import effective
from netbay.identity.service import check_password, hash_password
from netbay.store.models import ApplicationCredential, Project, RoleAssignment, User

_DENIED = "The request you have made requires authentication."


@dataclass(frozen=True)
class AppCredLogin:
    user: User
    project: Project
    roles: tuple[str, ...]
    credential: ApplicationCredential


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def create(s: Session, *, user_id: str, project_id: str, holder_roles: tuple[str, ...], name: str,
           secret: str | None, description: str, expires_at: datetime | None,
           roles: list[dict[str, Any]] | None, unrestricted: bool) -> tuple[ApplicationCredential, str]:
    if s.scalars(select(ApplicationCredential.id).where(ApplicationCredential.user_id == user_id,
                                                        ApplicationCredential.name == name)).first():
        raise Conflict(f"Conflict occurred attempting to store application_credential - "
                       f"Duplicate entry found with name {name}.")
    wanted = list(holder_roles)
    if roles:
        wanted = [directory.role_named(s, str(r.get("id") or r.get("name") or "")).name for r in roles]
        missing = sorted(set(wanted) - set(holder_roles))
        if missing:
            raise BadRequest(f"Invalid application credential: the user does not hold role(s) "
                             f"{', '.join(missing)} on project {project_id}.")
    if expires_at is not None and expires_at <= _now():
        raise BadRequest("Invalid application credential: expires_at is in the past.")
    secret = secret or secrets.token_urlsafe(48)
    cred = ApplicationCredential(user_id=user_id, project_id=project_id, name=name, description=description,
                                 secret_hash=hash_password(secret), roles=sorted(set(wanted)),
                                 expires_at=expires_at, unrestricted=unrestricted)
    s.add(cred)
    s.flush()
    return cred, secret


def owned(s: Session, user_id: str, *, name: str | None = None) -> list[ApplicationCredential]:
    directory.user(s, user_id)
    query = select(ApplicationCredential).where(ApplicationCredential.user_id == user_id)
    if name is not None:
        query = query.where(ApplicationCredential.name == name)
    return list(s.scalars(query.order_by(ApplicationCredential.name)))


def one(s: Session, user_id: str, cred_id: str) -> ApplicationCredential:
    cred = s.get(ApplicationCredential, cred_id)
    if cred is None or cred.user_id != user_id:
        raise NotFound(f"Could not find application credential: {cred_id}.")
    return cred


def authenticate(s: Session, *, cred_id: str | None, name: str | None, user_id: str | None,
                 user_name: str | None, secret: str) -> AppCredLogin:
    if cred_id:
        cred = s.get(ApplicationCredential, cred_id)
    else:
        owner = s.get(User, user_id) if user_id else s.scalars(select(User).where(User.name == user_name)).first()
        cred = s.scalars(select(ApplicationCredential).where(
            ApplicationCredential.user_id == owner.id, ApplicationCredential.name == name)).first() if owner else None
    if cred is None or not check_password(secret, cred.secret_hash):
        raise Unauthorized(_DENIED)
    if cred.expires_at is not None and cred.expires_at <= _now():
        raise Unauthorized(_DENIED)
    user, project = s.get(User, cred.user_id), s.get(Project, cred.project_id)
    if user is None or not user.enabled or project is None or not project.enabled:
        raise Unauthorized(_DENIED)
    held = effective(s.scalars(select(RoleAssignment.role).where(
        RoleAssignment.user_id == user.id, RoleAssignment.project_id == project.id)))
    if not cred.roles or not set(cred.roles) <= set(held):
        raise Unauthorized(_DENIED)  # the user lost a role the credential carries
    return AppCredLogin(user, project, effective(cred.roles), cred)
