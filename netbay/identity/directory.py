"""Keystone's admin operations on projects, users, roles and role assignments.

Each takes an open session (the caller's transaction) so the API and ``netbay
admin`` share one set of rules. Removing access bumps the users' epoch, which
revokes their older tokens the way a password change does (one row per user;
single tokens are revoked by audit id, ``netbay.identity.tokens``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from netbay.errors import Conflict, Forbidden, NotFound
from netbay.identity.roles import IMPLIES, ROLES
from netbay.identity.roles import effective as with_implied
from netbay.store.models import Project, Role, RoleAssignment, User

DEFAULT_DOMAIN = "default"


def _not_found(kind: str, ident: str) -> NotFound:
    return NotFound(f"Could not find {kind}: {ident}.")


def _duplicate(kind: str, name: str) -> Conflict:
    return Conflict(f"Conflict occurred attempting to store {kind} - Duplicate entry found with name "
                    f"{name} at domain ID {DEFAULT_DOMAIN}." if kind != "role" else
                    f"Conflict occurred attempting to store role - Duplicate entry found with name {name}.")


def check_domain(domain_id: str | None) -> None:
    """``Default`` (id ``default``) is the only domain."""
    if domain_id not in (None, DEFAULT_DOMAIN):
        raise _not_found("domain", domain_id)


def revoke_tokens(s: Session, user_ids: Iterable[str]) -> None:
    ids = list(set(user_ids))
    if ids:
        s.execute(update(User).where(User.id.in_(ids)).values(password_epoch=User.password_epoch + 1))


# -- projects ------------------------------------------------------------------------


def project(s: Session, project_id: str) -> Project:
    found = s.get(Project, project_id)
    if found is None:
        raise _not_found("project", project_id)
    return found


def projects(s: Session, *, name: str | None = None, enabled: bool | None = None,
             ids: Iterable[str] | None = None) -> list[Project]:
    query = select(Project).order_by(Project.name)
    if name is not None:
        query = query.where(Project.name == name)
    if enabled is not None:
        query = query.where(Project.enabled == enabled)
    if ids is not None:
        query = query.where(Project.id.in_(list(ids)))
    return list(s.scalars(query))


def create_project(s: Session, name: str, description: str = "", enabled: bool = True,
                   project_id: str | None = None) -> Project:
    if s.scalars(select(Project.id).where(Project.name == name)).first():
        raise _duplicate("project", name)
    proj = Project(name=name, description=description, enabled=enabled)
    if project_id:
        proj.id = project_id
    s.add(proj)
    s.flush()
    return proj


def update_project(s: Session, project_id: str, changes: dict[str, Any]) -> Project:
    proj = project(s, project_id)
    if "name" in changes and changes["name"] != proj.name:
        if s.scalars(select(Project.id).where(Project.name == changes["name"])).first():
            raise _duplicate("project", changes["name"])
        proj.name = changes["name"]
    if "description" in changes:
        proj.description = changes["description"] or ""
    if "enabled" in changes and changes["enabled"] != proj.enabled:
        proj.enabled = changes["enabled"]
        if not proj.enabled:
            revoke_tokens(s, _holders(s, proj.id))
    return proj


def delete_project(s: Session, project_id: str) -> None:
    proj = project(s, project_id)
    revoke_tokens(s, _holders(s, proj.id))
    s.execute(delete(RoleAssignment).where(RoleAssignment.project_id == proj.id))
    s.delete(proj)


def _holders(s: Session, project_id: str) -> list[str]:
    return list(s.scalars(select(RoleAssignment.user_id).where(RoleAssignment.project_id == project_id)))


# -- users -----------------------------------------------------------------------------


def user(s: Session, user_id: str) -> User:
    found = s.get(User, user_id)
    if found is None:
        raise _not_found("user", user_id)
    return found


def users(s: Session, *, name: str | None = None, enabled: bool | None = None) -> list[User]:
    query = select(User).order_by(User.name)
    if name is not None:
        query = query.where(User.name == name)
    if enabled is not None:
        query = query.where(User.enabled == enabled)
    return list(s.scalars(query))


def create_user(s: Session, name: str, password_hash: str, *, enabled: bool = True,
                default_project_id: str | None = None) -> User:
    if s.scalars(select(User.id).where(User.name == name)).first():
        raise _duplicate("user", name)
    if default_project_id:
        project(s, default_project_id)
    new = User(name=name, password_hash=password_hash, enabled=enabled, default_project_id=default_project_id)
    s.add(new)
    s.flush()
    return new


def update_user(s: Session, user_id: str, changes: dict[str, Any]) -> User:
    """``changes`` may hold name, enabled, default_project_id and password_hash."""
    found = user(s, user_id)
    if "name" in changes and changes["name"] != found.name:
        if s.scalars(select(User.id).where(User.name == changes["name"])).first():
            raise _duplicate("user", changes["name"])
        found.name = changes["name"]
    if "default_project_id" in changes:
        if changes["default_project_id"]:
            project(s, changes["default_project_id"])
        found.default_project_id = changes["default_project_id"]
    if "enabled" in changes and changes["enabled"] != found.enabled:
        found.enabled = changes["enabled"]
        found.password_epoch += 1
    if "password_hash" in changes:
        found.password_hash = changes["password_hash"]
        found.password_epoch += 1
    return found


def delete_user(s: Session, user_id: str) -> None:
    found = user(s, user_id)
    s.execute(delete(RoleAssignment).where(RoleAssignment.user_id == found.id))
    s.delete(found)


# -- roles -------------------------------------------------------------------------------


def role(s: Session, role_id: str) -> Role:
    found = s.get(Role, role_id)
    if found is None:
        raise _not_found("role", role_id)
    return found


def role_named(s: Session, name_or_id: str) -> Role:
    found = s.get(Role, name_or_id) or s.scalars(select(Role).where(Role.name == name_or_id)).first()
    if found is None:
        raise _not_found("role", name_or_id)
    return found


def roles(s: Session, *, name: str | None = None) -> list[Role]:
    query = select(Role).order_by(Role.name)
    if name is not None:
        query = query.where(Role.name == name)
    return list(s.scalars(query))


def create_role(s: Session, name: str, description: str = "") -> Role:
    if s.scalars(select(Role.id).where(Role.name == name)).first():
        raise _duplicate("role", name)
    new = Role(name=name, description=description)
    s.add(new)
    s.flush()
    return new


def delete_role(s: Session, role_id: str) -> None:
    found = role(s, role_id)
    if is_immutable(found):
        raise Forbidden(f"Unable to delete immutable role resource `{found.id}`. Ensure resource option "
                        "immutable is set to false first (netbay's implied-role chain needs it).")
    holders = s.scalars(select(RoleAssignment.user_id).where(RoleAssignment.role == found.name))
    revoke_tokens(s, holders)
    s.execute(delete(RoleAssignment).where(RoleAssignment.role == found.name))
    s.delete(found)


def is_immutable(r: Role) -> bool:
    """The implied-role chain admin → member → reader that netbay's policy rests on."""
    return r.name in IMPLIES or r.name in {i for implied in IMPLIES.values() for i in implied}


