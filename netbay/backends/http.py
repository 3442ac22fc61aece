"""netbay's own network service behind the seam, reached over its Neutron API.

This is the embedded backend as the cluster builder uses it. Why HTTP and not
:class:`netbay.backends.embedded.EmbeddedBackend` in-process: the builder acts
with a token, so every call passes the API's whole path — Keystone-style
policy on the token's roles, the owner project's quotas, Neutron's request
validation — and a refusal carries the API's own error text (and
``NeutronError.type``) into a cluster's ``status_reason``, exactly as before
the seam. The in-process backend skips the API's policy layer (it acts as
whatever ``Context`` it is given), which is right for callers inside the
server, not for a builder standing in for a user's Heat.

Failures come out as ``netbay.errors`` (status, kind, message), as from the
``openstack`` backend, so callers above the seam handle one kind of error.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from netbay import errors
from netbay.backends.seam import EMBEDDED
from netbay.client import NET, Api, ApiError

# Neutron member -> its collection in the URL (and, with "-" as "_", in list bodies).
COLLECTIONS = {
    "network": "networks", "subnet": "subnets", "subnetpool": "subnetpools", "port": "ports",
    "router": "routers", "floatingip": "floatingips", "security_group": "security-groups",
    "security_group_rule": "security-group-rules",
}


class HttpBackend:
    """netbay's Neutron API at ``api`` (an :class:`netbay.client.Api` with its token)."""

    name = "embedded"
    traits = EMBEDDED

    def __init__(self, api: Api) -> None:
        self.api = api

    def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("POST", _path(member), {member: dict(body)})[member]

    def show(self, member: str, obj_id: str) -> dict[str, Any]:
        return self._call("GET", f"{_path(member)}/{obj_id}")[member]

    def list(self, member: str, **filters: Any) -> list[dict[str, Any]]:
        params = {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) and k.endswith("tags") else v
                  for k, v in filters.items()}
        return self._call("GET", _path(member), **params)[COLLECTIONS[member].replace("-", "_")]

    def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("PUT", f"{_path(member)}/{obj_id}", {member: dict(body)})[member]

    def delete(self, member: str, obj_id: str) -> None:
        self._call("DELETE", f"{_path(member)}/{obj_id}")

    def create_bulk(self, member: str, bodies: builtins.list[Mapping[str, Any]]) -> builtins.list[dict[str, Any]]:
        """Neutron's bulk create: one request, all or nothing (:mod:`netbay.backends.batch`)."""
        key = COLLECTIONS[member].replace("-", "_")
        return self._call("POST", _path(member), {key: [dict(b) for b in bodies]})[key]

    def batch(self, ops: builtins.list[Mapping[str, Any]]) -> builtins.list[Any]:
        """netbay's ``POST /v2.0/batch``: the writes in one transaction (:mod:`netbay.backends.batch`)."""
        return self._call("POST", f"{NET}/batch", {"batch": list(ops)})["batch"]

    def add_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                             port_id: str | None = None) -> dict[str, Any]:
        return self._call("PUT", f"{NET}/routers/{router_id}/add_router_interface", _interface(subnet_id, port_id))

    def remove_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                                port_id: str | None = None) -> dict[str, Any]:
        return self._call("PUT", f"{NET}/routers/{router_id}/remove_router_interface",
                          _interface(subnet_id, port_id))

    def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]:
        return self._call("PUT", f"{_path(member)}/{obj_id}/tags", {"tags": list(tags)})["tags"]

    def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        self._call("PUT", f"{_path(member)}/{obj_id}/tags/{quote(tag, safe='')}")

    def remove_tag(self, member: str, obj_id: str, tag: str) -> None:
        self._call("DELETE", f"{_path(member)}/{obj_id}/tags/{quote(tag, safe='')}")

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "network": self.api.url + NET}

    def close(self) -> None:
        self.api.close()

    def _call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        return translated(lambda: self.api.call(method, path, body, **params))


def translated(fn: Callable[[], Any]) -> Any:
    """Run an API call; its refusal becomes the matching ``netbay.errors`` (status, type, text)."""
    try:
        return fn()
    except ApiError as exc:
        raise errors.from_status(exc.status, exc.message, exc.kind) from exc
    except httpx.HTTPError as exc:  # no answer: said as the openstack backend says it
        err = errors.NetbayError(f"netbay API unreachable ({type(exc).__name__}: {exc or 'no answer'})",
                                 kind="Unreachable")
        err.status = 502
        raise err from exc


def _path(member: str) -> str:
    try:
        return f"{NET}/{COLLECTIONS[member]}"
    except KeyError:
        raise errors.BadRequest(f"unknown network resource {member!r}") from None


def _interface(subnet_id: str | None, port_id: str | None) -> dict[str, str]:
    return {k: v for k, v in (("subnet_id", subnet_id), ("port_id", port_id)) if v}
