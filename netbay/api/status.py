"""``PUT /netbay/v1/status``: what the dataplane reports back (admin only).

Body: ``{"ports": {id: "ACTIVE"|"DOWN"|"ERROR"}, "routers": {...},
"floatingips": {...}, "sandboxes": {...}, "loadbalancers": {...}}``. Everything
is applied in one transaction; ids that no longer exist are skipped (the
resource was deleted while the agent worked), and only real changes are
written, so they reach the change stream as ordinary updates. Other services
(load balancers…) add their kinds with :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from netbay.api.auth import admin_context
from netbay.api.network.bodies import read_json
from netbay.errors import BadRequest, NotFound
from netbay.network import ports, sandboxes, taas
from netbay.network.resource import Resource
from netbay.store.models import FloatingIP, Port, Router

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])

# kind -> setter(session, id, status) -> changed?
Setter = Callable[[Session, str, str], bool]
SETTERS: dict[str, Setter] = {}


def register(kind: str, setter: Setter) -> None:
    """Let another service accept status reports for ``kind`` (e.g. ``loadbalancers``)."""
    SETTERS[kind] = setter


def _port(session: Session, port_id: str, status: str) -> bool:
    try:
        before = session.get(Port, port_id)
        old = before.status if before is not None else None
        return ports.set_status(session, port_id, status).status != old
    except NotFound:
        return False


def _plain(resource_name: str, model: type, statuses: set[str]) -> Setter:
    """A setter for a table whose ``status`` column is all there is to it."""

    def setter(session: Session, obj_id: str, status: str) -> bool:
        from netbay.network import registry

        resource: Resource = getattr(registry, resource_name)
        if status not in statuses:
            raise BadRequest(f"Invalid input for status. Reason: '{status}' is not in {sorted(statuses)}.")
        obj = session.get(model, obj_id, with_for_update=True)
        if obj is None or obj.status == status:
            return False
        obj.status = status
        resource.touch(obj)
        resource.record(session, obj, "update")
        return True

    return setter


register("ports", _port)
register("routers", _plain("ROUTERS", Router, {"ACTIVE", "DOWN", "ERROR", "ALLOCATING"}))
register("floatingips", _plain("FLOATINGIPS", FloatingIP, {"ACTIVE", "DOWN", "ERROR"}))
register("sandboxes", sandboxes.set_status)
register("tap_services", lambda s, i, st: taas.set_status(s, "tap_services", i, st))
register("tap_flows", lambda s, i, st: taas.set_status(s, "tap_flows", i, st))


def _parse(raw: Any) -> dict[str, dict[str, str]]:
    if not isinstance(raw, dict):
        raise BadRequest("Invalid input for status. Reason: expected a JSON object.")
    out: dict[str, dict[str, str]] = {}
    for kind, items in raw.items():
        if kind not in SETTERS:
            raise BadRequest(f"Unrecognized attribute(s) '{kind}'")
        if not isinstance(items, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in items.items()):
            raise BadRequest(f"Invalid input for {kind}. Reason: expected an object of id: status.")
        out[kind] = items
    return out


@router.put("/status")
async def put_status(request: Request) -> dict[str, Any]:
    admin_context(request)
    reports = _parse(await read_json(request))

    def apply(s: Session) -> dict[str, list[str]]:
        changed: dict[str, list[str]] = {}
        for kind, items in reports.items():
            setter = SETTERS[kind]
            changed[kind] = [obj_id for obj_id, status in items.items() if setter(s, obj_id, status)]
        return changed

    changed = await run_in_threadpool(lambda: request.app.state.store.retrying(apply))
    return {"updated": changed}
