"""Subnet pools: address space that subnets are carved from on request.

The prefix arithmetic (``compact``, ``available``, ``next_prefix``,
``prefix_free``) is pure and property-tested; ``SubnetPools.allocate`` applies
it under the pool's row lock, so two subnets never get overlapping prefixes of
one pool.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BeforeValidator
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, invalid_operation, policy_refused
from netbay.network import rbac
from netbay.network.address_scopes import check_association
from netbay.network.resource import Filter, Resource, standard, to_bool, to_int
from netbay.network.types import CIDR, UUID, Body, Bool, NonBlankName, ProjectID, Tags, Text
from netbay.store.models import Subnet, SubnetPool, Tag

Net = ipaddress.IPv4Network | ipaddress.IPv6Network

BITS = {4: 32, 6: 128}
DEFAULT_MIN_PREFIXLEN = {4: 8, 6: 64}
# Quotas count addresses in /32 units for IPv4 and in /64 units for IPv6.
QUOTA_UNIT = {4: 32, 6: 64}


def _non_negative_int(value: Any) -> Any:
    """Neutron's convert_to_int (Python's ``int()``: ``24``, ``"24"``, ``true``) and then
    non_negative; what ``int()`` refuses is the converter's ``InvalidInput``."""
    try:
        value = int(value)
    except (ValueError, TypeError, OverflowError):
        raise invalid_operation(f"'{value}' is not an integer") from None
    if value < 0:
        raise ValueError(f"'{value}' should be non-negative")
    if value >= 2**31:
        raise ValueError(f"'{value}' is too large")
    return value


NonNegative = Annotated[int, BeforeValidator(_non_negative_int)]


# --- pure prefix arithmetic ---------------------------------------------------------


def _net(value: str | Net) -> Net:
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return value
    return ipaddress.ip_network(value, strict=False)


def compact(prefixes: Iterable[str | Net]) -> list[Net]:
    """Overlapping and adjacent prefixes merged, in address order (Neutron's IPSet.compact)."""
    nets = [_net(p) for p in prefixes]
    result: list[Net] = []
    for version in (4, 6):
        same = [n for n in nets if n.version == version]
        result.extend(ipaddress.collapse_addresses(same))  # type: ignore[type-var]  # one version per call
    return result


def available(prefixes: Iterable[str | Net], allocated: Iterable[str | Net]) -> list[Net]:
    """The pool's space not covered by any allocated prefix, compacted."""
    blocks = compact(prefixes)
    for taken in (_net(t) for t in allocated):
        remaining: list[Net] = []
        for block in blocks:
            if block.version != taken.version or not block.overlaps(taken):
                remaining.append(block)
            elif block.prefixlen < taken.prefixlen:  # the block holds the allocation: cut it out
                remaining.extend(block.address_exclude(taken))
            # else the allocation covers the whole block: drop it
        blocks = remaining
    return compact(blocks)


def next_prefix(prefixes: Iterable[str | Net], allocated: Iterable[str | Net], prefixlen: int) -> Net | None:
    """The first /prefixlen of the smallest free block that can hold one (Neutron's choice)."""
    for block in sorted(available(prefixes, allocated), key=lambda b: -b.prefixlen):
        if block.prefixlen <= prefixlen <= block.max_prefixlen:
            return next(block.subnets(new_prefix=prefixlen))
    return None


def prefix_free(prefixes: Iterable[str | Net], allocated: Iterable[str | Net], cidr: str | Net) -> bool:
    """Whether ``cidr`` lies wholly in free space of the pool."""
    wanted = _net(cidr)
    return any(b.version == wanted.version and b.supernet_of(wanted)
               for b in available(prefixes, allocated))


def within(prefixes: Iterable[str | Net], cidr: str | Net) -> bool:
    wanted = _net(cidr)
    return any(p.version == wanted.version and p.supernet_of(wanted)
               for p in compact(prefixes))


def quota_units(version: int, prefixlen: int) -> float:
    return 2.0 ** (QUOTA_UNIT[version] - prefixlen)


# --- bodies -------------------------------------------------------------------------


