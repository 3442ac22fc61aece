"""Neutron's ``extraroute-atomic``: ``add_extraroutes`` / ``remove_extraroutes`` change a
router's routes by a difference, in one transaction, so two clients adding routes at
once do not overwrite each other (a PUT of ``routes`` replaces the whole list).

Adding a route already there and removing one that is not are no-ops, as in Neutron;
the resulting list is then validated as a PUT of ``routes`` would be.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest
from netbay.network.bodies import validate
from netbay.network.routers import ROUTERS, RouterUpdate


def _routes_of(info: Any) -> list[dict[str, str]]:
    """The ``{"router": {"routes": [...]}}`` of the request, each route validated."""
    member = info.get("router") if isinstance(info, dict) else None
    if not isinstance(member, dict) or set(member) != {"routes"}:
        raise BadRequest("Bad router request: the body must be {'router': {'routes': [...]}}.",
                         kind="BadRequest")
    body = validate(member, ROUTERS, "PUT")
    assert isinstance(body, RouterUpdate)
    return [r.model_dump() for r in body.routes or []]


def _change(session: Session, ctx: Context, router_id: str, info: Any, *, add: bool) -> dict[str, Any]:
    asked = _routes_of(info)
    router = ROUTERS.get_owned(session, ctx, router_id)
    current = [dict(r) for r in router.routes or []]
    if add:
        routes = current + [r for i, r in enumerate(asked) if r not in current and r not in asked[:i]]
    else:
        routes = [r for r in current if r not in asked]
    updated = ROUTERS.update(session, ctx, router_id, RouterUpdate.model_validate({"routes": routes}))
    return {"router": ROUTERS.for_caller(ctx, ROUTERS.rendered(session, updated))}


def add_extraroutes(session: Session, ctx: Context, router_id: str, info: Any) -> dict[str, Any]:
    """``PUT /routers/{id}/add_extraroutes``: the router with ``routes`` added."""
    return _change(session, ctx, router_id, info, add=True)


def remove_extraroutes(session: Session, ctx: Context, router_id: str, info: Any) -> dict[str, Any]:
    """``PUT /routers/{id}/remove_extraroutes``: the router with ``routes`` removed."""
    return _change(session, ctx, router_id, info, add=False)
