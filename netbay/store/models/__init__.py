"""Tables of desired state, one module per service that owns them.

Every model is importable from here, as before the tables had modules of their own;
importing this package registers every table with :data:`Base.metadata` once:

* :mod:`.base` — the declarative base, ids, timestamps, Neutron's standard attributes;
* :mod:`.identity` — Keystone's tables and Nova's keypairs;
* :mod:`.network` — Neutron's core: networks, subnets, ports, routers, floating IPs;
* :mod:`.secgroups` — security groups, their rules and address groups;
* :mod:`.network_extensions` — quotas, RBAC, trunks, metering, QoS, tap-as-a-service;
* :mod:`.sandboxes` — bare namespaces that ports plug into;
* :mod:`.loadbalancing` — Octavia's tables;
* :mod:`.coe` — Magnum's tables and the cluster executor's;
* :mod:`.clusterwork` — a cluster's network, pods and Kubernetes objects;
* :mod:`.containers` — Zun's tables;
* :mod:`.changes` — the change log.
"""

from netbay.store.models.base import Base, CREATED_REVISION, Standard, new_id, utcnow, utcnow_precise
from netbay.store.models.identity import (
    ApplicationCredential, Keypair, Meta, Project, RevokedToken, Role, RoleAssignment, User,
)
from netbay.store.models.network import (
    AddressScope, FloatingIP, IPAllocation, Network, Port, PortForwarding, PortSecurityGroup, Router, Subnet,
    SubnetPool, Tag,
)
from netbay.store.models.secgroups import (
    AddressGroup, DefaultSecurityGroup, SecurityGroup, SecurityGroupRule, SecurityGroupRuleTemplate,
)
from netbay.store.models.network_extensions import (
    MeteringLabel, MeteringLabelRule, QosPolicy, QosRule, Quota, RbacPolicy, SubPort, TapFlow, TapService, Trunk,
)
from netbay.store.models.sandboxes import Sandbox, SandboxPort
from netbay.store.models.loadbalancing import (
    LBHealthMonitor, LBL7Policy, LBL7Rule, LBListener, LBListenerStats, LBMember, LBPool, LoadBalancer,
)
from netbay.store.models.coe import Cluster, ClusterCA, ClusterTemplate, CoeStack, CoeStackResource, MService, WorkLease
from netbay.store.models.clusterwork import ClusterNet, K8sObject, Pod
from netbay.store.models.containers import Container, ContainerAction, ContainerNetwork, NetworkAttachment
from netbay.store.models.changes import Change

__all__ = [
    "AddressGroup", "AddressScope", "ApplicationCredential", "Base", "CREATED_REVISION", "Change", "Cluster",
    "ClusterCA", "ClusterNet", "ClusterTemplate", "CoeStack", "CoeStackResource", "Container", "ContainerAction",
    "ContainerNetwork", "DefaultSecurityGroup", "FloatingIP", "IPAllocation", "K8sObject", "Keypair",
    "LBHealthMonitor", "LBL7Policy", "LBL7Rule", "LBListener", "LBListenerStats", "LBMember", "LBPool",
    "LoadBalancer", "MService", "Meta", "MeteringLabel", "MeteringLabelRule", "Network", "NetworkAttachment", "Pod",
    "Port", "PortForwarding", "PortSecurityGroup", "Project", "QosPolicy", "QosRule", "Quota", "RbacPolicy",
    "RevokedToken", "Role", "RoleAssignment", "Router", "Sandbox", "SandboxPort", "SecurityGroup",
    "SecurityGroupRule", "SecurityGroupRuleTemplate", "Standard", "SubPort", "Subnet", "SubnetPool", "Tag",
    "TapFlow", "TapService", "Trunk", "User", "WorkLease", "new_id", "utcnow", "utcnow_precise",
]
