"""Zun's tables (the container API): container networks, containers, their actions,
and their attachments to networks through ports."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from netbay.store.models.base import Base, new_id, utcnow


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
