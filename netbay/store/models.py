"""Tables of desired state: identity, the network model and the change log.

One table per Neutron resource, named as Neutron names the API collection.
Addresses that a port, a router gateway or a floating IP holds all live in
``ip_allocations``, whose primary key (subnet, address) makes a duplicate IP
impossible whatever the callers do.
"""

from __future__ import annotations

import uuid
from datetime import datetime, UTC
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy import false as sa_false
from sqlalchemy import true as sa_true
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def new_id() -> str:
    return str(uuid.uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0, tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}
    if TYPE_CHECKING:  # every model here is a plain table (SQLAlchemy types it as any FromClause)
        __table__: ClassVar[Table]


# --- identity -----------------------------------------------------------------


class Meta(Base):
    """Process-independent settings, e.g. the token signing key."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=lambda: uuid.uuid4().hex)
    name: Mapped[str] = mapped_column(String(255))
    domain_id: Mapped[str] = mapped_column(String(64), default="default")
    description: Mapped[str] = mapped_column(Text, default="")
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    __table_args__ = (UniqueConstraint("domain_id", "name"),)


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=lambda: uuid.uuid4().hex)
    name: Mapped[str] = mapped_column(String(255))
    domain_id: Mapped[str] = mapped_column(String(64), default="default")
    password_hash: Mapped[str] = mapped_column(Text)
    # Bumped on every password change; tokens carry it, so old ones stop verifying.
    password_epoch: Mapped[int] = mapped_column(Integer, default=0)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    default_project_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    __table_args__ = (UniqueConstraint("domain_id", "name"),)


class RoleAssignment(Base):
    __tablename__ = "role_assignments"
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[str] = mapped_column(String(64), primary_key=True)


# --- network model ----------------------------------------------------------------


# A new network, port, router or security group is at revision 1 in Neutron 29 (its
# create writes the object a second time in the same request); a subnet, rule, floating
# IP or subnet pool is at the column's default, 0. Changes add 1 from there.
CREATED_REVISION = 1


class Standard:
    """Neutron's standard attributes, shared by every top-level resource."""

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(255), default="", index=True)
    description: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class Tag(Base):
    __tablename__ = "tags"
    resource_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tag: Mapped[str] = mapped_column(String(255), primary_key=True)
    __table_args__ = (Index("ix_tags_tag", "tag"),)


class Network(Standard, Base):
    __tablename__ = "networks"
    shared: Mapped[bool] = mapped_column(Boolean, default=False)
    external: Mapped[bool] = mapped_column(Boolean, default=False)
    mtu: Mapped[int] = mapped_column(Integer, default=1500)
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default="ACTIVE")
    # The VXLAN network identifier the dataplane uses between hosts.
    segmentation_id: Mapped[int] = mapped_column(Integer, unique=True)
    # Issue 10: the provider extension's type and physnet, and ports' port_security default.
    network_type: Mapped[str] = mapped_column(String(32), default="vxlan", server_default="vxlan")
    physical_network: Mapped[str | None] = mapped_column(String(64), nullable=True)
    port_security_enabled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=sa_true())
    # Issue 29: the default external network (``default-external-network``; one per cloud).
    is_default: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    # Issue 29 (neutron2): the QoS policy of the network's ports that have none of their own.
    qos_policy_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    # Issue 29 (neutron2): dns-integration's domain of the network's ports' names.
    dns_domain: Mapped[str] = mapped_column(String(255), default="", server_default="")

    subnets: Mapped[list[Subnet]] = relationship(
        back_populates="network", order_by="Subnet.created_at", lazy="selectin"
    )


class SubnetPool(Standard, Base):
    __tablename__ = "subnetpools"
    ip_version: Mapped[int] = mapped_column(Integer)
    prefixes: Mapped[list[Any]] = mapped_column(JSON)
    default_prefixlen: Mapped[int] = mapped_column(Integer)
    min_prefixlen: Mapped[int] = mapped_column(Integer)
    max_prefixlen: Mapped[int] = mapped_column(Integer)
    shared: Mapped[bool] = mapped_column(Boolean, default=False)
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    default_quota: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Issue 29: the address scope the pool's prefixes belong to (``address-scope``).
    address_scope_id: Mapped[str | None] = mapped_column(ForeignKey("address_scopes.id"), nullable=True,
                                                         index=True)


class AddressScope(Base):
    """A set of subnet pools whose prefixes are unique together (Neutron's ``address-scope``;
    like Neutron's, it has no standard attributes: no description, tags, revisions)."""

    __tablename__ = "address_scopes"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    shared: Mapped[bool] = mapped_column(Boolean, default=False)
    ip_version: Mapped[int] = mapped_column(Integer)


class Subnet(Standard, Base):
    __tablename__ = "subnets"
    network_id: Mapped[str] = mapped_column(ForeignKey("networks.id"), index=True)
    subnetpool_id: Mapped[str | None] = mapped_column(
        ForeignKey("subnetpools.id"), nullable=True, index=True
    )
    ip_version: Mapped[int] = mapped_column(Integer)
    cidr: Mapped[str] = mapped_column(String(64))
    gateway_ip: Mapped[str | None] = mapped_column(String(64), nullable=True)
    allocation_pools: Mapped[list[Any]] = mapped_column(JSON, default=list)
    dns_nameservers: Mapped[list[Any]] = mapped_column(JSON, default=list)
    host_routes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    enable_dhcp: Mapped[bool] = mapped_column(Boolean, default=True)
    ipv6_ra_mode: Mapped[str | None] = mapped_column(String(32), nullable=True)
    ipv6_address_mode: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Issue 29: the device owners the subnet serves (``subnet-service-types``; empty: any).
    service_types: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)

    network: Mapped[Network] = relationship(back_populates="subnets", lazy="raise")


