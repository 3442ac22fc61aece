"""A real cloud's Nova behind the compute seam, through openstacksdk.

Bodies go to the sdk's ``compute`` proxy under Nova's own attribute names
(``imageRef``, ``flavorRef``: the sdk maps them) and results come back under them
(``to_dict(original_names=True)``). Names of flavors and images are looked up in
Nova (its flavors, and its image proxy at microversion 2.1), as Heat's
``OS::Nova::Server`` takes a name or an id. The cloud's refusals become
``netbay.errors`` with Nova's status and message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openstack

from netbay.backends.openstack import plain, sdk_call

SERVICE_TYPE = "compute"


def has_nova(conn: openstack.connection.Connection) -> bool:
    """Whether the cloud's catalog lists a compute service (Nova)."""
    return bool(conn.has_service(SERVICE_TYPE))


class CloudServers:
    """Nova of the cloud behind an open openstacksdk ``connection``."""

    name = "openstack"

    def __init__(self, connection: openstack.connection.Connection) -> None:
        self.conn = connection
        self.compute = connection.compute

    def create(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return sdk_call(lambda: plain(self.compute.create_server(**body)))

    def show(self, server_id: str) -> dict[str, Any]:
        return sdk_call(lambda: plain(self.compute.get_server(server_id)))

    def list(self, **filters: Any) -> list[dict[str, Any]]:
        return sdk_call(lambda: [plain(s) for s in self.compute.servers(details=True, **filters)])

    def delete(self, server_id: str) -> None:
        sdk_call(lambda: self.compute.delete_server(server_id, ignore_missing=False))

    def flavor_id(self, ref: str) -> str:
        return sdk_call(lambda: self.compute.find_flavor(ref, ignore_missing=False).id)

    def image_id(self, ref: str) -> str:
        return sdk_call(lambda: self.compute.find_image(ref, ignore_missing=False).id)
