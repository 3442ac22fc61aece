"""Who may call what: each API family's default policy, by role, before any handler runs.

Keystone's default roles imply one another (admin → member → reader; see
``Identity.roles_of``), so the rules below only ask for the weakest role that
suffices:

- network (Neutron's defaults): ``reader`` reads, ``member`` writes its
  project's resources, ``admin`` everything; refusals are Neutron's
  ``PolicyNotAuthorized`` (``rule:create_network is disallowed by policy``).
- container-infra (Magnum's defaults): the same, with Magnum's
  ``Policy doesn't allow cluster:create to be performed.``; the conductor list
  (``magnum-service:get_all``) is admin-only, as in Magnum.
- load-balancer (Octavia's defaults, both of its personas): reads need
  ``reader`` (project-scoped, the "new defaults") or one of
  ``load-balancer_observer`` / ``load-balancer_member`` /
  ``load-balancer_global_observer``; writes need ``member`` or
  ``load-balancer_member``; ``admin`` and ``load-balancer_admin`` are the
  load-balancer admin, and a global observer reads every project. Refusals are
  Octavia's ``Policy does not allow this request to be performed.``
- compute (``os-keypairs``) and netbay's own APIs: reads need ``reader``,
  writes ``member``.
- identity: left to the identity API.

Which project an object belongs to stays the resource layer's business (another
project's objects are 404 there); this module decides only by role and method.
The context a family's rule returns is what its handlers see: the two Octavia
roles with cross-project reach act as ``admin`` inside the load-balancer API
only.
"""

from __future__ import annotations

from dataclasses import replace

from netbay.context import Context
from netbay.errors import Forbidden, policy_refused
from netbay.identity.roles import effective

READS = frozenset({"GET", "HEAD", "OPTIONS"})

LB_ADMIN = frozenset({"admin", "load-balancer_admin"})
LB_READERS = frozenset({"reader", "load-balancer_observer", "load-balancer_member"})
LB_WRITERS = frozenset({"member", "load-balancer_member"})
LB_GLOBAL_OBSERVER = "load-balancer_global_observer"

OCTAVIA_DENIED = "Policy does not allow this request to be performed."


def enforce(method: str, path: str, ctx: Context) -> Context:
    """The context the request may act with, or ``Forbidden`` in the family's words."""
    if path.startswith("/identity"):
        return ctx
    if path.startswith("/load-balancer/"):
        return _octavia(method, ctx)
    if ctx.is_admin:
        return ctx
    role = "reader" if method in READS else "member"
    if role in implied(ctx.roles) and not _admin_only(path):
        return ctx
    if path.startswith("/network/"):
        raise policy_refused(neutron_action(method, path))
    if path.startswith("/container-infra/"):
        raise Forbidden(f"Policy doesn't allow {magnum_action(method, path)} to be performed.")
    if path.startswith("/compute/"):
        verb = {"POST": "create", "DELETE": "delete"}.get(method, "show" if path.count("/") > 3 else "index")
        raise Forbidden(f"Policy doesn't allow os_compute_api:os-keypairs:{verb} to be performed.")
    raise Forbidden(f"This operation needs the {role} role.")


def _admin_only(path: str) -> bool:
    return path.startswith("/container-infra/v1/mservices")


def implied(roles: tuple[str, ...]) -> set[str]:
    """``roles`` with those they imply (admin → member → reader), also for tokens
    issued before a role was implied."""
    return set(effective(roles))


def _octavia(method: str, ctx: Context) -> Context:
    roles = implied(ctx.roles)
    if roles & LB_ADMIN:
        return _as_admin(ctx)
    if method in READS:
        if LB_GLOBAL_OBSERVER in roles:
            return _as_admin(ctx)
        if roles & LB_READERS:
            return ctx
    elif roles & LB_WRITERS:
        return ctx
    raise Forbidden(OCTAVIA_DENIED)


def _as_admin(ctx: Context) -> Context:
    return ctx if ctx.is_admin else replace(ctx, roles=(*ctx.roles, "admin"))


def _segments(path: str, prefix_parts: int) -> list[str]:
    return [p for p in path.split("/") if p][prefix_parts:]


def neutron_action(method: str, path: str) -> str:
    """Neutron's policy name for a request: ``create_network``, ``add_router_interface``,
    ``update_networks_tags``…"""
    parts = _segments(path, 2)  # network, v2.0
    if parts[:1] == ["taas"]:  # Tap-as-a-Service's collections hang under taas/: create_tap_service
        parts = parts[1:]
    collection = parts[0] if parts else ""
    member = collection.replace("-", "_").removesuffix("s")
    if len(parts) >= 3 and parts[2] == "tags":
        verb = {"PUT": "create" if len(parts) > 3 else "update", "DELETE": "delete"}.get(method, "get")
        return f"{verb}_{collection.replace('-', '_')}_tags"
    if len(parts) >= 3:
        return parts[2]  # a member action, e.g. add_router_interface
    verb = {"POST": "create", "PUT": "update", "DELETE": "delete"}.get(method, "get")
    return f"{verb}_{member}"


_MAGNUM_TARGETS = {"mservices": "magnum-service", "clustertemplates": "clustertemplate",
                   "baymodels": "baymodel", "clusters": "cluster", "bays": "bay",
                   "certificates": "certificate"}


def magnum_action(method: str, path: str) -> str:
    """Magnum's policy name for a request: ``cluster:create``, ``certificate:rotate_ca``…"""
    parts = _segments(path, 2)  # container-infra, v1
    target = _MAGNUM_TARGETS.get(parts[0] if parts else "", parts[0] if parts else "")
    if target == "certificate" and method == "PATCH":
        return "certificate:rotate_ca"
    verb = {"POST": "create", "PATCH": "update", "DELETE": "delete"}.get(method)
    if verb is None:
        verb = "get" if len(parts) > 1 else "get_all"
    return f"{target}:{verb}"