class Port(Standard, Base):
    __tablename__ = "ports"
    network_id: Mapped[str] = mapped_column(ForeignKey("networks.id"), index=True)
    mac_address: Mapped[str] = mapped_column(String(32))
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default="DOWN")
    device_id: Mapped[str] = mapped_column(String(255), default="", index=True)
    device_owner: Mapped[str] = mapped_column(String(255), default="", index=True)
    binding_host_id: Mapped[str] = mapped_column(String(255), default="")
    port_security_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    allowed_address_pairs: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # Issue 29: ``extra_dhcp_opt``, stored and shown (netbay serves no DHCP).
    extra_dhcp_opts: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True, default=list)
    # Issue 29 (neutron2): the port's own QoS policy, and dns-integration's name.
    qos_policy_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    dns_name: Mapped[str] = mapped_column(String(255), default="", server_default="")

    fixed_ips: Mapped[list[IPAllocation]] = relationship(
        back_populates="port", cascade="all, delete-orphan", lazy="selectin",
        order_by="IPAllocation.seq",
    )
    security_groups: Mapped[list[PortSecurityGroup]] = relationship(
        cascade="all, delete-orphan", lazy="selectin"
    )
    __table_args__ = (UniqueConstraint("network_id", "mac_address"),)


class IPAllocation(Base):
    __tablename__ = "ip_allocations"
    subnet_id: Mapped[str] = mapped_column(ForeignKey("subnets.id"), primary_key=True)
    ip_address: Mapped[str] = mapped_column(String(64), primary_key=True)
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), index=True)
    network_id: Mapped[str] = mapped_column(String(36), index=True)
    # Keeps a port's fixed_ips in the order they were asked for.
    seq: Mapped[int] = mapped_column(Integer, default=0)

    port: Mapped[Port] = relationship(back_populates="fixed_ips", lazy="raise")


class SecurityGroup(Standard, Base):
    __tablename__ = "securitygroups"
    stateful: Mapped[bool] = mapped_column(Boolean, default=True)

    rules: Mapped[list[SecurityGroupRule]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="SecurityGroupRule.created_at",
        foreign_keys="SecurityGroupRule.security_group_id",
    )


class SecurityGroupRule(Base):
    __tablename__ = "securitygrouprules"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    security_group_id: Mapped[str] = mapped_column(
        ForeignKey("securitygroups.id", ondelete="CASCADE"), index=True
    )
    direction: Mapped[str] = mapped_column(String(8))
    ethertype: Mapped[str] = mapped_column(String(8))
    protocol: Mapped[str | None] = mapped_column(String(40), nullable=True)
    port_range_min: Mapped[int | None] = mapped_column(Integer, nullable=True)
    port_range_max: Mapped[int | None] = mapped_column(Integer, nullable=True)
    remote_ip_prefix: Mapped[str | None] = mapped_column(String(64), nullable=True)
    remote_group_id: Mapped[str | None] = mapped_column(
        ForeignKey("securitygroups.id", ondelete="CASCADE"), nullable=True, index=True
    )
    # Issue 29 (neutron2): an address group's CIDRs as the rule's remote end.
    remote_address_group_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    description: Mapped[str] = mapped_column(String(255), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class DefaultSecurityGroup(Base):
    """One ``default`` group per project; the key makes a concurrent second one fail."""

    __tablename__ = "default_securitygroups"
    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    security_group_id: Mapped[str] = mapped_column(ForeignKey("securitygroups.id", ondelete="CASCADE"))


class PortSecurityGroup(Base):
    __tablename__ = "port_securitygroups"
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), primary_key=True)
    security_group_id: Mapped[str] = mapped_column(
        ForeignKey("securitygroups.id"), primary_key=True, index=True
    )


class Router(Standard, Base):
    __tablename__ = "routers"
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default="ACTIVE")
    gw_port_id: Mapped[str | None] = mapped_column(ForeignKey("ports.id"), nullable=True)
    enable_snat: Mapped[bool] = mapped_column(Boolean, default=True)
    routes: Mapped[list[Any]] = mapped_column(JSON, default=list)


class FloatingIP(Standard, Base):
    __tablename__ = "floatingips"
    floating_network_id: Mapped[str] = mapped_column(ForeignKey("networks.id"), index=True)
    floating_ip_address: Mapped[str] = mapped_column(String(64))
    floating_port_id: Mapped[str] = mapped_column(ForeignKey("ports.id"))
    fixed_port_id: Mapped[str | None] = mapped_column(
        ForeignKey("ports.id"), nullable=True, index=True
    )
    fixed_ip_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    router_id: Mapped[str | None] = mapped_column(ForeignKey("routers.id"), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="DOWN")
    # Issue 29 (neutron2): dns-integration's name and domain, given at create.
    dns_name: Mapped[str] = mapped_column(String(255), default="", server_default="")
    dns_domain: Mapped[str] = mapped_column(String(255), default="", server_default="")


