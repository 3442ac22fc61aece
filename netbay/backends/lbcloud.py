"""A real cloud's Octavia behind the load-balancer seam, through openstacksdk.

Bodies go to the sdk's ``load_balancer`` proxy under Octavia's own attribute
names and results come back under them (``to_dict(original_names=True)``), so
callers see the JSON netbay's own API returns. The cloud's refusals become
``netbay.errors`` with the cloud's status and message (Octavia's
``faultstring``), as the network backend does.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

import openstack
from openstack import exceptions as sdk_errors

from netbay.backends.lbscope import ProjectScopedLoadBalancers
from netbay.backends.lbkinds import checked
from netbay.backends.openstack import plain, sdk_call

# Octavia kind -> the name openstacksdk's load_balancer proxy uses for it.
_SDK_NAME = {"loadbalancer": "load_balancer", "listener": "listener", "pool": "pool", "member": "member",
             "healthmonitor": "health_monitor"}
SERVICE_TYPE = "load-balancer"


def has_octavia(conn: openstack.connection.Connection) -> bool:
    """Whether the cloud's catalog lists a load-balancer service (Octavia)."""
    return bool(conn.has_service(SERVICE_TYPE))


class CloudLoadBalancers:
    """Octavia of the cloud ``cloud`` (clouds.yaml), or of an open ``connection``."""

    name = "openstack"

    def __init__(self, cloud: str | None = None, connection: openstack.connection.Connection | None = None,
                 **config: Any) -> None:
        self.conn = connection or openstack.connect(cloud=cloud, **config)
        self.lb = self.conn.load_balancer

    def for_project(self, project_id: str) -> Any:
        """This Octavia as a member of ``project_id`` sees it (:mod:`netbay.backends.lbscope`)."""
        return ProjectScopedLoadBalancers(self, project_id)

    def create(self, kind: str, body: Mapping[str, Any], *, parent: str | None = None) -> dict[str, Any]:
        make = getattr(self.lb, f"create_{_sdk(kind, parent)}")
        return sdk_call(lambda: plain(make(parent, **body) if kind == "member" else make(**body)))

    def show(self, kind: str, obj_id: str, *, parent: str | None = None) -> dict[str, Any]:
        get = getattr(self.lb, f"get_{_sdk(kind, parent)}")
        return sdk_call(lambda: plain(get(obj_id, parent) if kind == "member" else get(obj_id)))

    def list(self, kind: str, *, parent: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        method = getattr(self.lb, _sdk(kind, parent) + "s")
        query = {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in filters.items()}
        return sdk_call(lambda: [plain(o) for o in (method(parent, **query) if kind == "member"
                                                  else method(**query))])

    def update(self, kind: str, obj_id: str, body: Mapping[str, Any], *,
               parent: str | None = None) -> dict[str, Any]:
        change = getattr(self.lb, f"update_{_sdk(kind, parent)}")
        return sdk_call(lambda: plain(change(obj_id, parent, **body) if kind == "member"
                                    else change(obj_id, **body)))

    def delete(self, kind: str, obj_id: str, *, parent: str | None = None, cascade: bool = False) -> None:
        remove = getattr(self.lb, f"delete_{_sdk(kind, parent)}")
        if kind == "member":
            sdk_call(lambda: remove(obj_id, parent, ignore_missing=False))
        elif kind == "loadbalancer":
            sdk_call(lambda: remove(obj_id, ignore_missing=False, cascade=cascade))
        else:
            sdk_call(lambda: remove(obj_id, ignore_missing=False))

    def replace_members(self, pool_id: str, members: builtins.list[Mapping[str, Any]]) -> None:
        """Octavia's batch member update, which the sdk's proxy does not wrap: a PUT on the proxy."""
        checked("member", pool_id)

        def run() -> None:
            response = self.lb.put(f"/lbaas/pools/{pool_id}/members", json={"members": [dict(m) for m in members]})
            sdk_errors.raise_from_response(response)

        sdk_call(run)

    def close(self) -> None:
        self.conn.close()

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "load-balancer": sdk_call(lambda: self.lb.get_endpoint()),
                "project_id": sdk_call(lambda: self.conn.current_project_id)}


def _sdk(kind: str, parent: str | None) -> str:
    checked(kind, parent)
    return _SDK_NAME[kind]
