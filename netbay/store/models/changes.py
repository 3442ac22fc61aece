"""The change log: one row per committed change, the reconcilers' stream of desired state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from netbay.store.models.base import Base, utcnow


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
