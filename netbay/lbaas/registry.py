"""Every Octavia collection, in the order the API and the state snapshot list them."""

from __future__ import annotations

from netbay.lbaas.common import LBResource
from netbay.lbaas.healthmonitors import HEALTHMONITORS
from netbay.lbaas.l7policies import L7POLICIES
from netbay.lbaas.l7rules import L7RULES
from netbay.lbaas.listeners import LISTENERS
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.lbaas.members import MEMBERS
from netbay.lbaas.pools import POOLS

LB_RESOURCES: list[LBResource] = [LOADBALANCERS, LISTENERS, POOLS, MEMBERS, HEALTHMONITORS, L7POLICIES,
                                  L7RULES]

__all__ = ["HEALTHMONITORS", "L7POLICIES", "L7RULES", "LB_RESOURCES", "LISTENERS", "LOADBALANCERS",
           "MEMBERS", "POOLS"]
