"""What runs on a cluster: its container network (each node's lease), its pods and the
Kubernetes objects the mapping controller converges to.

No foreign key to ``coe_clusters`` on purpose, as the stacks': the conductor removes
these rows when it deletes the cluster."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from netbay.store.models.base import Base, Standard, utcnow


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
    # Its cluster's labels and its own (string values), see netbay/store/labels.py.
    labels: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=dict, nullable=True)
    __table_args__ = (UniqueConstraint("cluster_id", "address"), UniqueConstraint("cluster_id", "name"))


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
