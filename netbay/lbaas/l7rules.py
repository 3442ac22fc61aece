"""L7 rules: the conditions of an L7 policy, under ``/l7policies/{id}/rules``.

A policy matches a request when all of its (enabled) rules do. Types: ``PATH``,
``HOST_NAME``, ``HEADER`` and ``COOKIE`` (these two need ``key``: the header or
cookie name), ``FILE_TYPE`` (the path's extension; ``EQUAL_TO`` or ``REGEX``);
compare types ``REGEX``, ``STARTS_WITH``, ``ENDS_WITH``, ``CONTAINS``,
``EQUAL_TO``; ``invert`` negates. The TLS client-certificate types need
TERMINATED_HTTPS and are not offered. A change marks the policy and its listener
``PENDING_UPDATE`` and logs the policy after the rule (its ``rules`` changed).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict
from netbay.lbaas.common import (
    PENDING_CREATE,
    PENDING_UPDATE,
    Bool,
    LBBody,
    LBResource,
    Str255,
    Tags,
    invalid_input,
    not_found,
    not_offered,
    one_of,
    standard,
)
from netbay.lbaas.l7policies import L7POLICIES
from netbay.lbaas.tree import claim
from netbay.network.resource import Filter, ListQuery, Page, to_bool
from netbay.store.models import LBL7Policy, LBL7Rule, LBListener

TYPES = ("COOKIE", "FILE_TYPE", "HEADER", "HOST_NAME", "PATH", "SSL_CONN_HAS_CERT", "SSL_VERIFY_RESULT",
         "SSL_DN_FIELD")
OFFERED = ("COOKIE", "FILE_TYPE", "HEADER", "HOST_NAME", "PATH")
COMPARE_TYPES = ("REGEX", "STARTS_WITH", "ENDS_WITH", "CONTAINS", "EQUAL_TO")
MAX_RULES = 50  # Octavia's limit per policy
# What haproxy can take in a config line: no whitespace, quotes or backslashes but in a regex.
SAFE_VALUE = re.compile(r'^[^\s"\'\\]+$')

RuleType = Annotated[str, AfterValidator(one_of(*TYPES))]
CompareType = Annotated[str, AfterValidator(one_of(*COMPARE_TYPES))]


class L7RuleCreate(LBBody):
    type: RuleType
    compare_type: CompareType
    key: Str255 | None = None
    value: Str255
    invert: Bool = False
    admin_state_up: Bool = True
    project_id: Str255 | None = None
    tenant_id: Str255 | None = None
    tags: Tags | None = None


class L7RuleUpdate(LBBody):
    type: RuleType | None = None
    compare_type: CompareType | None = None
    key: Str255 | None = None
    value: Str255 | None = None
    invert: Bool | None = None
    admin_state_up: Bool | None = None
    tags: Tags | None = None


def _invalid(detail: str) -> BadRequest:
    """Octavia's ``L7RuleValidation`` (400)."""
    return BadRequest(f"Error parsing L7Rule: {detail}")


def check_rule(rule: dict[str, Any]) -> None:
    """Octavia's rules for a rule's fields (after an update: the merged rule)."""
    kind, compare, value = rule["type"], rule["compare_type"], rule["value"]
    if kind not in OFFERED:
        raise not_offered(f"L7 rule type {kind} needs TERMINATED_HTTPS, which is not offered")
    if kind in ("HEADER", "COOKIE") and not rule.get("key"):
        raise _invalid(f"L7 rule type {kind} needs a key.")
    if kind == "FILE_TYPE" and compare not in ("EQUAL_TO", "REGEX"):
        raise _invalid("L7 rule type FILE_TYPE only supports compare types EQUAL_TO and REGEX.")
    if compare == "REGEX":
        try:
            re.compile(value)
        except re.error as exc:
            raise _invalid(f"Invalid L7 rule regex: {exc}") from None
    for what in (value, rule.get("key") or "x"):
        if not SAFE_VALUE.match(what):
            raise _invalid("L7 rule keys and values must not contain whitespace, quotes or backslashes.")