class Sandbox(Standard, Base):
    """A bare network namespace that ports plug into (a container without a runtime)."""

    __tablename__ = "sandboxes"
    status: Mapped[str] = mapped_column(String(16), default="BUILD")
    # The host whose dataplane agent realizes it.
    host: Mapped[str] = mapped_column(String(255), default="")
    # Labels (string values): a cluster node's are its cluster's (issue 13).
    labels: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=dict, nullable=True)

    ports: Mapped[list[SandboxPort]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="SandboxPort.seq"
    )


class SandboxPort(Base):
    """A port plugged into a sandbox; ``seq`` names its interface (``eth<seq>``)."""

    __tablename__ = "sandbox_ports"
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), primary_key=True)
    sandbox_id: Mapped[str] = mapped_column(ForeignKey("sandboxes.id", ondelete="CASCADE"), index=True)
    # The port's network (a port never changes network): rendering needs no port lookup.
    network_id: Mapped[str] = mapped_column(String(36))
    seq: Mapped[int] = mapped_column(Integer, default=0)
    # Made by the sandbox (deleted with it) rather than given to it (unbound on delete).
    auto_delete: Mapped[bool] = mapped_column(Boolean, default=False)


# --- load balancing (Octavia API v2) --------------------------------------------------


class LoadBalancer(Standard, Base):
    """A VIP and what it serves; its children are changed only while it is settled."""

    __tablename__ = "lb_loadbalancers"
    provisioning_status: Mapped[str] = mapped_column(String(16), default="PENDING_CREATE")
    operating_status: Mapped[str] = mapped_column(String(16), default="OFFLINE")
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    provider: Mapped[str] = mapped_column(String(64), default="netbay")
    vip_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Not a foreign key: the VIP port is removed with the load balancer, by the service.
    vip_port_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    vip_subnet_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    vip_network_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    # False when the caller brought the VIP port (vip_port_id): it is released, not deleted.
    vip_port_owned: Mapped[bool] = mapped_column(Boolean, default=True)


class LBListener(Standard, Base):
    __tablename__ = "lb_listeners"
    loadbalancer_id: Mapped[str] = mapped_column(ForeignKey("lb_loadbalancers.id"), index=True)
    provisioning_status: Mapped[str] = mapped_column(String(16), default="PENDING_CREATE")
    operating_status: Mapped[str] = mapped_column(String(16), default="OFFLINE")
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    protocol: Mapped[str] = mapped_column(String(16))
    protocol_port: Mapped[int] = mapped_column(Integer)
    connection_limit: Mapped[int] = mapped_column(Integer, default=-1)
    default_pool_id: Mapped[str | None] = mapped_column(
        ForeignKey("lb_pools.id"), nullable=True, index=True)
    # Milliseconds, as Octavia takes them.
    timeout_client_data: Mapped[int] = mapped_column(Integer, default=50000)
    timeout_member_connect: Mapped[int] = mapped_column(Integer, default=5000)
    timeout_member_data: Mapped[int] = mapped_column(Integer, default=50000)
    timeout_tcp_inspect: Mapped[int] = mapped_column(Integer, default=0)
    # L7 provider options (issue 16): client CIDRs let in (None: all) and X-Forwarded-* headers.
    allowed_cidrs: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    insert_headers: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class LBPool(Standard, Base):
    __tablename__ = "lb_pools"
    loadbalancer_id: Mapped[str] = mapped_column(ForeignKey("lb_loadbalancers.id"), index=True)
    provisioning_status: Mapped[str] = mapped_column(String(16), default="PENDING_CREATE")
    operating_status: Mapped[str] = mapped_column(String(16), default="OFFLINE")
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    protocol: Mapped[str] = mapped_column(String(16))
    lb_algorithm: Mapped[str] = mapped_column(String(32))
    # {"type": SOURCE_IP | HTTP_COOKIE | APP_COOKIE, "cookie_name": …} or None (issue 16).
    session_persistence: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class LBMember(Standard, Base):
    __tablename__ = "lb_members"
    pool_id: Mapped[str] = mapped_column(ForeignKey("lb_pools.id"), index=True)
    provisioning_status: Mapped[str] = mapped_column(String(16), default="PENDING_CREATE")
    operating_status: Mapped[str] = mapped_column(String(16), default="NO_MONITOR")
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    address: Mapped[str] = mapped_column(String(64))
    protocol_port: Mapped[int] = mapped_column(Integer)
    subnet_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    weight: Mapped[int] = mapped_column(Integer, default=1)
    backup: Mapped[bool] = mapped_column(Boolean, default=False)
    monitor_address: Mapped[str | None] = mapped_column(String(64), nullable=True)
    monitor_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    __table_args__ = (UniqueConstraint("pool_id", "address", "protocol_port"),)


