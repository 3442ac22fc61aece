"""Neutron's ``metering``: labels and their rules (``/v2.0/metering/metering-labels``,
``/v2.0/metering/metering-label-rules``), admin-only as Neutron's policy has them,
with Neutron's validation (one of the prefixes, ``remote_ip_prefix`` alone) and its
overlap refusal. The agent counts each label's traffic on the gateway leg of the
routers it applies to (its project's, or all for a shared label) by nftables counters
(netbay/dataplane/l3/metering.py), as Neutron's metering agent counts it by iptables.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import false, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound, NotImplementedByNeutron, policy_refused
from netbay.network.resource import Filter, Resource, standard, to_bool
from netbay.network.types import Body, Bool, Name, ProjectID, Text
from netbay.store.models import MeteringLabel, MeteringLabelRule


class LabelCreate(Body):
    name: Name = ""
    description: Text = ""
    shared: Bool = False
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


class NothingUpdatable(Body):
    """Neutron's labels and rules have no attribute a PUT may change."""


class RuleCreate(Body):
    metering_label_id: Text | None = None
    direction: Any = None
    excluded: Bool = False
    remote_ip_prefix: Any = None
    source_ip_prefix: Any = None
    destination_ip_prefix: Any = None
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


class MeteringLabels(Resource):
    member = "metering_label"
    collection = "metering-labels"
    path_prefix = "metering/"
    model = MeteringLabel
    has_tags = False
    create_body = LabelCreate
    update_body = NothingUpdatable
    filters = {"name": Filter(MeteringLabel.name), "description": Filter(MeteringLabel.description),
               "project_id": Filter(MeteringLabel.project_id), "tenant_id": Filter(MeteringLabel.project_id),
               "shared": Filter(MeteringLabel.shared, to_bool)}

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        return false()   # Neutron's policy: admins only

    def render(self, session: Session, obj: MeteringLabel, tags: list[str]) -> dict[str, Any]:
        common = standard(obj, tags)
        return {**{k: common[k] for k in ("id", "name", "description", "project_id", "tenant_id")},
                "shared": obj.shared}

    def missing(self, obj_id: str) -> NotFound:
        return NotFound(f"Metering label '{obj_id}' does not exist.", kind="MeteringLabelNotFound")

    def create(self, session: Session, ctx: Context, body: LabelCreate) -> MeteringLabel:
        if not ctx.is_admin:
            raise policy_refused("create_metering_label")
        given = body.given()
        label = MeteringLabel(project_id=self.owner_for_create(ctx, given), **given)
        session.add(label)
        session.flush()
        self.record(session, label, "create")
        return label

    def update(self, session: Session, ctx: Context, obj_id: str, body: NothingUpdatable) -> Any:
        self.get(session, ctx, obj_id)   # Neutron reads the label first (policy): 404 if unknown
        raise NotImplementedByNeutron("")   # every attribute is read-only (400 before this)

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        label = self.get(session, ctx, obj_id, for_update=True)   # 404 to all but admins
        self.record(session, label, "delete", None)
        session.delete(label)
        session.flush()


def _prefix(name: str, value: Any) -> str | None:
    if value in (None, ""):
        return None
    try:
        return str(ipaddress.ip_interface(str(value)).network)
    except ValueError as exc:
        raise BadRequest(f"{name}: {value} is invalid [{exc}].", kind="Invalid") from None


class MeteringLabelRules(Resource):
    member = "metering_label_rule"
    collection = "metering-label-rules"
    path_prefix = "metering/"
    model = MeteringLabelRule
    has_tags = False
    create_body = RuleCreate
    update_body = NothingUpdatable
    filters = {"metering_label_id": Filter(MeteringLabelRule.metering_label_id),
               "direction": Filter(MeteringLabelRule.direction),
               "excluded": Filter(MeteringLabelRule.excluded, to_bool),
               "remote_ip_prefix": Filter(MeteringLabelRule.remote_ip_prefix)}

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        return false()

    def render(self, session: Session, obj: MeteringLabelRule, tags: list[str]) -> dict[str, Any]:
        return {k: getattr(obj, k) for k in ("id", "metering_label_id", "direction", "excluded", "remote_ip_prefix",
                                             "source_ip_prefix", "destination_ip_prefix")}

    def missing(self, obj_id: str) -> NotFound:
        return NotFound(f"Metering label rule '{obj_id}' does not exist.", kind="MeteringLabelRuleNotFound")

    def create(self, session: Session, ctx: Context, body: RuleCreate) -> MeteringLabelRule:
        if not ctx.is_admin:
            raise policy_refused("create_metering_label_rule")
        if body.direction is None:
            raise BadRequest("Failed to parse request. Required attribute 'direction' not specified")
        if body.metering_label_id is None:
            raise BadRequest("Failed to parse request. Required attribute 'metering_label_id' not specified")
        if body.direction not in ("ingress", "egress"):
            raise BadRequest(f"Invalid input for direction. Reason: {body.direction} is not in valid_values.")
        prefixes = {n: _prefix(n, getattr(body, n))
                    for n in ("remote_ip_prefix", "source_ip_prefix", "destination_ip_prefix")}
        if prefixes["remote_ip_prefix"] and (prefixes["source_ip_prefix"] or prefixes["destination_ip_prefix"]):
            raise BadRequest("Cannot use 'remote-ip-prefix' in conjunction with 'source-ip-prefix' or "
                             "'destination-ip-prefix'.", kind="Invalid")
        if not any(prefixes.values()):
            raise BadRequest("You must define at least one of the following parameters 'remote_ip_prefix', or "
                             "'source_ip_prefix' or 'destination_ip_prefix'.", kind="Invalid")
        label = METERING_LABELS.get(session, ctx, body.metering_label_id)
        remote = prefixes["remote_ip_prefix"]
        if remote:
            for other in session.scalars(select(MeteringLabelRule.remote_ip_prefix).where(
                    MeteringLabelRule.metering_label_id == label.id, MeteringLabelRule.direction == body.direction,
                    MeteringLabelRule.excluded.is_(body.excluded), MeteringLabelRule.remote_ip_prefix.is_not(None))):
                a, b = ipaddress.ip_network(remote), ipaddress.ip_network(str(other))
                if a.version == b.version and a.overlaps(b):
                    raise Conflict(f"Metering label rule with remote_ip_prefix '{remote}' overlaps another.",
                                   kind="MeteringLabelRuleOverlaps")
        rule = MeteringLabelRule(project_id=label.project_id, metering_label_id=label.id, direction=body.direction,
                                 excluded=body.excluded, **prefixes)
        session.add(rule)
        session.flush()
        self.record(session, rule, "create")
        return rule

    def update(self, session: Session, ctx: Context, obj_id: str, body: NothingUpdatable) -> Any:
        self.get(session, ctx, obj_id)   # as the label's: 404 first
        raise NotImplementedByNeutron("")

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        rule = self.get(session, ctx, obj_id, for_update=True)
        self.record(session, rule, "delete", None)
        session.delete(rule)
        session.flush()


METERING_LABELS = MeteringLabels()
METERING_LABEL_RULES = MeteringLabelRules()

__all__ = ["METERING_LABELS", "METERING_LABEL_RULES", "MeteringLabelRules", "MeteringLabels"]
