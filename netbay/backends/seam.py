"""The network backend seam itself: ``NetworkBackend``, ``Traits`` and Neutron's members.

Below every backend (they import it) and re-exported by :mod:`netbay.backends`,
which also opens a backend by name (see the package's docstring).
"""


from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# Neutron's member names, in an order that creates dependencies first.
MEMBERS = ("network", "subnetpool", "subnet", "security_group", "security_group_rule", "router", "port",
           "floatingip")


@dataclass(frozen=True)
class Traits:
    """What a backend is, as far as code above the seam must know."""

    #: netbay's own network service: its sandboxes, load balancers and dataplane agent stand
    #: beside it (a cloud's Neutron has its own Nova, Octavia and agents, or none).
    own_services: bool
    #: Ports are bound by whoever makes them naming ``binding:host_id`` (a cloud's ML2, as
    #: Zun does); False: netbay's agent binds the ports it wires.
    binds_host: bool
    #: ``device_owner`` of a container's port: netbay's dataplane wires ``compute:netbay``;
    #: on a cloud, Zun's kuryr driver's ``compute:kuryr``.
    container_owner: str


EMBEDDED = Traits(own_services=True, binds_host=False, container_owner="compute:netbay")
CLOUD = Traits(own_services=False, binds_host=True, container_owner="compute:kuryr")


@runtime_checkable
class NetworkBackend(Protocol):
    """What a controller may ask of the network, whoever serves it."""

    name: str
    traits: Traits

    def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create one ``member`` from a Neutron request body; the created object."""

    def show(self, member: str, obj_id: str) -> dict[str, Any]:
        """One object, or ``NotFound``."""

    def list(self, member: str, **filters: Any) -> builtins.list[dict[str, Any]]:
        """Objects matching Neutron's list filters (``network_id=…``, ``tags=…``)."""

    def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Change an object; the updated object."""

    def delete(self, member: str, obj_id: str) -> None:
        """Delete an object, or ``NotFound``."""

    def add_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                             port_id: str | None = None) -> dict[str, Any]:
        """Plug a router into a subnet (or onto a port); Neutron's interface info."""

    def remove_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                                port_id: str | None = None) -> dict[str, Any]:
        """Unplug it again."""

    def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]:
        """Replace an object's tags (the sweep-by-tag that cleans up after a cluster)."""

    def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        """Add one tag, leaving the others (another writer's tags on a shared network stay)."""

    def remove_tag(self, member: str, obj_id: str, tag: str) -> None:
        """Remove one tag; ``NotFound`` if the object does not carry it."""

    def describe(self) -> dict[str, Any]:
        """Which backend this is and what it reaches (``netbay doctor``)."""


__all__ = ["CLOUD", "EMBEDDED", "MEMBERS", "NetworkBackend", "Traits"]