class LBHealthMonitor(Standard, Base):
    __tablename__ = "lb_healthmonitors"
    # One per pool: the key makes a concurrent second one fail.
    pool_id: Mapped[str] = mapped_column(ForeignKey("lb_pools.id"), unique=True)
    provisioning_status: Mapped[str] = mapped_column(String(16), default="PENDING_CREATE")
    operating_status: Mapped[str] = mapped_column(String(16), default="OFFLINE")
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    type: Mapped[str] = mapped_column(String(16))
    delay: Mapped[int] = mapped_column(Integer)
    timeout: Mapped[int] = mapped_column(Integer)
    max_retries: Mapped[int] = mapped_column(Integer)
    max_retries_down: Mapped[int] = mapped_column(Integer, default=3)
    http_method: Mapped[str | None] = mapped_column(String(16), nullable=True)
    url_path: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    expected_codes: Mapped[str | None] = mapped_column(String(64), nullable=True)


class LBL7Policy(Standard, Base):
    """An Octavia L7 policy: what a listener does with requests its rules match."""

    __tablename__ = "lb_l7policies"
    listener_id: Mapped[str] = mapped_column(ForeignKey("lb_listeners.id"), index=True)
    provisioning_status: Mapped[str] = mapped_column(String(16), default="PENDING_CREATE")
    operating_status: Mapped[str] = mapped_column(String(16), default="OFFLINE")
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    action: Mapped[str] = mapped_column(String(32))
    position: Mapped[int] = mapped_column(Integer, default=1)
    redirect_pool_id: Mapped[str | None] = mapped_column(ForeignKey("lb_pools.id"), nullable=True, index=True)
    redirect_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    redirect_prefix: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    redirect_http_code: Mapped[int | None] = mapped_column(Integer, nullable=True)


class LBL7Rule(Standard, Base):
    """One condition of an L7 policy (all of a policy's rules must match)."""

    __tablename__ = "lb_l7rules"
    l7policy_id: Mapped[str] = mapped_column(ForeignKey("lb_l7policies.id"), index=True)
    provisioning_status: Mapped[str] = mapped_column(String(16), default="PENDING_CREATE")
    operating_status: Mapped[str] = mapped_column(String(16), default="OFFLINE")
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    type: Mapped[str] = mapped_column(String(16))
    compare_type: Mapped[str] = mapped_column(String(16))
    key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    value: Mapped[str] = mapped_column(String(255))
    invert: Mapped[bool] = mapped_column(Boolean, default=False)


# --- container infrastructure (Magnum API v1) ------------------------------------------


def utcnow_precise() -> datetime:
    """Creation times to the microsecond: Magnum lists in creation order by default."""
    return datetime.now(UTC).replace(tzinfo=None)


class ClusterTemplate(Base):
    """A Magnum cluster template (baymodel): what a cluster is built from.

    ``network_driver`` is always stored (an omitted one becomes the COE's
    default); ``labels`` are kept as given, known or not."""

    __tablename__ = "coe_clustertemplates"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    user_id: Mapped[str] = mapped_column(String(64), default="")
    name: Mapped[str] = mapped_column(String(255), index=True)
    coe: Mapped[str] = mapped_column(String(32))
    network_driver: Mapped[str] = mapped_column(String(255))
    server_type: Mapped[str] = mapped_column(String(16), default="vm")
    image_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    flavor_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    master_flavor_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    keypair_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    external_network_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    fixed_network: Mapped[str | None] = mapped_column(String(255), nullable=True)
    fixed_subnet: Mapped[str | None] = mapped_column(String(255), nullable=True)
    dns_nameserver: Mapped[str | None] = mapped_column(String(255), nullable=True)
    volume_driver: Mapped[str | None] = mapped_column(String(255), nullable=True)
    docker_storage_driver: Mapped[str | None] = mapped_column(String(255), nullable=True)
    docker_volume_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    apiserver_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    http_proxy: Mapped[str | None] = mapped_column(String(255), nullable=True)
    https_proxy: Mapped[str | None] = mapped_column(String(255), nullable=True)
    no_proxy: Mapped[str | None] = mapped_column(String(255), nullable=True)
    insecure_registry: Mapped[str | None] = mapped_column(String(255), nullable=True)
    cluster_distro: Mapped[str | None] = mapped_column(String(255), nullable=True)
    tags: Mapped[str | None] = mapped_column(String(255), nullable=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    tls_disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    public: Mapped[bool] = mapped_column(Boolean, default=False)
    hidden: Mapped[bool] = mapped_column(Boolean, default=False)
    registry_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    master_lb_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    floating_ip_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow_precise)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class Cluster(Base):
    """A Magnum cluster (bay): the desired cluster and what its build reported.

    The API writes the wish (counts, labels, the template) and a ``*_IN_PROGRESS``
    status; the cluster executor (a later step) builds toward it, bumping nothing
    but the status fields and outputs. ``revision_number`` grows with every change
    of the wish, so the executor can tell a new wish from one it already applied;
    nodes and the resources a build made get tables of their own keyed by ``id``."""

    __tablename__ = "coe_clusters"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    user_id: Mapped[str] = mapped_column(String(64), default="")
    name: Mapped[str] = mapped_column(String(255), index=True)
    # No cascade: a template in use cannot go (the service says so first; the key guarantees it).
    cluster_template_id: Mapped[str] = mapped_column(ForeignKey("coe_clustertemplates.id"), index=True)
    node_count: Mapped[int] = mapped_column(Integer, default=1)
    master_count: Mapped[int] = mapped_column(Integer, default=1)
    create_timeout: Mapped[int] = mapped_column(Integer, default=60)
    keypair: Mapped[str | None] = mapped_column(String(255), nullable=True)
    flavor_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    master_flavor_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    docker_volume_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    fixed_network: Mapped[str | None] = mapped_column(String(255), nullable=True)
    fixed_subnet: Mapped[str | None] = mapped_column(String(255), nullable=True)
    discovery_url: Mapped[str | None] = mapped_column(String(255), nullable=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The template's network driver's typed config, parsed from ``labels`` once at create
    # (``netbay.drivers.registry.stored``): what the build, the cluster network and the
    # agent read. ``labels`` stays as given, for Magnum's API. None: the driver has none.
    driver_config: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    floating_ip_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    master_lb_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = mapped_column(String(32), default="CREATE_IN_PROGRESS", index=True)
    status_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    health_status: Mapped[str | None] = mapped_column(String(32), nullable=True)
    health_status_reason: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The id of the applied resource graph (Heat's stack id when Heat builds it).
    stack_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    api_address: Mapped[str | None] = mapped_column(String(255), nullable=True)
    master_addresses: Mapped[list[Any]] = mapped_column(JSON, default=list)
    node_addresses: Mapped[list[Any]] = mapped_column(JSON, default=list)
    coe_version: Mapped[str | None] = mapped_column(String(255), nullable=True)
    container_version: Mapped[str | None] = mapped_column(String(255), nullable=True)
    faults: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    revision_number: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow_precise)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


# --- change log -------------------------------------------------------------------


class Change(Base):
    """One row per committed change: the reconcilers' stream of desired state."""

    __tablename__ = "changes"
    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    resource: Mapped[str] = mapped_column(String(32))
    resource_id: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(16))
    project_id: Mapped[str] = mapped_column(String(64), default="")
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


