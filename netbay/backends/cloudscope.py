"""A cloud's Neutron as one project sees it, through netbay's service credentials.

Why service credentials and an explicit ``project_id`` (kuryr's way) rather than
the caller's token or a Keystone trust (Magnum's): netbay's cluster conductor and
container jobs run after the user's request has returned, when the user's token
may have expired, so the token alone cannot carry a build; a trust needs netbay's
clouds.yaml user to be a trustee every caller delegates to (a trust made per
cluster, stored and revoked with it). The clouds.yaml credentials are the
operator's service account; with Neutron's admin role they create in any
project by naming it (``project_id`` in the body), and this wrapper keeps what
such an admin would see and touch to what a member of the project may:

- creates carry the project (another project in a body is refused as Neutron
  refuses it to a non-admin), and the network, floating network or security
  group they name must be one the project sees (404 otherwise);
- lists are filtered server-side to the project's own objects plus what
  Neutron shows every project: shared and external networks, subnets on
  networks it sees, shared subnet pools, ports on its own networks, rules in
  its own groups (networks shared only by an RBAC policy are not followed);
  a list of networks, subnet pools, subnets or ports narrowed by id, tags or
  description (a subnet's also by network, a port's by device) is one query of
  every project's, filtered here by the same rule (a parent looked up once per list);
- shows, updates, deletes and tag calls on an object the project cannot see
  answer Neutron's 404; on one it sees but does not own (a shared network), 403.

A caller with the admin role (``for_context`` of an admin ``Context``) is not
filtered, as Neutron filters no admin; its creates default to its project.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from netbay.backends.seam import CLOUD
from netbay.errors import BadRequest, NotFound, not_found, policy_refused

CHUNK = 50        # ids per list query (a URL carries them as repeated parameters)
# Members whose visibility the object tells, from its own attributes (owner, shared,
# external) or its network's, and the filters that keep a list of every project's small
# (not a name: many projects name a network "private"): such a list is one query,
# filtered here, instead of one per view (a cluster's pass lists its networks and
# subnets by tag and mark, a segment's subnets by network).
_OWN_MARKS = frozenset({"id", "tags", "description"})
_ONE_QUERY = {
    "network": _OWN_MARKS, "subnetpool": _OWN_MARKS,
    "subnet": _OWN_MARKS | {"network_id"},   # a network has few subnets
    "port": _OWN_MARKS | {"device_id"},      # not by network: a shared one has every project's ports
}
# Members a project may change when it sees them, owned or not (Neutron's network-owner
# and group-owner rules): a port on its own network, a rule in its own group.
_OWNED_WHEN_SEEN = ("port", "security_group_rule")
# What a create names, per member: attribute -> the member the project must see (404 else).
_REFERENCES = {
    "subnet": {"network_id": "network", "subnetpool_id": "subnetpool"},
    "port": {"network_id": "network"},
    "floatingip": {"floating_network_id": "network", "port_id": "port"},
    "security_group_rule": {"security_group_id": "security_group", "remote_group_id": "security_group"},
}


class ProjectScoped:
    """``backend`` (an :class:`netbay.backends.openstack.OpenStackBackend`) acting for
    ``project_id``: as a member of it, or (``admin``) as an admin scoped to it."""

    name = "openstack"
    traits = CLOUD

    def __init__(self, backend: Any, project_id: str, *, admin: bool = False) -> None:
        if not project_id:
            raise ValueError("a project-scoped backend needs a project id")
        self.inner = backend
        self.conn = backend.conn
        self.project_id = project_id
        self.admin = admin

    def for_context(self, context: Any) -> Any:
        return self.inner.for_context(context)

    def for_project(self, project_id: str) -> ProjectScoped:
        return self.inner.for_project(project_id)

    # -- CRUD ------------------------------------------------------------------------------

    def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]:
        body = dict(body)
        named = body.get("project_id") or body.get("tenant_id")
        if not self.admin:
            if named and named != self.project_id:
                raise BadRequest("Specifying 'project_id' other than the authenticated project in request "
                                 "requires admin privileges")
            self._check_references(member, body)
        if not named:
            body["project_id"] = self.project_id
        return self.inner.create(member, body)

    def show(self, member: str, obj_id: str) -> dict[str, Any]:
        obj = self.inner.show(member, obj_id)   # the cloud's own 404 where it has none
        if not self._sees(member, obj):
            raise not_found(member, obj_id)
        return obj

    def list(self, member: str, **filters: Any) -> list[dict[str, Any]]:
        if self.admin:
            return self.inner.list(member, **filters)
        if _ONE_QUERY.get(member, frozenset()) & filters.keys():
            parents: dict[str, dict[str, Any] | None] = {}
            return [obj for chunk in _chunks(dict(filters)) for obj in self.inner.list(member, **chunk)
                    if self._sees(member, obj, parents)]
        seen: dict[str, dict[str, Any]] = {}
        for view in self._views(member):
            query = _within(filters, view)
            if query is None:
                continue
            for chunk in _chunks(query):
                for obj in self.inner.list(member, **chunk):
                    seen.setdefault(obj["id"], obj)
        return list(seen.values())

    def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._owned(member, obj_id, "update")
        return self.inner.update(member, obj_id, body)

    def delete(self, member: str, obj_id: str) -> None:
        self._owned(member, obj_id, "delete")
        self.inner.delete(member, obj_id)

    # -- beyond CRUD -----------------------------------------------------------------------

    def add_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                             port_id: str | None = None) -> dict[str, Any]:
        self._owned("router", router_id, "add_router_interface")
        self._refs(subnet_id, port_id)
        return self.inner.add_router_interface(router_id, subnet_id=subnet_id, port_id=port_id)

    def remove_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                                port_id: str | None = None) -> dict[str, Any]:
        self._owned("router", router_id, "remove_router_interface")
        return self.inner.remove_router_interface(router_id, subnet_id=subnet_id, port_id=port_id)

    def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]:
        self._owned(member, obj_id, "update")
        return self.inner.set_tags(member, obj_id, tags)

    def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        self._owned(member, obj_id, "update")
        self.inner.add_tag(member, obj_id, tag)

    def remove_tag(self, member: str, obj_id: str, tag: str) -> None:
        self._owned(member, obj_id, "update")
        self.inner.remove_tag(member, obj_id, tag)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "project_id": self.project_id}

    # -- what the project sees -------------------------------------------------------------

    def _sees(self, member: str, obj: Mapping[str, Any],
              parents: dict[str, dict[str, Any] | None] | None = None) -> bool:
        """Neutron's read rule for a member of the project (the list views, for one object);
        ``parents`` keeps the parent objects looked up, for the next object of a list."""
        if self.admin or obj.get("project_id") == self.project_id:
            return True
        if member == "network":
            return bool(obj.get("shared") or obj.get("router:external"))
        if member == "subnetpool":
            return bool(obj.get("shared"))
        parent = {"subnet": ("network", "network_id"), "port": ("network", "network_id"),
                  "security_group_rule": ("security_group", "security_group_id")}.get(member)
        if parent is None or not obj.get(parent[1]):
            return False
        parents = {} if parents is None else parents
        key = f"{parent[0]}/{obj[parent[1]]}"
        if key not in parents:
            try:
                parents[key] = self.inner.show(parent[0], obj[parent[1]])
            except NotFound:
                parents[key] = None
        owner = parents[key]
        if owner is None:
            return False
        return owner.get("project_id") == self.project_id or (member == "subnet" and self._sees("network", owner))

    def _views(self, member: str) -> builtins.list[dict[str, Any]]:
        """Server-side filters whose union is what the project sees of ``member``."""
        own = {"project_id": self.project_id}
        if member == "network":
            return [own, {"is_shared": True}, {"is_router_external": True}]
        if member == "subnetpool":
            return [own, {"is_shared": True}]
        if member == "subnet":
            return [own, {"network_id": [n["id"] for n in self.list("network")]}]
        if member == "port":
            return [own, {"network_id": [n["id"] for n in self.inner.list("network", **own)]}]
        if member == "security_group_rule":
            return [own, {"security_group_id": [g["id"] for g in self.inner.list("security_group", **own)]}]
        return [own]

    def _owned(self, member: str, obj_id: str, action: str) -> dict[str, Any]:
        """An object the project may change: seen (404 else) and its own (403 else)."""
        obj = self.show(member, obj_id)
        if self.admin or obj.get("project_id") == self.project_id or member in _OWNED_WHEN_SEEN:
            return obj
        raise policy_refused(f"{action}_{member}")  # Neutron's own refusal of another project's object

    def _check_references(self, member: str, body: Mapping[str, Any]) -> None:
        """What a create names must be the project's to use, as Neutron checks a member's."""
        shown: set[tuple[str, str]] = set()   # a rule's remote group is often its own group: shown once
        for key, ref in _REFERENCES.get(member, {}).items():
            if body.get(key) and (ref, body[key]) not in shown:
                shown.add((ref, body[key]))
                found = self.show(ref, body[key])
                if member == "port" and not found.get("shared") and found.get("project_id") != self.project_id:
                    raise policy_refused("create_port")  # as Neutron refuses a member's port there
        if member == "port":
            for group in body.get("security_groups") or ():
                self.show("security_group", group)
        gateway = (body.get("external_gateway_info") or {}).get("network_id") if member == "router" else None
        if gateway:
            self.show("network", gateway)

    def _refs(self, subnet_id: str | None, port_id: str | None) -> None:
        if subnet_id:
            self.show("subnet", subnet_id)
        if port_id:
            self._owned("port", port_id, "update")


def _within(filters: Mapping[str, Any], view: Mapping[str, Any]) -> dict[str, Any] | None:
    """The caller's filters narrowed to one view; None when nothing can match both."""
    query = dict(filters)
    for key, value in view.items():
        if key not in query:
            if isinstance(value, list) and not value:
                return None
            query[key] = value
            continue
        wanted = {_text(v) for v in _many(query[key])} & {_text(v) for v in _many(value)}
        if not wanted:
            return None
        query[key] = sorted(wanted) if len(wanted) > 1 else wanted.pop()
    return query


def _chunks(query: dict[str, Any]) -> list[dict[str, Any]]:
    """One query per ``CHUNK`` ids of its one long id list (a URL has a length limit)."""
    for key, value in query.items():
        if isinstance(value, list) and len(value) > CHUNK and key.endswith("_id"):
            return [{**query, key: value[i:i + CHUNK]} for i in range(0, len(value), CHUNK)]
    return [query]


def _many(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
