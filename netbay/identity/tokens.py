"""Signed, expiring tokens that any netbay process sharing the database verifies.

A token carries the user, project, roles, expiry, the user's password epoch, its
audit id and, when an application credential made it, that credential. Verifying
costs an HMAC (cached per token) and one indexed read: the user's epoch, whether
the token's audit id was revoked (``DELETE /v3/auth/tokens``) and whether its
application credential still exists. The read is not cached, so a revocation, a
password change or a deleted credential refuses the token at once in every process
sharing the database (several servers on one PostgreSQL included).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any
from datetime import datetime, UTC

from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy import and_, bindparam, delete, exists, select

from netbay.context import Context
from netbay.errors import Unauthorized
from netbay.store.db import Store
from netbay.store.models import ApplicationCredential, RevokedToken, User

DEFAULT_TTL = 3600 * 12
_DENIED = "The request you have made requires authentication."

# One round trip per request: the epoch and enabled flag of the token's user, whether
# its audit id is revoked, whether its application credential (if any) still exists.
_STANDING = select(
    User.password_epoch, User.enabled,
    exists().where(RevokedToken.audit_id == bindparam("audit")),
    exists().where(and_(ApplicationCredential.id == bindparam("cred"), ApplicationCredential.user_id == User.id)),
).where(User.id == bindparam("user"))


@dataclass(frozen=True)
class Token:
    value: str
    context: Context
    issued_at: datetime
    expires_at: datetime
    audit_id: str
    epoch: int
    # The application credential that made the token (Keystone's ``application_credential``
    # method), and whether it may manage further credentials.
    credential_id: str | None = None
    unrestricted: bool = True


class Tokens:
    def __init__(self, store: Store, key: str, ttl: int = DEFAULT_TTL, external: Any = None) -> None:
        self.store = store
        # A real cloud's Keystone (``netbay.identity.external``) for tokens netbay did not sign.
        self.external = external
        self.ttl = ttl
        self._serializer = URLSafeSerializer(key, salt="netbay-token")
        self._verified: dict[str, Token] = {}
        # Straight to the driver, in autocommit (no BEGIN/ROLLBACK round trips on
        # PostgreSQL): ~25 µs on SQLite, one round trip on PostgreSQL, instead of 3-6
        # times that through SQLAlchemy's connection, on every request.
        compiled = _STANDING.compile(dialect=store.engine.dialect)
        self._sql = str(compiled)
        self._positions = tuple(compiled.positiontup or ())  # SQLite's ``?``; psycopg takes names
        self._toggle_autocommit = not store.is_sqlite  # SQLite's connections already are (netbay.store.db)
        self._dropped = store.engine.dialect.loaded_dbapi.OperationalError

    def issue(self, user_id: str, project_id: str, roles: tuple[str, ...], epoch: int,
              credential: Any = None) -> Token:
        """A token; ``credential`` is the application credential it is issued for."""
        now = int(time.time())
        audit = secrets.token_urlsafe(16)[:22]
        payload = {"u": user_id, "p": project_id, "r": list(roles), "e": epoch, "i": now, "x": now + self.ttl, "a": audit}
        if credential is not None:
            payload["c"], payload["cu"] = credential.id, bool(credential.unrestricted)
        value = self._serializer.dumps(payload)
        return self._token(value, payload)

    def verify(self, value: str) -> Token:
        token = self._verified.get(value)
        if token is None:
            try:
                payload = self._serializer.loads(value)
            except BadSignature:
                if self.external is None:
                    raise Unauthorized(_DENIED) from None
                return self._external(value)
            token = self._token(value, payload)
            if len(self._verified) > 10_000:
                self._verified.clear()
            self._verified[value] = token
        if token.expires_at <= datetime.now(UTC):
            raise Unauthorized(_DENIED)
        if not self._standing(token):
            raise Unauthorized(_DENIED)
        return token

    def revoke(self, token: Token) -> None:
        """Refuse ``token`` from now on, in every process sharing the database; rows of
        tokens that have expired anyway go at the same time."""
        if not token.audit_id:
            return  # another Keystone's token: not ours to revoke
        now = datetime.now(UTC).replace(tzinfo=None)

        def work(s: Any) -> None:
            s.execute(delete(RevokedToken).where(RevokedToken.expires_at < now))
            if s.get(RevokedToken, token.audit_id) is None:
                s.add(RevokedToken(audit_id=token.audit_id,
                                   expires_at=token.expires_at.replace(tzinfo=None)))

        self.store.retrying(work)
        self._verified.pop(token.value, None)

    def _standing(self, token: Token) -> bool:
        """The token's user still has its epoch and is enabled, the token is not revoked
        and its application credential (if any) still exists."""
        params = {"user": token.context.user_id, "audit": token.audit_id, "cred": token.credential_id or ""}
        args: Any = tuple(params[p] for p in self._positions) if self._positions else params
        for attempt in range(2):
            raw = self.store.engine.raw_connection()
            try:
                row = self._read(raw.driver_connection, args)
                break
            except self._dropped:
                raw.invalidate()  # a connection the server dropped (a restart): once more, fresh
                if attempt:
                    raise
            finally:
                raw.close()
        if row is None or not row[1] or row[0] != token.epoch or row[2]:
            return False
        return token.credential_id is None or bool(row[3])

    def _read(self, driver: Any, args: Any) -> Any:
        if not self._toggle_autocommit:
            return driver.execute(self._sql, args).fetchone()
        driver.autocommit = True
        try:
            return driver.execute(self._sql, args).fetchone()
        finally:
            driver.autocommit = False

    def _external(self, value: str) -> Token:
        ctx = self.external.verify(value)
        now = datetime.now(UTC)
        return Token(value=value, context=ctx, issued_at=now, expires_at=now, audit_id="", epoch=0)

    @staticmethod
    def _token(value: str, payload: dict) -> Token:
        ctx = Context(user_id=payload["u"], project_id=payload["p"], roles=tuple(payload["r"]))
        return Token(
            value=value,
            context=ctx,
            issued_at=datetime.fromtimestamp(payload["i"], UTC),
            expires_at=datetime.fromtimestamp(payload["x"], UTC),
            audit_id=payload["a"],
            epoch=payload["e"],
            credential_id=payload.get("c"),
            unrestricted=payload.get("cu", True),
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
