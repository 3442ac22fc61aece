"""What templates and clusters share: lookup by uuid or name, Magnum's paging and
sorting, generated names, timestamps and the errors Magnum words its own way."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Select, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, Forbidden, NotFound
from netbay.store.models import Cluster

MAX_LIMIT = 1000
_GREEK = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
          "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi",
          "chi", "psi", "omega")


def is_uuid_like(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value.lower()
    except (ValueError, AttributeError, TypeError):
        return False


def generate_name(suffix: str) -> str:
    """A readable name like Magnum's NameGenerator: ``zeta-22-template``."""
    return f"{random.choice(_GREEK)}-{random.randint(1, 99)}-{suffix}"


def timestamp(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%S+00:00") if value else None


def policy_denied(action: str) -> Forbidden:
    return Forbidden(f"Policy doesn't allow {action} to be performed.")


@dataclass(frozen=True)
class Kind:
    """How Magnum names one resource in its messages (``ClusterTemplate``, ``Cluster``)."""

    title: str  # ClusterTemplate
    plural: str  # ClusterTemplates (Magnum says "clusters" for clusters)
    singular: str  # ClusterTemplate (… "cluster")

    def not_found(self, ident: str) -> NotFound:
        return NotFound(f"{self.title} {ident} could not be found.")

    def ambiguous(self) -> Conflict:
        return Conflict(f"Multiple {self.plural} exist with same name. Please use the "
                        f"{self.singular} uuid instead.")


def find(session: Session, model: type[Any], stmt: Select, ident: str, kind: Kind, *, for_update: bool = False) -> Any:
    """The one row ``ident`` (uuid, else name) names in ``stmt``; 404 / 409 as Magnum."""
    if "\x00" in ident:
        raise kind.not_found(ident.replace("\x00", "\\x00"))
    column = model.id if is_uuid_like(ident) else model.name
    query = stmt.where(column == (ident.lower() if column is model.id else ident))
    if for_update:
        query = query.with_for_update()
    rows = list(session.scalars(query.limit(2)))
    if not rows:
        raise kind.not_found(ident)
    if len(rows) > 1:
        raise kind.ambiguous()
    return rows[0]


@dataclass(frozen=True)
class Paging:
    limit: int
    marker: str | None
    sort_key: str
    sort_dir: str


def paging(params: dict[str, str]) -> Paging:
    """``limit``/``marker``/``sort_key``/``sort_dir`` with Magnum's checks."""
    raw = params.get("limit")
    limit = MAX_LIMIT
    if raw is not None:
        try:
            limit = int(raw)
        except ValueError:
            raise BadRequest(f"Invalid input for field/attribute limit. Value: '{raw}'. "
                             f"unable to convert to int") from None
        if limit <= 0:
            raise BadRequest("Limit must be positive")
        limit = min(limit, MAX_LIMIT)
    sort_dir = params.get("sort_dir", "asc")
    if sort_dir not in ("asc", "desc"):
        raise BadRequest(f"Invalid sort direction: {sort_dir}. Acceptable values are 'asc' or 'desc'")
    return Paging(limit, params.get("marker") or None, params.get("sort_key", "id"), sort_dir)


def page(session: Session, model: type[Any], stmt: Select, p: Paging, kind: Kind,
         render: Callable[[Any], dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """One page of ``stmt`` in Magnum's order and the marker of the next page (or None).

    Magnum's ``id`` is its creation-ordered integer key; creation time (then uuid)
    stands for it here."""
    column = model.__table__.columns.get(p.sort_key)
    if p.sort_key == "id":
        order = [model.created_at, model.id]
    elif column is not None and not isinstance(column.type, JSON):
        order = [getattr(model, p.sort_key), model.created_at, model.id]
    else:
        raise BadRequest(f'The sort_key value "{p.sort_key}" is an invalid field for sorting')
    order = [c.desc() if p.sort_dir == "desc" else c.asc() for c in order]
    rows = list(session.scalars(stmt.order_by(*order)))
    if p.marker:
        ids = [r.id for r in rows]
        if p.marker not in ids:
            raise kind.not_found(p.marker)
        rows = rows[ids.index(p.marker) + 1:]
    chosen = rows[: p.limit]
    next_marker = chosen[-1].id if len(chosen) == p.limit and len(rows) > p.limit else None
    return [render(r) for r in chosen], next_marker


def scoped(model: type[Any], ctx: Context) -> Select:
    stmt = select(model)
    return stmt if ctx.is_admin else stmt.where(model.project_id == ctx.project_id)


CLUSTER = Kind("Cluster", "clusters", "cluster")


def get_cluster(session: Session, ctx: Context, ident: str, *, for_update: bool = False) -> Cluster:
    """The cluster ``ident`` (uuid, else name) that ``ctx`` may see; 404 / 409 as Magnum.
    Here, below the cluster service, so that what lives on a cluster (its pods) can
    find it without importing the service that also tears it down."""
    return find(session, Cluster, scoped(Cluster, ctx), ident, CLUSTER, for_update=for_update)
