"""What every table shares: the declarative base, ids, timestamps and Neutron's
standard attributes."""

from __future__ import annotations

import uuid
from datetime import datetime, UTC
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import JSON, DateTime, Integer, String, Table
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def new_id() -> str:
    return str(uuid.uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0, tzinfo=None)


def utcnow_precise() -> datetime:
    """Creation times to the microsecond: Magnum lists in creation order by default."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}
    if TYPE_CHECKING:  # every model here is a plain table (SQLAlchemy types it as any FromClause)
        __table__: ClassVar[Table]


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
