"""Projects, users and role assignments; password checks; first-start bootstrap."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.errors import NotFound, Unauthorized
from netbay.identity import directory
from netbay.identity.passwords import check_password, hash_cost, hash_password
from netbay.identity.roles import ROLES, effective
from netbay.store.db import Store
from netbay.store.models import Meta, Project, RoleAssignment, User

__all__ = ["ROLES", "Identity", "Authenticated", "check_password", "hash_password"]
DEFAULT_DOMAIN = "default"
ADMIN_PASSWORD_FILE = "admin-password"


@dataclass(frozen=True)
class Authenticated:
    user: User
    project: Project
    roles: tuple[str, ...]


def _domain(name_or_id: str | None) -> str:
    """Keystone's ``Default`` domain is the only one; its id is ``default``."""
    return DEFAULT_DOMAIN


class Identity:
    def __init__(self, store: Store) -> None:
        self.store = store
        hash_cost()  # a bad NETBAY_PASSWORD_HASH_COST stops the start, not the first login

    # -- authentication ------------------------------------------------------------

    def authenticate(
        self,
        session: Session,
        *,
        user_name: str | None,
        user_id: str | None,
        password: str,
        project_name: str | None,
        project_id: str | None,
    ) -> Authenticated:
        query = select(User)
        query = query.where(User.id == user_id) if user_id else query.where(User.name == user_name)
        user = session.scalars(query).one_or_none()
        if user is None or not user.enabled or not check_password(password, user.password_hash):
            raise Unauthorized("The request you have made requires authentication.")
        project = None
        if project_id:
            project = session.get(Project, project_id)
        elif project_name:
            project = session.scalars(select(Project).where(Project.name == project_name)).one_or_none()
        elif user.default_project_id:
            project = session.get(Project, user.default_project_id)
        if project is None or not project.enabled:
            raise Unauthorized("The request you have made requires authentication.")
        roles = self.roles_of(session, user.id, project.id)
        if not roles:
            raise Unauthorized(f"User {user.id} has no access to project {project.id}")
        return Authenticated(user, project, roles)

    @staticmethod
    def roles_of(session: Session, user_id: str, project_id: str) -> tuple[str, ...]:
        rows = session.scalars(
            select(RoleAssignment.role).where(
                RoleAssignment.user_id == user_id, RoleAssignment.project_id == project_id
            )
        )
        return effective(rows)  # Keystone's implied roles: admin → member → reader

    # -- management (netbay admin …) -------------------------------------------------

    def create_project(self, name: str, description: str = "") -> Project:
        with self.store.write() as s:
            return directory.create_project(s, name, description)

    def create_user(self, name: str, password: str, project: str | None = None, role: str = "member") -> User:
        with self.store.write() as s:
            proj = self._project(s, project) if project else None
            user = directory.create_user(s, name, hash_password(password),
                                         default_project_id=proj.id if proj else None)
            if proj:
                directory.grant(s, proj.id, user.id, directory.role_named(s, role).id)
            return user

    def set_password(self, name: str, password: str) -> None:
        with self.store.write() as s:
            user = self._user(s, name)
            user.password_hash = hash_password(password)
            user.password_epoch += 1

    def grant(self, user: str, project: str, role: str) -> None:
        with self.store.write() as s:
            u, p = self._user(s, user), self._project(s, project)
            directory.grant(s, p.id, u.id, directory.role_named(s, role).id)

    def revoke(self, user: str, project: str, role: str) -> None:
        with self.store.write() as s:
            u, p = self._user(s, user), self._project(s, project)
            r = directory.role_named(s, role)
            if s.get(RoleAssignment, (u.id, p.id, r.name)) is not None:
                directory.revoke(s, p.id, u.id, r.id)

    def delete_user(self, name: str) -> None:
        with self.store.write() as s:
            directory.delete_user(s, self._user(s, name).id)

    def delete_project(self, name: str) -> None:
        with self.store.write() as s:
            directory.delete_project(s, self._project(s, name).id)

    def projects(self) -> list[Project]:
        with self.store.read() as s:
            return list(s.scalars(select(Project).order_by(Project.name)))

    def users(self) -> list[tuple[User, list[tuple[str, str]]]]:
        with self.store.read() as s:
            names = {p.id: p.name for p in s.scalars(select(Project))}
            out = []
            for user in s.scalars(select(User).order_by(User.name)):
                grants = s.scalars(select(RoleAssignment).where(RoleAssignment.user_id == user.id))
                out.append((user, [(names.get(g.project_id, g.project_id), g.role) for g in grants]))
            return out

    @staticmethod
    def _user(s: Session, name_or_id: str) -> User:
        user = s.get(User, name_or_id) or s.scalars(select(User).where(User.name == name_or_id)).first()
        if user is None:
            raise NotFound(f"Could not find user: {name_or_id}.")
        return user

    @staticmethod
    def _project(s: Session, name_or_id: str) -> Project:
        proj = s.get(Project, name_or_id) or s.scalars(
            select(Project).where(Project.name == name_or_id)
        ).first()
        if proj is None:
            raise NotFound(f"Could not find project: {name_or_id}.")
        return proj

    # -- first start --------------------------------------------------------------------

    def bootstrap(self, data_dir: Path) -> str | None:
        """Make project ``admin``, user ``admin`` and the signing key if missing.

        Returns the path of a generated password file when one was written.
        """
        written = None
        with self.store.write() as s:
            if s.get(Meta, "token_key") is None:
                s.add(Meta(key="token_key", value=secrets.token_urlsafe(48)))
            project = s.scalars(select(Project).where(Project.name == "admin")).first()
            if project is None:
                project = Project(id="admin", name="admin", description="Bootstrap project")
                s.add(project)
            user = s.scalars(select(User).where(User.name == "admin")).first()
            if user is None:
                password = os.environ.get("NETBAY_ADMIN_PASSWORD")
                if not password:
                    password = secrets.token_urlsafe(18)
                    written = _write_secret(data_dir / ADMIN_PASSWORD_FILE, password)
                user = User(name="admin", password_hash=hash_password(password), default_project_id=project.id)
                s.add(user)
                s.flush()
                s.add(RoleAssignment(user_id=user.id, project_id=project.id, role="admin"))
            directory.ensure_roles(s)
        return written

    def token_key(self) -> str:
        with self.store.read() as s:
            meta = s.get(Meta, "token_key")
            if meta is None:
                raise RuntimeError("netbay is not bootstrapped: no token key")
            return meta.value


def _write_secret(path: Path, value: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return str(path)
