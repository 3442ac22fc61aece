"""The network backend seam for asyncio callers (Docker's network + IPAM driver).

Why an async face: dockerd holds its locks while it waits on a plugin, and the
plugin answers every call from one event loop; a synchronous seam call on that
loop would stall every other call behind a slow cloud. Same members, bodies,
results and errors as :class:`netbay.backends.NetworkBackend`, awaited:

- :class:`HttpAsyncBackend` — netbay's own (embedded) network service over its
  Neutron API, on :class:`netbay.client.aio.AsyncApi` (httpx's async client): no
  thread, short timeouts (connect 1 s, read 5 s), the token renewed on 401.
- :class:`ThreadedBackend` — any synchronous backend (the ``openstack`` one,
  openstacksdk) on a bounded thread pool, one backend per worker thread (an sdk
  connection is not shared between threads). A create comes back tagged or not
  at all (the ``openstack`` backend tags what its Neutron would not take on POST).

Failures are ``netbay.errors`` carrying the backend's status, ``NeutronError.type``
and message; a backend that does not answer is a ``NetbayError`` of status 503,
kind ``Unreachable``, at once (never a hang).
"""

from __future__ import annotations

import builtins
import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote


from netbay.backends.seam import EMBEDDED, NetworkBackend, Traits
from netbay.backends.http import COLLECTIONS, _path
from netbay.client import NET, unreachable
from netbay.client.aio import READ_TIMEOUT, AsyncApi

WORKERS = 8


@runtime_checkable
class AsyncNetworkBackend(Protocol):
    """:class:`netbay.backends.NetworkBackend`'s CRUD and tags, awaited."""

    name: str
    traits: Traits

    async def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    async def show(self, member: str, obj_id: str) -> dict[str, Any]: ...
    async def list(self, member: str, **filters: Any) -> list[dict[str, Any]]: ...
    async def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    async def delete(self, member: str, obj_id: str) -> None: ...
    async def add_tag(self, member: str, obj_id: str, tag: str) -> None: ...
    async def remove_tag(self, member: str, obj_id: str, tag: str) -> None: ...
    async def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]: ...
    def describe(self) -> dict[str, Any]: ...
    async def aclose(self) -> None: ...


class HttpAsyncBackend:
    """netbay's network service at ``api`` (the embedded backend, as a client sees it)."""

    name = "embedded"
    traits = EMBEDDED

    def __init__(self, api: AsyncApi) -> None:
        self.api = api

    async def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return (await self.api.call("POST", _path(member), json={member: dict(body)}))[member]

    async def show(self, member: str, obj_id: str) -> dict[str, Any]:
        return (await self.api.call("GET", f"{_path(member)}/{quote(obj_id, safe='')}"))[member]

    async def list(self, member: str, **filters: Any) -> list[dict[str, Any]]:
        params = {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in filters.items()}
        return (await self.api.call("GET", _path(member), params=params))[COLLECTIONS[member].replace("-", "_")]

    async def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return (await self.api.call("PUT", f"{_path(member)}/{obj_id}", json={member: dict(body)}))[member]

    async def delete(self, member: str, obj_id: str) -> None:
        await self.api.call("DELETE", f"{_path(member)}/{obj_id}")

    async def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        await self.api.call("PUT", f"{_path(member)}/{obj_id}/tags/{quote(tag, safe='')}")

    async def remove_tag(self, member: str, obj_id: str, tag: str) -> None:
        await self.api.call("DELETE", f"{_path(member)}/{obj_id}/tags/{quote(tag, safe='')}")

    async def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]:
        return (await self.api.call("PUT", f"{_path(member)}/{obj_id}/tags", json={"tags": list(tags)}))["tags"]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "network": self.api.url + NET}

    async def aclose(self) -> None:
        await self.api.aclose()


class ThreadedBackend:
    """A synchronous backend made by ``make`` per worker thread, at most ``workers`` calls at once."""

    def __init__(self, make: Callable[[], NetworkBackend], workers: int = WORKERS) -> None:
        self._make = make
        self._local = threading.local()
        self._made: list[NetworkBackend] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="netbay-backend")
        self.first = self._backend()  # on the caller's thread: settings are checked here, not on a call
        self.name, self.traits = self.first.name, self.first.traits

    def _backend(self) -> NetworkBackend:
        backend = getattr(self._local, "backend", None)
        if backend is None:
            backend = self._local.backend = self._make()
            with self._lock:
                self._made.append(backend)
        return backend

    async def _run(self, method: str, *args: Any, **kw: Any) -> Any:
        def call() -> Any:
            return getattr(self._backend(), method)(*args, **kw)

        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    async def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._run("create", member, body)

    async def show(self, member: str, obj_id: str) -> dict[str, Any]:
        return await self._run("show", member, obj_id)

    async def list(self, member: str, **filters: Any) -> list[dict[str, Any]]:
        return await self._run("list", member, **filters)

    async def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._run("update", member, obj_id, body)

    async def delete(self, member: str, obj_id: str) -> None:
        await self._run("delete", member, obj_id)

    async def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        await self._run("add_tag", member, obj_id, tag)

    async def remove_tag(self, member: str, obj_id: str, tag: str) -> None:
        await self._run("remove_tag", member, obj_id, tag)

    async def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]:
        return await self._run("set_tags", member, obj_id, tags)

    def describe(self) -> dict[str, Any]:
        return self.first.describe()

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            made, self._made = self._made, []
        for backend in made:
            with contextlib.suppress(Exception):
                getattr(backend, "close", lambda: None)()


def open_async_backend(kind: str, *, url: str | None = None, creds: Any = None, cloud: str | None = None,
                       workers: int = WORKERS, timeout: float = READ_TIMEOUT) -> AsyncNetworkBackend:
    """``embedded``: netbay's API at ``url`` with ``creds``; ``openstack``: the cloud
    ``cloud`` of clouds.yaml, each call bounded by ``timeout`` seconds."""
    if kind == "embedded":
        if not url or creds is None:
            raise ValueError("the embedded backend needs netbay's URL and credentials")
        return HttpAsyncBackend(AsyncApi(url, creds, read_timeout=timeout))
    if kind == "openstack":
        if not cloud:
            raise ValueError("the openstack backend needs a cloud: --os-cloud NAME (or OS_CLOUD), "
                             "a clouds.yaml entry")
        from netbay.backends import open_backend

        return ThreadedBackend(lambda: open_backend("openstack", cloud=cloud, api_timeout=timeout), workers)
    raise ValueError(f"unknown network backend {kind!r}: choose embedded or openstack")


__all__ = ["AsyncNetworkBackend", "HttpAsyncBackend", "ThreadedBackend", "open_async_backend",
           "unreachable"]
