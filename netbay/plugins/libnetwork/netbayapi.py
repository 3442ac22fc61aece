"""The netbay API as the plugin uses it: a few calls, short timeouts, clear errors.

Every failure becomes a :class:`PluginError` whose text Docker prints as is: the
API's own message (Neutron's ``NeutronError.message``), or that the server cannot
be reached — at once, never a hang (connect timeout 1 s, read timeout 5 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from netbay.agent import Credentials

CONNECT_TIMEOUT = 1.0
READ_TIMEOUT = 5.0


class PluginError(Exception):
    """An answer for Docker: ``{"Err": str(exc)}``."""


class NotFoundError(PluginError):
    pass


def _message(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text[:300] or f"HTTP {r.status_code}"
    if isinstance(body, Mapping):
        for key in ("NeutronError", "error"):
            inner = body.get(key)
            if isinstance(inner, Mapping) and inner.get("message"):
                return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    return r.text[:300]


class NetbayAPI:
    """Networks, subnets, subnet pools, ports and their tags (Neutron v2.0 paths)."""

    def __init__(self, url: str, creds: Credentials) -> None:
        self.url = url.rstrip("/")
        self.creds = creds
        self._token: str | None = None
        self._token_lock = asyncio.Lock()
        self.client = httpx.AsyncClient(
            base_url=f"{self.url}/network/v2.0",
            timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _get_token(self, renew: bool = False) -> str:
        async with self._token_lock:
            if self._token is None or renew:
                c = self.creds
                body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
                    "name": c.username, "domain": {"name": c.user_domain_name}, "password": c.password}}},
                    "scope": {"project": {"name": c.project_name, "domain": {"name": c.project_domain_name}}}}}
                url = c.auth_url.rstrip("/")
                url = url if url.endswith("/v3") else url + "/v3"
                try:
                    r = await self.client.post(f"{url}/auth/tokens", json=body)
                except httpx.HTTPError as exc:
                    raise self._down(exc) from None
                if r.status_code != 201:
                    raise PluginError(f"netbay: authentication failed: {_message(r)}")
                self._token = r.headers["X-Subject-Token"]
            return self._token

    def _down(self, exc: Exception) -> PluginError:
        return PluginError(f"netbay API at {self.url} is unreachable ({type(exc).__name__}: {exc or 'no answer'})")

    async def call(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(2):
            token = await self._get_token(renew=attempt > 0)
            try:
                r = await self.client.request(method, path, headers={"X-Auth-Token": token}, **kw)
            except httpx.HTTPError as exc:
                raise self._down(exc) from None
            if r.status_code == 401 and attempt == 0:
                continue
            if r.status_code == 404:
                raise NotFoundError(_message(r))
            if r.status_code >= 400:
                raise PluginError(_message(r))
            return r.json() if r.content else None
        raise PluginError("netbay: token refused")

    # -- resources -------------------------------------------------------------------------

    async def list(self, collection: str, **params: Any) -> list[dict[str, Any]]:
        return (await self.call("GET", f"/{collection}", params=params))[collection]

    async def show(self, collection: str, obj_id: str) -> dict[str, Any]:
        return next(iter((await self.call("GET", f"/{collection}/{quote(obj_id, safe='')}")).values()))

    async def create(self, collection: str, body: Mapping[str, Any]) -> dict[str, Any]:
        member = collection[:-1]
        return (await self.call("POST", f"/{collection}", json={member: dict(body)}))[member]

    async def update(self, collection: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        member = collection[:-1]
        return (await self.call("PUT", f"/{collection}/{obj_id}", json={member: dict(body)}))[member]

    async def delete(self, collection: str, obj_id: str) -> bool:
        """False if it was gone already (a retried call)."""
        try:
            await self.call("DELETE", f"/{collection}/{obj_id}")
        except NotFoundError:
            return False
        return True

    async def find(self, collection: str, ref: str) -> dict[str, Any]:
        """By id, else by unique name."""
        try:
            return await self.show(collection, ref)
        except NotFoundError:
            pass
        found = await self.list(collection, name=ref)
        if len(found) == 1:
            return found[0]
        what = collection[:-1].replace("subnetpool", "subnet pool")
        if not found:
            raise NotFoundError(f"netbay: no {what} with id or name {ref!r}")
        raise PluginError(f"netbay: {len(found)} {collection} are named {ref!r}; give the id")

    async def add_tag(self, collection: str, obj_id: str, tag: str) -> None:
        await self.call("PUT", f"/{collection}/{obj_id}/tags/{quote(tag, safe='')}")

    async def remove_tag(self, collection: str, obj_id: str, tag: str) -> None:
        try:
            await self.call("DELETE", f"/{collection}/{obj_id}/tags/{quote(tag, safe='')}")
        except NotFoundError:
            pass


__all__ = ["NetbayAPI", "NotFoundError", "PluginError"]
