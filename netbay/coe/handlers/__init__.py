"""One handler per Heat resource type, chosen for the backends in use.

Neutron's types go through the ``NetworkBackend`` seam and Octavia's through the
``LoadBalancerBackend`` seam on every backend. On the embedded one, load
balancers are netbay's own Octavia-compatible API and nodes are sandboxes
standing in for Nova (the backend's ``traits.own_services``). On a cloud's Neutron
load balancers are the
cloud's Octavia where its catalog lists one (a cloud without it refuses a
template with a master load balancer by name; one without builds), and nodes
are servers of the cloud's Nova where its catalog lists a compute service
(:class:`NovaServerHandler`, through the compute seam), else claims on their
Neutron ports (:class:`CloudNodeHandler`).
"""

from __future__ import annotations

from netbay.backends import Traits
from netbay.coe.handlers.base import Handler, Refused, Unavailable, ValueHandler, gone_ok, or_none
from netbay.coe.handlers.neutron import (FloatingIPHandler, NetHandler, PortHandler, RouterHandler,
                                         RouterInterfaceHandler, SecurityGroupHandler, SubnetHandler,
                                         SubnetPoolHandler)
from netbay.coe.handlers.nova import NovaServerHandler
from netbay.coe.handlers.octavia import (HealthMonitorHandler, ListenerHandler, LoadBalancerHandler,
                                         MemberHandler, PoolHandler)
from netbay.coe.handlers.servers import CloudNodeHandler, ServerHandler

LB_TYPES = ("OS::Octavia::LoadBalancer", "OS::Octavia::Listener", "OS::Octavia::Pool",
            "OS::Octavia::HealthMonitor", "OS::Octavia::PoolMember")
NO_OCTAVIA = ("load balancers need the cloud's Octavia, which this cloud's catalog does not list "
              "(no load-balancer service): use a cluster template with master_lb_enabled=false on this cloud")

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
OCTAVIA: dict[str, Handler] = {
    "OS::Octavia::LoadBalancer": LoadBalancerHandler(),
    "OS::Octavia::Listener": ListenerHandler(),
    "OS::Octavia::Pool": PoolHandler(),
    "OS::Octavia::HealthMonitor": HealthMonitorHandler(),
    "OS::Octavia::PoolMember": MemberHandler(),
}
EMBEDDED: dict[str, Handler] = {**NEUTRON, **OCTAVIA, "OS::Nova::Server": ServerHandler()}
CLOUD: dict[str, Handler] = {
    **NEUTRON,
    **{t: Unavailable(NO_OCTAVIA) for t in LB_TYPES},
    "OS::Nova::Server": CloudNodeHandler(),
}
CLOUD_WITH_OCTAVIA: dict[str, Handler] = {**CLOUD, **OCTAVIA}
NOVA: dict[str, Handler] = {"OS::Nova::Server": NovaServerHandler()}


def table(traits: Traits, *, load_balancers: bool = True, servers: bool = False) -> dict[str, Handler]:
    """The handlers for a ``NetworkBackend`` with ``traits``; ``load_balancers``: whether
    a ``LoadBalancerBackend`` stands beside it (a cloud's Octavia); ``servers``: whether a
    ``ServerBackend`` does (a cloud's Nova)."""
    if traits.own_services:
        return EMBEDDED
    found = CLOUD_WITH_OCTAVIA if load_balancers else CLOUD
    return {**found, **NOVA} if servers else found


__all__ = ["CLOUD", "CLOUD_WITH_OCTAVIA", "EMBEDDED", "NOVA", "OCTAVIA", "LB_TYPES", "NO_OCTAVIA", "Handler", "Refused", "Unavailable", "gone_ok",
           "or_none", "table"]