# --- cluster stacks (issue 4: the embedded executor's state, netbay/coe/executor.py) ---
# Kept at the end of the file on purpose: owned by the executor, independent of the
# cluster tables above (no foreign key to coe_clusters, so a stack can be cleaned up
# even after its cluster row went).


class CoeStack(Base):
    """One applied resource graph (Heat's stack): the desired graph, the inputs it was
    composed from (to recompose on scale), the operation under way and its outcome."""

    __tablename__ = "coe_stacks"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    cluster_id: Mapped[str] = mapped_column(String(36), index=True)
    name: Mapped[str] = mapped_column(String(255))
    project_id: Mapped[str] = mapped_column(String(64), default="")
    action: Mapped[str] = mapped_column(String(16), default="CREATE")
    status: Mapped[str] = mapped_column(String(32), default="CREATE_IN_PROGRESS")
    status_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    graph: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    outputs: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow_precise)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class CoeStackResource(Base):
    """One resource of a stack as made: its physical id and status, written before and
    after each API call so a restarted executor adopts instead of duplicating."""

    __tablename__ = "coe_stack_resources"
    stack_id: Mapped[str] = mapped_column(ForeignKey("coe_stacks.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    type: Mapped[str] = mapped_column(String(64))
    physical_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    status: Mapped[str] = mapped_column(String(32))
    status_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    depends_on: Mapped[list[Any]] = mapped_column(JSON, default=list)
    seq: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow_precise)


# --- cluster networks and pods (issue 5: netbay/coe/clusternet.py, netbay/coe/pods.py) ---
# Kept at the end on purpose, like the stacks above: no foreign key to coe_clusters,
# the conductor removes them when it deletes the cluster.


class ClusterNet(Base):
    """A cluster's container network as the dataplane agent needs it: the driver, its
    config (from the labels), each node's lease and underlay address. ``id`` is the
    cluster's id; ``leases`` persist so that a node keeps its subnet across restarts."""

    __tablename__ = "coe_clusternets"
    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    driver: Mapped[str] = mapped_column(String(32))
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # node logical name (kube_minion_0) -> lease CIDR
    leases: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # [{"name", "sandbox_id", "address": "10.0.0.5/24"}], masters first
    nodes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    revision_number: Mapped[int] = mapped_column(Integer, default=0)


class Pod(Standard, Base):
    """A pod sandbox on a cluster node, with an address from the node's lease."""

    __tablename__ = "pods"
    cluster_id: Mapped[str] = mapped_column(String(36), index=True)
    node: Mapped[str] = mapped_column(String(255))          # the node's logical name
    sandbox_id: Mapped[str] = mapped_column(String(36))     # the node's sandbox
    address: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="BUILD")
    status_reason: Mapped[str] = mapped_column(String(255), default="")   # why ERROR, from the agent
    # "": a netbay sandbox the agent makes and plugs; "docker": a Docker container the
    # libnetwork plugin plugs into the node (the agent leaves it alone)
    runtime: Mapped[str] = mapped_column(String(16), default="", server_default="")
    # Its cluster's labels and its own (string values), see netbay/coe/labelscope.py.
    labels: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=dict, nullable=True)
    __table_args__ = (UniqueConstraint("cluster_id", "address"), UniqueConstraint("cluster_id", "name"))


