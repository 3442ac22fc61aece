"""``/netbay/v1``: the change stream and a full snapshot, for reconcilers."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request
from sqlalchemy import func, select

from netbay.api.auth import admin_context
from netbay.api.responses import JSONResponse
from netbay.coe.clusternet import CLUSTERNETS
from netbay.lbaas.registry import LB_RESOURCES
from netbay.network.registry import RESOURCES
from netbay.network.resource import ListQuery
from netbay.coe.pods import PODS
from netbay.network.sandboxes import SANDBOXES
from netbay.store import changelog
from netbay.store.models import Change

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])


@router.get("/changes", response_class=JSONResponse)
async def changes(
    request: Request,
    since: int = Query(0, ge=0, le=2**31 - 1),   # a revision: an INTEGER column (PostgreSQL: 32 bits)
    wait: float = Query(0.0, ge=0.0, le=60.0),
    limit: int = Query(1000, ge=1, le=1000),
) -> JSONResponse:
    """Changes after revision ``since``; with ``wait`` > 0, long-polls until one arrives.
    ``revision``: the last change's, or with none the feed's head (at most ``since``:
    ``since=2147483647`` asks for the head). Answered as rendered (orjson, no response
    model: it is on every change's path)."""
    admin_context(request)
    feed = request.app.state.feed
    closing: asyncio.Event | None = getattr(request.app.state, "closing", None)
    shutting = False
    if closing is None or wait <= 0:
        items = await feed.wait(since, wait, limit)
    else:  # a server shutting down answers its long polls at once (nothing new)
        poll = asyncio.ensure_future(feed.wait(since, wait, limit))
        stop = asyncio.ensure_future(closing.wait())
        done, pending = await asyncio.wait({poll, stop}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        items = poll.result() if poll in done else []
        shutting = poll not in done
    if items:
        revision = items[-1]["revision"]
    else:   # nothing newer: the head (a server shutting down reads nothing more: ``since``)
        revision = since if shutting else await asyncio.to_thread(feed.quiet_head, since)
    return JSONResponse({"changes": items, "revision": revision})


@router.get("/state")
def state(request: Request) -> dict[str, Any]:
    """Every resource as the API renders it, and the revision it is current to."""
    ctx = admin_context(request)
    store = request.app.state.store
    everything = ListQuery(filters={}, fields=[], sort=[], limit=None, marker=None)
    with store.read() as s:  # every revision up to it is final before the snapshot is taken
        bound = changelog.committed(s)
    with store.read() as s:
        if not store.is_sqlite:  # one snapshot for the revision and every list
            s.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        revision = bound if bound is not None else s.scalar(select(func.max(Change.revision))) or 0
        body: dict[str, Any] = {"revision": revision}
        for resource in [*RESOURCES, SANDBOXES, *LB_RESOURCES, CLUSTERNETS, PODS]:
            items = resource.list(s, ctx, everything).items
            body[resource.collection] = items
            # The JSON key as the network API spells it ("security_groups"); the
            # collection's path spelling ("security-groups") is kept for older readers.
            body[resource.collection.replace("-", "_")] = items
    return body
