"""Neutron's ``qos``: policies, their bandwidth-limit, DSCP-marking and minimum-bandwidth
rules, and the ``qos_policy_id`` a port or network is given.

A policy is rendered with its rules, and every rule change re-records the policy, so
the dataplane agent learns of a rule as of any policy change: it limits a port's
bandwidth by tc on the port's host end and marks its packets' DSCP by nftables
(netbay/dataplane/qos.py). Minimum bandwidth rules are stored and shown only, as
Neutron's ML2 drivers use them for placement alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound, policy_refused
from netbay.network.resource import Filter, Resource, select_fields, standard, to_bool, to_int
from netbay.network.types import Body, Bool, Name, ProjectID, Tags, Text
from netbay.store.models import FloatingIP, Network, Port, QosPolicy, QosRule, Tag

# neutron-lib's VALID_DSCP_MARKS
DSCP_MARKS = [0, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 44, 46, 48, 56]
INT_MAX = 2**31 - 1


class PolicyCreate(Body):
    name: Name = ""
    description: Text = ""
    shared: Bool = False
    is_default: Bool = False
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class PolicyUpdate(Body):
    name: Name | None = None
    description: Text | None = None
    shared: Bool | None = None
    is_default: Bool | None = None


def policy_not_found(policy_id: str) -> NotFound:
    return NotFound(f"QoS policy {policy_id} could not be found.", kind="QosPolicyNotFound")


class QosPolicies(Resource):
    member = "policy"
    collection = "policies"
    path_prefix = "qos/"
    model = QosPolicy
    create_body = PolicyCreate
    update_body = PolicyUpdate
    readonly = Resource.readonly | {"rules"}
    filters = {
        "name": Filter(QosPolicy.name),
        "description": Filter(QosPolicy.description),
        "project_id": Filter(QosPolicy.project_id),
        "tenant_id": Filter(QosPolicy.project_id),
        "shared": Filter(QosPolicy.shared, to_bool),
        "is_default": Filter(QosPolicy.is_default, to_bool),
        "revision_number": Filter(QosPolicy.revision_number, to_int),
    }

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        return or_(QosPolicy.project_id == ctx.project_id, QosPolicy.shared.is_(True))

    def render(self, session: Session, obj: QosPolicy, tags: list[str]) -> dict[str, Any]:
        return {**standard(obj, tags), "shared": obj.shared, "is_default": obj.is_default,
                "rules": [{**render_rule(r), "qos_policy_id": obj.id, "type": r.type} for r in obj.rules]}

    def missing(self, obj_id: str) -> NotFound:
        return policy_not_found(obj_id)

    def get_owned(self, session: Session, ctx: Context, obj_id: str, action: str = "") -> Any:
        """A policy the caller may change. Neutron's defaults let an admin (or a project
        manager, a role netbay does not have) change policies and rules, not a member: 404
        if not seen; else 403, or — where Neutron's controller checks its show rule on the
        object's policy fields only (a policy's update, a rule's update or delete) — 404
        ``HTTPNotFound`` for another project's shared policy, to give nothing away."""
        obj = self.get(session, ctx, obj_id, for_update=True)
        if not ctx.is_admin:
            if obj.project_id != ctx.project_id and action != "delete_policy":
                raise NotFound("The resource could not be found.")
            raise policy_refused(action or f"update_{self.member}")
        return obj

    def create(self, session: Session, ctx: Context, body: PolicyCreate) -> QosPolicy:
        if not ctx.is_admin:
            raise policy_refused("create_policy")
        given = body.given()
        tags = given.pop("tags", None) or []
        project_id = self.owner_for_create(ctx, given)
        if given.get("is_default"):
            self._one_default(session, project_id, None)
        policy = QosPolicy(project_id=project_id, **given)
        session.add(policy)
        session.flush()
        if tags:
            self.set_tags(session, policy, tags)
            policy.revision_number = 0
        self.record(session, policy, "create")
        return policy

    def update(self, session: Session, ctx: Context, obj_id: str, body: PolicyUpdate) -> QosPolicy:
        policy = self.get_owned(session, ctx, obj_id)
        given = {k: v for k, v in body.given().items() if v is not None}
        if given.get("is_default"):
            self._one_default(session, policy.project_id, policy.id)
        for key, value in given.items():
            setattr(policy, key, value)
        self.touch(policy)
        self.record(session, policy, "update")
        return policy

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        policy = self.get_owned(session, ctx, obj_id, "delete_policy")
        for model, kind in ((Port, "port"), (Network, "network"), (FloatingIP, "fip")):
            user = session.scalars(select(model.id).where(model.qos_policy_id == policy.id)).first()
            if user is not None:
                raise Conflict(f"QoS Policy {policy.id} is used by {kind} {user}.", kind="QosPolicyInUse")
        session.execute(Tag.__table__.delete().where(Tag.resource_id == policy.id))
        self.record(session, policy, "delete", None)
        session.delete(policy)
        session.flush()

    @staticmethod
    def _one_default(session: Session, project_id: str, policy_id: str | None) -> None:
        other = session.scalars(select(QosPolicy.id).where(
            QosPolicy.project_id == project_id, QosPolicy.is_default.is_(True),
            QosPolicy.id != (policy_id or ""))).first()
        if other is not None:
            raise Conflict(f"A default QoS policy exists for project {project_id}.",
                           kind="QoSPolicyDefaultAlreadyExists")


