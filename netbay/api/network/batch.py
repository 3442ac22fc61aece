"""``POST /network/v2.0/batch`` (netbay extension ``netbay-batch``): several writes of the
network API in ONE transaction.

WHY: a Kubernetes NetworkPolicy change is a few Neutron calls (name a group, create
its rules, move ports between groups); each alone pays a round trip, a commit and a
wake-up of the dataplane agent, which together cost more than the work. A batch is
one commit: its change-stream revisions reach the agent in one long poll, and it
applies all or nothing. The objects stay plain Neutron ones that anyone can list.

Body::

    {"batch": [{"method": "PUT", "path": "security-groups/<id>", "body": {"security_group": {...}}},
               {"method": "POST", "path": "security-group-rules", "body": {"security_group_rules": [...]}},
               {"method": "PUT", "path": "ports/<id>", "body": {"port": {"security_groups": [...]}}},
               {"method": "DELETE", "path": "security-group-rules/<id>", "missing_ok": true}]}

Answer ``{"batch": [...]}``: for each operation the body that call alone answers
(``null`` for a delete). Each body is checked as that call checks it; the first
refusal rolls back the whole batch and is answered as that call alone answers it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from netbay.api.auth import context
from netbay.api.network.bodies import parse_member, parse_members, read_json
from netbay.api.network.quotas import enforce_create
from netbay.api.responses import JSONResponse
from netbay.context import Context
from netbay.errors import BadRequest, NotFound
from netbay.network.registry import RESOURCES, Resource

MAX_OPERATIONS = 1000
_BY_PATH: dict[str, Resource] = {f"{r.path_prefix}{r.collection}": r for r in RESOURCES}

Step = Callable[[Session, Context], Any]


@dataclass(frozen=True)
class _Op:
    resource: Resource
    run: Step


def _parse(index: int, op: Any) -> _Op:
    """One operation, its body validated now (before any write)."""
    where = f"batch[{index}]"
    if not isinstance(op, dict):
        raise BadRequest(f"Invalid input for {where}: expected an object with method and path.")
    method, path = str(op.get("method", "")).upper(), str(op.get("path", "")).strip("/")
    parts = path.split("/")
    n = 2 if parts[0] == "taas" else 1  # Tap-as-a-Service's collections hang under taas/
    coll, item_id = "/".join(parts[:n]), "/".join(parts[n:])
    resource = _BY_PATH.get(coll)
    if resource is None:
        raise BadRequest(f"Invalid input for {where}: unknown collection in path {path!r}.")
    raw = op.get("body")
    if method == "POST" and not item_id:
        key = resource.collection.replace("-", "_")
        if isinstance(raw, dict) and key in raw:
            bodies = parse_members(raw, resource)
        else:
            bodies = [parse_member(raw, resource, "POST")]
        many = isinstance(raw, dict) and key in raw

        def create(s: Session, ctx: Context) -> Any:
            enforce_create(s, ctx, resource.member, bodies)
            items = [resource.for_caller(ctx, resource.rendered(s, resource.create(s, ctx, b))) for b in bodies]
            return {key: items} if many else {resource.member: items[0]}

        return _Op(resource, create)
    if method == "PUT" and item_id and resource.update_body is not None:
        body = parse_member(raw, resource, "PUT")

        def update(s: Session, ctx: Context) -> Any:
            return {resource.member: resource.for_caller(
                ctx, resource.rendered(s, resource.update(s, ctx, item_id, body)))}

        return _Op(resource, update)
    if method == "DELETE" and item_id:
        missing_ok = bool(op.get("missing_ok"))

        def delete(s: Session, ctx: Context) -> None:
            try:
                resource.delete(s, ctx, item_id)
            except NotFound:
                if not missing_ok:
                    raise

        return _Op(resource, delete)
    raise BadRequest(f"Invalid input for {where}: {method} {path} is not an operation of the network API.")


async def run_batch(request: Request) -> Response:
    ctx = context(request)
    raw = await read_json(request)
    ops = raw.get("batch") if isinstance(raw, dict) else None
    if not isinstance(ops, list) or not ops:
        raise BadRequest("Unable to find 'batch' in request body: a non-empty list of operations")
    if len(ops) > MAX_OPERATIONS:
        raise BadRequest(f"A batch is limited to {MAX_OPERATIONS} operations")
    parsed = [_parse(i, op) for i, op in enumerate(ops)]
    store = request.app.state.store
    results = await run_in_threadpool(lambda: store.retrying(lambda s: [op.run(s, ctx) for op in parsed]))
    return JSONResponse({"batch": results})


_SCHEMA = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["batch"],
    "properties": {"batch": {"type": "array", "maxItems": MAX_OPERATIONS, "items": {
        "type": "object", "required": ["method", "path"],
        "properties": {"method": {"enum": ["POST", "PUT", "DELETE"]},
                       "path": {"type": "string", "description": "collection or collection/<id>, as under /v2.0/"},
                       "body": {"type": "object"},
                       "missing_ok": {"type": "boolean", "description": "DELETE: an absent item is no error"}}}}}}}}}}


def mount(router: APIRouter) -> None:
    router.add_api_route("/v2.0/batch", run_batch, methods=["POST"], name="network_batch", openapi_extra=_SCHEMA)
