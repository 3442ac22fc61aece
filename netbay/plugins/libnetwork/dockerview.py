"""What dockerd knows, read through its API (the docker SDK), off the call path.

Plugin calls carry no container id, and a crash's leftovers are only recognisable
against Docker's own list of networks and endpoints; both are asked here, on a
thread, never while Docker waits on a plugin answer.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("netbay.libnetwork.docker")

TIMEOUT = 10
API_VERSION = "1.41"  # Docker 20.10; newer daemons still serve it


class DockerView:
    def __init__(self, host: str, driver: str) -> None:
        self.host, self.driver = host, driver

    def _client(self):  # noqa: ANN202
        import docker

        return docker.APIClient(base_url=self.host, version=API_VERSION, timeout=TIMEOUT)

    def _state(self) -> tuple[set[str], dict[str, str]]:
        client = self._client()
        try:
            nets = client.networks(filters={"driver": self.driver})
            endpoints: dict[str, str] = {}
            for n in nets:
                for cid, c in (client.inspect_network(n["Id"]).get("Containers") or {}).items():
                    if c.get("EndpointID"):
                        endpoints[c["EndpointID"]] = cid
            return {n["Id"] for n in nets}, endpoints
        finally:
            client.close()

    async def state(self) -> tuple[set[str], dict[str, str]]:
        """(this driver's network ids, {endpoint id: container id})."""
        return await asyncio.to_thread(self._state)

    def _container_of(self, network_id: str, endpoint_id: str) -> str | None:
        client = self._client()
        try:
            for cid, c in (client.inspect_network(network_id).get("Containers") or {}).items():
                # "ep-<endpoint id>": Docker's placeholder while the container is still starting
                if c.get("EndpointID") == endpoint_id and not cid.startswith("ep-"):
                    return cid
            return None
        finally:
            client.close()

    async def container_of(self, network_id: str, endpoint_id: str, attempts: int = 12) -> str | None:
        """The container an endpoint belongs to, once Docker lists it (bounded retries)."""
        delay = 0.1
        for _ in range(attempts):
            try:
                found = await asyncio.to_thread(self._container_of, network_id, endpoint_id)
            except Exception as exc:  # noqa: BLE001 - Docker busy or restarting: try again
                log.debug("container of %s: %s", endpoint_id[:12], exc)
                found = None
            if found:
                return found
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        return None

    def _pid_of(self, container_id: str) -> int:
        client = self._client()
        try:
            return int((client.inspect_container(container_id).get("State") or {}).get("Pid") or 0)
        finally:
            client.close()

    async def netns_of(self, container_id: str, attempts: int = 12) -> str | None:
        """``/proc/PID/ns/net`` of the container's process, once it runs (bounded retries)."""
        delay = 0.1
        for _ in range(attempts):
            try:
                pid = await asyncio.to_thread(self._pid_of, container_id)
            except Exception as exc:  # noqa: BLE001 - Docker busy: try again
                log.debug("pid of %s: %s", container_id[:12], exc)
                pid = 0
            if pid:
                return f"/proc/{pid}/ns/net"
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        return None


__all__ = ["DockerView"]
