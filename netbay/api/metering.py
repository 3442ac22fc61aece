"""Metering counts as Neutron's metering agent reports them (admin only).

Neutron's agent sends each label's counts as an ``l3.meter`` notification: ``label_id``,
``tenant_id``, ``pkts``, ``bytes``, ``time``, ``first_update``, ``last_update``, ``host``.
netbay sends no notifications; the same payloads are read at ``GET /netbay/v1/metering``
(optionally ``?label_id=``). The dataplane agent puts its routers' counters at
``PUT /netbay/v1/metering`` — ``{"host": h, "routers": {router id: {label id: {"pkts",
"bytes"}}}}``, absolute values read from the kernel — and they are held in the
server's memory: a restarted server has them again at the agent's next report (it
resends everything every few rounds); a namespace rebuilt starts its counts at zero.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy import select

from netbay.api.auth import admin_context
from netbay.api.network.bodies import read_json
from netbay.errors import BadRequest
from netbay.store.models import MeteringLabel

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])


def _counts(request: Request) -> dict[str, Any]:
    state = request.app.state
    if not hasattr(state, "metering_counts"):
        state.metering_counts = {"routers": {}, "labels": {}, "host": ""}
    counts: dict[str, Any] = state.metering_counts
    return counts


@router.put("/metering")
async def put_metering(request: Request) -> dict[str, Any]:
    admin_context(request)
    body = await read_json(request)
    routers = body.get("routers") if isinstance(body, dict) else None
    if not isinstance(routers, dict):
        raise BadRequest("Body must be {'host': ..., 'routers': {router id: {label id: {pkts, bytes}}}}.")
    counts = _counts(request)
    now = int(time.time())
    counts["host"] = str(body.get("host") or "")
    counts["routers"].update(routers)
    for labels in routers.values():
        for label_id in labels or {}:
            seen = counts["labels"].setdefault(label_id, {"first_update": now, "last_update": now})
            seen["last_update"] = now
    return {"routers": len(routers)}


@router.get("/metering")
def get_metering(request: Request) -> dict[str, Any]:
    """Each label's counts over every router it meters, as an ``l3.meter`` payload."""
    admin_context(request)
    counts = _counts(request)
    wanted = set(request.query_params.getlist("label_id"))
    totals: dict[str, dict[str, int]] = {}
    for labels in counts["routers"].values():
        for label_id, c in (labels or {}).items():
            t = totals.setdefault(label_id, {"pkts": 0, "bytes": 0})
            t["pkts"] += int(c.get("pkts", 0))
            t["bytes"] += int(c.get("bytes", 0))
    with request.app.state.store.read() as s:
        owners = {row.id: row.project_id for row in s.execute(select(MeteringLabel.id, MeteringLabel.project_id))}
    out = []
    for label_id, t in sorted(totals.items()):
        if label_id not in owners or (wanted and label_id not in wanted):
            continue
        seen = counts["labels"][label_id]
        out.append({"label_id": label_id, "tenant_id": owners[label_id], "pkts": t["pkts"], "bytes": t["bytes"],
                    "time": seen["last_update"] - seen["first_update"], "first_update": seen["first_update"],
                    "last_update": seen["last_update"], "host": counts["host"]})
    return {"metering": out}


__all__ = ["router"]
