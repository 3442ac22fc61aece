"""The request bodies of security groups and their rules. A rule's attributes are
converted and checked by :mod:`netbay.network.sgchecks`, so that every refusal carries
Neutron's own error type, not a generic "Invalid input"."""

from __future__ import annotations

from typing import Any

from netbay.network.types import Body, Bool, Name, ProjectID, Tags, Text


class SecurityGroupCreate(Body):
    name: Name = ""
    description: Text = ""
    stateful: Bool = True
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class SecurityGroupUpdate(Body):
    name: Name | None = None
    description: Text | None = None
    stateful: Bool | None = None


class SecurityGroupRuleCreate(Body):
    # Converted and checked in ``SecurityGroupRules.create`` so that every refusal
    # carries Neutron's own error type, not a generic "Invalid input".
    security_group_id: Text | None = None
    direction: Any = None
    ethertype: Any = "IPv4"
    protocol: Any = None
    port_range_min: Any = None
    port_range_max: Any = None
    remote_ip_prefix: Any = None
    remote_group_id: Text | None = None
    remote_address_group_id: Text | None = None
    description: Text = ""
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
