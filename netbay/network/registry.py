"""Every resource of the network API, in the order the API lists them.

Each resource's handle lives in its own module, so the modules import each other
downward only and this one imports them all; what a module must learn from one it
cannot import (a network's deletion reaching its subnets) it subscribes itself to
(see ``Networks.on_delete`` and ``ports.on_delete``).
"""

from __future__ import annotations

from netbay.network.address_scopes import ADDRESS_SCOPES
from netbay.network.address_groups import ADDRESS_GROUPS
from netbay.network.floatingips import FLOATINGIPS
from netbay.network.metering import METERING_LABEL_RULES, METERING_LABELS
from netbay.network.networks import NETWORKS
from netbay.network.portforwardings import PORT_FORWARDINGS  # noqa: F401  (its port cascade)
from netbay.network.ports import PORTS
from netbay.network.rbac import RBAC_POLICIES
from netbay.network.qos import QOS_POLICIES
from netbay.network.resource import Resource
from netbay.network.routers import ROUTERS
from netbay.network.security_groups import SECURITY_GROUP_RULES, SECURITY_GROUPS
from netbay.network.sg_templates import SECURITY_GROUP_RULE_TEMPLATES
from netbay.network.subnetpools import SUBNETPOOLS
from netbay.network.subnets import SUBNETS
from netbay.network.taas import TAP_FLOWS, TAP_SERVICES
from netbay.network.trunks import TRUNKS

RESOURCES: list[Resource] = [
    NETWORKS, SUBNETS, SUBNETPOOLS, PORTS, SECURITY_GROUPS, SECURITY_GROUP_RULES, ROUTERS, FLOATINGIPS,
    RBAC_POLICIES, TRUNKS, TAP_SERVICES, TAP_FLOWS, ADDRESS_SCOPES, QOS_POLICIES, ADDRESS_GROUPS,
    SECURITY_GROUP_RULE_TEMPLATES, METERING_LABELS, METERING_LABEL_RULES,
]

__all__ = ["ADDRESS_SCOPES", "FLOATINGIPS", "NETWORKS", "PORTS", "QOS_POLICIES", "RBAC_POLICIES", "RESOURCES", "ROUTERS", "Resource",
           "SECURITY_GROUPS", "SECURITY_GROUP_RULES", "SUBNETPOOLS", "SUBNETS", "TRUNKS"]
