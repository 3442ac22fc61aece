"""``/netbay/v1/pods``: create, list, show and delete pods on cluster nodes.

Neutron conventions as for sandboxes (``{"pod": {...}}`` bodies, filters such as
``?cluster_id=``, ``NeutronError`` bodies). Pods are also a status kind of
``PUT /netbay/v1/status`` (the agent reports them ``ACTIVE`` or ``ERROR``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api import status
from netbay.api.auth import context
from netbay.api.network import parse_list_query
from netbay.api.network.bodies import parse_member, read_json
from netbay.api.responses import JSONResponse
from netbay.coe import pods
from netbay.coe.pods import PODS

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])
status.register("pods", pods.set_status)


@router.get("/pods")
def list_pods(request: Request) -> Response:
    ctx = context(request)
    query = parse_list_query(request)
    with request.app.state.store.read() as s:
        return JSONResponse({"pods": PODS.list(s, ctx, query).items})


@router.get("/pods/{pod_id}")
def show_pod(request: Request, pod_id: str) -> Response:
    ctx = context(request)
    fields = parse_list_query(request).fields
    with request.app.state.store.read() as s:
        return JSONResponse({"pod": PODS.show(s, ctx, pod_id, fields)})


@router.post("/pods", status_code=201)
async def create_pod(request: Request) -> Response:
    ctx = context(request)
    body = parse_member(await read_json(request), PODS, "POST")

    def create(s):  # noqa: ANN001, ANN202
        return PODS.rendered(s, PODS.create(s, ctx, body))

    item = await run_in_threadpool(lambda: request.app.state.store.retrying(create))
    return JSONResponse({"pod": item}, status_code=201)


@router.delete("/pods/{pod_id}", status_code=204)
def delete_pod(request: Request, pod_id: str) -> Response:
    ctx = context(request)
    with request.app.state.store.write() as s:
        PODS.delete(s, ctx, pod_id)
    return Response(status_code=204)
