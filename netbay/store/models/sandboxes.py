"""netbay's own sandboxes: bare network namespaces that ports plug into."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from netbay.store.models.base import Base, Standard


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
