"""Collect what a crash left: ports, veths and tags nothing in Docker stands for.

Docker resends a call that died with the plugin, and rolls back what failed, so
almost everything heals by itself. What cannot: a RequestAddress whose answer was
lost (Docker never learnt the address, so never releases it), a pair plugged just
before a crash, a ``network rm`` while the plugin was down (Docker ignores the
error), a binding CreateEndpoint left on its way (its mark on the fabric end). A
sweep runs at start and every ``grace`` seconds; anything younger than
``grace`` is left alone (it may be a call in flight). With ``docker_host`` the
sweep also asks Docker which networks and endpoints exist.

Containers on cluster nodes leave pod rows (``runtime: docker``, ``docker-<EndpointID>``)
rather than ports: a plugin killed between making the row and Docker's Join, or a
container Docker removed while the plugin was down (Docker forgets the endpoint
anyway), would keep the row, its address in the node's lease and, while the
container's namespace has its name, its veth. The sweep releases this plugin's pods
whose endpoint Docker no longer has.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from netbay.plugins.libnetwork.clusters import pod_name
from netbay.plugins.libnetwork.directory import (MADE, binding_marks, endpoint_of, net_tag,
                                                 parse_binding_mark)
from netbay.plugins.libnetwork.dockerview import DockerView
from netbay.errors import NetbayError, NotFound
from netbay.plugins.libnetwork.resources import Resources
from netbay.plugins.libnetwork.network import NetworkDriver
from netbay.runtime.attach import delete_host_end
from netbay.runtime.tags import age

log = logging.getLogger("netbay.libnetwork.gc")

RETRY_FIRST = 1.0   # bindings a sweep could not finish: again after 1, 2, 4 … s, within the sweep's interval

class Collector:
    def __init__(self, neutron: Resources, driver: NetworkDriver, grace: float,
                 docker: DockerView | None = None, awaited: Callable[[], set[str]] = set) -> None:
        """``awaited()``: MACs of RequestAddress calls a crash cut short that Docker may still
        resend (:mod:`.journal`): their ports are that resend's to finish, not orphans."""
        self.neutron, self.driver, self.grace, self.docker = neutron, driver, grace, docker
        self.awaited = awaited
        self._suspects: set[str] = set()
        self._unfinished = False   # a binding the last attempt could not finish (or the sweep failed)

    async def run(self) -> None:
        """Sweep every ``grace`` seconds. Bindings a sweep could not finish are tried again
        sooner (:data:`RETRY_FIRST`, doubling): a restarted plugin's first sweep meets an API
        still slow to answer its first calls, and a container Docker was told is attached
        must not wait ``grace`` (30 s by default) for its port. Only the bindings: the rest
        of the sweep keeps its interval (a veth seen stray twice goes)."""
        for _ in range(1 << 30):  # until cancelled
            self._unfinished = False
            try:
                gone = await self.sweep()
                if any(gone.values()):
                    log.info("collected %s", gone)
            except (NetbayError, OSError) as exc:
                log.warning("sweep: %s", exc)
                self._unfinished = True
            except Exception:  # a sweep's bug must not stop the plugin
                log.exception("sweep failed")
            await asyncio.sleep(self.grace - await self._retry_bindings())

    async def _retry_bindings(self) -> float:
        """While bindings are left unfinished: :meth:`finish_bindings` again, backing off,
        within one ``grace``; the seconds spent."""
        waited, retry = 0.0, RETRY_FIRST
        while self._unfinished and waited + retry < self.grace:
            await asyncio.sleep(retry)
            waited, retry = waited + retry, retry * 2
            self._unfinished = False
            try:
                await self.finish_bindings()
            except (NetbayError, OSError) as exc:
                log.warning("finishing bindings: %s", exc)
                self._unfinished = True
            except Exception:  # a bug must not end the sweeps (this runs inside run())
                log.exception("finishing bindings failed")
                self._unfinished = True
        return waited

    async def sweep(self) -> dict[str, list[str]]:
        gone: dict[str, list[str]] = {"ports": [], "networks": [], "veths": [], "pods": []}
        try:
            known = await self.docker.state() if self.docker is not None else None
        except Exception as exc:  # noqa: BLE001 - Docker busy or gone: its part waits
            log.info("sweep: Docker not asked (%s)", exc)
            known = None
        marked = await self.finish_bindings()
        ports = await self.neutron.list("port", tags=f"{MADE},{self.driver.dir.owner}")
        bound = {port_id[:11] for port_id in marked | set(self.driver.prepared)}
        awaited, now = self.awaited(), time.monotonic()
        spared = self.driver.dir.spared
        for port_id in [p for p, until in spared.items() if until <= now]:
            del spared[port_id]

        def waited_for(port: dict[str, Any]) -> bool:
            """Docker was answered for it (its binding is still to land), or a resend's
            (Docker is still to ask for it, or to take it: CreateEndpoint)."""
            return port["id"] in marked or (port.get("mac_address") or "").lower() in awaited or port["id"] in spared

        def orphan(port: dict[str, Any]) -> bool:
            if waited_for(port):
                return False
            eid = endpoint_of(port)
            if known is not None and eid and port.get("binding:host_id") == self.driver.host:
                return eid not in known[1] and age(port) > self.grace
            return not eid and age(port, "created_at") > self.grace

        gone["ports"] = await self.driver.claims.collect(ports, orphan, self.driver.drop)
        for port in ports:
            eid = endpoint_of(port)
            if not eid or port["id"] in gone["ports"] or waited_for(port):
                continue
            bound.add(port["id"][:11])
            cid = known[1].get(eid) if known is not None else None
            if cid and port.get("device_id") == eid:  # Join's naming did not get through
                await self.driver.name_device(port["id"], eid, cid)
        if known is not None:
            gone["pods"] = await self._sweep_pods(known[1])
            for net in await self.neutron.list("network", tags=self.driver.dir.owner):
                for nid in net_tag.values(net):
                    if nid and nid not in known[0] and age(net) > self.grace:
                        await self.driver.delete_network({"NetworkID": nid})
                        gone["networks"].append(nid)
        ends = set(await self.driver.kernel(self.driver.attacher.host_ends))  # not another netbay's
        stray = {e for e in ends if e[3:] not in bound}
        for end in stray & self._suspects:  # seen twice: not a call in flight
            if await self.driver.kernel(delete_host_end, end):
                gone["veths"].append(end)
        self._suspects = stray - self._suspects
        return gone

    async def _sweep_pods(self, endpoints: dict[str, str]) -> list[str]:
        """Release this plugin's endpoint pods whose endpoint Docker no longer lists."""
        gone = []
        for pod in await self.driver.clusters.own_pods():
            eid = pod["name"][len(pod_name("")):]
            if eid in endpoints or age(pod, "created_at") <= self.grace:   # young: a call in flight
                continue
            self.driver.clusters.placed.pop(eid, None)
            await self.driver.clusters.release(pod)
            gone.append(pod["id"])
        return gone

    async def finish_bindings(self) -> set[str]:
        """Bind the ports CreateEndpoint answered for but whose binding never landed (the
        plugin was killed, or the API refused it a while), from the marks on their fabric
        ends; a mark is as old as its pair, so one whose pair is gone needs nothing.
        Returns the ports still marked (a binding on its way, or refused again)."""
        driver, left = self.driver, set()
        for note in await driver.kernel(driver.attacher.marks, binding_marks(driver.dir.owner)):
            port_id, eid = parse_binding_mark(note)
            if port_id in driver.binding:
                left.add(port_id)
                continue
            try:
                await driver.bind(eid, port_id)
                log.info("port %s: binding for endpoint %s finished", port_id, eid[:12])
            except NotFound:
                log.info("port %s: gone; its binding mark cleared", port_id)
                await driver.kernel(driver.attacher.mark, port_id, "")  # released: its pair goes with Docker's endpoint
            except NetbayError as exc:
                log.warning("port %s: binding not finished: %s", port_id, exc)
                left.add(port_id)
                self._unfinished = True
        return left


__all__ = ["Collector"]
