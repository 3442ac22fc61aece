"""Octavia's tables (API v2): load balancers, listeners, pools, members, health
monitors, L7 policies and rules, and the listeners' traffic statistics."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from netbay.store.models.base import Base, Standard, utcnow


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
