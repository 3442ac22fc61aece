"""Quotas: how many of each resource a project may have (Neutron's ``quotas`` extension).

Neutron's defaults (``neutron.conf [quotas]``) hold for every project until an
admin sets a limit; only the limits that differ are stored. A limit below zero
means unlimited. As in Neutron, limits are enforced on API creates only (a
router's interface port or a project's default group is not refused), and a
create is counted against what the project holds at that moment, in the create's own
transaction: one statement reads the limit and counts the project's rows up to
limit + 1 (none when unlimited), so its cost is bounded by the limit, not the table.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import bindparam, case, delete, func, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, Forbidden, policy_refused
from netbay.store.models import (
    FloatingIP,
    Network,
    Port,
    Quota,
    RbacPolicy,
    Router,
    SecurityGroup,
    SecurityGroupRule,
    Subnet,
    SubnetPool,
    Trunk,
)

UNLIMITED = -1
MAX_LIMIT = 2**31 - 1
# Neutron's defaults (neutron/conf/quota.py) and the table each resource counts.
DEFAULTS: dict[str, int] = {
    "network": 100,
    "subnet": 100,
    "subnetpool": UNLIMITED,
    "port": 500,
    "router": 10,
    "floatingip": 50,
    "security_group": 10,
    "security_group_rule": 100,
    "rbac_policy": 10,
    "trunk": UNLIMITED,
    "router_route": 30,
}
# Limits on one object, not counts of a project's rows: Neutron counts none (``used`` 0,
# any limit may be set) and checks a value against the limit (``limit_check``): a
# router's routes (``extraroute``'s ``router_route``, checked on every change of them).
PER_OBJECT = {"router_route"}
MODELS: dict[str, Any] = {
    "network": Network, "subnet": Subnet, "subnetpool": SubnetPool, "port": Port, "router": Router,
    "floatingip": FloatingIP, "security_group": SecurityGroup, "security_group_rule": SecurityGroupRule,
    "rbac_policy": RbacPolicy, "trunk": Trunk,
}
_QUOTAS = Quota.__table__


def _limit_of(prefix: str = "") -> Any:
    """The project's limit for the resource: its row, else the default."""
    stored = select(_QUOTAS.c.limit).where(_QUOTAS.c.project_id == bindparam(f"{prefix}project_id"),
                                           _QUOTAS.c.resource == bindparam(f"{prefix}resource")).scalar_subquery()
    return func.coalesce(stored, bindparam(f"{prefix}default"))


def limit_and_held(model: Any, prefix: str = "") -> tuple[Any, Any]:
    """Two columns: the limit, and what the project holds counted up to limit + 1 rows
    (none when unlimited) — at most limit + 1 index entries, however big the table.
    ``prefix`` names their parameters apart when they join another statement (the
    port create path reads them with its network, in the same round trip)."""
    table = model.__table__
    cap = case((_limit_of(prefix) < 0, 0), else_=_limit_of(prefix) + 1)
    held = select(table.c.id).where(table.c.project_id == bindparam(f"{prefix}project_id")).limit(cap).subquery()
    return _limit_of(prefix), select(func.count()).select_from(held).scalar_subquery()


def parameters(resource: str, project_id: str, prefix: str = "") -> dict[str, Any]:
    return {f"{prefix}project_id": project_id, f"{prefix}resource": resource,
            f"{prefix}default": DEFAULTS[resource]}


_CHECK = {name: select(*limit_and_held(model)) for name, model in MODELS.items()}
# A single create of these counts its quota in the statement that reads what it is
# created in (a rule: its group, netbay/network/sgrows.py), one round trip less than
# counting first: it takes the count with :func:`deferred`, and refuses first, as here.
DEFERRED = {"security_group_rule"}
_DEFERRED = "quotas.deferred"


def limits(session: Session, project_id: str) -> dict[str, int]:
    """Every resource's limit for ``project_id``: the defaults, overridden by what is stored."""
    result = dict(DEFAULTS)
    for resource, limit in session.execute(
            select(Quota.resource, Quota.limit).where(Quota.project_id == project_id)):
        if resource in result:
            result[resource] = limit
    return result


def usage(session: Session, project_id: str) -> dict[str, int]:
    counted = {name: session.scalar(select(func.count()).select_from(model).where(model.project_id == project_id))
               or 0 for name, model in MODELS.items()}
    return {**counted, **dict.fromkeys(PER_OBJECT, 0)}


def limit_check(session: Session, resource: str, project_id: str, value: int) -> None:
    """Refuse (409 ``OverQuota``) a value above the project's per-object limit
    (Neutron's ``QUOTAS.limit_check``: a router's routes against ``router_route``)."""
    stored = session.scalar(select(Quota.limit).where(Quota.project_id == project_id, Quota.resource == resource))
    refuse_over(resource, DEFAULTS[resource] if stored is None else stored, 0, value)


def details(session: Session, project_id: str) -> dict[str, dict[str, int]]:
    """``{resource: {limit, used, reserved}}`` as ``/quotas/{p}/details`` shows it."""
    used = usage(session, project_id)
    return {name: {"limit": limit, "used": used[name], "reserved": 0}
            for name, limit in limits(session, project_id).items()}


