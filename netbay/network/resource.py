"""What every Neutron resource shares: visibility, filters, sorting, paging,
tags, standard attributes and the change log.

A resource module subclasses ``Resource`` once and fills in ``render``,
``create``, ``update`` and ``delete``; everything generic about the Neutron API
(``fields=``, ``sort_key``, ``limit``/``marker``, ``tags-any``…) lives here.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel
from sqlalchemy import DateTime, Select, and_, bindparam, delete, false, func, insert, or_, select, true
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.context import Context
from netbay.errors import BadRequest, NotFound, not_found, policy_refused
from netbay.network.converters import MAX_TAG, Converter, to_bool, to_int, to_timestamp, valid_tag
from netbay.store import changelog
from netbay.store.models import Tag, utcnow


def timestamp(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


@dataclass(frozen=True)
class Filter:
    """An attribute the list call filters and sorts on."""

    column: Any
    convert: Converter = str
    sortable: bool = True


@dataclass
class ListQuery:
    filters: dict[str, list[str]]
    fields: list[str]
    sort: list[tuple[str, str]]
    limit: int | None
    marker: str | None
    page_reverse: bool = False


@dataclass
class Page:
    items: list[dict[str, Any]]
    next_marker: str | None
    previous_marker: str | None
    # The ids of the page's first and last rows and the limit applied: what Neutron's
    # links are made of (``next_marker`` and ``previous_marker`` serve Octavia's).
    first_id: str | None = None
    last_id: str | None = None
    limit: int | None = None


MAX_PAGE = 10_000
# Statements built once: no statement to build nor cache key to compute per call.
_TAGS = Tag.__table__
_TAGS_OF_ONE = select(_TAGS.c.resource_id, _TAGS.c.tag).where(_TAGS.c.resource_id == bindparam("id")) \
    .order_by(_TAGS.c.tag)
_TAGS_OF_MANY = select(_TAGS.c.resource_id, _TAGS.c.tag) \
    .where(_TAGS.c.resource_id.in_(bindparam("ids", expanding=True))).order_by(_TAGS.c.tag)
_INSERT_TAGS = insert(_TAGS)


class Resource:
    """One Neutron collection: its table, its filters and its rules."""

    member: ClassVar[str]
    collection: ClassVar[str]
    # Where the collection hangs under /v2.0/ (``taas/`` for Tap-as-a-Service's).
    path_prefix: ClassVar[str] = ""
    model: ClassVar[type[Any]]
    has_tags: ClassVar[bool] = True
    # Attributes only admins see (Neutron's ``get_<member>:<attr>`` admin-only policies).
    admin_only: ClassVar[frozenset[str]] = frozenset()
    # The pydantic bodies of POST and PUT (``update_body = None``: no PUT).
    create_body: ClassVar[type[BaseModel]]
    update_body: ClassVar[type[BaseModel] | None] = None
    # Attributes that exist but no request may set (refused with Neutron's wording).
    readonly: ClassVar[set[str]] = {"id", "status", "created_at", "updated_at", "revision_number"}
    # Attributes list calls filter and sort on (API name -> column).
    filters: ClassVar[dict[str, Filter]] = {}

    # -- hooks -----------------------------------------------------------------------

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        """Rows a non-admin may see; default: own project only."""
        return self.model.project_id == ctx.project_id

    def render(self, session: Session, obj: Any, tags: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    if TYPE_CHECKING:  # the writes a collection offers, each with its own body type; the
        # API routes only those a collection defines (a method here would be offered by all)
        def create(self, *args: Any, **kwargs: Any) -> Any: ...
        def update(self, *args: Any, **kwargs: Any) -> Any: ...
        def delete(self, *args: Any, **kwargs: Any) -> Any: ...

    def extra_filter(self, name: str, values: list[str]) -> ColumnElement[bool] | None:
        """Filters that are not a plain column (e.g. a port's ``fixed_ips``)."""
        return None

    def fetch(self, session: Session, stmt: Select) -> list[Any]:
        """The rows of a list call, handed to ``render``; a resource listed by the
        thousand may load plain rows instead of ORM objects (ports do)."""
        return list(session.scalars(stmt))

    def before_read(self, store: Any, ctx: Context, filters: dict[str, list[str]]) -> None:
        """Writes a read implies, each in its own transaction, before the read.

        Neutron creates some things on first GET (a project's default security
        group); the read itself then runs in a plain read session.
        """
        return None

    # -- reading -----------------------------------------------------------------------

    def scoped(self, ctx: Context) -> Select:
        stmt = select(self.model)
        if not ctx.is_admin:
            stmt = stmt.where(self.visible(ctx))
        return stmt

    def get(self, session: Session, ctx: Context, obj_id: str, *, for_update: bool = False) -> Any:
        stmt = self.scoped(ctx).where(self.model.id == obj_id)
        if for_update:
            stmt = stmt.with_for_update()
        obj = session.scalars(stmt).one_or_none()
        if obj is None:
            raise self.missing(obj_id)
        return obj

    def missing(self, obj_id: str) -> NotFound:
        """The 404 of an id the caller cannot see, in the API's words for this collection."""
        return not_found(self.member, obj_id)

    def get_owned(self, session: Session, ctx: Context, obj_id: str, action: str = "") -> Any:
        """A row the caller may change: visible and owned (or admin), else 404/403 (``action``
        is Neutron's policy rule, ``update_<member>`` unless given)."""
        obj = self.get(session, ctx, obj_id, for_update=True)
        if not ctx.is_admin and obj.project_id != ctx.project_id:
            raise policy_refused(action or f"update_{self.member}")
        return obj

    def show(self, session: Session, ctx: Context, obj_id: str, fields: list[str]) -> dict[str, Any]:
        obj = self.get(session, ctx, obj_id)
        item = self.for_caller(ctx, self.render(session, obj, self.tags_of(session, [obj.id])[obj.id]))
        return select_fields(item, fields)

    def for_caller(self, ctx: Context, item: dict[str, Any]) -> dict[str, Any]:
        """``item`` as ``ctx`` may see it: without the admin-only attributes for others."""
        if ctx.is_admin or not self.admin_only:
            return item
        return {k: v for k, v in item.items() if k not in self.admin_only}

    def list(self, session: Session, ctx: Context, query: ListQuery) -> Page:
        stmt = self.scoped(ctx)
        for name, values in query.filters.items():
            stmt = stmt.where(self._filter_clause(name, values))
        sort = [(key, direction) for key, direction in query.sort] or [("id", "asc")]
        if all(key != "id" for key, _ in sort):
            sort.append(("id", sort[-1][1]))
        columns = [(self._sort_column(key), direction) for key, direction in sort]
        if query.page_reverse:
            columns = [(col, "desc" if d == "asc" else "asc") for col, d in columns]
        if query.marker:
            marker = session.scalars(self.scoped(ctx).where(self.model.id == query.marker)).one_or_none()
            if marker is None:
                raise not_found(self.member, query.marker)
            stmt = stmt.where(_after(marker, columns))
        stmt = stmt.order_by(*[col.asc() if d == "asc" else col.desc() for col, d in columns])
        limit = min(query.limit, MAX_PAGE) if query.limit else None
        if limit:
            stmt = stmt.limit(limit + 1)
        rows = self.fetch(session, stmt)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit else rows
        if query.page_reverse:
            rows.reverse()
        tags = self.tags_of(session, [r.id for r in rows])
        items = [select_fields(self.for_caller(ctx, self.render(session, r, tags[r.id])), query.fields)
                 for r in rows]
        next_marker = prev_marker = None
        if limit and rows:
            if query.page_reverse:
                prev_marker = rows[0].id if more else None
                next_marker = rows[-1].id
            else:
                next_marker = rows[-1].id if more else None
                prev_marker = rows[0].id if query.marker else None
        return Page(items, next_marker, prev_marker, rows[0].id if rows else None,
                    rows[-1].id if rows else None, limit)

    def _sort_column(self, key: str) -> Any:
        if key == "id":
            return self.model.id
        spec = self.filters.get(key)
        if spec is None or not spec.sortable:
            raise BadRequest(f"{key} is invalid attribute for sort_key")
        return spec.column

    def _filter_clause(self, name: str, values: builtins.list[str]) -> ColumnElement[bool]:
        if name in {"tags", "tags-any", "not-tags", "not-tags-any"} and self.has_tags:
            return self._tag_clause(name, values)
        clause = self.extra_filter(name, values)
        if clause is not None:
            return clause
        spec = self.filters.get(name) if name != "id" else Filter(self.model.id)
        if spec is None:
            raise BadRequest(f"[{name!r}] is invalid attribute for filtering")  # Neutron prints the list
        convert = spec.convert
        if convert is str and isinstance(getattr(spec.column, "type", None), DateTime):
            convert = to_timestamp  # comparing a timestamp with text fails on PostgreSQL
        converted = [None if v == "" and convert is not str else convert(v) for v in values]
        if len(converted) == 1:
            value = converted[0]
            return spec.column.is_(None) if value is None else spec.column == value
        return spec.column.in_([v for v in converted if v is not None])

    def _tag_clause(self, name: str, values: builtins.list[str]) -> ColumnElement[bool]:
        tags = [t for v in values for t in v.split(",") if t]
        if not tags:
            return true()
        if name in {"tags", "not-tags"}:
            # All of them: the resource holds as many matching tags as asked for.
            matching = (
                select(Tag.resource_id)
                .where(Tag.tag.in_(tags))
                .group_by(Tag.resource_id)
                .having(func.count() == len(set(tags)))
            )
        else:
            matching = select(Tag.resource_id).where(Tag.tag.in_(tags))
        clause = self.model.id.in_(matching)
        return ~clause if name.startswith("not-") else clause

    # -- tags ----------------------------------------------------------------------------

    @staticmethod
    def tags_of(session: Session, ids: Sequence[str]) -> dict[str, builtins.list[str]]:
        result: dict[str, list[str]] = {i: [] for i in ids}
        if not ids:
            return result
        conn = session.connection()
        if len(ids) == 1:
            rows = conn.execute(_TAGS_OF_ONE, {"id": ids[0]})
            result[ids[0]].extend(tag for _, tag in rows)
            return result
        for chunk in _chunks(list(ids), 500):
            for rid, tag in conn.execute(_TAGS_OF_MANY, {"ids": chunk}):
                result[rid].append(tag)
        return result

    @staticmethod
    def add_tags(session: Session, resource_id: str, tags: Sequence[str]) -> None:
        """INSERT ``tags`` (new to the resource) as rows, in one executemany: as ORM
        objects they would cost a unit-of-work flush (tagging a new port, as the CNI and
        Docker plugins' creates do, spent about a tenth of the request there)."""
        if tags:
            session.connection().execute(_INSERT_TAGS, [{"resource_id": resource_id, "tag": t} for t in tags])

    def set_tags(self, session: Session, obj: Any, tags: Iterable[str]) -> builtins.list[str]:
        wanted = sorted(set(tags))
        session.execute(delete(Tag).where(Tag.resource_id == obj.id))
        self.add_tags(session, obj.id, wanted)
        self.touch(obj)
        return wanted

    # -- writing -----------------------------------------------------------------------

    @staticmethod
    def touch(obj: Any) -> None:
        obj.updated_at = utcnow()
        obj.revision_number = (obj.revision_number or 0) + 1

    def record(self, session: Session, obj: Any, action: str, data: dict[str, Any] | None = None) -> None:
        """Append to the change log; called for every committed change."""
        if data is None and action != "delete":
            session.flush()
            data = self.render(session, obj, self.tags_of(session, [obj.id])[obj.id] if self.has_tags else [])
        if data is not None:  # the API answers with what the log says (see ``rendered``)
            session.info.setdefault("rendered", {})[(self.member, obj.id)] = data
        # Written at commit, numbered in commit order (netbay/store/changelog.py).
        changelog.append(session, {
            "resource": self.member, "resource_id": obj.id, "action": action,
            "project_id": obj.project_id, "data": data, "at": utcnow(),
        })

    def rendered(self, session: Session, obj: Any) -> dict[str, Any]:
        """The resource as this transaction last recorded it, else rendered afresh."""
        data = session.info.get("rendered", {}).get((self.member, obj.id))
        if data is not None:
            return data
        session.flush()
        return self.render(session, obj, self.tags_of(session, [obj.id])[obj.id])

    def owner_for_create(self, ctx: Context, body: dict[str, Any]) -> str:
        """The project a new resource belongs to: the caller's, or any for admins."""
        project = body.pop("project_id", None)
        tenant = body.pop("tenant_id", None)
        if project and tenant and project != tenant:
            raise BadRequest("'project_id' and 'tenant_id' do not match")
        requested = project or tenant
        if requested and requested != ctx.project_id and not ctx.is_admin:
            # A 400, not a 403: neutron-lib's ``_validate_privileges``.
            raise BadRequest("Specifying 'project_id' other than the authenticated project in request "
                             "is not allowed for the current user.")
        return requested or ctx.project_id


def standard(obj: Any, tags: list[str]) -> dict[str, Any]:
    """The attributes every resource renders the same way."""
    return {
        "id": obj.id,
        "name": obj.name,
        "description": obj.description,
        "project_id": obj.project_id,
        "tenant_id": obj.project_id,
        "created_at": timestamp(obj.created_at),
        "updated_at": timestamp(obj.updated_at),
        "revision_number": obj.revision_number,
        "tags": tags,
    }


def select_fields(item: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    if not fields:
        return item
    return {k: v for k, v in item.items() if k in fields}


def _after(marker: Any, columns: list[tuple[Any, str]]) -> ColumnElement[bool]:
    """Keyset condition: rows strictly after ``marker`` in the given order."""
    clauses = []
    for i, (col, direction) in enumerate(columns):
        value = getattr(marker, col.key)
        equal_before = [c == getattr(marker, c.key) for c, _ in columns[:i]]
        step = col > value if direction == "asc" else col < value
        if value is None:
            step = col.is_not(None) if direction == "asc" else false()
        clauses.append(and_(*equal_before, step))
    return or_(*clauses)


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


__all__ = [
    "MAX_TAG",
    "Converter",
    "Filter",
    "ListQuery",
    "NotFound",
    "Page",
    "Resource",
    "select_fields",
    "standard",
    "to_bool",
    "to_int",
    "to_timestamp",
    "valid_tag",
]
