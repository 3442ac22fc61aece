"""Magnum's tables (container-infra API v1): cluster templates and clusters, the
conductors' heartbeats, cluster CAs, and how clusters are built: the work leases
that say which process builds one now, and the embedded executor's stacks.

The stacks have no foreign key to ``coe_clusters`` on purpose (owned by the executor
of netbay/coe/executor.py), so a stack can be cleaned up even after its cluster row
went."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from netbay.store.models.base import Base, new_id, utcnow, utcnow_precise


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
