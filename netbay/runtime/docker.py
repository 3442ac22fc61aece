"""Containers on given netbay ports through Docker: the seam the container API builds on.

The caller (the Zun-compatible API) owns the ports: it creates each one (device =
its container, owner ``compute:netbay``) and asks here for a container on it. The
Docker network of a netbay network is named by the network's id (as Zun names its
Docker networks by the Neutron network) and uses the netbay driver with the network
and subnet given (``-o netbay.network=``, ``--ipam-opt netbay.subnet=``); the plugin
then finds the port by its address, plugs it and leaves it the caller's: stopping or
removing the container unbinds it, never deletes it. Docker is driven through its
Engine API (the docker SDK), never the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.types import IPAMConfig, IPAMPool


# The sandbox's process: waits (as PID 1 it needs its own TERM handler to stop at once).
SANDBOX_COMMAND = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"]


def _addresses(port: dict[str, Any]) -> dict[str, str]:
    """The port's first address of each family, as Docker's endpoint settings name them
    (``ipv4_address``, ``ipv6_address``); a port with no IPv4 one is refused (Docker asks
    the driver for an IPv4 pool on every network)."""
    out: dict[str, str] = {}
    for fixed in port.get("fixed_ips") or ():
        out.setdefault("ipv6_address" if ":" in fixed["ip_address"] else "ipv4_address", fixed["ip_address"])
    if "ipv4_address" not in out:
        raise ValueError(f"port {port['id']} has no IPv4 address (a Docker network has an IPv4 pool)")
    return out


class DockerRuntime:
    def __init__(self, client: docker.DockerClient, driver: str = "netbay") -> None:
        self.client, self.driver = client, driver

    def ensure_network(self, network: dict[str, Any], subnets: Sequence[dict[str, Any]]) -> str:
        """The Docker network of ``network`` (made once; a concurrent maker is fine), with a
        pool on each of ``subnets`` (one per family: an IPv6 one makes it dual-stack)."""
        name = network["id"]
        try:
            self.client.networks.get(name)
            return name
        except NotFound:
            pass
        pools = [IPAMPool(subnet=s["cidr"], gateway=s.get("gateway_ip") or None) for s in subnets]
        options = {"netbay.subnet.v6" if ":" in s["cidr"] else "netbay.subnet": s["id"] for s in subnets}
        try:
            self.client.networks.create(
                name, driver=self.driver, check_duplicate=True, options={"netbay.network": network["id"]},
                enable_ipv6=any(":" in s["cidr"] for s in subnets),
                ipam=IPAMConfig(driver=self.driver, pool_configs=pools, options=options))
        except APIError as exc:
            if exc.status_code != 409:  # made meanwhile by another caller
                raise
        return name

    def ensure_cluster_network(self, name: str, cluster: str, node: str) -> str:
        """The Docker network placing containers on ``node`` of ``cluster`` (the plugin plugs each
        as a pod; Docker's null IPAM: the node's lease gives the addresses)."""
        try:
            self.client.networks.get(name)
            return name
        except NotFound:
            pass
        try:
            self.client.networks.create(name, driver=self.driver, check_duplicate=True,
                                        options={"netbay.cluster": cluster, "netbay.node": node},
                                        ipam=IPAMConfig(driver="null"))
        except APIError as exc:
            if exc.status_code != 409:
                raise
        return name

    def endpoint_id(self, container_id: str, network: str) -> str:
        """Docker's EndpointID of ``container_id`` on ``network`` ("" if not joined)."""
        nets = self.client.api.inspect_container(container_id)["NetworkSettings"]["Networks"] or {}
        return (nets.get(network) or {}).get("EndpointID") or ""

    def remove_network(self, network_id: str) -> bool:
        try:
            self.client.networks.get(network_id).remove()
        except NotFound:
            return False
        return True

    def run(self, image: str, command: list[str] | str | None, port: dict[str, Any] | str, *,
            name: str | None = None, start: bool = True, **create: Any) -> str:
        """Create (and start, unless ``start=False``) a container whose ``eth0`` is ``port``; returns its id.
        ``port`` may instead name a Docker network whose driver chooses the address (a cluster node's)."""
        api = self.client.api
        if isinstance(port, str):
            net, endpoint = port, api.create_endpoint_config()
        else:
            net, endpoint = port["network_id"], api.create_endpoint_config(**_addresses(port))
            create["mac_address"] = port["mac_address"]
        cid = api.create_container(
            image, command, name=name, host_config=api.create_host_config(network_mode=net),
            networking_config=api.create_networking_config({net: endpoint}), **create)["Id"]
        if start:
            self._start(cid)
        return cid

    def sandbox(self, image: str, port: dict[str, Any], *, name: str, labels: dict[str, str],
                hostname: str = "") -> str:
        """Start a sandbox holding the network namespace on ``port`` (Zun's ``zun-sandbox-<uuid>``):
        a process that only waits, so an app container joined to it can stop, restart or be
        replaced without Docker leaving the network (no plugin call, same address and MAC)."""
        create: dict[str, Any] = {"labels": labels}
        if hostname:
            create["hostname"] = hostname  # Docker refuses a hostname with --net=container:
        return self.run(image, SANDBOX_COMMAND, port, name=name, **create)

    def app(self, sandbox_id: str, image: str, command: list[str] | str | None, *, name: str,
            start: bool = True, host: dict[str, Any] | None = None, **create: Any) -> str:
        """Create (and start) a container in ``sandbox_id``'s network namespace (``--net=container:``);
        ``host``: more of Docker's host config (limits, restart policy, binds)."""
        api = self.client.api
        config = api.create_host_config(network_mode=f"container:{sandbox_id}", **(host or {}))
        cid = api.create_container(image, command, name=name, host_config=config, **create)["Id"]
        if start:
            self._start(cid)
        return cid

    def _start(self, cid: str) -> None:
        """Start a container just made; one Docker refuses to start goes again."""
        try:
            self.client.api.start(cid)
        except APIError:
            self.client.api.remove_container(cid, force=True)
            raise

    def find(self, name: str) -> dict[str, Any] | None:
        """Docker's inspect of the container named ``name`` (None: there is none)."""
        try:
            return self.client.api.inspect_container(name)
        except NotFound:
            return None

    def ensure_running(self, container_id: str) -> None:
        if not self.client.api.inspect_container(container_id)["State"]["Running"]:
            self.client.api.start(container_id)

    def connect(self, container_id: str, port: dict[str, Any]) -> None:
        """Attach one more port (its network's Docker network must exist)."""
        self.client.api.connect_container_to_network(container_id, port["network_id"], **_addresses(port))

    def disconnect(self, container_id: str, network_id: str) -> None:
        self.client.api.disconnect_container_from_network(container_id, network_id)

    def remove(self, container_id: str) -> None:
        try:
            self.client.api.remove_container(container_id, force=True)
        except NotFound:
            pass


__all__ = ["DockerRuntime"]
