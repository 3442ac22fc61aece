"""netbay's own network service behind the seam, called in-process.

Each call runs the same steps as the matching Neutron route in
``netbay.api.network`` — member validation, quota, the resource's rules, the
change log the dataplane follows — in one retried transaction, without an HTTP
hop or a token check (the caller's identity is the ``Context`` given here).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from netbay.backends.seam import EMBEDDED
from netbay.context import Context
from netbay.errors import BadRequest, NotFound
from netbay.network.bodies import validate
from netbay.network.quotas import enforce_create
from netbay.network.registry import RESOURCES, ROUTERS
from netbay.network.resource import ListQuery, Resource, valid_tag
from netbay.store.db import Store

_BY_MEMBER: dict[str, Resource] = {r.member: r for r in RESOURCES}


class EmbeddedBackend:
    """The embedded network service, acting for ``context`` (netbay itself by default)."""

    name = "embedded"
    traits = EMBEDDED

    def __init__(self, store: Store, context: Context | None = None) -> None:
        self.store = store
        self.context = context or Context.admin()

    def for_context(self, context: Context) -> EmbeddedBackend:
        """The same backend acting for another identity (a request's caller)."""
        return EmbeddedBackend(self.store, context)

    @property
    def project_id(self) -> str:
        """The project whose objects this backend makes (its caller's)."""
        return self.context.project_id

    # -- CRUD ------------------------------------------------------------------------------

    def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]:
        resource, ctx = _resource(member), self.context
        parsed = validate(dict(body), resource, "POST")

        def run(s):  # noqa: ANN001, ANN202
            enforce_create(s, ctx, member, [parsed])
            return resource.for_caller(ctx, resource.rendered(s, resource.create(s, ctx, parsed)))

        return self.store.retrying(run)  # type: ignore[return-value]

    def show(self, member: str, obj_id: str) -> dict[str, Any]:
        resource = _resource(member)
        resource.before_read(self.store, self.context, {})
        with self.store.read() as s:
            return resource.show(s, self.context, obj_id, [])

    def list(self, member: str, **filters: Any) -> list[dict[str, Any]]:
        resource = _resource(member)
        query = ListQuery(filters={k: _values(v) for k, v in filters.items()}, fields=[], sort=[],
                          limit=None, marker=None)
        resource.before_read(self.store, self.context, query.filters)
        with self.store.read() as s:
            return resource.list(s, self.context, query).items

    def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        resource, ctx = _resource(member), self.context
        if resource.update_body is None:
            raise BadRequest(f"{member} cannot be updated")
        parsed = validate(dict(body), resource, "PUT")
        return self.store.retrying(  # type: ignore[return-value]
            lambda s: resource.for_caller(ctx, resource.rendered(s, resource.update(s, ctx, obj_id, parsed))))

    def delete(self, member: str, obj_id: str) -> None:
        resource = _resource(member)
        with self.store.write() as s:
            resource.delete(s, self.context, obj_id)

    # -- beyond CRUD -----------------------------------------------------------------------

    def add_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                             port_id: str | None = None) -> dict[str, Any]:
        info = _interface(subnet_id, port_id)
        return self.store.retrying(  # type: ignore[return-value]
            lambda s: ROUTERS.add_interface(s, self.context, router_id, info))

    def remove_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                                port_id: str | None = None) -> dict[str, Any]:
        info = _interface(subnet_id, port_id)
        return self.store.retrying(  # type: ignore[return-value]
            lambda s: ROUTERS.remove_interface(s, self.context, router_id, info))

    def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]:
        resource = _resource(member)
        checked = [valid_tag(t) for t in tags]
        with self.store.write() as s:
            obj = resource.get_owned(s, self.context, obj_id)
            result = resource.set_tags(s, obj, checked)
            resource.record(s, obj, "update")
        return result

    def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        self._change_tags(member, obj_id, lambda tags: tags + [valid_tag(tag)] if tag not in tags else tags)

    def remove_tag(self, member: str, obj_id: str, tag: str) -> None:
        def without(tags: list[str]) -> list[str]:
            if tag not in tags:
                raise NotFound(f"Tag {tag} could not be found.", kind="TagNotFound")
            return [t for t in tags if t != tag]

        self._change_tags(member, obj_id, without)

    def _change_tags(self, member: str, obj_id: str, change: Any) -> None:
        resource = _resource(member)
        with self.store.write() as s:
            obj = resource.get_owned(s, self.context, obj_id)
            resource.set_tags(s, obj, change(resource.tags_of(s, [obj.id])[obj.id]))
            resource.record(s, obj, "update")

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "database": self.store.engine.url.render_as_string(hide_password=True)}


def _resource(member: str) -> Resource:
    try:
        return _BY_MEMBER[member]
    except KeyError:
        raise BadRequest(f"unknown network resource {member!r}") from None


def _values(value: Any) -> list[str]:
    """A list filter's values as the query string would carry them."""
    items = value if isinstance(value, (list, tuple, set)) else [value]
    return [str(v).lower() if isinstance(v, bool) else str(v) for v in items]


def _interface(subnet_id: str | None, port_id: str | None) -> dict[str, str]:
    return {k: v for k, v in (("subnet_id", subnet_id), ("port_id", port_id)) if v}
