"""The network backend as Docker's verbs use it, whichever backend it is.

The plugin sees an :class:`netbay.backends.aio.AsyncNetworkBackend` (netbay's own
network service, or a cloud's Neutron) and nothing else of it. What this adds:
Docker resends a call whose answer it lost, so deleting or untagging what is
already gone succeeds; and Docker's options name networks, subnets and pools by
id or by name.

Errors: a refusal of the backend is a ``netbay.errors.NetbayError`` whose message
Docker prints as is (Neutron's own text); the plugin's own refusals are
:class:`PluginError`.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from netbay.backends.aio import AsyncNetworkBackend
from netbay.errors import NetbayError, NotFound
from netbay.runtime import resolve


class PluginError(NetbayError):
    """An answer for Docker: ``{"Err": message}``."""


class Resources:
    def __init__(self, backend: AsyncNetworkBackend) -> None:
        self.backend = backend
        self.name = backend.name

    async def list(self, member: str, **filters: Any) -> list[dict[str, Any]]:
        return await self.backend.list(member, **filters)

    async def show(self, member: str, obj_id: str) -> dict[str, Any]:
        return await self.backend.show(member, obj_id)

    async def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.backend.create(member, body)

    async def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.backend.update(member, obj_id, body)

    async def delete(self, member: str, obj_id: str) -> bool:
        """False if it was gone already (a resent call)."""
        try:
            await self.backend.delete(member, obj_id)
        except NotFound:
            return False
        return True

    async def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        await self.backend.add_tag(member, obj_id, tag)

    async def remove_tag(self, member: str, obj_id: str, tag: str) -> None:
        try:
            await self.backend.remove_tag(member, obj_id, tag)
        except NotFound:
            pass  # not there (a resent call), or gone with its object

    async def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]:
        return await self.backend.set_tags(member, obj_id, tags)

    async def find(self, member: str, ref: str) -> dict[str, Any]:
        """By id, else by unique name (:mod:`netbay.runtime.resolve`)."""
        try:
            return await resolve.find_async(self.backend, member, ref)
        except resolve.Unresolved as exc:
            what = member.replace("subnetpool", "subnet pool")
            if not exc.count:
                raise PluginError(f"netbay: no {what} with id or name {ref!r}", kind="NotFound") from None
            raise PluginError(f"netbay: {exc.count} {what}s are named {ref!r}; give the id") from None

    async def aclose(self) -> None:
        await self.backend.aclose()


__all__ = ["PluginError", "Resources"]