class L7Rules(LBResource):
    # The change log's name (the API's body key is "rule", see netbay.api.loadbalancer).
    member = "l7rule"
    collection = "l7rules"
    title = "L7 Rule"
    model = LBL7Rule
    create_body = L7RuleCreate
    update_body = L7RuleUpdate
    filters = {
        "project_id": Filter(LBL7Rule.project_id),
        "provisioning_status": Filter(LBL7Rule.provisioning_status),
        "operating_status": Filter(LBL7Rule.operating_status),
        "admin_state_up": Filter(LBL7Rule.admin_state_up, to_bool),
        "type": Filter(LBL7Rule.type),
        "compare_type": Filter(LBL7Rule.compare_type),
        "key": Filter(LBL7Rule.key),
        "value": Filter(LBL7Rule.value),
        "invert": Filter(LBL7Rule.invert, to_bool),
        "created_at": Filter(LBL7Rule.created_at),
        "updated_at": Filter(LBL7Rule.updated_at),
    }

    def render(self, session: Session, obj: LBL7Rule, tags: list[str]) -> dict[str, Any]:
        out = standard(obj, tags)
        out.pop("name")
        return {**out, "type": obj.type, "compare_type": obj.compare_type, "key": obj.key,
                "value": obj.value, "invert": obj.invert}

    def extra_filter(self, name: str, values: list[str]):  # noqa: ANN201
        return LBL7Rule.l7policy_id.in_(values) if name == "l7policy_id" else None

    # -- within a policy ------------------------------------------------------------------------

    def list_in(self, session: Session, ctx: Context, policy_id: str, query: ListQuery) -> Page:
        L7POLICIES.get(session, ctx, policy_id)
        query.filters = {**query.filters, "l7policy_id": [policy_id]}
        return self.list(session, ctx, query)

    def get_in(self, session: Session, ctx: Context, policy_id: str, obj_id: str,
               *, for_update: bool = False) -> LBL7Rule:
        L7POLICIES.get(session, ctx, policy_id)
        rule = self.get(session, ctx, obj_id, for_update=for_update)
        if rule.l7policy_id != policy_id:
            raise not_found(self.title, obj_id)
        return rule

    def show_in(self, session: Session, ctx: Context, policy_id: str, obj_id: str,
                fields: list[str]) -> dict[str, Any]:
        self.get_in(session, ctx, policy_id, obj_id)
        return self.show(session, ctx, obj_id, fields)

    def _claim(self, session: Session, policy: LBL7Policy) -> Any:
        listener = session.get_one(LBListener, policy.listener_id)
        took = claim(session, listener.loadbalancer_id, listeners=[listener])
        policy.provisioning_status = PENDING_UPDATE
        self.touch(policy)
        return took

    def create_in(self, session: Session, ctx: Context, policy_id: str, body: L7RuleCreate) -> LBL7Rule:
        given, tags = self.child_body(body)
        policy = L7POLICIES.get(session, ctx, policy_id, for_update=True)
        check_rule(given)
        count = len(list(session.scalars(select(LBL7Rule.id).where(LBL7Rule.l7policy_id == policy.id))))
        if count >= MAX_RULES:
            raise Conflict(f"Too many rules on L7 policy {policy.id}")
        took = self._claim(session, policy)
        rule = LBL7Rule(project_id=policy.project_id, l7policy_id=policy.id, provisioning_status=PENDING_CREATE,
                        operating_status="OFFLINE", name="", **given)
        session.add(rule)
        session.flush()
        self.created(session, rule, tags)
        L7POLICIES.record(session, policy, "update")
        took.log(session)
        return rule

    def update_in(self, session: Session, ctx: Context, policy_id: str, obj_id: str,
                  body: L7RuleUpdate) -> LBL7Rule:
        rule = self.get_in(session, ctx, policy_id, obj_id, for_update=True)
        policy = session.get_one(LBL7Policy, rule.l7policy_id)
        given = body.given()
        tags = given.pop("tags", None)
        for key, value in given.items():
            if value is None and key != "key":
                raise invalid_input(key, None, "Value should not be null")
        merged = {k: getattr(rule, k) for k in ("type", "compare_type", "key", "value", "invert")}
        check_rule({**merged, **given})
        took = self._claim(session, policy)
        for key, value in given.items():
            setattr(rule, key, value)
        self.updated(session, rule, tags)
        L7POLICIES.record(session, policy, "update")
        took.log(session)
        return rule

    def delete_in(self, session: Session, ctx: Context, policy_id: str, obj_id: str) -> None:
        rule = self.get_in(session, ctx, policy_id, obj_id, for_update=True)
        policy = session.get_one(LBL7Policy, rule.l7policy_id)
        took = self._claim(session, policy)
        self.remove(session, rule)
        L7POLICIES.record(session, policy, "update")
        took.log(session)

    def remove(self, session: Session, rule: LBL7Rule) -> None:
        self.erase(session, rule)


L7RULES = L7Rules()

__all__ = ["L7RULES", "L7Rules", "check_rule"]
