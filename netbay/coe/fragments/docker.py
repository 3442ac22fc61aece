"""docker: the overlay's subnet, and its VXLAN port on the masters.

Docker's overlay needs nothing from the cluster's infrastructure but one open
port: VXLAN (UDP 4789) between the nodes. Minions take all UDP already; the
masters' group gains the rule, as flannel's fragment does for its port.
"""

from __future__ import annotations

from netbay.drivers.docker import SPEC as DOCKER
from netbay.coe.fragments.types import Context, Fragment, rule
from netbay.coe.graph import Param

VXLAN_PORT = 4789


def fragment(ctx: Context) -> Fragment:
    labels = ctx.driver_labels(DOCKER)
    spec = DOCKER.label("docker_overlay_cidr")
    assert spec is not None
    out = Fragment()
    out.params = [(Param("docker_overlay_cidr", "string", spec.default, spec.help), labels["docker_overlay_cidr"])]
    out.sg_rules[ctx.coe.master_sg] = [rule("udp", VXLAN_PORT)]
    return out