def projects(session: Session) -> list[dict[str, Any]]:
    """Every project with a limit set, with all its limits (``GET /quotas``)."""
    ids = sorted(set(session.scalars(select(Quota.project_id))))
    return [{**limits(session, p), "project_id": p, "tenant_id": p} for p in ids]


def update(session: Session, project_id: str, body: Any) -> dict[str, int]:
    """Set limits from ``{"quota": {resource: limit, "check_limit": bool, "force": bool}}``.

    As Neutron since 2025.1 (``quota-check-limit-default``): a limit below what the
    project already holds is refused (400) unless ``force`` is true; ``check_limit``
    is accepted and no longer needed. A forced limit below usage refuses new creates.
    """
    if not isinstance(body, dict) or not isinstance(body.get("quota"), dict):
        raise BadRequest("Failed to parse request. Required attribute 'quota' not specified", kind="HTTPBadRequest")
    wanted = dict(body["quota"])
    _flag(wanted.pop("check_limit", False), "check_limit")
    force = _flag(wanted.pop("force", False), "force")
    unknown = sorted(k for k in wanted if k not in DEFAULTS)
    if unknown:
        raise BadRequest(f"Unrecognized attribute(s) '{', '.join(unknown)}'")
    parsed = {name: _limit(name, value) for name, value in wanted.items()}
    if not force:
        used = usage(session, project_id)
        for name, limit in parsed.items():
            if limit != UNLIMITED and used[name] > limit:
                raise BadRequest(f"Quota limit {limit} for {name} must be greater than or equal to already "
                                 f"used {used[name]}", kind="HTTPBadRequest")
    for name, limit in parsed.items():
        row = session.get(Quota, (project_id, name))
        if row is None:
            session.add(Quota(project_id=project_id, resource=name, limit=limit))
        else:
            row.limit = limit
    session.flush()
    return limits(session, project_id)


def reset(session: Session, project_id: str) -> None:
    session.execute(delete(Quota).where(Quota.project_id == project_id))


def enforce_create(session: Session, ctx: Context, member: str, bodies: list[Any]) -> None:
    """Refuse a create (single or bulk) that would take a project over its limit."""
    if member not in DEFAULTS or member == "port":  # ports: read with their network (Ports.create)
        return
    wanted = Counter(getattr(b, "project_id", None) or getattr(b, "tenant_id", None) or ctx.project_id
                     for b in bodies)
    if member in DEFERRED and len(bodies) == 1:  # counted by the create, in the statement reading its group
        session.info[_DEFERRED] = (bodies[0], next(iter(wanted)))
        return
    for project_id, count in wanted.items():
        enforce(session, member, project_id, count)
        if member == "security_group":  # each new group brings its two egress rules
            enforce(session, "security_group_rule", project_id, 2 * count)


def deferred(session: Session, body: Any) -> str | None:
    """The project whose quota the create of ``body`` counts itself (``enforce_create``
    left it that count), else None."""
    left = session.info.pop(_DEFERRED, None)
    return left[1] if left is not None and left[0] is body else None


def enforce(session: Session, resource: str, project_id: str, adding: int = 1) -> None:
    """Refuse (Neutron's 409 ``OverQuota``) when ``adding`` more would exceed the limit."""
    check = _CHECK.get(resource)
    if check is None:
        return
    limit, held = session.connection().execute(check, parameters(resource, project_id)).one()
    refuse_over(resource, limit, held, adding)


def refuse_over(resource: str, limit: int, held: int, adding: int = 1) -> None:
    if limit >= 0 and held + adding > limit:
        raise Conflict(f"Quota exceeded for resources: ['{resource}'].", kind="OverQuota")


def check_access(ctx: Context, project_id: str, action: str) -> None:
    """Admins see and set any project's quotas; a member only reads its own."""
    if ctx.is_admin:
        return
    if action != "get":
        raise policy_refused(f"{action}_quota")
    if project_id != ctx.project_id:
        raise Forbidden("Only admin is authorized to access quotas for another tenant")


def _limit(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise BadRequest(f"Invalid input for {name}. Reason: '{value}' is not an integer.")
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"Invalid input for {name}. Reason: '{value}' is not an integer.") from None
    if isinstance(value, float) and value != limit:
        raise BadRequest(f"Invalid input for {name}. Reason: '{value}' is not an integer.")
    if limit < UNLIMITED:
        raise BadRequest(f"Invalid input for {name}. Reason: '{limit}' is too small - must be at least '-1'.")
    if limit > MAX_LIMIT:
        raise BadRequest(f"Invalid input for {name}. Reason: '{limit}' is too large - must be no larger "
                         f"than '{MAX_LIMIT}'.")
    return limit


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"true", "false"}:
        return value.lower() == "true"
    raise BadRequest(f"Invalid input for {name}. Reason: '{value}' is not a valid boolean value.")


__all__ = ["DEFAULTS", "deferred", "details", "enforce", "limit_check", "limits", "projects", "reset", "update"]
