"""PLACEHOLDER: to be written."""

from __future__ import annotations

from netbay.network.resource import Resource
from netbay.network.types import Body
from netbay.store.models import SecurityGroup, SecurityGroupRule


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