class LBListenerStats(Base):
    """A listener's traffic as its dataplane counted it (Octavia's ``listener_statistics``).

    The agent reports its kernel counters as they are (``epoch`` names the counters:
    a rebuilt namespace or restarted agent starts new ones at zero); what earlier
    epochs counted is carried in ``carried_*`` so the totals never go back."""

    __tablename__ = "lb_listener_stats"
    listener_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    loadbalancer_id: Mapped[str] = mapped_column(String(36), index=True)
    epoch: Mapped[str] = mapped_column(String(64), default="")
    bytes_in: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_out: Mapped[int] = mapped_column(BigInteger, default=0)
    total_connections: Mapped[int] = mapped_column(BigInteger, default=0)
    active_connections: Mapped[int] = mapped_column(BigInteger, default=0)
    request_errors: Mapped[int] = mapped_column(BigInteger, default=0)
    carried_bytes_in: Mapped[int] = mapped_column(BigInteger, default=0)
    carried_bytes_out: Mapped[int] = mapped_column(BigInteger, default=0)
    carried_total_connections: Mapped[int] = mapped_column(BigInteger, default=0)
    carried_request_errors: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

# --- Magnum's conductors and cluster CAs (issue 16: netbay/coe/mservices.py, certificates.py) ---


class MService(Base):
    """A running conductor's heartbeat, as Magnum keeps ``magnum_service``: one row per
    (host, binary); ``state`` is computed from ``last_seen_up`` when listed."""

    __tablename__ = "coe_mservices"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(255))
    binary: Mapped[str] = mapped_column(String(255))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    disabled_reason: Mapped[str | None] = mapped_column(String(255), nullable=True)
    forced_down: Mapped[bool] = mapped_column(Boolean, default=False)
    last_seen_up: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    report_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    __table_args__ = (UniqueConstraint("host", "binary"),)


class ClusterCA(Base):
    """A cluster's certificate authority (Magnum keeps it in its cert manager); goes
    with its cluster."""

    __tablename__ = "coe_cluster_cas"
    cluster_id: Mapped[str] = mapped_column(ForeignKey("coe_clusters.id", ondelete="CASCADE"), primary_key=True)
    cert_pem: Mapped[str] = mapped_column(Text)
    key_pem: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class Keypair(Base):
    """An SSH public key a user registered (Nova's os-keypairs: per user, by name);
    cluster templates and clusters name one in ``keypair_id`` / ``keypair``."""

    __tablename__ = "keypairs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(255))
    type: Mapped[str] = mapped_column(String(16), default="ssh")
    public_key: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

class Role(Base):
    """A Keystone role; assignments name it (``RoleAssignment.role``), the API shows its id."""

    __tablename__ = "roles"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=lambda: uuid.uuid4().hex)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")


class ApplicationCredential(Base):
    """Keystone's application credential: a named secret that logs its user into one
    project with (a subset of) the roles the user holds there."""

    __tablename__ = "application_credentials"
    id: Mapped[str] = mapped_column(String(64), primary_key=True, default=lambda: uuid.uuid4().hex)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str] = mapped_column(Text, default="")
    secret_hash: Mapped[str] = mapped_column(Text)
    roles: Mapped[list[Any]] = mapped_column(default=list)   # role names
    expires_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    unrestricted: Mapped[bool] = mapped_column(Boolean, default=False)
    __table_args__ = (UniqueConstraint("user_id", "name"),)


class RevokedToken(Base):
    """A token revoked before its expiry (``DELETE /v3/auth/tokens``), by its audit id as
    Keystone's revocation events name it; every process sharing the database refuses it.
    The row is only needed until the token would have expired anyway."""

    __tablename__ = "revoked_tokens"
    audit_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime, index=True)

# --- issue 10: quotas, RBAC policies, trunks ---------------------------------------


class Quota(Base):
    """A project's limit for one resource where it differs from the default (Neutron's ``quotas``)."""

    __tablename__ = "quotas"
    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    resource: Mapped[str] = mapped_column(String(64), primary_key=True)
    limit: Mapped[int] = mapped_column(Integer)


class RbacPolicy(Base):
    """Access to one object granted to one project (or ``*``), as Neutron's ``rbac-policies``."""

    __tablename__ = "rbac_policies"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    object_type: Mapped[str] = mapped_column(String(32))
    object_id: Mapped[str] = mapped_column(String(36), index=True)
    action: Mapped[str] = mapped_column(String(32))
    target_project: Mapped[str] = mapped_column(String(64), index=True)
    __table_args__ = (UniqueConstraint("object_type", "object_id", "action", "target_project"),)


class Trunk(Standard, Base):
    """A parent port carrying subports told apart by VLAN id (Neutron's ``trunk``)."""

    __tablename__ = "trunks"
    # A port removed by netbay itself (a sandbox's, say) takes its trunk along; the API
    # refuses to delete a parent port first (``PortInUseAsTrunkParent``).
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), unique=True)
    admin_state_up: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default="DOWN")

    sub_ports: Mapped[list[SubPort]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="SubPort.segmentation_id")


class SubPort(Base):
    __tablename__ = "trunk_subports"
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), primary_key=True)
    trunk_id: Mapped[str] = mapped_column(ForeignKey("trunks.id", ondelete="CASCADE"), index=True)
    segmentation_type: Mapped[str] = mapped_column(String(32))
    segmentation_id: Mapped[int] = mapped_column(Integer)
    __table_args__ = (UniqueConstraint("trunk_id", "segmentation_type", "segmentation_id"),)

