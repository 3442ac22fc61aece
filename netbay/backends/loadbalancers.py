"""The load-balancer seam: controllers make load balancers, listeners, pools,
members and health monitors through ``LoadBalancerBackend`` and never learn
whose Octavia answers.

Two implementations, as for the network (:mod:`netbay.backends`):

- ``embedded`` — netbay's own Octavia-compatible API, over HTTP with a token
  (:mod:`netbay.backends.lbapi`), so every call passes the API's policy, quotas
  and validation as a user's would;
- ``openstack`` — a real cloud's Octavia through openstacksdk's
  ``load_balancer`` proxy (:mod:`netbay.backends.lbcloud`).

Both speak Octavia's vocabulary: ``kind`` is one of :data:`LB_KINDS`, bodies and
results are Octavia's inner JSON objects (``{"name": …, "vip_subnet_id": …}``,
not wrapped), ``parent`` is the pool id of a ``member`` (Octavia nests members
under pools), and failures are ``netbay.errors`` exceptions carrying the
backend's status and message. Octavia refuses changes to a tree while its load
balancer is ``PENDING_*`` (409): waiting and retrying is the caller's business.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from netbay.backends import poll
from netbay.backends.lbkinds import COLLECTIONS, LB_KINDS, checked


@runtime_checkable
class LoadBalancerBackend(Protocol):
    """What a controller may ask of load balancing, whoever serves it."""

    name: str

    def create(self, kind: str, body: Mapping[str, Any], *, parent: str | None = None) -> dict[str, Any]:
        """Create one object from Octavia's request body; the created object."""

    def show(self, kind: str, obj_id: str, *, parent: str | None = None) -> dict[str, Any]:
        """One object, or ``NotFound``."""

    def list(self, kind: str, *, parent: str | None = None, **filters: Any) -> list[dict[str, Any]]:
        """Objects matching Octavia's list filters (``name=…``, ``tags=[…]``)."""

    def update(self, kind: str, obj_id: str, body: Mapping[str, Any], *,
               parent: str | None = None) -> dict[str, Any]:
        """Change an object; the updated object."""

    def delete(self, kind: str, obj_id: str, *, parent: str | None = None, cascade: bool = False) -> None:
        """Delete an object (``cascade``: a load balancer with its whole tree), or ``NotFound``."""

    def replace_members(self, pool_id: str, members: builtins.list[Mapping[str, Any]]) -> None:
        """Make a pool's members exactly ``members`` (Octavia's ``PUT /pools/{id}/members``)."""

    def describe(self) -> dict[str, Any]:
        """Which backend this is and where it reaches."""


def open_lb_backend(kind: str, **options: Any) -> LoadBalancerBackend:
    """``embedded`` (``api=`` an :class:`netbay.client.Api`) or ``openstack``
    (``connection=`` an openstacksdk connection, or ``cloud=`` a clouds.yaml name)."""
    if kind == "embedded":
        from netbay.backends.lbapi import ApiLoadBalancers

        return ApiLoadBalancers(**options)
    if kind == "openstack":
        from netbay.backends.lbcloud import CloudLoadBalancers

        return CloudLoadBalancers(**options)
    raise ValueError(f"unknown load-balancer backend {kind!r}: choose embedded or openstack")


def settled(lbs: LoadBalancerBackend, lb_id: str, timeout: float) -> dict[str, Any]:
    """The load balancer once it has left ``PENDING_*`` (bounded by ``timeout``), as
    Heat's Octavia resources wait: Octavia refuses any change to its tree meanwhile
    (409, immutable). Whatever it settled at (``ACTIVE``, ``ERROR``) is the caller's
    to judge; ``NotFound`` when it is gone."""
    return poll.until(lambda: lbs.show("loadbalancer", lb_id),
                      lambda lb: not lb["provisioning_status"].startswith("PENDING_"), timeout, first=0.01, cap=0.25,
                      late=lambda lb: f"load balancer {lb_id} still {lb['provisioning_status']} after {timeout:.0f}s")


def cloud_load_balancers(net: Any) -> LoadBalancerBackend | None:
    """The cloud's Octavia on the ``openstack`` network backend's connection, where its
    catalog lists one, acting for the same project as ``net`` when that acts for one
    (:meth:`netbay.backends.openstack.OpenStackBackend.for_project`); None otherwise
    (no load balancers on such a cloud)."""
    from netbay.backends.cloudscope import ProjectScoped
    from netbay.backends.lbcloud import has_octavia

    if not has_octavia(net.conn):
        return None
    lbs = open_lb_backend("openstack", connection=net.conn)
    if isinstance(net, ProjectScoped) and not net.admin:
        return lbs.for_project(net.project_id)  # type: ignore[attr-defined]
    return lbs


__all__ = ["COLLECTIONS", "LB_KINDS", "LoadBalancerBackend", "checked", "cloud_load_balancers", "open_lb_backend",
           "settled"]
