"""Security groups and their rules (PLACEHOLDER resources; ensure_default_group is final)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from netbay.network.resource import Resource
from netbay.network.types import Body
from netbay.store.models import DefaultSecurityGroup, SecurityGroup, SecurityGroupRule


def default_rules(group: SecurityGroup) -> list[SecurityGroupRule]:
    """Neutron's defaults: all egress, and ingress from members of the same group."""
    rules = []
    for ethertype in ("IPv4", "IPv6"):
        rules.append(SecurityGroupRule(project_id=group.project_id, security_group_id=group.id,
                                       direction="egress", ethertype=ethertype))
        rules.append(SecurityGroupRule(project_id=group.project_id, security_group_id=group.id,
                                       direction="ingress", ethertype=ethertype, remote_group_id=group.id))
    return rules


def ensure_default_group(session: Session, project_id: str) -> SecurityGroup:
    """The project's ``default`` group, made (with its rules) on first use."""
    known = session.get(DefaultSecurityGroup, project_id)
    if known is not None:
        return session.get(SecurityGroup, known.security_group_id)
    from netbay.network.registry import SECURITY_GROUPS

    group = SecurityGroup(project_id=project_id, name="default", description="Default security group")
    session.add(group)
    session.flush()
    session.add(DefaultSecurityGroup(project_id=project_id, security_group_id=group.id))
    session.add_all(default_rules(group))
    session.flush()
    session.refresh(group)
    SECURITY_GROUPS.record(session, group, "create")
    return group


class SecurityGroupCreate(Body):
    pass


class SecurityGroups(Resource):
    member = "security_group"
    collection = "security-groups"
    model = SecurityGroup
    create_body = SecurityGroupCreate


class SecurityGroupRules(Resource):
    member = "security_group_rule"
    collection = "security-group-rules"
    model = SecurityGroupRule
    create_body = SecurityGroupCreate
    has_tags = False
