"""Tokens of a real cloud's Keystone, accepted by netbay's APIs.

With ``NETBAY_EXTERNAL_KEYSTONE=<Keystone v3 URL>`` a token that netbay did not
sign is checked the way every OpenStack service checks one (keystonemiddleware):
``GET /v3/auth/tokens`` with the token as both ``X-Auth-Token`` and
``X-Subject-Token`` (Keystone lets a token validate itself). A valid,
project-scoped token acts for its project with its roles, so every call is
scoped to the token's project exactly as in the cloud's own services. Answers
are cached until the token expires (at most ``CACHE_SECONDS``); a refused token
is not cached, so a fixed clock or a new token works at once.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, UTC

import httpx

from netbay.context import Context
from netbay.errors import Unauthorized
from netbay.identity.roles import effective

CACHE_SECONDS = 300.0
MAX_CACHED = 10_000
TIMEOUT = 10.0


class ExternalKeystone:
    """Validates tokens against the Keystone at ``url`` (``…/v3``)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        if not self.url.endswith("/v3"):
            self.url += "/v3"
        self._client = httpx.Client(timeout=TIMEOUT)
        self._cache: dict[str, tuple[Context, float]] = {}
        self._lock = threading.Lock()

    def verify(self, value: str) -> Context:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(value)
        if hit and hit[1] > now:
            return hit[0]
        try:
            r = self._client.get(f"{self.url}/auth/tokens", headers={"X-Auth-Token": value,
                                                                      "X-Subject-Token": value})
        except httpx.HTTPError as exc:
            raise Unauthorized(f"The request you have made requires authentication "
                               f"(Keystone at {self.url} unreachable: {type(exc).__name__}).") from None
        if r.status_code != 200:
            raise Unauthorized("The request you have made requires authentication.")
        token = r.json()["token"]
        project = token.get("project")
        if not project:
            raise Unauthorized("A project-scoped token is required.")
        ctx = Context(user_id=token["user"]["id"], project_id=project["id"],
                      roles=effective(role["name"] for role in token.get("roles", [])))
        expires = datetime.fromisoformat(token["expires_at"].replace("Z", "+00:00"))
        keep = min(CACHE_SECONDS, (expires - datetime.now(UTC)).total_seconds())
        with self._lock:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[value] = (ctx, now + max(keep, 0.0))
        return ctx
