"""One handler per Heat resource type, chosen for the network backend in use.

Neutron's types go through the ``NetworkBackend`` seam on every backend. On the
embedded one, load balancers and nodes are netbay's own (its Octavia-compatible
API, sandboxes standing in for Nova). On the ``openstack`` backend netbay drives
the cloud's Neutron only: a cloud's Octavia is not driven yet, so a template
with a master load balancer is refused by name there (one without builds), and
nodes are claims on their Neutron ports (:class:`CloudNodeHandler`), as no Nova
is driven either.
"""

from __future__ import annotations

from netbay.coe.handlers.base import Handler, Refused, Unavailable, ValueHandler, gone_ok, or_none
from netbay.coe.handlers.neutron import (FloatingIPHandler, NetHandler, PortHandler, RouterHandler,
                                         RouterInterfaceHandler, SecurityGroupHandler, SubnetHandler,
                                         SubnetPoolHandler)
from netbay.coe.handlers.octavia import (HealthMonitorHandler, ListenerHandler, LoadBalancerHandler,
                                         MemberHandler, PoolHandler)
from netbay.coe.handlers.servers import CloudNodeHandler, ServerHandler

LB_TYPES = ("OS::Octavia::LoadBalancer", "OS::Octavia::Listener", "OS::Octavia::Pool",
            "OS::Octavia::HealthMonitor", "OS::Octavia::PoolMember")
NO_OCTAVIA = ("load balancers need the cloud's Octavia, which netbay's openstack backend does not drive "
              "yet: use a cluster template with master_lb_enabled=false on this cloud")

NEUTRON: dict[str, Handler] = {
    "OS::Neutron::Net": NetHandler(),
    "OS::Neutron::Subnet": SubnetHandler(),
    "OS::Neutron::SubnetPool": SubnetPoolHandler(),
    "OS::Neutron::Router": RouterHandler(),
    "OS::Neutron::RouterInterface": RouterInterfaceHandler(),
    "OS::Neutron::SecurityGroup": SecurityGroupHandler(),
    "OS::Neutron::Port": PortHandler(),
    "OS::Neutron::FloatingIP": FloatingIPHandler(),
    "OS::Heat::Value": ValueHandler(),
}
EMBEDDED: dict[str, Handler] = {
    **NEUTRON,
    "OS::Octavia::LoadBalancer": LoadBalancerHandler(),
    "OS::Octavia::Listener": ListenerHandler(),
    "OS::Octavia::Pool": PoolHandler(),
    "OS::Octavia::HealthMonitor": HealthMonitorHandler(),
    "OS::Octavia::PoolMember": MemberHandler(),
    "OS::Nova::Server": ServerHandler(),
}
CLOUD: dict[str, Handler] = {
    **NEUTRON,
    **{t: Unavailable(NO_OCTAVIA) for t in LB_TYPES},
    "OS::Nova::Server": CloudNodeHandler(),
}


def table(backend: str) -> dict[str, Handler]:
    """The handlers for a ``NetworkBackend`` named ``backend``."""
    return CLOUD if backend == "openstack" else EMBEDDED


__all__ = ["CLOUD", "EMBEDDED", "LB_TYPES", "NO_OCTAVIA", "Handler", "Refused", "Unavailable", "gone_ok",
           "or_none", "table"]
