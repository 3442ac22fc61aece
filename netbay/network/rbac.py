"""RBAC policies: share one network with one project (Neutron's ``rbac-policies``).

``access_as_shared`` on a network lets the target project (or ``*``, every
project, admins only) see the network and create ports on it, as if it were
``shared`` for that project alone. ``access_as_external`` makes the network
external for the target: it sees it, may put a router's gateway and floating IPs
on it. As in Neutron, a network is ``router:external`` while it has at least one
such policy (the first makes it external, deleting the last makes it internal),
and an external network made through the network API carries a ``*`` policy of its
owner. The ``*`` sharing policy is what ``shared`` means. Removing or retargeting
a policy that a port (a router gateway, for ``access_as_external``) of the target
project still depends on is refused with Neutron's 409 ``RbacPolicyInUse``. A
policy on a network is a change of that network: its revision goes up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field
from sqlalchemy import ColumnElement, bindparam, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, invalid_operation, not_found, policy_refused
from netbay.network.resource import Filter, Resource
from netbay.network.types import Body, ID, ProjectID
from netbay.store.models import Network, Port, RbacPolicy, Router

SHARED = "access_as_shared"
EXTERNAL = "access_as_external"
WILDCARD = "*"
OBJECT_TYPES = ("network",)
ACTIONS = (SHARED, EXTERNAL)
# Told of every policy change on a network (``Networks`` bumps and records it); the
# network module builds on this one, so it subscribes instead of being imported.
network_changed: list[Callable[[Session, Network], None]] = []

_RBAC = RbacPolicy.__table__
# Networks shared with the project bound as ``project_id`` (the port-create path's statement).
SHARED_NETWORK_IDS = select(_RBAC.c.object_id).where(
    _RBAC.c.object_type == "network", _RBAC.c.action == SHARED,
    _RBAC.c.target_project.in_([bindparam("project_id"), WILDCARD]))


EXTERNAL_NETWORK_IDS = select(_RBAC.c.object_id).where(
    _RBAC.c.object_type == "network", _RBAC.c.action == EXTERNAL,
    _RBAC.c.target_project.in_([bindparam("project_id"), WILDCARD]))


def shared_with(project_id: str, action: str = SHARED) -> Any:
    """The ids of networks an RBAC policy of ``action`` grants ``project_id`` (a subquery)."""
    return select(RbacPolicy.object_id).where(
        RbacPolicy.object_type == "network", RbacPolicy.action == action,
        RbacPolicy.target_project.in_([project_id, WILDCARD]))


def network_visible(project_id: str) -> ColumnElement[bool]:
    """The networks ``project_id`` sees: its own, shared ones, and those shared with it
    or made external for it by a policy (Neutron's network RBAC query)."""
    return or_(Network.project_id == project_id, Network.shared,
               Network.id.in_(shared_with(project_id)), Network.id.in_(shared_with(project_id, EXTERNAL)))


def add_external(session: Session, network: Network) -> None:
    """The ``*`` policy of an external network, owned by its owner (``router:external``
    set through the network API)."""
    if not _exists(session, "network", network.id, EXTERNAL, WILDCARD):
        policy = RbacPolicy(project_id=network.project_id, object_type="network", object_id=network.id,
                            action=EXTERNAL, target_project=WILDCARD)
        session.add(policy)
        RBAC_POLICIES.record(session, policy, "create")


def remove_external(session: Session, network: Network) -> None:
    """Every ``access_as_external`` policy of a network made internal again."""
    for policy in session.scalars(select(RbacPolicy).where(
            RbacPolicy.object_type == "network", RbacPolicy.object_id == network.id,
            RbacPolicy.action == EXTERNAL)):
        RBAC_POLICIES.record(session, policy, "delete", None)
        session.delete(policy)


class RbacCreate(Body):
    object_type: str = None  # type: ignore[assignment]  # required: refused with Neutron's words
    object_id: ID = None  # type: ignore[assignment]
    action: str = None  # type: ignore[assignment]
    target_tenant: ProjectID = None  # type: ignore[assignment]
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


class RbacUpdate(Body):
    target_tenant: ProjectID = Field(None)  # type: ignore[assignment]


class RbacPolicies(Resource):
    member = "rbac_policy"
    collection = "rbac-policies"
    model = RbacPolicy
    has_tags = False
    create_body = RbacCreate
    update_body = RbacUpdate
    readonly = {"id"}
    filters = {
        "project_id": Filter(RbacPolicy.project_id),
        "tenant_id": Filter(RbacPolicy.project_id),
        "object_type": Filter(RbacPolicy.object_type),
        "object_id": Filter(RbacPolicy.object_id),
        "action": Filter(RbacPolicy.action),
        "target_tenant": Filter(RbacPolicy.target_project),
    }

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        """The policies a project made (Neutron's ``admin_or_owner``)."""
        return RbacPolicy.project_id == ctx.project_id

    def render(self, session: Session, obj: RbacPolicy, tags: list[str]) -> dict[str, Any]:
        return {
            "id": obj.id,
            "project_id": obj.project_id,
            "tenant_id": obj.project_id,
            "object_type": obj.object_type,
            "object_id": obj.object_id,
            "action": obj.action,
            "target_tenant": obj.target_project,
        }

    def create(self, session: Session, ctx: Context, body: RbacCreate) -> RbacPolicy:
        given = body.given()
        for required in ("object_type", "object_id", "action", "target_tenant"):
            if given.get(required) is None:
                raise BadRequest(f"Failed to parse request. Required attribute '{required}' not specified")
        _check_choice("object_type", given["object_type"], OBJECT_TYPES)
        _check_choice("action", given["action"], ACTIONS)
        project_id = self.owner_for_create(ctx, given)
        target = given["target_tenant"]
        if target == WILDCARD and not ctx.is_admin:
            raise policy_refused("create_rbac_policy", "target_tenant")
        network = session.scalars(select(Network).where(Network.id == given["object_id"]).with_for_update()
                                  ).one_or_none()
        if network is None or (not ctx.is_admin and not session.scalar(
                select(Network.id).where(Network.id == network.id, network_visible(ctx.project_id)))):
            # Neutron hides the objects a project may not see as missing.
            raise not_found("network", given["object_id"])
        _check_owner(ctx, network)
        if _exists(session, given["object_type"], given["object_id"], given["action"], target):
            raise _duplicate()
        policy = RbacPolicy(project_id=project_id, object_type=given["object_type"],
                            object_id=given["object_id"], action=given["action"], target_project=target)
        session.add(policy)
        try:
            session.flush()
        except IntegrityError:
            raise _duplicate() from None
        if policy.action == EXTERNAL:
            network.external = True
        elif target == WILDCARD:
            network.shared = True
        self.record(session, policy, "create")
        _changed(session, network)
        return policy

    def update(self, session: Session, ctx: Context, obj_id: str, body: RbacUpdate) -> RbacPolicy:
        policy = self.get_owned(session, ctx, obj_id)
        target = body.given().get("target_tenant")
        if target is None or target == policy.target_project:
            return policy
        if target == WILDCARD and not ctx.is_admin:
            raise policy_refused("update_rbac_policy", "target_tenant")
        network = session.get(Network, policy.object_id)
        if network is not None:
            _check_owner(ctx, network)
        if target != WILDCARD:  # what the old target loses (Neutron checks no more)
            self._check_unused(session, policy, keeping=target)
        if _exists(session, policy.object_type, policy.object_id, policy.action, target):
            raise _duplicate()
        was_wildcard = policy.target_project == WILDCARD
        policy.target_project = target
        if network is not None and policy.action == SHARED and (was_wildcard or target == WILDCARD):
            network.shared = target == WILDCARD
        self.record(session, policy, "update")
        if network is not None:
            _changed(session, network)
        return policy

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        policy = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        self._check_unused(session, policy)
        network = session.get(Network, policy.object_id)
        if (network is not None and policy.action == EXTERNAL and policy.target_project == WILDCARD
                and network.is_default):
            raise Conflict(f"RBAC policy on object {policy.object_id} cannot be removed because other objects "
                           "depend on it.\nDetails: Default external networks must be shared to everyone.",
                           kind="RbacPolicyInUse")
        self.record(session, policy, "delete", None)
        session.delete(policy)
        session.flush()
        if network is not None:
            if policy.action == EXTERNAL and not _exists(session, "network", network.id, EXTERNAL):
                network.external = False
            elif policy.action == SHARED and policy.target_project == WILDCARD:
                network.shared = False
            _changed(session, network)

    @staticmethod
    def _check_unused(session: Session, policy: RbacPolicy, keeping: str | None = None) -> None:
        """Ports of projects that reach the network only through this policy block its
        removal (router gateways, for an external network); ``keeping``: the project
        the policy is retargeted to keeps its access."""
        network = session.get(Network, policy.object_id)
        if network is None or (network.shared and policy.action == SHARED):
            return
        others = select(RbacPolicy.target_project).where(
            RbacPolicy.object_type == policy.object_type, RbacPolicy.object_id == policy.object_id,
            RbacPolicy.action == policy.action, RbacPolicy.id != policy.id)
        remaining = set(session.scalars(others)) | ({keeping} if keeping else set())
        if WILDCARD in remaining:
            return
        # the projects using the network: ports' owners, or for an external network the
        # owners of the routers with their gateway on it (a gateway port has no project)
        user = Router.project_id if policy.action == EXTERNAL else Port.project_id
        stmt = select(func.count()).select_from(Port).where(
            Port.network_id == network.id, user != network.project_id,
            user.not_in(remaining) if remaining else user.is_not(None))
        if policy.action == EXTERNAL:
            stmt = stmt.join(Router, Router.gw_port_id == Port.id)
        if policy.target_project != WILDCARD:
            stmt = stmt.where(user == policy.target_project)
        if session.scalar(stmt):
            raise Conflict(f"RBAC policy on object {policy.object_id} cannot be removed because other "
                           "objects depend on it.\nDetails: Callback neutron.plugins.ml2.plugin.Ml2Plugin."
                           "validate_network_rbac_policy_change failed with \"Unable to reconfigure sharing "
                           f"settings for network {policy.object_id}. Multiple tenants are using it.\"",
                           kind="RbacPolicyInUse")


def _exists(session: Session, object_type: str, object_id: str, action: str, target: str | None = None) -> bool:
    stmt = select(RbacPolicy.id).where(RbacPolicy.object_type == object_type, RbacPolicy.object_id == object_id,
                                       RbacPolicy.action == action)
    if target is not None:
        stmt = stmt.where(RbacPolicy.target_project == target)
    return session.scalar(stmt.limit(1)) is not None


def _check_owner(ctx: Context, network: Network) -> None:
    """Only the owner (or an admin) writes policies on a network it may see (Neutron's
    ``validate_rbac_policy_change``: a 400)."""
    if not ctx.is_admin and network.project_id != ctx.project_id:
        raise invalid_operation("Only admins can manipulate policies on objects they do not own")


def _changed(session: Session, network: Network) -> None:
    for tell in network_changed:
        tell(session, network)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BadRequest(f"Invalid input for {name}. Reason: '{value}' is not in {list(choices)}.")


def _duplicate() -> Conflict:
    return Conflict("An RBAC policy already exists with those values.", kind="DuplicateRbacPolicy")


RBAC_POLICIES = RbacPolicies()

__all__ = ["EXTERNAL_NETWORK_IDS", "RBAC_POLICIES", "RbacPolicies", "SHARED_NETWORK_IDS", "add_external",
           "network_visible", "remove_external", "shared_with"]
