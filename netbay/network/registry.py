"""Every resource of the network API, in the order the API lists them."""

from __future__ import annotations

from netbay.network.floatingips import FloatingIPs
from netbay.network.networks import Networks
from netbay.network.ports import Ports
from netbay.network.rbac import RbacPolicies
from netbay.network.resource import Resource
from netbay.network.routers import Routers
from netbay.network.security_groups import SecurityGroupRules, SecurityGroups
from netbay.network.subnetpools import SubnetPools
from netbay.network.subnets import Subnets
from netbay.network.taas import TAP_FLOWS, TAP_SERVICES
from netbay.network.trunks import Trunks

NETWORKS = Networks()
SUBNETS = Subnets()
SUBNETPOOLS = SubnetPools()
PORTS = Ports()
SECURITY_GROUPS = SecurityGroups()
SECURITY_GROUP_RULES = SecurityGroupRules()
ROUTERS = Routers()
FLOATINGIPS = FloatingIPs()
RBAC_POLICIES = RbacPolicies()
TRUNKS = Trunks()

RESOURCES: list[Resource] = [
    NETWORKS, SUBNETS, SUBNETPOOLS, PORTS, SECURITY_GROUPS, SECURITY_GROUP_RULES, ROUTERS, FLOATINGIPS,
    RBAC_POLICIES, TRUNKS, TAP_SERVICES, TAP_FLOWS,
]

__all__ = ["RESOURCES", "Resource"]
