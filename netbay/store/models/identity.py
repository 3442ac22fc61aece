"""Keystone's tables (projects, users, roles and their assignments, application
credentials, revoked tokens), Nova's keypairs, and the process-independent settings."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from netbay.store.models.base import Base, utcnow


class Meta(Base):
    """Process-independent settings, e.g. the token signing key."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=lambda: uuid.uuid4().hex)
    name: Mapped[str] = mapped_column(String(255))
    domain_id: Mapped[str] = mapped_column(String(64), default="default")
    description: Mapped[str] = mapped_column(Text, default="")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    __table_args__ = (UniqueConstraint("domain_id", "name"),)


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=lambda: uuid.uuid4().hex)
    name: Mapped[str] = mapped_column(String(255))
    domain_id: Mapped[str] = mapped_column(String(64), default="default")
    password_hash: Mapped[str] = mapped_column(Text)
    # Bumped on every password change; tokens carry it, so old ones stop verifying.
    password_epoch: Mapped[int] = mapped_column(Integer, default=0)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    default_project_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    __table_args__ = (UniqueConstraint("domain_id", "name"),)


class RoleAssignment(Base):
    __tablename__ = "role_assignments"
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[str] = mapped_column(String(64), primary_key=True)


class Role(Base):
    """A Keystone role; assignments name it (``RoleAssignment.role``), the API shows its id."""

    __tablename__ = "roles"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=lambda: uuid.uuid4().hex)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")


class ApplicationCredential(Base):
    """Keystone's application credential: a named secret that logs its user into one
    project with (a subset of) the roles the user holds there."""

    __tablename__ = "application_credentials"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=lambda: uuid.uuid4().hex)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str] = mapped_column(Text, default="")
    secret_hash: Mapped[str] = mapped_column(Text)
    roles: Mapped[list[Any]] = mapped_column(default=list)   # role names
    expires_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    unrestricted: Mapped[bool] = mapped_column(Boolean, default=False)
    __table_args__ = (UniqueConstraint("user_id", "name"),)


class RevokedToken(Base):
    """A token revoked before its expiry (``DELETE /v3/auth/tokens``), by its audit id as
    Keystone's revocation events name it; every process sharing the database refuses it.
    The row is only needed until the token would have expired anyway."""

    __tablename__ = "revoked_tokens"
    audit_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime, index=True)


class Keypair(Base):
    """An SSH public key a user registered (Nova's os-keypairs: per user, by name);
    cluster templates and clusters name one in ``keypair_id`` / ``keypair``."""

    __tablename__ = "keypairs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(255))
    type: Mapped[str] = mapped_column(String(16), default="ssh")
    public_key: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
