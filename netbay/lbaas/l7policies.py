"""L7 policies: what an HTTP listener does with the requests its rules match.

Octavia's ``/v2/lbaas/l7policies``: ``REJECT``, ``REDIRECT_TO_URL``,
``REDIRECT_PREFIX`` and ``REDIRECT_TO_POOL``, evaluated in ``position`` order
(1 first; positions stay contiguous: inserting at N moves N and after down one,
deleting closes the gap, a position past the end appends). A policy with no
rules matches nothing. Only the haproxy provider realizes them (refused, per
Octavia's provider rules, on the others). A change claims the load balancer and
marks the listener ``PENDING_UPDATE``, as for the rest of the tree.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlparse

from pydantic import AfterValidator
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.lbaas import providers
from netbay.lbaas.common import (
    PENDING_CREATE,
    UUID,
    Bool,
    Int,
    LBBody,
    LBResource,
    Str255,
    Tags,
    between,
    handle,
    invalid_input,
    not_found,
    one_of,
    standard,
    validation,
)
from netbay.lbaas.listeners import LISTENERS, no_children
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.lbaas.tree import claim
from netbay.network.resource import Filter, to_bool, to_int
from netbay.store.models import LBL7Policy, LBL7Rule, LBListener, LBPool

ACTIONS = ("REJECT", "REDIRECT_TO_URL", "REDIRECT_TO_POOL", "REDIRECT_PREFIX")
REDIRECT_CODES = (301, 302, 303, 307, 308)
L7_LISTENERS = ("HTTP", "TERMINATED_HTTPS")

Action = Annotated[str, AfterValidator(one_of(*ACTIONS))]
Position = Annotated[Int, AfterValidator(between(1, None))]


def _code(value: int) -> int:
    if value not in REDIRECT_CODES:
        raise ValueError(f"Value should be one of: {', '.join(map(str, REDIRECT_CODES))}")
    return value


def _url(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or len(value) > 2048:
        raise ValueError("Value should be a valid URL")
    return value


Url = Annotated[str, AfterValidator(_url)]
RedirectCode = Annotated[Int, AfterValidator(_code)]


class L7PolicyCreate(LBBody):
    not_offered = {"rules": (None, [])}
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool = True
    listener_id: UUID
    action: Action
    position: Position | None = None
    redirect_pool_id: UUID | None = None
    redirect_url: Url | None = None
    redirect_prefix: Url | None = None
    redirect_http_code: RedirectCode | None = None
    project_id: Str255 | None = None
    tenant_id: Str255 | None = None
    tags: Tags | None = None


class L7PolicyUpdate(LBBody):
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool | None = None
    action: Action | None = None
    position: Position | None = None
    redirect_pool_id: UUID | None = None
    redirect_url: Url | None = None
    redirect_prefix: Url | None = None
    redirect_http_code: RedirectCode | None = None
    tags: Tags | None = None


class L7Policies(LBResource):
    member = "l7policy"
    collection = "l7policies"
    title = "L7 Policy"
    model = LBL7Policy
    create_body = L7PolicyCreate
    update_body = L7PolicyUpdate
    filters = {
        "name": Filter(LBL7Policy.name),
        "description": Filter(LBL7Policy.description),
        "project_id": Filter(LBL7Policy.project_id),
        "provisioning_status": Filter(LBL7Policy.provisioning_status),
        "operating_status": Filter(LBL7Policy.operating_status),
        "admin_state_up": Filter(LBL7Policy.admin_state_up, to_bool),
        "listener_id": Filter(LBL7Policy.listener_id),
        "action": Filter(LBL7Policy.action),
        "position": Filter(LBL7Policy.position, to_int),
        "redirect_pool_id": Filter(LBL7Policy.redirect_pool_id),
        "redirect_url": Filter(LBL7Policy.redirect_url),
        "redirect_prefix": Filter(LBL7Policy.redirect_prefix),
        "redirect_http_code": Filter(LBL7Policy.redirect_http_code, to_int),
        "created_at": Filter(LBL7Policy.created_at),
        "updated_at": Filter(LBL7Policy.updated_at),
    }

    def render(self, session: Session, obj: LBL7Policy, tags: list[str]) -> dict[str, Any]:
        rules = session.scalars(select(LBL7Rule.id).where(LBL7Rule.l7policy_id == obj.id)
                                .order_by(LBL7Rule.created_at, LBL7Rule.id))
        return {
            **standard(obj, tags),
            "description": obj.description,
            "listener_id": obj.listener_id,
            "action": obj.action,
            "position": obj.position,
            "redirect_pool_id": obj.redirect_pool_id,
            "redirect_url": obj.redirect_url,
            "redirect_prefix": obj.redirect_prefix,
            "redirect_http_code": obj.redirect_http_code,
            "rules": [{"id": i} for i in rules],
        }

    # -- writing --------------------------------------------------------------------------------

    def create(self, session: Session, ctx: Context, body: L7PolicyCreate) -> LBL7Policy:
        given, tags = self.child_body(body)
        listener = LISTENERS.get(session, ctx, given.pop("listener_id"), for_update=True)
        lb = LOADBALANCERS.get(session, ctx, listener.loadbalancer_id)
        providers.check_l7(lb.provider)
        no_children(listener.protocol)
        if listener.protocol not in L7_LISTENERS:
            raise validation(f"L7 policies are not supported on {listener.protocol} listeners.")
        target = self._action(session, lb.id, given, {})
        took = claim(session, lb.id, listeners=[listener])
        siblings = self._siblings(session, listener.id)
        position = min(given.pop("position", None) or len(siblings) + 1, len(siblings) + 1)
        policy = LBL7Policy(project_id=lb.project_id, listener_id=listener.id, provisioning_status=PENDING_CREATE,
                            operating_status="OFFLINE", position=position,
                            **{**given, **target, "name": given.get("name") or "",
                               "description": given.get("description") or ""})
        session.add(policy)
        session.flush()
        self._renumber(session, listener.id, siblings, policy)
        self.created(session, policy, tags)
        took.log(session)
        return policy

    def update(self, session: Session, ctx: Context, obj_id: str, body: L7PolicyUpdate) -> LBL7Policy:
        policy = self.get(session, ctx, obj_id, for_update=True)
        listener = session.get_one(LBListener, policy.listener_id)
        given = body.given()
        tags = given.pop("tags", None)
        current = {k: getattr(policy, k) for k in ("action", "redirect_pool_id", "redirect_url",
                                                   "redirect_prefix", "redirect_http_code")}
        target = self._action(session, listener.loadbalancer_id, {**current, **given}, given)
        took = claim(session, listener.loadbalancer_id, listeners=[listener])
        position = given.pop("position", None)
        for key, value in given.items():
            if value is None and key in {"name", "description"}:
                value = ""
            elif value is None and key not in target:
                raise invalid_input(key, None, "Value should not be null")
            setattr(policy, key, value)
        for key, value in target.items():
            setattr(policy, key, value)
        if position is not None:
            siblings = [p for p in self._siblings(session, listener.id) if p.id != policy.id]
            policy.position = min(position, len(siblings) + 1)
            self._renumber(session, listener.id, siblings, policy)
        self.updated(session, policy, tags)
        took.log(session)
        return policy

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        policy = self.get(session, ctx, obj_id, for_update=True)
        listener = session.get_one(LBListener, policy.listener_id)
        took = claim(session, listener.loadbalancer_id, listeners=[listener])
        self.remove(session, policy)
        siblings = self._siblings(session, listener.id)
        for n, other in enumerate(siblings, 1):
            if other.position != n:
                other.position = n
                self.touch(other)
                self.record(session, other, "update")
        took.log(session)

    def remove(self, session: Session, policy: LBL7Policy) -> None:
        """Delete a policy with its rules, logging each (no claim)."""
        for rule in session.scalars(select(LBL7Rule).where(LBL7Rule.l7policy_id == policy.id)).all():
            handle(LBL7Rule).remove(session, rule)
        self.erase(session, policy)

    # -- rules of the policy's fields --------------------------------------------------------------

    @staticmethod
    def _action(session: Session, lb_id: str, want: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
        """The action's target fields, the others cleared (Octavia keeps one target)."""
        action = want["action"]
        out: dict[str, Any] = {"redirect_pool_id": None, "redirect_url": None, "redirect_prefix": None,
                               "redirect_http_code": None}
        if action == "REDIRECT_TO_POOL":
            pool_id = want.get("redirect_pool_id")
            if not pool_id:
                raise validation("An L7 policy of action REDIRECT_TO_POOL requires redirect_pool_id.")
            pool = session.scalars(select(LBPool).where(LBPool.id == pool_id, LBPool.loadbalancer_id == lb_id)
                                   ).one_or_none()
            if pool is None:
                raise not_found("Pool", pool_id)
            out["redirect_pool_id"] = pool.id
        elif action in ("REDIRECT_TO_URL", "REDIRECT_PREFIX"):
            key = "redirect_url" if action == "REDIRECT_TO_URL" else "redirect_prefix"
            if not want.get(key):
                raise validation(f"An L7 policy of action {action} requires {key}.")
            out[key] = want[key]
            out["redirect_http_code"] = want.get("redirect_http_code") or 302
        elif given.get("redirect_pool_id") or given.get("redirect_url") or given.get("redirect_prefix"):
            raise validation("An L7 policy of action REJECT takes no redirect target.")
        return out

    @staticmethod
    def _siblings(session: Session, listener_id: str) -> list[LBL7Policy]:
        return list(session.scalars(select(LBL7Policy).where(LBL7Policy.listener_id == listener_id)
                                    .order_by(LBL7Policy.position, LBL7Policy.created_at, LBL7Policy.id)))

    def _renumber(self, session: Session, listener_id: str, others: list[LBL7Policy], placed: LBL7Policy) -> None:
        """Positions 1..n with ``placed`` at its position; log the ones that moved."""
        order = [p for p in others if p.id != placed.id]
        order.insert(placed.position - 1, placed)
        for n, policy in enumerate(order, 1):
            if policy.position != n or policy is placed:
                moved = policy is not placed and policy.position != n
                policy.position = n
                if moved:
                    self.touch(policy)
                    self.record(session, policy, "update")


L7POLICIES = L7Policies()

__all__ = ["L7POLICIES", "L7Policies"]
