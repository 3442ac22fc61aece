"""The CNI verbs on netbay: a pod's attachment is a port of the network backend
(:class:`netbay.backends.NetworkBackend`: netbay's own network service, or a cloud's
Neutron), plugged as every container port is (:mod:`netbay.runtime.attach`), its end
inside the runtime's namespace (:mod:`netbay.runtime.inside`). Nothing here knows
which backend answers: the port's ``device_owner`` is handed in with it
(``compute:netbay`` on netbay's own, kuryr's ``compute:kuryr`` on a cloud).

Which port (ADD): ``PORT_UUID`` from ``CNI_ARGS`` (made by a controller, as the
kuryr spec's API watcher does); else, when the config names a kuryr ``cluster``, the
port its mapping controller made for ``K8S_POD_NAMESPACE``/``K8S_POD_NAME``
(:mod:`netbay.k8s.podport`; on its own network, the pod's namespace's; none yet: try
again later, as kuryr's CNI waits for the pod's VIF); else the port on the network
whose ``device_id`` is the pod's ``K8S_POD_UID`` (pre-created the same way, kuryr's
convention); else a new one, tagged :data:`MADE`, with ``IPV4`` as its fixed IP when
given. ``PORT_TYPE`` (kuryr's VIF type) is honoured when it names what is plugged here
(``veth``/``bridge``) and refused by name otherwise. A given port keeps its owner where the agent already plugs it as a container's
(``compute:kuryr``: the controller still owns it). A kuryr cluster's pod's result
carries the cluster's DNS (its resolver, the namespace's search list). The attachment
is found again (DEL, CHECK, GC) by its tags — ``netbay.cni.ctr:<CNI_CONTAINERID>``,
``netbay.cni.if:<CNI_IFNAME>`` and ``netbay.cni.net:<config name>`` — so a restarted
daemon knows everything. With ``vifs`` (a cloud's ports bound on this host,
:mod:`netbay.runtime.vif`), the pair's host end is plugged with os-vif into the
cloud's Open vSwitch as the port's ``binding:vif_type``/``binding:vif_details`` say,
instead of into netbay's fabric; a type netbay cannot plug is refused by name before
the pair is made, the port released. DEL deletes a port it made and unbinds one it was given;
it succeeds when nothing is left to remove. The dataplane agent adopts the fabric
end (security groups, status ``ACTIVE``) as for any container port.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Mapping
from typing import Any

from netbay.backends import NetworkBackend
from netbay.backends.aio import ThreadedBackend
from netbay.client import Api
from netbay.dataplane.fabric import CONTAINER
from netbay.dataplane.rtnl import LinkError
from netbay.errors import NetbayError
from netbay.k8s import podport
from netbay.plugins.cni.adding import Adding
from netbay.plugins.cni.attachment import DEVICE_SET, MADE, OWN, ctr_tag, if_tag, key_of, net_tag, request_key
from netbay.plugins.cni.checking import Checking
from netbay.plugins.cni.spec import (INTERNAL, INVALID_ENV, NOT_AVAILABLE, UNSUPPORTED_FIELD, CniError,
                                     Request)
from netbay.plugins.cni.watch import PortWatch
from netbay.runtime import inside
from netbay.runtime.attach import Attacher
from netbay.runtime.claim import Claims
from netbay.runtime.kernel import KernelThread
from netbay.runtime.vif import OvsVifs

log = logging.getLogger("netbay.cni")

API_THREADS = 16           # backend calls in flight at once (the seam is synchronous)


class Cni(Adding, Checking):
    """ADD / DEL / CHECK / STATUS / GC against one network backend and this host's fabric.

    The backend is synchronous (one seam for every controller); its calls run on a
    pool of their own (:class:`netbay.backends.aio.ThreadedBackend`), so parallel ADDs
    wait on the network service together while netlink keeps its one thread."""

    def __init__(self, network: NetworkBackend, attacher: Attacher, host: str | None = None,
                 owner: str = CONTAINER, vifs: OvsVifs | None = None, feed: Api | None = None) -> None:
        self.attacher, self.owner, self.vifs = attacher, owner, vifs
        self.backend = ThreadedBackend(lambda: network, API_THREADS)  # one backend, shared by the threads
        self.host = host or socket.gethostname()
        self.claims = Claims(self.backend, OWN, owner, self.host)
        self.kernel = KernelThread("netbay-cni")  # netlink work (sockets are per thread)
        # CHECK's ports, current to netbay's change feed at ``feed`` (its own connections)
        self.watch = PortWatch(feed.fork(), key_of).start() if feed is not None else None
        self._networks: dict[str, tuple[float, dict[str, Any]]] = {}
        self._subnets: dict[str, tuple[float, dict[str, Any]]] = {}
        self._resolvers: dict[str, tuple[float, list[str]]] = {}   # cluster -> its resolver's addresses

    async def aclose(self) -> None:
        if self.watch is not None:
            self.watch.close()
        self.kernel.close()
        await self.backend.aclose()   # closes the network backend too

    async def handle(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """One call: ``{"result": …}`` (ADD), ``{}`` (others), or ``{"error": …}``."""
        version = None
        try:
            req = Request.parse(raw)
            version = req.version
            verb = {"ADD": self.add, "DEL": self.delete, "CHECK": self.check, "STATUS": self.status,
                    "GC": self.gc}.get(req.command)
            if verb is None:
                raise CniError(INVALID_ENV, f"unknown CNI_COMMAND: {req.command}")
            out = await verb(req)
            return {"result": out} if out is not None else {}
        except CniError as exc:
            self._networks.clear()  # a network deleted and made again under its name: look again

            return {"error": exc.body(version)}
        except NetbayError as exc:  # the network service's own message
            self._networks.clear()
            return {"error": CniError(INTERNAL, f"netbay: {exc.message}").body(version)}
        except LinkError as exc:
            return {"error": CniError(INTERNAL, exc.strerror or str(exc)).body(version)}
        except Exception as exc:  # the runtime must get an answer
            log.exception("%s failed", raw.get("command"))
            return {"error": CniError(INTERNAL, f"netbay-cni: {type(exc).__name__}: {exc}").body(version)}

    # -- DEL / GC / STATUS ------------------------------------------------------------

    async def delete(self, req: Request) -> None:
        """The container's link is removed (it needs no port: found or not, a lost ADD or a
        pre-DEL crash included) while the API is asked for the attachment's ports; each
        port's host end is unplugged while the port is given back. A veth's deletion
        waits on the kernel (tens of ms under load), so overlapping it with the API's
        round trips is most of what DEL can save. Both halves finish before DEL answers."""
        unlink = asyncio.ensure_future(self.kernel(inside.remove, req.netns, req.ifname)) if req.netns else None
        try:
            for port in await self._to_release(req):
                if self.watch is not None:
                    self.watch.forget(port["id"])
                await _both(self.kernel(self._unwire, port["id"], None), self.claims.give_back(port, made=False))
        finally:
            if unlink is not None:
                await unlink
        return None

    async def _to_release(self, req: Request) -> list[dict[str, Any]]:
        """DEL's ports: a port this daemon made, as its watch knows it (deleted by id; gone
        already is fine), without asking the API; else every port the API finds by the
        attachment's tags (a given port is unbound and untagged from what the API says)."""
        known = self.watch.get(request_key(req)) if self.watch is not None else None
        if known is not None and OWN.made_it(known):
            return [known]
        return await self.attached(req)

    async def gc(self, req: Request) -> None:
        valid = req.config.get("cni.dev/valid-attachments")
        if valid is None:
            valid = []
        if not isinstance(valid, list):
            raise CniError(UNSUPPORTED_FIELD, "cni.dev/valid-attachments is not a list")
        keep = {(str(v.get("containerID")), str(v.get("ifname"))) for v in valid if isinstance(v, dict)}
        await self.claims.collect(await self.backend.list("port", tags=net_tag(req.config["name"])),
                                  lambda port: (ctr_tag.value(port), if_tag.value(port)) not in keep,
                                  lambda port: self._release(port, False, None))
        return None

    async def status(self, req: Request) -> None:
        try:
            if req.cluster and not req.has_network:   # the cluster's own resources (its service subnet)
                if not await self.backend.list("subnet", tags=podport.cluster_tag(req.cluster)):
                    raise CniError(NOT_AVAILABLE, f"no kuryr cluster {req.cluster}")
            else:
                await self.network(req.network_ref, cached=False)  # the API answers now
        except (CniError, NetbayError) as exc:
            why = exc.msg if isinstance(exc, CniError) else exc.message
            raise CniError(NOT_AVAILABLE, f"netbay-cni cannot serve ADD: {why}") from None
        return None


async def _both(first: Awaitable[Any], second: Awaitable[Any]) -> None:
    """Run both to their end; then the first one's error, if any."""
    results = await asyncio.gather(first, second, return_exceptions=True)
    for outcome in results:
        if isinstance(outcome, BaseException):
            raise outcome


__all__ = ["Cni", "DEVICE_SET", "MADE", "OWN", "ctr_tag", "if_tag", "net_tag"]
