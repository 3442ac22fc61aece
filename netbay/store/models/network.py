"""Neutron's core tables: networks, subnets with their pools and address scopes, ports
with their addresses and security groups, routers, floating IPs and their port
forwardings, tags.

One table per Neutron resource, named as Neutron names the API collection.
Addresses that a port, a router gateway or a floating IP holds all live in
``ip_allocations``, whose primary key (subnet, address) makes a duplicate IP
impossible whatever the callers do.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy import false as sa_false
from sqlalchemy import true as sa_true
from sqlalchemy.orm import Mapped, mapped_column, relationship

from netbay.store.models.base import Base, Standard, new_id


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
    # Issue 29 (neutron6, ``qos-fip``): the QoS policy whose bandwidth limits the floating IP's traffic obeys.
    qos_policy_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)


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