QOS_POLICIES = QosPolicies()


def check_policy(session: Session, ctx: Context, policy_id: str | None) -> None:
    """A ``qos_policy_id`` given to a port or network names a policy the caller sees."""
    if policy_id is not None:
        QOS_POLICIES.get(session, ctx, policy_id)


# --- rules ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleKind:
    type: str
    required: tuple[str, ...]
    defaults: dict[str, Any]


RULE_KINDS = {
    "bandwidth_limit_rules": RuleKind("bandwidth_limit", ("max_kbps",),
                                      {"max_burst_kbps": 0, "direction": "egress"}),
    "dscp_marking_rules": RuleKind("dscp_marking", ("dscp_mark",), {}),
    "minimum_bandwidth_rules": RuleKind("minimum_bandwidth", ("min_kbps",), {"direction": "egress"}),
}
_FIELDS = {"bandwidth_limit": ("max_kbps", "max_burst_kbps", "direction"), "dscp_marking": ("dscp_mark",),
           "minimum_bandwidth": ("min_kbps", "direction")}


def render_rule(rule: QosRule) -> dict[str, Any]:
    return {"id": rule.id, **{f: getattr(rule, f) for f in _FIELDS[rule.type]}}


def _value(name: str, value: Any) -> Any:
    """A rule attribute converted and validated with neutron-lib's words."""
    if name == "direction":
        if value not in ("egress", "ingress"):
            raise BadRequest(f"Invalid input for direction. Reason: {value} is not in valid_values.")
        return value
    try:
        number = int(value)
        if isinstance(value, bool) or (isinstance(value, float) and value != number):
            raise ValueError
    except (TypeError, ValueError):
        raise BadRequest(f"Invalid input for operation: '{value}' is not an integer.", kind="InvalidInput") from None
    if name == "dscp_mark" and number not in DSCP_MARKS:
        raise BadRequest(f"Invalid input for dscp_mark. Reason: {number} is not in valid_values.")
    if number < 0:   # neutron-lib's validate_range, in its words
        raise BadRequest(f"Invalid input for {name}. Reason: '{number}' is too small - must be at least '0'.")
    if number > INT_MAX:
        raise BadRequest(f"Invalid input for {name}. Reason: '{number}' is too large - must be no larger than "
                         f"'{INT_MAX}'.")
    return number


def _rule_body(kind: RuleKind, raw: Any, *, create: bool) -> dict[str, Any]:
    member = kind.type + "_rule"
    if not isinstance(raw, dict) or not isinstance(raw.get(member), dict):
        raise BadRequest(f"Unable to find '{member}' in request body")
    body = raw[member]
    allowed = set(_FIELDS[kind.type])
    unknown = sorted(k for k in body if k not in allowed and k not in ("project_id", "tenant_id"))
    if unknown:
        raise BadRequest(f"Unrecognized attribute(s) '{', '.join(unknown)}'")
    values = {k: _value(k, v) for k, v in body.items() if k in allowed}
    if create:
        for required in kind.required:
            if required not in values:
                raise BadRequest(f"Failed to parse request. Required attribute '{required}' not specified")
        values = {**kind.defaults, **values}
    return values


def _rule(session: Session, policy: QosPolicy, kind: RuleKind, rule_id: str) -> QosRule:
    rule = session.scalars(select(QosRule).where(QosRule.id == rule_id, QosRule.policy_id == policy.id,
                                                 QosRule.type == kind.type)).one_or_none()
    if rule is None:
        raise NotFound(f"QoS rule {rule_id} for policy {policy.id} could not be found.", kind="QosRuleNotFound")
    return rule


def _conflict(session: Session, policy: QosPolicy, rule: QosRule) -> None:
    """One rule per type and direction in a policy (neutron's ``check_rules_conflict``)."""
    same = session.scalars(select(QosRule).where(QosRule.policy_id == policy.id, QosRule.type == rule.type,
                                                 QosRule.direction == rule.direction,
                                                 QosRule.id != (rule.id or ""))).first()
    if same is not None:
        raise Conflict(f"Rule {rule.type} conflicts with rule {same.id} which already exists in QoS Policy "
                       f"{policy.id}.", kind="QoSRulesConflict")


