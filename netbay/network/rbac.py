"""RBAC policies: share a network, a security group or a subnet pool with one project
(Neutron's ``rbac-policies``, ``rbac-security-groups``, ``rbac-subnetpool``).

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
policy on a network is a change of that network: its revision goes up. A security
group or subnet pool shared with a project is seen by it and usable by its ports
(subnets); its ports (subnets) keep the policy from going.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field
from sqlalchemy import ColumnElement, Select, bindparam, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, invalid_operation, not_found, policy_refused
from netbay.network.resource import Filter, Resource
from netbay.network.types import Body, ID, ProjectID
from netbay.store.models import Network, Port, PortSecurityGroup, RbacPolicy, Router, SecurityGroup, Subnet, SubnetPool

SHARED = "access_as_shared"
EXTERNAL = "access_as_external"
WILDCARD = "*"
# What each object type may be granted (Neutron's rbac-policies, rbac-security-groups,
# rbac-subnetpool).
MODELS: dict[str, Any] = {"network": Network, "security_group": SecurityGroup, "subnetpool": SubnetPool}
OBJECT_TYPES = tuple(MODELS)
ACTIONS = (SHARED, EXTERNAL)
VALID_ACTIONS = {"network": (SHARED, EXTERNAL), "security_group": (SHARED,), "subnetpool": (SHARED,)}
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


def shared_with(project_id: str, action: str = SHARED, object_type: str = "network") -> Any:
    """The ids of the objects an RBAC policy of ``action`` grants ``project_id`` (a subquery)."""
    return select(RbacPolicy.object_id).where(
        RbacPolicy.object_type == object_type, RbacPolicy.action == action,
        RbacPolicy.target_project.in_([project_id, WILDCARD]))


def visible_to(object_type: str, project_id: str) -> ColumnElement[bool]:
    """The objects of ``object_type`` ``project_id`` sees: its own, and those shared with it."""
    if object_type == "network":
        return network_visible(project_id)
    model = MODELS[object_type]
    clause = or_(model.project_id == project_id, model.id.in_(shared_with(project_id, SHARED, object_type)))
    return or_(clause, SubnetPool.shared) if model is SubnetPool else clause


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
        object_type = given["object_type"]
        _check_choice("object_type", object_type, OBJECT_TYPES)
        _check_choice("action", given["action"], ACTIONS)
        if given["action"] not in VALID_ACTIONS[object_type]:
            raise BadRequest(f"Invalid action '{given['action']}' for object type '{object_type}'. Valid actions: "
                             f"{list(VALID_ACTIONS[object_type])}", kind="InvalidActionForType")
        project_id = self.owner_for_create(ctx, given)
        target = given["target_tenant"]
        if target == WILDCARD and not ctx.is_admin:
            raise policy_refused("create_rbac_policy", "target_tenant")
        model = MODELS[object_type]
        obj = session.scalars(select(model).where(model.id == given["object_id"]).with_for_update()).one_or_none()
        if obj is None or (not ctx.is_admin and not session.scalar(
                select(model.id).where(model.id == obj.id, visible_to(object_type, ctx.project_id)))):
            # Neutron hides the objects a project may not see as missing.
            raise not_found(object_type, given["object_id"])
        _check_owner(ctx, obj)
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
            obj.external = True
        elif target == WILDCARD and hasattr(obj, "shared"):
            obj.shared = True
        self.record(session, policy, "create")
        if isinstance(obj, Network):
            _changed(session, obj)
        return policy

    def update(self, session: Session, ctx: Context, obj_id: str, body: RbacUpdate) -> RbacPolicy:
        policy = self.get_owned(session, ctx, obj_id)
        target = body.given().get("target_tenant")
        if target is None or target == policy.target_project:
            return policy
        if target == WILDCARD and not ctx.is_admin:
            raise policy_refused("update_rbac_policy", "target_tenant")
        obj = session.get(MODELS[policy.object_type], policy.object_id)
        if obj is not None:
            _check_owner(ctx, obj)
        if target != WILDCARD:  # what the old target loses (Neutron checks no more)
            self._check_unused(session, policy, keeping=target)
        if _exists(session, policy.object_type, policy.object_id, policy.action, target):
            raise _duplicate()
        was_wildcard = policy.target_project == WILDCARD
        policy.target_project = target
        if obj is not None and hasattr(obj, "shared") and policy.action == SHARED and (was_wildcard or target == WILDCARD):
            obj.shared = target == WILDCARD
        self.record(session, policy, "update")
        if isinstance(obj, Network):
            _changed(session, obj)
        return policy

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        policy = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        self._check_unused(session, policy)
        obj = session.get(MODELS[policy.object_type], policy.object_id)
        if (isinstance(obj, Network) and policy.action == EXTERNAL and policy.target_project == WILDCARD
                and obj.is_default):
            raise Conflict(f"RBAC policy on object {policy.object_id} cannot be removed because other objects "
                           "depend on it.\nDetails: Default external networks must be shared to everyone.",
                           kind="RbacPolicyInUse")
        self.record(session, policy, "delete", None)
        session.delete(policy)
        session.flush()
        if obj is None:
            return
        if policy.action == EXTERNAL and not _exists(session, "network", obj.id, EXTERNAL):
            obj.external = False
        elif policy.action == SHARED and policy.target_project == WILDCARD and hasattr(obj, "shared"):
            obj.shared = False
        if isinstance(obj, Network):
            _changed(session, obj)

    @staticmethod
    def _check_unused(session: Session, policy: RbacPolicy, keeping: str | None = None) -> None:
        """Projects that reach the object only through this policy and use it (ports on a
        network or in a group, router gateways on an external network, subnets from a
        pool) block its removal; ``keeping``: the project it is retargeted to keeps access."""
        obj = session.get(MODELS[policy.object_type], policy.object_id)
        if obj is None or (policy.action == SHARED and getattr(obj, "shared", False)):
            return
        others = select(RbacPolicy.target_project).where(
            RbacPolicy.object_type == policy.object_type, RbacPolicy.object_id == policy.object_id,
            RbacPolicy.action == policy.action, RbacPolicy.id != policy.id)
        remaining = set(session.scalars(others)) | ({keeping} if keeping else set())
        if WILDCARD in remaining:
            return
        users = _users(policy.object_type, policy.action, obj.id).subquery()
        stmt = select(func.count()).select_from(users).where(users.c.project_id != obj.project_id)
        if remaining:
            stmt = stmt.where(users.c.project_id.not_in(remaining))
        if policy.target_project != WILDCARD:
            stmt = stmt.where(users.c.project_id == policy.target_project)
        if not session.scalar(stmt):
            return
        if policy.object_type == "network":
            detail = ("Callback neutron.plugins.ml2.plugin.Ml2Plugin.validate_network_rbac_policy_change failed "
                      f"with \"Unable to reconfigure sharing settings for network {obj.id}. Multiple tenants are "
                      "using it.\"")
        else:
            detail = f"{policy.object_type} {obj.id} is in use by the projects it is shared with"
        raise Conflict(f"RBAC policy on object {policy.object_id} cannot be removed because other objects depend "
                       f"on it.\nDetails: {detail}", kind="RbacPolicyInUse")


def _users(object_type: str, action: str, object_id: str) -> Select:
    """The projects using an object, one ``project_id`` row per use."""
    if object_type == "network" and action == EXTERNAL:   # a gateway port has no project: its router's
        return select(Router.project_id).join(Port, Router.gw_port_id == Port.id).where(Port.network_id == object_id)
    if object_type == "network":
        return select(Port.project_id).where(Port.network_id == object_id)
    if object_type == "security_group":
        return select(Port.project_id).join(PortSecurityGroup, PortSecurityGroup.port_id == Port.id).where(
            PortSecurityGroup.security_group_id == object_id)
    return select(Subnet.project_id).where(Subnet.subnetpool_id == object_id)


def _exists(session: Session, object_type: str, object_id: str, action: str, target: str | None = None) -> bool:
    stmt = select(RbacPolicy.id).where(RbacPolicy.object_type == object_type, RbacPolicy.object_id == object_id,
                                       RbacPolicy.action == action)
    if target is not None:
        stmt = stmt.where(RbacPolicy.target_project == target)
    return session.scalar(stmt.limit(1)) is not None


def _check_owner(ctx: Context, obj: Any) -> None:
    """Only the owner (or an admin) writes policies on an object it may see (Neutron's
    ``validate_rbac_policy_change``: a 400)."""
    if not ctx.is_admin and obj.project_id != ctx.project_id:
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
           "network_visible", "remove_external", "shared_with", "visible_to"]
