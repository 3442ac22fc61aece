"""Neutron's QoS rules as sub-collections of ``/v2.0/qos/policies/{id}`` (bandwidth
limit, DSCP marking, minimum bandwidth) and ``/v2.0/qos/rule-types``; the policies
themselves are an ordinary collection. The rules live in ``netbay.network.qos``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.network.bodies import read_json
from netbay.api.responses import JSONResponse
from netbay.errors import NotFound
from netbay.network import qos


def _fields(request: Request) -> list[str]:
    return [f for v in request.query_params.getlist("fields") for f in v.split(",") if f]


def _mount_rules(router: APIRouter, collection: str) -> None:
    member = qos.RULE_KINDS[collection].type + "_rule"
    path = "/v2.0/qos/policies/{policy_id}/" + collection

    def list_all(request: Request, policy_id: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse({collection: qos.list_rules(s, ctx, policy_id, collection, _fields(request))})

    def show(request: Request, policy_id: str, rule_id: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return JSONResponse({member: qos.show_rule(s, ctx, policy_id, collection, rule_id, _fields(request))})

    async def create(request: Request, policy_id: str) -> Response:
        ctx, raw = context(request), await read_json(request)
        result = await run_in_threadpool(lambda: request.app.state.store.retrying(
            lambda s: qos.create_rule(s, ctx, policy_id, collection, raw)))
        return JSONResponse({member: result}, status_code=201)

    async def update(request: Request, policy_id: str, rule_id: str) -> Response:
        ctx, raw = context(request), await read_json(request)
        result = await run_in_threadpool(lambda: request.app.state.store.retrying(
            lambda s: qos.update_rule(s, ctx, policy_id, collection, rule_id, raw)))
        return JSONResponse({member: result})

    async def delete(request: Request, policy_id: str, rule_id: str) -> Response:
        ctx = context(request)
        await run_in_threadpool(lambda: request.app.state.store.retrying(
            lambda s: qos.delete_rule(s, ctx, policy_id, collection, rule_id)))
        return Response(status_code=204)

    router.add_api_route(path, list_all, methods=["GET"], name=f"list_{collection}")
    router.add_api_route(path, create, methods=["POST"], name=f"create_{member}", status_code=201)
    router.add_api_route(path + "/{rule_id}", show, methods=["GET"], name=f"show_{member}")
    router.add_api_route(path + "/{rule_id}", update, methods=["PUT"], name=f"update_{member}")
    router.add_api_route(path + "/{rule_id}", delete, methods=["DELETE"], name=f"delete_{member}", status_code=204)


def rule_types() -> dict[str, Any]:
    return {"rule_types": qos.RULE_TYPES}


def rule_type(rule_type: str) -> dict[str, Any]:
    if rule_type not in {t["type"] for t in qos.RULE_TYPES}:
        raise NotFound(f"QoS rule type {rule_type} could not be found.", kind="QosRuleTypeNotFound")
    return {"rule_type": {"type": rule_type, "drivers": [{"name": "netbay", "supported_parameters": []}]}}


def mount(router: APIRouter) -> None:
    for collection in qos.RULE_KINDS:
        _mount_rules(router, collection)
    router.add_api_route("/v2.0/qos/rule-types", rule_types, methods=["GET"], name="list_qos_rule_types")
    router.add_api_route("/v2.0/qos/rule-types/{rule_type}", rule_type, methods=["GET"], name="show_qos_rule_type")