def _bandwidth_conflict(policy: QosPolicy, values: dict[str, Any]) -> None:
    """A limit below a guarantee of the same direction, or a guarantee above a limit, is
    refused (neutron's ``check_bandwidth_rule_conflict``; without a direction in the
    request, every direction is compared)."""
    direction = values.get("direction")
    for rule in policy.rules:
        if rule.type == "dscp_marking" or (direction and rule.direction != direction):
            continue
        minimum, limit = int(rule.min_kbps or 0), int(rule.max_kbps or 0)
        if rule.type == "minimum_bandwidth" and "max_kbps" in values and minimum > values["max_kbps"]:
            given, existing = values["max_kbps"], minimum
        elif rule.type == "bandwidth_limit" and "min_kbps" in values and limit < values["min_kbps"]:
            given, existing = values["min_kbps"], limit
        else:
            continue
        raise Conflict(f"Unable to add the rule with value {given} to the policy {policy.id} as the existing rule "
                       f"of type {rule.type} has value {existing}.", kind="QoSRuleParameterConflict")


def _changed(session: Session, policy: QosPolicy) -> None:
    session.flush()
    session.expire(policy, ["rules"])
    QOS_POLICIES.touch(policy)
    QOS_POLICIES.record(session, policy, "update")


def list_rules(session: Session, ctx: Context, policy_id: str, collection: str, fields: list[str]
               ) -> list[dict[str, Any]]:
    policy, kind = QOS_POLICIES.get(session, ctx, policy_id), RULE_KINDS[collection]
    return [select_fields(render_rule(r), fields) for r in policy.rules if r.type == kind.type]


def show_rule(session: Session, ctx: Context, policy_id: str, collection: str, rule_id: str,
              fields: list[str]) -> dict[str, Any]:
    policy = QOS_POLICIES.get(session, ctx, policy_id)
    return select_fields(render_rule(_rule(session, policy, RULE_KINDS[collection], rule_id)), fields)


def create_rule(session: Session, ctx: Context, policy_id: str, collection: str, raw: Any) -> dict[str, Any]:
    kind = RULE_KINDS[collection]
    values = _rule_body(kind, raw, create=True)
    if not ctx.is_admin:   # before the policy is looked up, as Neutron's controller enforces it
        raise policy_refused("create_policy_" + kind.type + "_rule")
    policy = QOS_POLICIES.get_owned(session, ctx, policy_id, "create_policy_" + kind.type + "_rule")
    _bandwidth_conflict(policy, values)
    rule = QosRule(policy_id=policy.id, type=kind.type, **values)
    if kind.type == "dscp_marking":
        rule.direction = "egress"
    _conflict(session, policy, rule)
    session.add(rule)
    _changed(session, policy)
    return render_rule(rule)


def update_rule(session: Session, ctx: Context, policy_id: str, collection: str, rule_id: str, raw: Any
                ) -> dict[str, Any]:
    kind = RULE_KINDS[collection]
    values = _rule_body(kind, raw, create=False)
    policy = QOS_POLICIES.get_owned(session, ctx, policy_id, "update_policy_" + kind.type + "_rule")
    _bandwidth_conflict(policy, values)
    rule = _rule(session, policy, kind, rule_id)
    for key, value in values.items():
        setattr(rule, key, value)
    _conflict(session, policy, rule)
    _changed(session, policy)
    return render_rule(rule)


def delete_rule(session: Session, ctx: Context, policy_id: str, collection: str, rule_id: str) -> None:
    kind = RULE_KINDS[collection]
    policy = QOS_POLICIES.get_owned(session, ctx, policy_id, "delete_policy_" + kind.type + "_rule")
    session.delete(_rule(session, policy, kind, rule_id))
    _changed(session, policy)


def rule_policy_id(session: Session, ctx: Context, collection: str, rule_id: str) -> str:
    """The policy of a rule named by its id alone (``qos-rules-alias``), found as Neutron
    finds it: the rule of that type first (else 404 ``QosRuleNotFound``, its policy left
    empty in the words), then its policy as the caller sees it (404 ``QosPolicyNotFound``)."""
    policy_id = session.scalar(select(QosRule.policy_id).where(
        QosRule.id == rule_id, QosRule.type == RULE_KINDS[collection].type))
    if policy_id is None:
        raise NotFound(f"QoS rule {rule_id} for policy  could not be found.", kind="QosRuleNotFound")
    QOS_POLICIES.get(session, ctx, policy_id)
    return policy_id


RULE_TYPES = [{"type": k.type} for k in RULE_KINDS.values()]

__all__ = ["DSCP_MARKS", "QOS_POLICIES", "RULE_KINDS", "RULE_TYPES", "QosPolicies", "check_policy",
           "create_rule", "delete_rule", "list_rules", "rule_policy_id", "show_rule", "update_rule"]
