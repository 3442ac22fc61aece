"""netbay's own Octavia-compatible API behind the load-balancer seam.

Reached over HTTP with a token, as :class:`netbay.backends.http.HttpBackend`
reaches the network service (which says why HTTP and not in-process): the
caller's project, policy and quotas apply, and a refusal carries the API's own
text. Refusals come out as ``netbay.errors``, as from the ``openstack`` backend.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from netbay.client import LB, Api
from netbay.backends.http import translated
from netbay.backends.lbkinds import checked


class ApiLoadBalancers:
    """netbay's load-balancer API at ``api`` (an :class:`netbay.client.Api` with its token)."""

    name = "embedded"

    def __init__(self, api: Api) -> None:
        self.api = api

    def create(self, kind: str, body: Mapping[str, Any], *, parent: str | None = None) -> dict[str, Any]:
        return self._call("POST", _path(kind, parent), {kind: dict(body)})[kind]

    def show(self, kind: str, obj_id: str, *, parent: str | None = None) -> dict[str, Any]:
        return self._call("GET", f"{_path(kind, parent)}/{obj_id}")[kind]

    def list(self, kind: str, *, parent: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        params = {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in filters.items()}
        return self._call("GET", _path(kind, parent), **params)[checked(kind, parent)]

    def update(self, kind: str, obj_id: str, body: Mapping[str, Any], *,
               parent: str | None = None) -> dict[str, Any]:
        return self._call("PUT", f"{_path(kind, parent)}/{obj_id}", {kind: dict(body)})[kind]

    def delete(self, kind: str, obj_id: str, *, parent: str | None = None, cascade: bool = False) -> None:
        params = {"cascade": "true"} if cascade and kind == "loadbalancer" else {}
        self._call("DELETE", f"{_path(kind, parent)}/{obj_id}", **params)

    def replace_members(self, pool_id: str, members: builtins.list[Mapping[str, Any]]) -> None:
        self._call("PUT", _path("member", pool_id), {"members": [dict(m) for m in members]})

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "load-balancer": self.api.url + LB}

    def _call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        return translated(lambda: self.api.call(method, path, body, **params))


def _path(kind: str, parent: str | None) -> str:
    collection = checked(kind, parent)
    return f"{LB}/pools/{parent}/members" if kind == "member" else f"{LB}/{collection}"
