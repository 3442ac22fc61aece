"""Neutron's extension tables: quotas, RBAC policies, trunks, metering labels, QoS
policies and Tap-as-a-Service (port mirroring)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, DateTime, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from netbay.store.models.base import Base, Standard, new_id, utcnow


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