# --- neutron2: floating IP port forwardings (issue 29) -------------------------


class PortForwarding(Base):
    """A floating IP's protocol and port DNATed to a port's fixed IP and port
    (Neutron's ``floating-ip-port-forwarding``). The keys unique here are Neutron's."""

    __tablename__ = "port_forwardings"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    floatingip_id: Mapped[str] = mapped_column(ForeignKey("floatingips.id", ondelete="CASCADE"), index=True)
    protocol: Mapped[str] = mapped_column(String(16))
    # A range (``floating-ip-port-forwarding-port-ranges``) is its first port here and
    # its last in ``*_end``; a single port has both equal.
    external_port: Mapped[int] = mapped_column(Integer)
    internal_port: Mapped[int] = mapped_column(Integer)
    external_port_end: Mapped[int] = mapped_column(Integer)
    internal_port_end: Mapped[int] = mapped_column(Integer)
    internal_ip_address: Mapped[str] = mapped_column(String(64))
    internal_port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), index=True)
    description: Mapped[str] = mapped_column(String(255), default="")
    __table_args__ = (
        UniqueConstraint("floatingip_id", "external_port", "protocol", name="uniq_pf_external"),
        UniqueConstraint("internal_port_id", "internal_ip_address", "internal_port", "protocol",
                         name="uniq_pf_internal"),
    )

class SecurityGroupRuleTemplate(Base):
    """A rule every new security group starts with (Neutron's
    ``security-groups-default-rules``): the default groups those ``used_in_default_sg``,
    the others those ``used_in_non_default_sg``; ``remote_group_id`` ``PARENT`` is the
    new group itself. Seeded by migration 0021 with Neutron's four defaults."""

    __tablename__ = "default_security_group_rules"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    direction: Mapped[str] = mapped_column(String(8))
    ethertype: Mapped[str] = mapped_column(String(8))
    protocol: Mapped[str | None] = mapped_column(String(40), nullable=True)
    port_range_min: Mapped[int | None] = mapped_column(Integer, nullable=True)
    port_range_max: Mapped[int | None] = mapped_column(Integer, nullable=True)
    remote_ip_prefix: Mapped[str | None] = mapped_column(String(64), nullable=True)
    remote_group_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    remote_address_group_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    description: Mapped[str] = mapped_column(String(255), default="")
    used_in_default_sg: Mapped[bool] = mapped_column(Boolean, default=True)
    used_in_non_default_sg: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class MeteringLabel(Standard, Base):
    """A metering label (Neutron's ``metering``): traffic of the project's routers to count."""

    __tablename__ = "metering_labels"
    shared: Mapped[bool] = mapped_column(Boolean, default=False)


class MeteringLabelRule(Base):
    __tablename__ = "metering_label_rules"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    metering_label_id: Mapped[str] = mapped_column(ForeignKey("metering_labels.id", ondelete="CASCADE"), index=True)
    direction: Mapped[str] = mapped_column(String(8))
    excluded: Mapped[bool] = mapped_column(Boolean, default=False)
    remote_ip_prefix: Mapped[str | None] = mapped_column(String(64), nullable=True)
    source_ip_prefix: Mapped[str | None] = mapped_column(String(64), nullable=True)
    destination_ip_prefix: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class AddressGroup(Standard, Base):
    """A named list of CIDRs a security group rule may name as its remote end
    (Neutron's ``address-group``)."""

    __tablename__ = "address_groups"
    addresses: Mapped[list[str]] = mapped_column(JSON, default=list)


class QosPolicy(Standard, Base):
    """A QoS policy (Neutron's ``qos``): rules a port or network it is given obeys."""

    __tablename__ = "qos_policies"
    shared: Mapped[bool] = mapped_column(Boolean, default=False)
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)

    rules: Mapped[list[QosRule]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="QosRule.created_at")


class QosRule(Base):
    """One rule of a policy; ``type`` says which of the value columns it uses
    (bandwidth_limit: max_kbps, max_burst_kbps, direction; dscp_marking: dscp_mark;
    minimum_bandwidth: min_kbps, direction)."""

    __tablename__ = "qos_rules"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    policy_id: Mapped[str] = mapped_column(ForeignKey("qos_policies.id", ondelete="CASCADE"), index=True)
    type: Mapped[str] = mapped_column(String(32))
    direction: Mapped[str] = mapped_column(String(8), default="egress")
    max_kbps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_burst_kbps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    dscp_mark: Mapped[int | None] = mapped_column(Integer, nullable=True)
    min_kbps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    __table_args__ = (UniqueConstraint("policy_id", "type", "direction", name="uniq_qos_rule_kind"),)


# --- containers (issue 11: the Zun-compatible container API) -----------------


class ContainerNetwork(Base):
    """A netbay network made usable by containers (Zun's ``network``), per project;
    optionally pinned to one subnet pool and subnet of it (the spec's --neutron-pool,
    --neutron-subnet). Its Docker network is named by ``network_id``."""

    __tablename__ = "container_networks"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    user_id: Mapped[str] = mapped_column(String(64), default="")
    name: Mapped[str] = mapped_column(String(255), default="")
    # The network backend's network (no foreign key: it may be a cloud's, as in Zun).
    network_id: Mapped[str] = mapped_column(String(36), index=True)
    subnetpool_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    subnet_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    __table_args__ = (UniqueConstraint("project_id", "network_id"),)


