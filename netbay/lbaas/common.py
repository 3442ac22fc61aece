"""What every Octavia resource shares: statuses, Octavia's wording of errors,
value types for request bodies, and the ``LBResource`` base.

``LBResource`` is the network API's generic ``Resource`` (visibility, filters,
paging, tags, change log) with Octavia's not-found wording and timestamps.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import AfterValidator, BeforeValidator
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, Forbidden, NetbayError, NotFound
from netbay.network.resource import ListQuery, Page, Resource
from netbay.network.types import Body
from netbay.store.models import Tag

PROVIDER = "netbay"
PROVIDER_DESCRIPTION = "netbay: network namespaces and nftables on this machine"

ACTIVE = "ACTIVE"
ERROR = "ERROR"
PENDING_CREATE = "PENDING_CREATE"
PENDING_UPDATE = "PENDING_UPDATE"
PENDING_DELETE = "PENDING_DELETE"
PENDING = frozenset({PENDING_CREATE, PENDING_UPDATE, PENDING_DELETE})
PROVISIONING_STATUSES = frozenset({ACTIVE, ERROR, *PENDING})
OPERATING_STATUSES = frozenset({"ONLINE", "DRAINING", "OFFLINE", "DEGRADED", "ERROR", "NO_MONITOR"})
OFFLINE = "OFFLINE"
NO_MONITOR = "NO_MONITOR"
INT_MAX = 2**31 - 1


# --- Octavia's errors -----------------------------------------------------------------


def not_found(kind: str, obj_id: str) -> NotFound:
    """``Load Balancer X not found.`` (404), as Octavia's NotFound words it."""
    return NotFound(f"{kind} {obj_id} not found.")


def invalid_subresource(kind: str, obj_id: str) -> BadRequest:
    """A referenced network object that does not exist (or is not the caller's): 400."""
    return BadRequest(f"{kind} {obj_id} not found.")


def validation(detail: str) -> BadRequest:
    return BadRequest(f"Validation failure: {detail}")


class ProviderUnsupportedOption(NetbayError):
    """Octavia's ``ProviderUnsupportedOptionError``: 501, which clients and test tooling
    read as "not implemented by this provider" (a skip), not as a bad request."""

    status = 501
    kind = "ProviderUnsupportedOptionError"


def not_offered(what: str, provider: str = PROVIDER) -> ProviderUnsupportedOption:
    """An Octavia option ``provider`` does not realize (yet): refused, never pretended."""
    return ProviderUnsupportedOption(f"Provider '{provider}' does not support a requested option: {what}")


def forbidden() -> Forbidden:
    """Octavia's ``PolicyForbidden`` (403): the answer for another project's object."""
    return Forbidden("Policy does not allow this request to be performed.")


def immutable(kind: str, obj_id: str) -> Conflict:
    return Conflict(f"{kind} {obj_id} is immutable and cannot be updated.")


def pending_state(status: str, lb_id: str) -> Conflict:
    return Conflict(f"Invalid state {status} of loadbalancer resource {lb_id}")


def invalid_input(attr: str, value: Any, reason: str) -> BadRequest:
    """WSME's wording, which Octavia answers with for a malformed attribute."""
    return BadRequest(f"Invalid input for field/attribute {attr}. Value: '{value}'. {reason}")


# --- value types (WSME's messages) ------------------------------------------------------


def one_of(*choices: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"Value should be one of: {', '.join(choices)}")
        return value

    return check


def between(low: int | None, high: int | None) -> Callable[[int], int]:
    def check(value: int) -> int:
        if low is not None and value < low:
            raise ValueError(f"Value should be greater or equal to {low}")
        if high is not None and value > high:
            raise ValueError(f"Value should be lower or equal to {high}")
        return value

    return check


