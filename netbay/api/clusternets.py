"""``/netbay/v1/clusternets/{cluster_id}``: a cluster's container network, read-only.

The nodes (role, sandbox, underlay address) and each node's lease, as the conductor
keeps them for the dataplane agent; clients (``netbay cluster topology``) read it
here rather than from the admin-only ``/netbay/v1/state``. Scoped like every other
resource: a member sees the networks of their own project's clusters.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from netbay.api.auth import context
from netbay.api.responses import JSONResponse
from netbay.coe.clusternet import CLUSTERNETS

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])


@router.get("/clusternets/{cluster_id}")
def show_clusternet(request: Request, cluster_id: str) -> Response:
    ctx = context(request)
    with request.app.state.store.read() as s:
        return JSONResponse({"clusternet": CLUSTERNETS.show(s, ctx, cluster_id, [])})