class SubnetPoolCreate(Body):
    name: NonBlankName = None  # type: ignore[assignment]  # required: refused in create with Neutron's words
    description: Text = ""
    prefixes: list[CIDR] | None = None
    default_prefixlen: NonNegative | None = None
    min_prefixlen: NonNegative | None = None
    max_prefixlen: NonNegative | None = None
    default_quota: NonNegative | None = None
    shared: Bool = False
    is_default: Bool = False
    address_scope_id: UUID | None = None
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class SubnetPoolUpdate(Body):
    name: NonBlankName | None = None
    description: Text | None = None
    prefixes: list[CIDR] | None = None
    default_prefixlen: NonNegative | None = None
    min_prefixlen: NonNegative | None = None
    max_prefixlen: NonNegative | None = None
    default_quota: NonNegative | None = None
    is_default: Bool | None = None
    address_scope_id: UUID | None = None


def _bounds_error(kind: str, value: int, base_kind: str, base: int) -> BadRequest:
    return BadRequest(f"Illegal prefix bounds: {kind}={value}, {base_kind}={base}.",
                      kind="IllegalSubnetPoolPrefixBounds")


def check_bounds(version: int, min_len: int, max_len: int, default_len: int) -> None:
    """Neutron's SubnetPoolHelper checks, in its order."""
    if min_len > max_len:
        raise _bounds_error("min_prefixlen", min_len, "max_prefixlen", max_len)
    if max_len > BITS[version]:
        raise _bounds_error("max_prefixlen", max_len, "ip_version_max", BITS[version])
    if default_len < min_len:
        raise _bounds_error("default_prefixlen", default_len, "min_prefixlen", min_len)
    if default_len > max_len:
        raise _bounds_error("default_prefixlen", default_len, "max_prefixlen", max_len)


def _version_of(prefixes: list[str]) -> int:
    if not prefixes:
        raise BadRequest("Empty subnet pool prefix list.", kind="EmptySubnetPoolPrefixList")
    versions = {ipaddress.ip_network(p, strict=False).version for p in prefixes}
    if len(versions) > 1:
        raise BadRequest("Cannot mix IPv4 and IPv6 prefixes in a subnet pool.", kind="PrefixVersionMismatch")
    return versions.pop()


