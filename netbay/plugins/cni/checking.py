"""CNI CHECK: the attachment as ADD left it — its port still there, bound to this
host with the prevResult's addresses; the container end with the port's MAC,
addresses and routes; the host end still plugged. The port is read from the daemon's
watch of the change feed when it follows the feed (:mod:`.watch`), else from the API."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

from netbay.plugins.cni.attachment import Lookups, request_key
from netbay.plugins.cni.spec import INTERNAL, CniError, Request
from netbay.runtime import inside


class Checking(Lookups):
    """CHECK."""

    async def check(self, req: Request) -> None:
        """The attachment as ADD left it: its port (one API call) is bound here with the
        prevResult's addresses; the container end has the port's MAC, addresses and
        routes; the host end is still plugged. The container end is read while the API
        answers (the kernel's half of CHECK off its path); the port's errors come first."""
        if not isinstance(req.config.get("prevResult"), dict):
            raise CniError(INTERNAL, "Required prevResult missing")
        inner = asyncio.ensure_future(self.kernel(inside.seen, req.netns, req.ifname))
        try:
            port, addressing = await self._checked_port(req)
        except BaseException:
            await asyncio.gather(inner, return_exceptions=True)   # its outcome no longer matters
            raise
        try:
            found = (await inner).problems(port["mac_address"], addressing)
        except inside.NamespaceGone as exc:
            raise CniError(INTERNAL, exc.strerror or str(exc)) from None
        if not await self.kernel(self.vifs.plugged if self.vifs else self.attacher.plugged, port["id"]):
            found.append(f"the port's {'host end is in no bridge' if self.vifs else 'fabric end is gone'} "
                         f"({port['id']})")
        if found:
            raise CniError(INTERNAL, "; ".join(found))
        return None

    async def _checked_port(self, req: Request) -> tuple[dict[str, Any], inside.Addressing]:
        """CHECK's API half: the attachment's port, bound to this host, whose addresses are
        the prevResult's; with the addressing the container end should have."""
        ports = await self._current(req)
        if not ports:
            raise CniError(INTERNAL, f"netbay-cni: no port for container {req.container_id} "
                                     f"interface {req.ifname} on {req.config['name']}")
        port = ports[0]
        if port.get("binding:host_id") != self.host:
            raise CniError(INTERNAL, f"port {port['id']} is bound to {port.get('binding:host_id')!r}, "
                                     f"not to this host {self.host!r}")
        addressing, _pairs = await self.addressing(port, req.args.get("GW"))
        prev = {str(ipaddress.ip_interface(i["address"])) for i in req.config["prevResult"].get("ips") or ()
                if isinstance(i, dict) and i.get("address")}
        if prev != set(addressing.cidrs):
            raise CniError(INTERNAL, f"prevResult addresses {sorted(prev)} are not the port's "
                                     f"{sorted(addressing.cidrs)}")
        return port, addressing

    async def _current(self, req: Request) -> list[dict[str, Any]]:
        """The attachment's port: the watch's, when it follows the feed and knows it; else
        the API's (kept by the watch for the next CHECK)."""
        watch = self.watch
        if watch is None:
            return await self.attached(req)
        hit = watch.get(request_key(req))
        if hit is not None:
            return [hit]
        ticket = watch.ticket()
        ports = await self.attached(req)
        if len(ports) == 1:
            watch.put(ports[0], ticket)
        return ports


__all__ = ["Checking"]
