"""Signed, expiring tokens that any netbay process sharing the database verifies.

A token carries the user, project, roles, expiry and the user's password epoch.
Verifying costs an HMAC and a cached look-up of the epoch, so a password change
revokes every older token without a revocation list.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any
from datetime import datetime, timezone

from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy import select

from netbay.context import Context
from netbay.errors import Unauthorized
from netbay.store.db import Store
from netbay.store.models import User

DEFAULT_TTL = 3600 * 12
EPOCH_CACHE_SECONDS = 2.0


@dataclass(frozen=True)
class Token:
    value: str
    context: Context
    issued_at: datetime
    expires_at: datetime
    audit_id: str
    epoch: int


class Tokens:
    def __init__(self, store: Store, key: str, ttl: int = DEFAULT_TTL, external: Any = None) -> None:
        self.store = store
        # A real cloud's Keystone (``netbay.identity.external``) for tokens netbay did not sign.
        self.external = external
        self.ttl = ttl
        self._serializer = URLSafeSerializer(key, salt="netbay-token")
        self._epochs: dict[str, tuple[int | None, float]] = {}
        self._lock = threading.Lock()
        self._verified: dict[str, Token] = {}

    def issue(self, user_id: str, project_id: str, roles: tuple[str, ...], epoch: int) -> Token:
        now = int(time.time())
        audit = secrets.token_urlsafe(16)[:22]
        payload = {"u": user_id, "p": project_id, "r": list(roles), "e": epoch, "i": now, "x": now + self.ttl, "a": audit}
        value = self._serializer.dumps(payload)
        return self._token(value, payload)

    def verify(self, value: str) -> Token:
        token = self._verified.get(value)
        if token is None:
            try:
                payload = self._serializer.loads(value)
            except BadSignature:
                if self.external is None:
                    raise Unauthorized("The request you have made requires authentication.") from None
                return self._external(value)
            token = self._token(value, payload)
            if len(self._verified) > 10_000:
                self._verified.clear()
            self._verified[value] = token
        if token.expires_at <= datetime.now(timezone.utc):
            raise Unauthorized("The request you have made requires authentication.")
        if self._epoch(token.context.user_id) != token.epoch:
            raise Unauthorized("The request you have made requires authentication.")
        return token

    def _external(self, value: str) -> Token:
        ctx = self.external.verify(value)
        now = datetime.now(timezone.utc)
        return Token(value=value, context=ctx, issued_at=now, expires_at=now, audit_id="", epoch=0)

    def forget_user(self, user_id: str) -> None:
        """Drop the cached epoch (after a password change in this process)."""
        with self._lock:
            self._epochs.pop(user_id, None)

    def forget_all(self) -> None:
        """Drop every cached epoch (after access was removed in this process)."""
        with self._lock:
            self._epochs.clear()

    def _epoch(self, user_id: str) -> int | None:
        now = time.monotonic()
        cached = self._epochs.get(user_id)
        if cached and now - cached[1] < EPOCH_CACHE_SECONDS:
            return cached[0]
        with self.store.read() as s:
            row = s.execute(select(User.password_epoch, User.enabled).where(User.id == user_id)).first()
        epoch = row[0] if row and row[1] else None
        with self._lock:
            self._epochs[user_id] = (epoch, now)
        return epoch

    @staticmethod
    def _token(value: str, payload: dict) -> Token:
        ctx = Context(user_id=payload["u"], project_id=payload["p"], roles=tuple(payload["r"]))
        return Token(
            value=value,
            context=ctx,
            issued_at=datetime.fromtimestamp(payload["i"], timezone.utc),
            expires_at=datetime.fromtimestamp(payload["x"], timezone.utc),
            audit_id=payload["a"],
            epoch=payload["e"],
        )


def service_token(store: Store, tokens: Tokens) -> Callable[[], str]:
    """Admin tokens for netbay's own reconcilers in the server process (the agent, the
    conductor): minted by the token service itself, no password needed."""
    from netbay.identity.roles import effective
    from netbay.store.models import Project

    def issue() -> str:
        with store.read() as s:
            user = s.scalars(select(User).where(User.name == "admin", User.domain_id == "default")).first()
            project = s.scalars(select(Project).where(Project.name == "admin")).first()
            if user is None or project is None:
                raise RuntimeError("netbay is not bootstrapped: no admin user")
            epoch = user.password_epoch
        return tokens.issue(user.id, project.id, effective(("admin",)), epoch).value

    return issue
