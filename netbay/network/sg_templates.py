"""Neutron's ``security-groups-default-rules``: ``/v2.0/default-security-group-rules``,
the rule templates a new security group is made with (read by
``sgdefaults.rules_from_templates``). Every project reads them; only admins
create and delete them (there is no update, as in Neutron). A template's rule is
checked as a security group rule is, ``remote_group_id`` being ``PARENT`` (the new
group) or a group's id.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, true
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound, policy_refused
from netbay.network.resource import Filter, Resource, to_bool
from netbay.network.sgchecks import checked_rule, rule_key
from netbay.network.types import Body, Bool, ProjectID, Text
from netbay.store.models import SecurityGroupRuleTemplate

_T = SecurityGroupRuleTemplate


class TemplateCreate(Body):
    direction: Any = None
    ethertype: Any = "IPv4"
    protocol: Any = None
    port_range_min: Any = None
    port_range_max: Any = None
    remote_ip_prefix: Any = None
    remote_group_id: Text | None = None
    remote_address_group_id: Text | None = None
    description: Text = ""
    used_in_default_sg: Bool = True
    used_in_non_default_sg: Bool = True
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


class SecurityGroupRuleTemplates(Resource):
    member = "default_security_group_rule"
    collection = "default-security-group-rules"
    model = _T
    has_tags = False
    create_body = TemplateCreate
    readonly = {"id"}
    filters = {
        "direction": Filter(_T.direction),
        "ethertype": Filter(_T.ethertype),
        "protocol": Filter(_T.protocol),
        "remote_group_id": Filter(_T.remote_group_id),
        "remote_ip_prefix": Filter(_T.remote_ip_prefix),
        "description": Filter(_T.description),
        "used_in_default_sg": Filter(_T.used_in_default_sg, to_bool),
        "used_in_non_default_sg": Filter(_T.used_in_non_default_sg, to_bool),
    }

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        return true()

    def render(self, session: Session, obj: Any, tags: list[str]) -> dict[str, Any]:
        return {k: getattr(obj, k) for k in (
            "id", "direction", "ethertype", "protocol", "port_range_min", "port_range_max", "remote_ip_prefix",
            "remote_group_id", "remote_address_group_id", "description", "used_in_default_sg",
            "used_in_non_default_sg")}

    def missing(self, obj_id: str) -> NotFound:
        return NotFound(f"Default Security Group rule {obj_id} does not exist", kind="DefaultSecurityGroupRuleNotFound")

    def create(self, session: Session, ctx: Context, body: TemplateCreate) -> Any:
        if not ctx.is_admin:
            raise policy_refused("create_default_security_group_rule")
        given = body.given()
        given.pop("project_id", None)
        given.pop("tenant_id", None)
        if given.get("direction") is None:
            raise BadRequest("Failed to parse request. Required attribute 'direction' not specified")
        rule = checked_rule(given)
        key = rule_key(rule)
        for existing in session.scalars(select(_T)):
            if rule_key(self.render(session, existing, [])) == key:
                raise Conflict(f"Default Security group rule already exists. Rule id is {existing.id}.",
                               kind="DefaultSecurityGroupRuleExists")
        template = _T(**rule, description=body.description, used_in_default_sg=body.used_in_default_sg,
                      used_in_non_default_sg=body.used_in_non_default_sg)
        session.add(template)
        session.flush()
        return template

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        if not ctx.is_admin:
            raise policy_refused("delete_default_security_group_rule")
        session.delete(self.get(session, ctx, obj_id, for_update=True))
        session.flush()

    def record(self, session: Session, obj: Any, action: str, data: dict[str, Any] | None = None) -> None:
        """Templates are not in the change log: nothing downstream realizes them."""


SECURITY_GROUP_RULE_TEMPLATES = SecurityGroupRuleTemplates()

__all__ = ["SECURITY_GROUP_RULE_TEMPLATES", "SecurityGroupRuleTemplates"]
