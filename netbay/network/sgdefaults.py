"""A project's ``default`` security group: its name, the rules a new group starts with
(the rule templates), and whether a group is its project's default (the store's
cache entry ports use too)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.store.models import DefaultSecurityGroup, SecurityGroup, SecurityGroupRule, SecurityGroupRuleTemplate

DEFAULT_NAME = "default"
DEFAULT_DESCRIPTION = "Default security group"


def _rule(group: SecurityGroup, direction: str, ethertype: str, **attrs: Any) -> SecurityGroupRule:
    return SecurityGroupRule(project_id=group.project_id, security_group_id=group.id,
                             direction=direction, ethertype=ethertype, **attrs)


PARENT = "PARENT"   # a template's remote_group_id: the new group itself


def rules_from_templates(session: Session, group: SecurityGroup, *, default: bool) -> list[SecurityGroupRule]:
    """What a new group starts with: the rule templates (``/default-security-group-rules``)
    for the default group or for the others; Neutron's own are all egress for every
    group and ingress from the group's members for the default one."""
    used = SecurityGroupRuleTemplate.used_in_default_sg if default else \
        SecurityGroupRuleTemplate.used_in_non_default_sg
    templates = session.scalars(select(SecurityGroupRuleTemplate).where(used.is_(True))
                                .order_by(SecurityGroupRuleTemplate.created_at, SecurityGroupRuleTemplate.id))
    return [_rule(group, t.direction, t.ethertype, protocol=t.protocol, port_range_min=t.port_range_min,
                  port_range_max=t.port_range_max, remote_ip_prefix=t.remote_ip_prefix,
                  remote_group_id=group.id if t.remote_group_id == PARENT else t.remote_group_id,
                  remote_address_group_id=t.remote_address_group_id, description=t.description)
            for t in templates]


def default_group_key(project_id: str) -> tuple[str, str]:
    """Where the store's session cache keeps a project's default group id."""
    return ("default-security-group", project_id)


def is_default_group(session: Session, group_id: str, project_id: str) -> bool:
    """Every rendering of a group or rule asks; the answer is the store's cache entry
    ports use too (kept once found: a default group changes only by its deletion,
    which drops the entry), else one primary-key read."""
    cache = session.info.get("cache", {})
    key = default_group_key(project_id)
    known = cache.get(key)
    if known is None:
        row = session.get(DefaultSecurityGroup, project_id)
        if row is None:
            return False
        known = cache[key] = row.security_group_id
    return known == group_id