def ensure_roles(s: Session) -> None:
    """The seeded roles exist (migration 0003 makes them; this repairs a hand-edited table)."""
    have = set(s.scalars(select(Role.name)))
    for name in ROLES:
        if name not in have:
            s.add(Role(name=name))
    s.flush()


# -- role assignments ------------------------------------------------------------------


def grant(s: Session, project_id: str, user_id: str, role_id: str) -> None:
    project(s, project_id), user(s, user_id)
    name = role(s, role_id).name
    if s.get(RoleAssignment, (user_id, project_id, name)) is None:
        s.add(RoleAssignment(user_id=user_id, project_id=project_id, role=name))


def revoke(s: Session, project_id: str, user_id: str, role_id: str) -> None:
    project(s, project_id), user(s, user_id)
    name = role(s, role_id).name
    found = s.get(RoleAssignment, (user_id, project_id, name))
    if found is None:
        raise NotFound(f"Could not find role assignment with role: {role_id}, user or group: {user_id}, "
                       f"project, domain, or system: {project_id}.")
    s.delete(found)
    revoke_tokens(s, [user_id])


def has_grant(s: Session, project_id: str, user_id: str, role_id: str) -> bool:
    project(s, project_id), user(s, user_id)
    return s.get(RoleAssignment, (user_id, project_id, role(s, role_id).name)) is not None


def assignments(s: Session, *, user_id: str | None = None, project_id: str | None = None,
                role_id: str | None = None, effective: bool = False) -> list[tuple[str, str, Role]]:
    """(user id, project id, role) rows; ``effective`` adds the roles the assigned ones imply."""
    query = select(RoleAssignment)
    if user_id:
        query = query.where(RoleAssignment.user_id == user_id)
    if project_id:
        query = query.where(RoleAssignment.project_id == project_id)
    by_name = {r.name: r for r in s.scalars(select(Role))}
    rows: set[tuple[str, str, str]] = set()
    for a in s.scalars(query):
        names = [a.role]
        if effective:
            names = list(with_implied(names))
        rows.update((a.user_id, a.project_id, n) for n in names)
    out = [(u, p, by_name[n]) for u, p, n in sorted(rows) if n in by_name]
    if role_id:
        out = [row for row in out if row[2].id == role_id]
    return out
