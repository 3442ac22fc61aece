"""RBAC policies: share one network with one project (Neutron's ``rbac-policies``).

``access_as_shared`` on a network lets the target project (or ``*``, every
project, admins only) see the network and create ports on it, as if it were
``shared`` for that project alone. Removing or retargeting a policy that a port
of the target project still depends on is refused with Neutron's 409
``RbacPolicyInUse``. Other object types and actions are refused (400), not
stored: netbay realizes only network sharing.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from sqlalchemy import ColumnElement, bindparam, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, not_found, policy_refused
from netbay.network.resource import Filter, Resource
from netbay.network.types import Body, ID, ProjectID
from netbay.store.models import Network, Port, RbacPolicy

SHARED = "access_as_shared"
WILDCARD = "*"
OBJECT_TYPES = ("network",)
ACTIONS = (SHARED,)

_RBAC = RbacPolicy.__table__
# Networks shared with the project bound as ``project_id`` (the port-create path's statement).
SHARED_NETWORK_IDS = select(_RBAC.c.object_id).where(
    _RBAC.c.object_type == "network", _RBAC.c.action == SHARED,
    _RBAC.c.target_project.in_([bindparam("project_id"), WILDCARD]))


def shared_with(project_id: str) -> Any:
    """The ids of networks an RBAC policy shares with ``project_id`` (a subquery)."""
    return select(RbacPolicy.object_id).where(
        RbacPolicy.object_type == "network", RbacPolicy.action == SHARED,
        RbacPolicy.target_project.in_([project_id, WILDCARD]))


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
        network = session.get(Network, given["object_id"])
        if network is None or (not ctx.is_admin and network.project_id != ctx.project_id):
            # Neutron hides the objects a project may not share as missing.
            raise not_found("network", given["object_id"])
        if self._exists(session, given["object_type"], given["object_id"], given["action"], target):
            raise _duplicate()
        policy = RbacPolicy(project_id=project_id, object_type=given["object_type"],
                            object_id=given["object_id"], action=given["action"], target_project=target)
        session.add(policy)
        try:
            session.flush()
        except IntegrityError:
            raise _duplicate() from None
        self.record(session, policy, "create")
        return policy

    def update(self, session: Session, ctx: Context, obj_id: str, body: RbacUpdate) -> RbacPolicy:
        policy = self.get_owned(session, ctx, obj_id)
        target = body.given().get("target_tenant")
        if target is None or target == policy.target_project:
            return policy
        if target == WILDCARD and not ctx.is_admin:
            raise policy_refused("update_rbac_policy", "target_tenant")
        self._check_unused(session, policy)
        if self._exists(session, policy.object_type, policy.object_id, policy.action, target):
            raise _duplicate()
        policy.target_project = target
        self.record(session, policy, "update")
        return policy

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        policy = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        self._check_unused(session, policy)
        self.record(session, policy, "delete", None)
        session.delete(policy)

    @staticmethod
    def _exists(session: Session, object_type: str, object_id: str, action: str, target: str) -> bool:
        return session.scalar(select(RbacPolicy.id).where(
            RbacPolicy.object_type == object_type, RbacPolicy.object_id == object_id,
            RbacPolicy.action == action, RbacPolicy.target_project == target)) is not None

    @staticmethod
    def _check_unused(session: Session, policy: RbacPolicy) -> None:
        """Ports of projects that reach the network only through this policy block its removal."""
        network = session.get(Network, policy.object_id)
        if network is None or network.shared:
            return
        others = select(RbacPolicy.target_project).where(
            RbacPolicy.object_type == policy.object_type, RbacPolicy.object_id == policy.object_id,
            RbacPolicy.action == policy.action, RbacPolicy.id != policy.id)
        remaining = set(session.scalars(others))
        if WILDCARD in remaining:
            return
        stmt = select(func.count()).select_from(Port).where(
            Port.network_id == network.id, Port.project_id != network.project_id,
            Port.project_id.not_in(remaining) if remaining else Port.project_id.is_not(None))
        if policy.target_project != WILDCARD:
            stmt = stmt.where(Port.project_id == policy.target_project)
        if session.scalar(stmt):
            raise Conflict(f"RBAC policy on object {policy.object_id} cannot be removed because other "
                           "objects depend on it.\nDetails: Callback neutron.plugins.ml2.plugin.Ml2Plugin."
                           "validate_network_rbac_policy_change failed with \"Unable to reconfigure sharing "
                           f"settings for network {policy.object_id}. Multiple tenants are using it.\"",
                           kind="RbacPolicyInUse")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BadRequest(f"Invalid input for {name}. Reason: '{value}' is not in {list(choices)}.")


def _duplicate() -> Conflict:
    return Conflict("An RBAC policy already exists with those values.", kind="DuplicateRbacPolicy")


RBAC_POLICIES = RbacPolicies()

__all__ = ["RBAC_POLICIES", "RbacPolicies", "SHARED_NETWORK_IDS", "shared_with"]
