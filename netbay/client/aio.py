"""The asynchronous face: :class:`AsyncApi`, for callers on an event loop (Docker's
network plugin answers every call from one loop; a blocking call would stall the rest).

Same server, credentials, 401 renewal and error decoder as :class:`netbay.client.Api`;
its failures are ``netbay.errors`` (the backend seams' contract): the API's status,
kind and message, and a server that does not answer is status 503, kind ``Unreachable``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from netbay import errors, keepalive
from netbay.client.errors import IDEMPOTENT, decode, unreachable

CONNECT_TIMEOUT = 1.0
READ_TIMEOUT = 5.0


class AsyncApi:
    """netbay's APIs with a Keystone token from ``creds`` (a :class:`netbay.client.auth.Credentials`)."""

    def __init__(self, url: str, creds: Any, *, connect_timeout: float = CONNECT_TIMEOUT,
                 read_timeout: float = READ_TIMEOUT) -> None:
        self.url = url.rstrip("/")
        self.creds = creds
        self._token: str | None = None
        self._token_lock = asyncio.Lock()
        self.client = httpx.AsyncClient(
            base_url=self.url, timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32,
                                keepalive_expiry=keepalive.CLIENT))

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _get_token(self, renew: bool) -> str:
        async with self._token_lock:
            if self._token is None or renew:
                try:
                    r = await self.client.post(self.creds.tokens_url, json=self.creds.body())
                except httpx.HTTPError as exc:
                    raise unreachable(f"netbay API at {self.url}", exc) from None
                if r.status_code != 201:
                    raise errors.Unauthorized(f"netbay: authentication failed: {decode(r.status_code, r.content)[0]}")
                self._token = r.headers["X-Subject-Token"]
            return self._token

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        """``path`` below the server's root (``/network/v2.0/ports``, ``/netbay/v1/pods``)."""
        renew = resent = False
        for _ in range(3):
            token = await self._get_token(renew=renew)
            try:
                r = await self.client.request(method, path, headers={"X-Auth-Token": token}, **kw)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if resent or method.upper() not in IDEMPOTENT:
                    raise unreachable(f"netbay API at {self.url}", exc) from None
                resent = True   # a kept-alive connection the server closed as it was reused
                continue
            except httpx.HTTPError as exc:
                raise unreachable(f"netbay API at {self.url}", exc) from None
            if r.status_code == 401 and not renew:
                renew = True
                continue
            if r.status_code >= 400:
                message, kind = decode(r.status_code, r.content)
                raise errors.from_status(r.status_code, message, kind)
            return r.json() if r.content else None
        raise errors.Unauthorized("netbay: token refused")
