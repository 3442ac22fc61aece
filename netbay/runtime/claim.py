"""Claiming a port for a container, giving it back, and collecting what nothing stands for.

The Docker driver and the CNI daemon take ports the same way: a port they make
carries ``<ns>.made`` (:mod:`.tags`) and goes when given back; a port they are given
is bound (:mod:`.binding`) and tagged with what it serves, and when given back is
unbound and stripped of their tags — its device cleared only if the claim set it
(the ``<ns>.device`` flag). Their collectors walk the same loop too: of the ports a
service tags, those on this host or bound nowhere (a claim cut short) that nothing
stands for any more are given back. :class:`Claims` is that, once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from netbay.errors import NotFound
from netbay.runtime import binding
from netbay.runtime.tags import Owner, on_host_or_unbound, tags_of

if TYPE_CHECKING:
    from netbay.backends.aio import AsyncNetworkBackend

log = logging.getLogger("netbay.runtime")

Port = dict[str, Any]


class Claims:
    """One service's claims on ports: ``owner``'s tags, ``device_owner`` on what it
    binds, bound to ``host``."""

    def __init__(self, backend: AsyncNetworkBackend, owner: Owner, device_owner: str, host: str) -> None:
        self.backend, self.owner, self.device_owner, self.host = backend, owner, device_owner, host
        self.device_set = owner.flag("device")   # on a given port: its device_id was empty, the claim set it

    async def make(self, body: Mapping[str, Any], ours: Iterable[str] = (), device: str | None = None) -> Port:
        """A port made for a claim (tagged made and ``ours``); bound to ``device`` on this
        host at once, or (None) only owned, for :meth:`claim` to bind later."""
        made: dict[str, Any] = {**body, "tags": [self.owner.made, *ours]}
        made.update(binding.bind({}, device, self.device_owner, self.host) if device is not None
                    else {"device_owner": self.device_owner})
        return await self.backend.create("port", made)

    def binding(self, port: Mapping[str, Any], device: str, keep_owner: bool = False) -> dict[str, Any]:
        """The update that binds ``port`` to ``device`` on this host (``keep_owner``: its
        owner stays, a controller's)."""
        return binding.bind(port, device, owner=None if keep_owner else self.device_owner, host=self.host)

    async def claim(self, port: Mapping[str, Any], device: str, ours: Iterable[str] = (), *,
                    keep_owner: bool = False, also: Mapping[str, Any] | None = None) -> Port:
        """Bind ``port`` (made or given) to ``device`` here, with ``also`` in the same
        update, and tag it ``ours`` (one tag call, none if they are all there): the port
        as it is now."""
        marks = set(ours)
        if not port.get("device_id") and not self.owner.made_it(port):
            marks.add(self.device_set)
        bound = await self.backend.update("port", port["id"], {**self.binding(port, device, keep_owner), **(also or {})})
        have = tags_of(bound)
        missing = sorted(marks.difference(have))
        if len(missing) == 1:
            await self.backend.add_tag("port", port["id"], missing[0])
            have = [*have, missing[0]]
        elif missing:
            have = await self.backend.set_tags("port", port["id"], sorted({*have, *missing}))
        return {**bound, "tags": have}

    async def give_back(self, port: Mapping[str, Any], *, made: bool = False, device: str | None = None) -> None:
        """Delete ``port`` if it was made here (``made``, or its tag); else unbind it —
        its device too if the claim set it (or it is still ``device``) — and strip this
        service's tags. Gone already (a retried call): nothing to do."""
        with contextlib.suppress(NotFound):
            if made or self.owner.made_it(port):
                await self.backend.delete("port", port["id"])
                return
            have = tags_of(port)
            ours = self.device_set in have or (device is not None and port.get("device_id") == device)
            await self.backend.update("port", port["id"], binding.unbind(ours))
            kept = self.owner.without_ours(have)
            if kept != have:
                await self.backend.set_tags("port", port["id"], kept)

    async def collect(self, ports: Iterable[Port], orphan: Callable[[Port], bool],
                      release: Callable[[Port], Awaitable[Any]] | None = None) -> list[str]:
        """Give back (``release``: the service's own undoing, else :meth:`give_back`) each
        of ``ports`` that is bound here or nowhere and that ``orphan`` says nothing
        stands for; the ids given back."""
        gone = []
        for port in ports:
            if on_host_or_unbound(port, self.host) and orphan(port):
                log.info("%s: port %s is no one's any more; given back", self.owner.namespace, port["id"])
                await (release or self.give_back)(port)
                gone.append(port["id"])
        return gone


__all__ = ["Claims"]