class Container(Base):
    """A Zun container: what was asked for and what Docker made of it."""

    __tablename__ = "containers"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(String(64), index=True)
    user_id: Mapped[str] = mapped_column(String(64), default="")
    name: Mapped[str] = mapped_column(String(255), default="", index=True)
    image: Mapped[str] = mapped_column(String(255))
    command: Mapped[list[Any]] = mapped_column(JSON, default=list)
    environment: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    workdir: Mapped[str] = mapped_column(String(255), default="")
    hostname: Mapped[str] = mapped_column(String(63), default="")
    status: Mapped[str] = mapped_column(String(16), default="Creating")
    status_reason: Mapped[str] = mapped_column(Text, default="")
    task_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    run: Mapped[bool] = mapped_column(Boolean, default=False)        # start once created
    host: Mapped[str] = mapped_column(String(255), default="")
    docker_id: Mapped[str] = mapped_column(String(64), default="")
    security_groups: Mapped[list[Any]] = mapped_column(JSON, default=list)   # ids
    exposed_ports: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # Placed on a cluster node (Zun's ``hints``: cluster=, node=): no ports, a pod row
    # (``runtime: docker``) the plugin makes, whose id is kept once Docker made it.
    cluster_id: Mapped[str] = mapped_column(String(36), default="", server_default="")
    node: Mapped[str] = mapped_column(String(255), default="", server_default="")
    pod_id: Mapped[str] = mapped_column(String(36), default="", server_default="")
    # What Docker is given (Zun's: CPU shares 1024 × cpu, memory MiB, a restart policy,
    # ``mounts`` as checked: local files and volumes, never Cinder's).
    cpu: Mapped[float | None] = mapped_column(Float, nullable=True)
    memory: Mapped[str | None] = mapped_column(String(16), nullable=True)
    restart_policy: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    mounts: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)


class ContainerAction(Base):
    """Zun's ``container_actions``: one record per request that acted on a container, with
    its events (``[{event, start_time, finish_time, result, traceback}]``)."""

    __tablename__ = "container_actions"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    container_id: Mapped[str] = mapped_column(ForeignKey("containers.id", ondelete="CASCADE"), index=True)
    request_id: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(32))
    project_id: Mapped[str] = mapped_column(String(64), default="")
    user_id: Mapped[str] = mapped_column(String(64), default="")
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    start_time: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finish_time: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    events: Mapped[list[Any]] = mapped_column(JSON, default=list)


class NetworkAttachment(Base):
    """The spec's many-to-many ``network_attachment``: a container on a container
    network through a port. ``auto_delete``: the container made the port (deleted
    with it); otherwise the port was the user's and is unbound, kept."""

    __tablename__ = "network_attachments"
    container_id: Mapped[str] = mapped_column(ForeignKey("containers.id", ondelete="CASCADE"), primary_key=True)
    port_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    container_network_id: Mapped[str] = mapped_column(ForeignKey("container_networks.id"), index=True)
    network_id: Mapped[str] = mapped_column(String(36))
    seq: Mapped[int] = mapped_column(Integer, default=0)
    auto_delete: Mapped[bool] = mapped_column(Boolean, default=True)
    # The port's [{ip_address, subnet_id}] when the container took it: the port may be a
    # cloud's (not in this database), and Zun shows the addresses it recorded too.
    fixed_ips: Mapped[list[Any]] = mapped_column(JSON, default=list)


# --- port mirroring (issue 13: Neutron's Tap-as-a-Service) -------------------


class TapService(Standard, Base):
    """Where mirrored traffic goes: a port (Neutron TaaS's ``tap_service``)."""

    __tablename__ = "tap_services"
    port_id: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16), default="DOWN")


class TapFlow(Standard, Base):
    """A port whose traffic (``IN``, ``OUT`` or ``BOTH``) is copied to a tap service."""

    __tablename__ = "tap_flows"
    tap_service_id: Mapped[str] = mapped_column(ForeignKey("tap_services.id", ondelete="CASCADE"), index=True)
    source_port: Mapped[str] = mapped_column(ForeignKey("ports.id", ondelete="CASCADE"), index=True)
    direction: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(16), default="DOWN")

# --- cluster work leases (issue 13: several processes on one database, netbay/coe/worklease.py) ---


class WorkLease(Base):
    """Which process builds, scales or deletes a cluster now, until when. The owner renews
    ``expires_at``; once it lapses (the owner died) another process takes the work over.
    No foreign key: the lease goes in the same transaction as the deleted cluster."""

    __tablename__ = "coe_work_leases"
    cluster_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(16))
    expires_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    taken_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow_precise)
    takeovers: Mapped[int] = mapped_column(Integer, default=0)   # taken from an owner whose lease lapsed

class K8sObject(Base):
    """A Kubernetes object a source handed the mapping controller (issue 12): the
    desired state a resync converges netbay's resources to (``netbay.k8s``)."""

    __tablename__ = "k8s_objects"
    cluster_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(253), primary_key=True)
    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
