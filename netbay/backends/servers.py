"""The compute seam: the cluster builder boots a node as a server and never learns
whose Nova answers.

One implementation: a real cloud's Nova through openstacksdk's ``compute`` proxy
(:mod:`netbay.backends.novacloud`), where the cloud's catalog lists a ``compute``
service. Embedded nodes are netbay's own sandboxes (netbay's API, not this seam),
and on a cloud without Nova nodes are claims on their Neutron ports
(:mod:`netbay.coe.handlers.servers`).

It speaks Nova's vocabulary: bodies and results are Nova's inner JSON objects
(``{"name", "imageRef", "flavorRef", "networks": [{"port": …}], "metadata"}``), and
failures are ``netbay.errors`` exceptions with Nova's status and message. Nova boots
asynchronously (``BUILD`` → ``ACTIVE`` or ``ERROR``) and deletes asynchronously too:
:func:`active` and :func:`gone` wait, bounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from netbay.backends import poll
from netbay.errors import NotFound


@runtime_checkable
class ServerBackend(Protocol):
    """What the cluster builder may ask of a compute service."""

    name: str

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Boot one server from Nova's request body; the server as first answered (``BUILD``)."""

    def show(self, server_id: str) -> dict[str, Any]:
        """One server, or ``NotFound``."""

    def list(self, **filters: Any) -> list[dict[str, Any]]:
        """The project's servers (with details) matching Nova's list filters."""

    def delete(self, server_id: str) -> None:
        """Ask for a server's deletion, or ``NotFound``."""

    def flavor_id(self, ref: str) -> str:
        """A flavor's id from its name or id (Nova takes ids only)."""

    def image_id(self, ref: str) -> str:
        """An image's id from its name or id."""


def active(servers: ServerBackend, server_id: str, timeout: float) -> dict[str, Any]:
    """The server once it is ``ACTIVE`` (bounded by ``timeout``); ``ERROR`` raises with
    the server's fault, as Heat's ``OS::Nova::Server`` reports it."""
    server = _until(servers, server_id, timeout, lambda s: s.get("status") not in ("BUILD", None), "ACTIVE")
    if server["status"] != "ACTIVE":
        fault = (server.get("fault") or {}).get("message") or "no fault given"
        raise RuntimeError(f"server {server_id} went to {server['status']}: {fault}")
    return server


def gone(servers: ServerBackend, server_id: str, timeout: float) -> None:
    """Return once the server is gone (404 or ``DELETED``), bounded by ``timeout``: its
    ports are in use until then."""
    try:
        _until(servers, server_id, timeout, lambda s: s.get("status") == "DELETED", "gone")
    except NotFound:
        return


def _until(servers: ServerBackend, server_id: str, timeout: float, done: Any, what: str) -> dict[str, Any]:
    return poll.until(lambda: servers.show(server_id), done, timeout, first=0.05, cap=1.0,
                      late=lambda s: f"server {server_id} not {what} after {timeout:.0f}s (still {s.get('status')})")


def cloud_servers(net: Any) -> ServerBackend | None:
    """The cloud's Nova on the ``openstack`` network backend's connection, where its
    catalog lists a compute service; None otherwise."""
    from netbay.backends.novacloud import CloudServers, has_nova

    return CloudServers(connection=net.conn) if has_nova(net.conn) else None


__all__ = ["ServerBackend", "active", "cloud_servers", "gone"]