class SubnetPools(Resource):
    member = "subnetpool"
    collection = "subnetpools"
    model = SubnetPool
    create_body = SubnetPoolCreate
    update_body = SubnetPoolUpdate
    readonly = Resource.readonly | {"ip_version"}
    filters = {
        "name": Filter(SubnetPool.name),
        "description": Filter(SubnetPool.description),
        "project_id": Filter(SubnetPool.project_id),
        "tenant_id": Filter(SubnetPool.project_id),
        "ip_version": Filter(SubnetPool.ip_version, to_int),
        "default_prefixlen": Filter(SubnetPool.default_prefixlen, to_int),
        "min_prefixlen": Filter(SubnetPool.min_prefixlen, to_int),
        "max_prefixlen": Filter(SubnetPool.max_prefixlen, to_int),
        "default_quota": Filter(SubnetPool.default_quota, to_int),
        "shared": Filter(SubnetPool.shared, to_bool),
        "is_default": Filter(SubnetPool.is_default, to_bool),
        "address_scope_id": Filter(SubnetPool.address_scope_id),
        "revision_number": Filter(SubnetPool.revision_number, to_int),
        "created_at": Filter(SubnetPool.created_at),
        "updated_at": Filter(SubnetPool.updated_at),
    }

    def visible(self, ctx: Context):  # noqa: ANN201
        """Own pools, shared ones, and those an RBAC policy shares with the project (rbac-subnetpool)."""
        return rbac.visible_to("subnetpool", ctx.project_id)

    def render(self, session: Session, obj: SubnetPool, tags: list[str]) -> dict[str, Any]:
        return {
            **standard(obj, tags),
            "prefixes": list(obj.prefixes),
            "ip_version": obj.ip_version,
            # Strings, as Neutron's ``_make_subnetpool_dict`` renders them.
            "default_prefixlen": str(obj.default_prefixlen),
            "min_prefixlen": str(obj.min_prefixlen),
            "max_prefixlen": str(obj.max_prefixlen),
            "default_quota": obj.default_quota,
            "shared": obj.shared,
            "is_default": obj.is_default,
            "address_scope_id": obj.address_scope_id,
        }

    # -- writing -----------------------------------------------------------------------

    def create(self, session: Session, ctx: Context, body: SubnetPoolCreate) -> SubnetPool:
        given = body.given()
        tags = given.pop("tags", None) or []
        project_id = self.owner_for_create(ctx, given)
        for required in ("name", "prefixes"):   # in Neutron's attribute order
            if given.get(required) is None:
                raise BadRequest(f"Failed to parse request. Required attribute '{required}' not specified")
        for attribute in ("is_default", "shared"):
            if given.get(attribute) and not ctx.is_admin:
                raise policy_refused("create_subnetpool", attribute)
        version = _version_of(given["prefixes"])
        prefixes = [str(p) for p in compact(given["prefixes"])]
        min_len = given.get("min_prefixlen")
        min_len = DEFAULT_MIN_PREFIXLEN[version] if min_len is None else min_len
        max_len = given.get("max_prefixlen")
        max_len = BITS[version] if max_len is None else max_len
        default_len = given.get("default_prefixlen")
        default_len = min_len if default_len is None else default_len
        check_bounds(version, min_len, max_len, default_len)
        if given.get("is_default"):
            self._check_no_default(session, version)
        check_association(session, ctx, given.get("address_scope_id"), None, version, prefixes)
        pool = SubnetPool(
            project_id=project_id, name=given["name"], description=given.get("description", ""),
            ip_version=version, prefixes=prefixes, min_prefixlen=min_len, max_prefixlen=max_len,
            default_prefixlen=default_len, default_quota=given.get("default_quota"),
            shared=given.get("shared", False), is_default=given.get("is_default", False),
            address_scope_id=given.get("address_scope_id"),
        )
        session.add(pool)
        session.flush()
        if tags:
            self.set_tags(session, pool, tags)
            pool.revision_number = 0
        self.record(session, pool, "create")
        return pool

    def update(self, session: Session, ctx: Context, obj_id: str, body: SubnetPoolUpdate) -> SubnetPool:
        pool = self.get_owned(session, ctx, obj_id)
        given = body.given()
        if "is_default" in given and not ctx.is_admin:
            raise policy_refused("update_subnetpool", "is_default")
        prefixes = list(pool.prefixes)
        if "prefixes" in given:
            new = given["prefixes"] or []
            old_space = compact(pool.prefixes)
            if not all(within(new, old) for old in old_space):
                raise BadRequest("Illegal update to prefixes: Existing prefixes must be a subset of the new "
                                 "prefixes.", kind="IllegalSubnetPoolPrefixUpdate")
            _version_of(new)
            prefixes = [str(p) for p in compact(new)]
        bounds = {k: given.get(k) if given.get(k) is not None else getattr(pool, k)
                  for k in ("min_prefixlen", "max_prefixlen", "default_prefixlen")}
        check_bounds(pool.ip_version, bounds["min_prefixlen"], bounds["max_prefixlen"],
                     bounds["default_prefixlen"])
        if given.get("is_default") and not pool.is_default:
            self._check_no_default(session, pool.ip_version)
        scope_id = given.get("address_scope_id", pool.address_scope_id)
        check_association(session, ctx, scope_id, pool.id, pool.ip_version, prefixes)
        pool.address_scope_id = scope_id
        for key in ("name", "description", "is_default"):
            if given.get(key) is not None:
                setattr(pool, key, given[key])
        if "default_quota" in given:
            pool.default_quota = given["default_quota"]
        pool.prefixes = prefixes
        for key, value in bounds.items():
            setattr(pool, key, value)
        self.touch(pool)
        self.record(session, pool, "update")
        return pool

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        pool = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        if session.scalar(select(Subnet.id).where(Subnet.subnetpool_id == pool.id).limit(1)):
            raise BadRequest("Unable to delete subnet pool: Subnet pool has existing allocations.",
                             kind="SubnetPoolDeleteError")
        session.execute(delete(Tag).where(Tag.resource_id == pool.id))
        self.record(session, pool, "delete", None)
        session.delete(pool)

    def _check_no_default(self, session: Session, version: int) -> None:
        if session.scalar(select(SubnetPool.id).where(SubnetPool.is_default, SubnetPool.ip_version == version)):
            raise BadRequest("Invalid input for operation: A default subnetpool for this IP family has already "
                             "been set. Only one default may exist per IP family.", kind="InvalidInput")

    # -- for subnets -------------------------------------------------------------------

    def default_for(self, session: Session, ctx: Context, version: int) -> SubnetPool | None:
        """The default pool of an IP version, if the caller may see it."""
        stmt = self.scoped(ctx).where(SubnetPool.is_default, SubnetPool.ip_version == version)
        return session.scalars(stmt).first()

    def allocate(
        self,
        session: Session,
        pool: SubnetPool,
        project_id: str,
        *,
        cidr: str | None = None,
        prefixlen: int | None = None,
        gateway_ip: str | None = None,
    ) -> str:
        """A prefix for a new subnet of ``project_id``: ``cidr`` if free, else the next free one.

        With a gateway but no cidr, the cidr is the gateway's /prefixlen, as Neutron does.
        """
        if cidr is not None:
            wanted = cidr_len = ipaddress.ip_network(cidr).prefixlen
        else:
            wanted = pool.default_prefixlen if prefixlen is None else prefixlen
            cidr_len = None
        if wanted > pool.max_prefixlen:
            raise BadRequest(f"Unable to allocate subnet with prefix length {wanted}, maximum allowed prefix "
                             f"is {pool.max_prefixlen}.", kind="MaxPrefixSubnetAllocationError")
        if wanted < pool.min_prefixlen:
            raise BadRequest(f"Unable to allocate subnet with prefix length {wanted}, minimum allowed prefix "
                             f"is {pool.min_prefixlen}.", kind="MinPrefixSubnetAllocationError")
        if cidr_len is None and gateway_ip is not None:
            if ipaddress.ip_address(gateway_ip).version != pool.ip_version:
                raise BadRequest(f"Invalid input for operation: gateway_ip '{gateway_ip}' does not match the "
                                 f"ip_version '{pool.ip_version}'.", kind="InvalidInput")
            cidr = str(ipaddress.ip_network(f"{gateway_ip}/{wanted}", strict=False))
        self._lock(session, pool.id)
        self._check_quota(session, pool, project_id, wanted)
        allocated = list(session.scalars(select(Subnet.cidr).where(Subnet.subnetpool_id == pool.id)))
        if cidr is not None:
            if prefix_free(pool.prefixes, allocated, cidr):
                return str(ipaddress.ip_network(cidr))
            reason = "Cannot allocate requested subnet from the available set of prefixes"
            # Neutron answers SubnetAllocationError with a 500 (it derives from no HTTP error);
            # netbay answers a client's request that cannot be met with a 4xx, never a 5xx.
            error = Conflict if within(pool.prefixes, cidr) else BadRequest
            raise error(f"Failed to allocate subnet: {reason}.", kind="SubnetAllocationError")
        found = next_prefix(pool.prefixes, allocated, wanted)
        if found is None:
            raise Conflict(f"Failed to allocate subnet: Insufficient prefix space to allocate subnet size "
                           f"/{wanted}.", kind="SubnetAllocationError")
        return str(found)

    @staticmethod
    def _lock(session: Session, pool_id: str) -> None:
        """Serialize allocations from one pool (SQLite writers are serial already)."""
        if session.bind is not None and session.bind.dialect.name == "postgresql":
            session.execute(select(SubnetPool.id).where(SubnetPool.id == pool_id).with_for_update())

    @staticmethod
    def _check_quota(session: Session, pool: SubnetPool, project_id: str, prefixlen: int) -> None:
        if not pool.default_quota:
            return
        used = sum(
            quota_units(pool.ip_version, ipaddress.ip_network(c).prefixlen)
            for c in session.scalars(select(Subnet.cidr).where(
                Subnet.subnetpool_id == pool.id, Subnet.project_id == project_id))
        )
        if used + quota_units(pool.ip_version, prefixlen) > pool.default_quota:
            raise Conflict("Per-project subnet pool prefix quota exceeded.", kind="SubnetPoolQuotaExceeded")


SUBNETPOOLS = SubnetPools()

__all__ = [
    "SUBNETPOOLS",
    "SubnetPoolCreate",
    "SubnetPoolUpdate",
    "SubnetPools",
    "available",
    "compact",
    "next_prefix",
    "prefix_free",
]
