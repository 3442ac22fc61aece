"""Rules naming an address group (``remote_address_group_id``), expanded over the
group's CIDRs into one rule per CIDR of the rule's ethertype, each with that CIDR as
its ``remote_ip_prefix``.

Expanded rules have ids derived from the rule's and the CIDR, so the security groups'
element diff sees an address added to or removed from a group as one rule (and its
set elements) added or removed; the rest of the group's rules stay. A group that is
missing (not arrived yet) or empty allows nothing, as in Neutron.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from typing import Any


def expanded_rule_id(rule_id: str, cidr: str) -> str:
    return f"{rule_id}-ag{hashlib.sha1(cidr.encode()).hexdigest()[:12]}"


def with_address_groups(group: Mapping[str, Any], address_groups: Mapping[str, Mapping[str, Any]]
                        ) -> Mapping[str, Any]:
    """``group`` with each rule naming an address group replaced by its expansion."""
    rules = group.get("security_group_rules") or ()
    if not any(r.get("remote_address_group_id") for r in rules):
        return group
    out = []
    for rule in rules:
        ag_id = rule.get("remote_address_group_id")
        if not ag_id:
            out.append(rule)
            continue
        version = 6 if rule.get("ethertype") == "IPv6" else 4
        for cidr in (address_groups.get(ag_id) or {}).get("addresses") or ():
            if ipaddress.ip_network(cidr, strict=False).version == version:
                out.append({**rule, "id": expanded_rule_id(rule["id"], cidr), "remote_ip_prefix": cidr,
                            "remote_address_group_id": None})
    return {**group, "security_group_rules": out}


def groups_naming(security_groups: Mapping[str, Mapping[str, Any]], address_group_id: str) -> set[str]:
    """The security groups with a rule naming ``address_group_id``."""
    return {gid for gid, g in security_groups.items()
            if any(r.get("remote_address_group_id") == address_group_id for r in g.get("security_group_rules") or ())}
