"""Neutron's security groups: groups, their rules, each project's default group, the
rules a new group starts with, and the address groups a rule may name."""

from __future__ import annotations

import ipaddress
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from netbay.store.models.base import Base, Standard, new_id, utcnow


class SecurityGroup(Standard, Base):
    __tablename__ = "securitygroups"
    stateful: Mapped[bool] = mapped_column(Boolean, default=True)

    rules: Mapped[list[SecurityGroupRule]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="SecurityGroupRule.created_at",
        foreign_keys="SecurityGroupRule.security_group_id",
    )


def normalized_cidr(prefix: str | None) -> str | None:
    """A rule's ``remote_ip_prefix`` as its network (``10.0.0.5/24`` -> ``10.0.0.0/24``)."""
    return None if prefix is None else str(ipaddress.ip_network(prefix, strict=False))


def _normalized_default(context: Any) -> str | None:
    """``normalized_cidr`` of a row inserted without one (rules made from templates)."""
    return normalized_cidr(context.get_current_parameters().get("remote_ip_prefix"))


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
    # As the client wrote it (host bits kept: ``10.0.0.5/24``), as Neutron keeps it;
    # ``normalized_cidr`` is its network (``10.0.0.0/24``), what the dataplane matches.
    remote_ip_prefix: Mapped[str | None] = mapped_column(String(64), nullable=True)
    normalized_cidr: Mapped[str | None] = mapped_column(String(64), nullable=True, default=_normalized_default)
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


class AddressGroup(Standard, Base):
    """A named list of CIDRs a security group rule may name as its remote end
    (Neutron's ``address-group``)."""

    __tablename__ = "address_groups"
    addresses: Mapped[list[str]] = mapped_column(JSON, default=list)