def _max_chars(limit: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        if len(value) > limit:
            raise ValueError(f"Value should have a maximum character requirement of {limit}")
        if "\x00" in value:
            raise ValueError("Value should not contain NUL characters")
        return value

    return check


def _uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise ValueError("Value should be UUID format") from None


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError("Value should be IPv4 or IPv6 format") from None


def _strict_int(value: Any) -> Any:
    """JSON numbers only (WSME takes no booleans or floats for an integer)."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("Value should be an integer")
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise ValueError("Value should be an integer") from None
    return value


def _strict_bool(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in {"true", "false"}:
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ValueError("Value should be a boolean")
    return value


Str255 = Annotated[str, AfterValidator(_max_chars(255))]
UUID = Annotated[str, AfterValidator(_uuid)]
IP = Annotated[str, AfterValidator(_ip)]
Bool = Annotated[bool, BeforeValidator(_strict_bool)]
# Every integer column is 32-bit (PostgreSQL refuses more).
Int = Annotated[int, BeforeValidator(_strict_int), AfterValidator(between(None, INT_MAX))]
PortNumber = Annotated[int, BeforeValidator(_strict_int), AfterValidator(between(1, 65535))]
Tags = list[Str255]


# --- the base resource -------------------------------------------------------------------


def octavia_time(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%S") if value else None


def standard(obj: Any, tags: list[str]) -> dict[str, Any]:
    """Attributes every Octavia object renders alike (``updated_at`` null until changed)."""
    return {
        "id": obj.id,
        "name": obj.name,
        "project_id": obj.project_id,
        "provisioning_status": obj.provisioning_status,
        "operating_status": obj.operating_status,
        "admin_state_up": obj.admin_state_up,
        "created_at": octavia_time(obj.created_at),
        "updated_at": octavia_time(obj.updated_at) if obj.revision_number else None,
        "tags": tags,
    }


class LBBody(Body):
    """An Octavia request object. ``not_offered``: Octavia attributes this provider does
    not realize, refused (400) unless given as a value meaning "not asked for"."""

    # attribute -> the values that mean "not asked for" (accepted and ignored)
    not_offered: ClassVar[dict[str, tuple[Any, ...]]] = {}


# session.info key: the objects a fully populated create has made so far (``new_tree``).
NEW_TREE = "netbay.lbaas.new_tree"


@dataclasses.dataclass(frozen=True)
class Made:
    """One object of a new tree: its collection, row, tags and (at the tree's end) rendering."""
    resource: LBResource
    obj: Any
    tags: list[str]
    data: dict[str, Any]


@contextmanager
def new_tree(session: Session) -> Iterator[list[Made]]:
    """A load balancer made whole in one transaction (Octavia's fully populated create):
    each new object's change row is written once, rendered as the tree stands at the
    end — not once as made and again as each child joins it. Yields the objects made,
    in order, rendered once the block ends without an error."""
    made: list[Made] = []
    session.info[NEW_TREE] = made
    try:
        yield made
    finally:
        session.info.pop(NEW_TREE, None)
    session.flush()
    for m in made:
        m.data.update(m.resource.render(session, m.obj, m.tags))


# Each Octavia collection's handle, by its model (see ``LBResource``).
HANDLES: dict[type, LBResource] = {}


def handle(model: type) -> LBResource:
    """The collection of ``model``'s rows; its module is loaded with the service
    (:mod:`netbay.lbaas.registry`), never silently skipped."""
    try:
        return HANDLES[model]
    except KeyError:
        raise RuntimeError(f"no load-balancer collection of {model.__name__} loaded "
                           "(import netbay.lbaas.registry)") from None


class LBResource(Resource):
    """An Octavia collection: the generic resource with Octavia's words.

    Each handle joins :data:`HANDLES` as it is made: a load balancer's tree is built
    upward (a listener's module imports the load balancers', a member's the pools'),
    so a parent that removes its children, or a claim that logs them, finds their
    collection there (:func:`handle`) instead of importing the modules above it.
    """

    def __init__(self) -> None:
        HANDLES[self.model] = self

    # Octavia's name of the object in messages ("Load Balancer", "Health Monitor").
    title: ClassVar[str]
    readonly: ClassVar[set[str]] = {"id", "provisioning_status", "operating_status", "created_at",
                                    "updated_at"}

    if TYPE_CHECKING:  # each collection removes its own rows (and its children) its own way
        def remove(self, session: Session, obj: Any) -> None: ...

    def created(self, session: Session, obj: Any, tags: list[str] | None) -> None:
        """Log a new object (with its tags, which leave it at revision 0); inside
        :func:`new_tree`, its row is rendered once, at the tree's end."""
        wanted = self.set_tags(session, obj, tags) if tags else []
        if tags:
            obj.revision_number = 0
        made = session.info.get(NEW_TREE)
        if made is None:
            self.record(session, obj, "create")
            return
        data: dict[str, Any] = {}   # the row's and the answer's, filled in by new_tree
        self.record(session, obj, "create", data)
        made.append(Made(self, obj, wanted, data))

    def updated(self, session: Session, obj: Any, tags: list[str] | None) -> None:
        """Log a changed object: its tags replaced when given, and ``PENDING_UPDATE``
        until the realizer reports it (Octavia's life cycle)."""
        if tags is not None:
            self.set_tags(session, obj, tags)
        obj.provisioning_status = PENDING_UPDATE
        self.touch(obj)
        self.record(session, obj, "update")

    def erase(self, session: Session, obj: Any) -> None:
        """Delete a child object with its tags, logging it (no claim: for callers that hold one)."""
        session.execute(Tag.__table__.delete().where(Tag.resource_id == obj.id))
        self.record(session, obj, "delete", None)
        session.delete(obj)
        session.flush()

    def get(self, session: Session, ctx: Context, obj_id: str, *, for_update: bool = False) -> Any:
        try:
            return super().get(session, ctx, obj_id, for_update=for_update)
        except NotFound:
            raise self.refusal(session, obj_id) from None

    def refusal(self, session: Session, obj_id: str) -> NetbayError:
        """Why the caller cannot have ``obj_id``: Octavia looks the object up in every
        project, then its policy check refuses another project's (403); 404 only if
        it does not exist at all."""
        exists = session.scalar(select(self.model.id).where(self.model.id == obj_id))
        return forbidden() if exists is not None else not_found(self.title, obj_id)

    @staticmethod
    def child_body(body: LBBody) -> tuple[dict[str, Any], list[str]]:
        """A child's given fields and its tags; children belong to their load balancer's project."""
        given = body.given()
        given.pop("project_id", None)
        given.pop("tenant_id", None)
        return given, given.pop("tags", None) or []

    def list(self, session: Session, ctx: Context, query: ListQuery) -> Page:
        if not query.sort:  # Octavia's default order (its pagination helper's); the caller's query is kept
            query = dataclasses.replace(query, sort=[("created_at", "asc"), ("id", "asc")])
        try:
            return super().list(session, ctx, query)
        except NotFound:  # only the marker can be missing
            raise BadRequest(f"Supplied pagination marker '{query.marker}' is not valid.") from None

    def set_status(self, session: Session, obj: Any, provisioning: str | None = None,
                   operating: str | None = None) -> bool:
        """Change statuses, logging the change if there was one."""
        changed = False
        if provisioning is not None and obj.provisioning_status != provisioning:
            obj.provisioning_status = provisioning
            changed = True
        if operating is not None and obj.operating_status != operating:
            obj.operating_status = operating
            changed = True
        if changed:
            self.touch(obj)
            self.record(session, obj, "update")
        return changed


__all__ = [
    "ACTIVE", "Bool", "ERROR", "HANDLES", "IP", "Int", "LBBody", "LBResource", "Made", "NEW_TREE", "OFFLINE",
    "PENDING", "new_tree",
    "ProviderUnsupportedOption", "forbidden",
    "PENDING_CREATE", "PENDING_DELETE", "PENDING_UPDATE", "PROVIDER", "PortNumber", "Str255",
    "Tags", "UUID", "between", "handle", "immutable", "invalid_input", "not_found", "not_offered", "one_of",
    "pending_state", "standard", "validation",
]
