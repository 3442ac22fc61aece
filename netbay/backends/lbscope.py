"""A cloud's Octavia as one project sees it, through netbay's service credentials.

The load-balancer half of :mod:`netbay.backends.cloudscope` (which says why netbay
acts with the clouds.yaml credentials and names the project rather than with the
caller's token): creates carry the project in ``project_id``, as Octavia lets an
admin make objects for another project; lists are filtered to it server-side;
any call on another project's object — or under another project's load
balancer or pool — is refused as Octavia refuses it, 403 with its policy text
(Octavia checks the object's project, it does not hide it as Neutron does).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from netbay.errors import Forbidden

# Octavia's ``PolicyForbidden`` wording (netbay's own Octavia API says the same).
DENIED = "Policy does not allow this request to be performed."
# A create's parent reference -> the kind it names.
_PARENTS = {"loadbalancer_id": "loadbalancer", "listener_id": "listener", "pool_id": "pool",
            "default_pool_id": "pool"}


class ProjectScopedLoadBalancers:
    """``lbs`` (a :class:`netbay.backends.lbcloud.CloudLoadBalancers`) acting for ``project_id``."""

    name = "openstack"

    def __init__(self, lbs: Any, project_id: str) -> None:
        if not project_id:
            raise ValueError("a project-scoped backend needs a project id")
        self.inner = lbs
        self.conn = lbs.conn
        self.project_id = project_id

    def create(self, kind: str, body: Mapping[str, Any], *, parent: str | None = None) -> dict[str, Any]:
        body = dict(body)
        if body.get("project_id") not in (None, self.project_id):
            raise Forbidden(DENIED)
        if parent:
            self.show("pool", parent)
        for key, ref in _PARENTS.items():
            if body.get(key):
                self.show(ref, body[key])
        body["project_id"] = self.project_id
        return self.inner.create(kind, body, parent=parent)

    def show(self, kind: str, obj_id: str, *, parent: str | None = None) -> dict[str, Any]:
        if parent:
            self.show("pool", parent)
        obj = self.inner.show(kind, obj_id, parent=parent)
        if obj.get("project_id") != self.project_id:
            raise Forbidden(DENIED)
        return obj

    def list(self, kind: str, *, parent: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        if parent:
            self.show("pool", parent)
        if filters.get("project_id") not in (None, self.project_id):
            raise Forbidden(DENIED)
        return self.inner.list(kind, parent=parent, **{**filters, "project_id": self.project_id})

    def update(self, kind: str, obj_id: str, body: Mapping[str, Any], *,
               parent: str | None = None) -> dict[str, Any]:
        self.show(kind, obj_id, parent=parent)
        return self.inner.update(kind, obj_id, body, parent=parent)

    def delete(self, kind: str, obj_id: str, *, parent: str | None = None, cascade: bool = False) -> None:
        self.show(kind, obj_id, parent=parent)
        self.inner.delete(kind, obj_id, parent=parent, cascade=cascade)

    def replace_members(self, pool_id: str, members: builtins.list[Mapping[str, Any]]) -> None:
        self.show("pool", pool_id)
        self.inner.replace_members(pool_id, members)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "project_id": self.project_id}
