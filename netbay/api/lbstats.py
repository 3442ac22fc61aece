"""``PUT /netbay/v1/lbstats``: listener counters the dataplane reports (admin only).

Body: ``{"listeners": {id: {"epoch", "bytes_in", "bytes_out", "active_connections",
"total_connections", "request_errors"}}}`` (``netbay.dataplane.lbstats`` sends
it, only for listeners whose counters moved). Statistics are not desired state:
they do not enter the change stream.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import admin_context
from netbay.api.network.bodies import read_json
from netbay.lbaas import stats

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])


@router.put("/lbstats")
async def put_lbstats(request: Request) -> dict[str, Any]:
    admin_context(request)
    body = await read_json(request)
    missing = await run_in_threadpool(lambda: request.app.state.store.retrying(lambda s: stats.record(s, body)))
    return {"missing": missing}
