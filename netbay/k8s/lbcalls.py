"""The load-balancer seam's methods over netbay's own Octavia API (``Api``).

The mapping controller's Services speak the shared interface of
``netbay.backends.loadbalancers.LoadBalancerBackend`` (``create / show / list /
update / delete / replace_members / describe`` by kind — ``loadbalancer``,
``listener``, ``pool``, ``member``, ``healthmonitor`` —, inner Octavia objects,
``netbay.errors`` failures). This adapter is that interface for netbay's embedded
load balancers, reached as today over their API, until the seam's own embedded
implementation replaces it (``open_lb_backend("embedded", api=…)``: the same
calls). Nothing here knows about Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netbay.backends.apiclient import LB, Api
from netbay.backends.http import translated

LB_KINDS = ("loadbalancer", "listener", "pool", "member", "healthmonitor")


class ApiLoadBalancers:
    """netbay's Octavia-compatible API at ``api``."""

    name = "embedded"

    def __init__(self, api: Api) -> None:
        self.api = api

    def create(self, kind: str, body: Mapping[str, Any], *, parent: str | None = None) -> dict[str, Any]:
        return self._call("POST", _path(kind, parent), {kind: dict(body)})[kind]

    def show(self, kind: str, obj_id: str, *, parent: str | None = None) -> dict[str, Any]:
        return self._call("GET", f"{_path(kind, parent)}/{obj_id}")[kind]

    def list(self, kind: str, *, parent: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        params = {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in filters.items()}
        return self._call("GET", _path(kind, parent), **params)[f"{kind}s"]

    def update(self, kind: str, obj_id: str, body: Mapping[str, Any], *,
               parent: str | None = None) -> dict[str, Any]:
        return self._call("PUT", f"{_path(kind, parent)}/{obj_id}", {kind: dict(body)})[kind]

    def delete(self, kind: str, obj_id: str, *, parent: str | None = None, cascade: bool = False) -> None:
        params = {"cascade": "true"} if cascade else {}
        self._call("DELETE", f"{_path(kind, parent)}/{obj_id}", **params)

    def replace_members(self, pool_id: str, members: list[Mapping[str, Any]]) -> None:
        """Octavia's batch member update (``PUT /pools/{id}/members``)."""
        self._call("PUT", f"{LB}/pools/{pool_id}/members", {"members": [dict(m) for m in members]})

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "load_balancer": self.api.url + LB}

    def _call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        return translated(lambda: self.api.call(method, path, body, **params))


def _path(kind: str, parent: str | None) -> str:
    if kind not in LB_KINDS:
        raise ValueError(f"unknown load-balancer kind {kind!r}")
    if kind == "member":
        if not parent:
            raise ValueError("a member's calls need its pool (parent=)")
        return f"{LB}/pools/{parent}/members"
    return f"{LB}/{kind}s"


__all__ = ["ApiLoadBalancers"]
