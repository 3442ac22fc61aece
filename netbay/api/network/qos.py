"""Neutron's QoS rules as sub-collections of ``/v2.0/qos/policies/{id}`` (bandwidth
limit, DSCP marking, minimum bandwidth), each also by its id alone at
``/v2.0/qos/alias_<type>_rules/{id}`` (``qos-rules-alias``), and ``/v2.0/qos/rule-types``;
the policies themselves are an ordinary collection. The rules live in ``netbay.network.qos``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.network.bodies import read_json
from netbay.api.responses import JSONResponse
from netbay.errors import BadRequest, NotFound
from netbay.network import qos
from netbay.network.resource import to_bool


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


def _mount_alias(router: APIRouter, collection: str) -> None:
    """``qos-rules-alias``: show, update and delete a rule without its policy's id; the
    body's key is ``alias_<type>_rule``. Neutron offers no list here (it answers 500)."""
    member = qos.RULE_KINDS[collection].type + "_rule"
    alias = "alias_" + member
    path = f"/v2.0/qos/alias_{collection}/{{rule_id}}"

    def show(request: Request, rule_id: str) -> Response:
        ctx = context(request)
        with request.app.state.store.read() as s:
            policy_id = qos.rule_policy_id(s, ctx, collection, rule_id)
            return JSONResponse({alias: qos.show_rule(s, ctx, policy_id, collection, rule_id, _fields(request))})

    async def update(request: Request, rule_id: str) -> Response:
        ctx, raw = context(request), await read_json(request)
        if not isinstance(raw, dict) or not isinstance(raw.get(alias), dict):
            raise BadRequest(f"Unable to find '{alias}' in request body")
        body = {member: raw[alias]}

        def change(s: Any) -> dict[str, Any]:
            return qos.update_rule(s, ctx, qos.rule_policy_id(s, ctx, collection, rule_id), collection, rule_id, body)

        result = await run_in_threadpool(lambda: request.app.state.store.retrying(change))
        return JSONResponse({alias: result})

    async def delete(request: Request, rule_id: str) -> Response:
        ctx = context(request)

        def remove(s: Any) -> None:
            qos.delete_rule(s, ctx, qos.rule_policy_id(s, ctx, collection, rule_id), collection, rule_id)

        await run_in_threadpool(lambda: request.app.state.store.retrying(remove))
        return Response(status_code=204)

    router.add_api_route(path, show, methods=["GET"], name=f"show_{alias}")
    router.add_api_route(path, update, methods=["PUT"], name=f"update_{alias}")
    router.add_api_route(path, delete, methods=["DELETE"], name=f"delete_{alias}", status_code=204)


# Every rule type Neutron 29's QoS plugin knows, in its order: what ``all_rules`` lists,
# those netbay has no rules of included (``qos-rule-type-filter``).
ALL_RULE_TYPES = ["dscp_marking", "minimum_bandwidth", "packet_rate_limit", "minimum_packet_rate", "bandwidth_limit"]


def rule_types(request: Request) -> dict[str, Any]:
    """``qos-rule-type-filter``: ``all_rules`` lists every type Neutron knows, ``all_supported``
    those a driver supports (netbay's three, as without a filter); values are booleans,
    other filters refused. As Neutron 29 answers, ``all_rules`` given at all lists them all
    (``all_rules=false`` too)."""
    given = [k for k in request.query_params if k != "fields"]
    for key in given:
        if key not in ("all_rules", "all_supported"):
            raise BadRequest(f"[{key!r}] is invalid attribute for filtering")
        for value in request.query_params.getlist(key):
            to_bool(value)
    if "all_rules" in given:
        return {"rule_types": [{"type": t} for t in ALL_RULE_TYPES]}
    return {"rule_types": qos.RULE_TYPES}


def rule_type(rule_type: str) -> dict[str, Any]:
    if rule_type not in {t["type"] for t in qos.RULE_TYPES}:
        raise NotFound(f"QoS rule type {rule_type} could not be found.", kind="QosRuleTypeNotFound")
    return {"rule_type": {"type": rule_type, "drivers": [{"name": "netbay", "supported_parameters": []}]}}


def mount(router: APIRouter) -> None:
    for collection in qos.RULE_KINDS:
        _mount_rules(router, collection)
        _mount_alias(router, collection)
    router.add_api_route("/v2.0/qos/rule-types", rule_types, methods=["GET"], name="list_qos_rule_types")
    router.add_api_route("/v2.0/qos/rule-types/{rule_type}", rule_type, methods=["GET"], name="show_qos_rule_type")
