"""The Octavia-compatible load-balancer API v2 under ``/load-balancer``.

Routes, Octavia's list parameters (``limit``/``marker``/``page_reverse``,
``sort=key:dir,…`` or ``sort_key``/``sort_dir``, ``fields``, filters) and
request bodies refused in WSME's words; the rules live in ``netbay.lbaas``.
Errors are rendered as Octavia's ``{"faultcode", "faultstring", "debuginfo"}``
by ``netbay.api.errors`` (chosen by path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from netbay.api.responses import JSONResponse
from pydantic import ValidationError

from netbay.api.auth import context
from netbay.api.network.bodies import read_json
from netbay.errors import BadRequest
from netbay.lbaas import stats, status
from netbay.lbaas.batch import batch_update
from netbay.lbaas.failover import failover
from netbay.lbaas.populate import populate
from netbay.lbaas import providers as lb_providers
from netbay.lbaas.common import LBBody, LBResource, invalid_input, not_offered
from netbay.lbaas.registry import HEALTHMONITORS, L7POLICIES, L7RULES, LISTENERS, LOADBALANCERS, MEMBERS, POOLS
from netbay.network.resource import ListQuery, Page, to_bool

MAX_LIMIT = 1000
# Octavia's version document (its root controller): every v2.x it lists, with the
# dates it gives, the last one CURRENT. Clients pick features by the highest version
# (python-octaviaclient and openstacksdk send ``tags`` from 2.5 on).
VERSIONS = (
    ("v2.0", "2016-12-11T00:00:00Z"), ("v2.1", "2018-04-20T00:00:00Z"), ("v2.2", "2018-07-31T00:00:00Z"),
    ("v2.3", "2018-12-18T00:00:00Z"), ("v2.4", "2018-12-19T00:00:00Z"), ("v2.5", "2019-01-21T00:00:00Z"),
    ("v2.6", "2019-01-25T00:00:00Z"), ("v2.7", "2018-01-25T12:00:00Z"), ("v2.8", "2019-02-12T00:00:00Z"),
    ("v2.9", "2019-03-04T00:00:00Z"), ("v2.10", "2019-03-05T00:00:00Z"), ("v2.11", "2019-06-24T00:00:00Z"),
    ("v2.12", "2019-09-11T00:00:00Z"), ("v2.13", "2019-09-13T00:00:00Z"), ("v2.14", "2019-11-10T00:00:00Z"),
    ("v2.15", "2020-03-10T00:00:00Z"), ("v2.16", "2020-03-15T00:00:00Z"), ("v2.17", "2020-04-29T00:00:00Z"),
    ("v2.18", "2020-04-29T01:00:00Z"), ("v2.19", "2020-05-12T00:00:00Z"), ("v2.20", "2020-08-02T00:00:00Z"),
    ("v2.21", "2020-09-03T00:00:00Z"), ("v2.22", "2020-09-04T00:00:00Z"), ("v2.23", "2020-09-07T00:00:00Z"),
    ("v2.24", "2020-10-15T00:00:00Z"), ("v2.25", "2021-10-02T00:00:00Z"), ("v2.26", "2022-08-29T00:00:00Z"),
    ("v2.27", "2023-05-05T00:00:00Z"), ("v2.28", "2023-11-08T00:00:00Z"), ("v2.29", "2024-10-15T00:00:00Z"),
    ("v2.30", "2025-02-26T00:00:00Z"),
)

router = APIRouter(prefix="/load-balancer", tags=["load-balancer"])


def _base(request: Request) -> str:
    return request.app.state.public_url or str(request.base_url).rstrip("/")


def _versions(request: Request) -> list[dict[str, Any]]:
    href = f"{_base(request)}/load-balancer/v2"
    last = VERSIONS[-1][0]
    return [{"id": v, "status": "CURRENT" if v == last else "SUPPORTED", "updated": updated,
             "links": [{"rel": "self", "href": href}]} for v, updated in VERSIONS]


@router.get("", include_in_schema=False)
@router.get("/")
def versions(request: Request) -> dict[str, Any]:
    return {"versions": _versions(request)}


@router.get("/v2")
@router.get("/v2/", include_in_schema=False)
def version(request: Request) -> dict[str, Any]:
    return {"version": _versions(request)[-1]}


# --- requests ------------------------------------------------------------------------------


def parse_body(raw: Any, resource: LBResource, method: str) -> Any:
    """``{"listener": {...}}`` → the resource's create or update body (an ``LBBody`` of the
    resource's own class, hence ``Any`` to its callers), or a WSME-worded 400."""
    model = resource.create_body if method == "POST" else resource.update_body
    assert model is not None and issubclass(model, LBBody), "no PUT route without an update_body"
    key = resource.member
    if not isinstance(raw, dict) or key not in raw:
        raise BadRequest(f'Missing argument: "{key}"')
    member = raw[key]
    if not isinstance(member, dict):
        raise invalid_input(key, member, "Value should be an object")
    member = dict(member)
    for attr, unset in model.not_offered.items():
        if attr in member and member.pop(attr) not in unset:
            raise not_offered(f"{attr} is not offered yet")
    unknown = sorted(k for k in member if k not in model.model_fields)
    if unknown:
        raise BadRequest(f"Unknown attribute for argument {key}: {', '.join(unknown)}")
    try:
        return model.model_validate(member)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err.get("loc", ())]
        attr = loc[0] if loc else key
        if err.get("type") == "missing":
            raise invalid_input(attr, None, "Mandatory field missing.") from None
        message = str(err.get("msg", "invalid value"))
        for prefix in ("Value error, ", "Assertion failed, "):
            message = message.removeprefix(prefix)
        raise invalid_input(attr, member.get(attr), message) from None


def parse_list_query(request: Request, resource: LBResource) -> ListQuery:
    filters: dict[str, list[str]] = {}
    fields: list[str] = []
    sort: list[tuple[str, str]] = []
    sort_keys: list[str] = []
    sort_dirs: list[str] = []
    limit = marker = None
    page_reverse = False
    for key, value in request.query_params.multi_items():
        if "\x00" in value or "\x00" in key:
            raise BadRequest("Query parameters must not contain NUL characters")
        if key == "fields":
            fields.extend(v for v in value.split(",") if v)
        elif key == "sort":
            for part in (p for p in value.split(",") if p):
                name, _, direction = part.partition(":")
                sort.append((name.strip(), direction.strip() or "asc"))
        elif key == "sort_key":
            sort_keys.extend(v for v in value.split(",") if v)
        elif key == "sort_dir":
            sort_dirs.extend(v for v in value.split(",") if v)
        elif key == "limit":
            try:
                limit = int(value)
            except ValueError:
                raise BadRequest(f"Supplied pagination limit '{value}' is not valid.") from None
            if limit < 0:
                raise BadRequest(f"Supplied pagination limit '{value}' is not valid.")
        elif key == "marker":
            marker = value
        elif key == "page_reverse":
            page_reverse = to_bool(value)
        else:
            filters.setdefault(key, []).append(value)
    sort += list(zip(sort_keys, sort_dirs + ["asc"] * (len(sort_keys) - len(sort_dirs))))
    for name, direction in sort:
        if name != "id" and (name not in resource.filters or not resource.filters[name].sortable):
            raise BadRequest(f"Supplied sort key '{name}' is not valid.")
        if direction not in {"asc", "desc"}:
            raise BadRequest(f"Supplied sort direction '{direction}' is not valid.")
    return ListQuery(filters, fields, sort, min(limit, MAX_LIMIT) if limit else None, marker, page_reverse)


def _links(request: Request, page: Page) -> list[dict[str, str]]:
    url = f"{_base(request)}{request.url.path}"
    keep = [(k, v) for k, v in request.query_params.multi_items() if k not in {"marker", "page_reverse"}]
    links = []
    if page.previous_marker:
        query = keep + [("marker", page.previous_marker), ("page_reverse", "True")]
        links.append({"href": f"{url}?{urlencode(query)}", "rel": "previous"})
    if page.next_marker:
        links.append({"href": f"{url}?{urlencode(keep + [('marker', page.next_marker)])}", "rel": "next"})
    return links


def _listing(request: Request, key: str, page: Page) -> JSONResponse:
    return JSONResponse({key: page.items, f"{key}_links": _links(request, page)})


async def _write(request: Request, work: Callable[[Any], Any]) -> Any:
    store = request.app.state.store
    return await run_in_threadpool(lambda: store.retrying(work))


def _rendered(resource: LBResource, session: Any, obj: Any) -> dict[str, Any]:
    session.flush()
    return resource.render(session, obj, resource.tags_of(session, [obj.id])[obj.id])


# --- top-level collections ---------------------------------------------------------------------


def _pop_tree(raw: Any) -> Any:
    """The ``listeners`` of a fully populated load balancer create (taken out of the body)."""
    member = raw.get("loadbalancer") if isinstance(raw, dict) else None
    if isinstance(member, dict) and "listeners" in member:
        raw["loadbalancer"] = dict(member)
        return raw["loadbalancer"].pop("listeners")
    return None


def _mount(api: APIRouter, resource: LBResource) -> None:
    coll, key = resource.collection, resource.member
    path = f"/lbaas/{coll}"

    def list_items(request: Request) -> Response:
        ctx = context(request)
        query = parse_list_query(request, resource)
        with request.app.state.store.read() as s:
            return _listing(request, coll, resource.list(s, ctx, query))

    def show_item(request: Request, item_id: str) -> Response:
        ctx = context(request)
        fields = parse_list_query(request, resource).fields
        with request.app.state.store.read() as s:
            return JSONResponse({key: resource.show(s, ctx, item_id, fields)})

    async def create_item(request: Request) -> Response:
        ctx = context(request)
        raw = await read_json(request)
        tree = _pop_tree(raw) if resource is LOADBALANCERS else None
        body = parse_body(raw, resource, "POST")

        def create(s):  # noqa: ANN001, ANN202
            obj = resource.create(s, ctx, body)
            if tree:
                populate(s, ctx, obj, tree, parse_body)
            return _rendered(resource, s, obj)

        item = await _write(request, create)
        return JSONResponse({key: item}, status_code=201)

    async def update_item(request: Request, item_id: str) -> Response:
        ctx = context(request)
        body = parse_body(await read_json(request), resource, "PUT")
        item = await _write(request, lambda s: _rendered(resource, s, resource.update(s, ctx, item_id, body)))
        return JSONResponse({key: item})

    async def delete_item(request: Request, item_id: str) -> Response:
        ctx = context(request)
        if resource is LOADBALANCERS:
            cascade = to_bool(request.query_params.get("cascade", "false"))
            await _write(request, lambda s: resource.delete(s, ctx, item_id, cascade=cascade))
        else:
            await _write(request, lambda s: resource.delete(s, ctx, item_id))
        return Response(status_code=204)

    api.add_api_route(path, list_items, methods=["GET"], name=f"list_{coll}")
    api.add_api_route(path, create_item, methods=["POST"], name=f"create_{key}", status_code=201)
    api.add_api_route(path + "/{item_id}", show_item, methods=["GET"], name=f"show_{key}")
    api.add_api_route(path + "/{item_id}", update_item, methods=["PUT"], name=f"update_{key}")
    api.add_api_route(path + "/{item_id}", delete_item, methods=["DELETE"], name=f"delete_{key}",
                      status_code=204)


def _mount_members(api: APIRouter) -> None:
    path = "/lbaas/pools/{pool_id}/members"

    def list_members(request: Request, pool_id: str) -> Response:
        ctx = context(request)
        query = parse_list_query(request, MEMBERS)
        with request.app.state.store.read() as s:
            return _listing(request, "members", MEMBERS.list_in(s, ctx, pool_id, query))

    def show_member(request: Request, pool_id: str, member_id: str) -> Response:
        ctx = context(request)
        fields = parse_list_query(request, MEMBERS).fields
        with request.app.state.store.read() as s:
            return JSONResponse({"member": MEMBERS.show_in(s, ctx, pool_id, member_id, fields)})

    async def create_member(request: Request, pool_id: str) -> Response:
        ctx = context(request)
        body = parse_body(await read_json(request), MEMBERS, "POST")
        item = await _write(request, lambda s: _rendered(MEMBERS, s, MEMBERS.create_in(s, ctx, pool_id, body)))
        return JSONResponse({"member": item}, status_code=201)

    async def update_member(request: Request, pool_id: str, member_id: str) -> Response:
        ctx = context(request)
        body = parse_body(await read_json(request), MEMBERS, "PUT")
        item = await _write(
            request, lambda s: _rendered(MEMBERS, s, MEMBERS.update_in(s, ctx, pool_id, member_id, body)))
        return JSONResponse({"member": item})

    async def delete_member(request: Request, pool_id: str, member_id: str) -> Response:
        ctx = context(request)
        await _write(request, lambda s: MEMBERS.delete_in(s, ctx, pool_id, member_id))
        return Response(status_code=204)

    async def batch_members(request: Request, pool_id: str) -> Response:
        ctx = context(request)
        raw = await read_json(request)
        if not isinstance(raw, dict) or "members" not in raw:
            raise BadRequest('Missing argument: "members"')
        if not isinstance(raw["members"], list):
            raise invalid_input("members", raw["members"], "Value should be a list")
        bodies = [parse_body({"member": m}, MEMBERS, "POST") for m in raw["members"]]
        additive = to_bool(request.query_params.get("additive_only", "false"))
        await _write(request, lambda s: batch_update(s, ctx, pool_id, bodies, additive_only=additive))
        return Response(status_code=202)

    api.add_api_route(path, list_members, methods=["GET"], name="list_members")
    api.add_api_route(path, create_member, methods=["POST"], name="create_member", status_code=201)
    api.add_api_route(path, batch_members, methods=["PUT"], name="batch_update_members", status_code=202)
    api.add_api_route(path + "/{member_id}", show_member, methods=["GET"], name="show_member")
    api.add_api_route(path + "/{member_id}", update_member, methods=["PUT"], name="update_member")
    api.add_api_route(path + "/{member_id}", delete_member, methods=["DELETE"], name="delete_member",
                      status_code=204)


def _rule_body(raw: Any, method: str) -> Any:
    """``{"rule": {...}}`` (the API's key; the change log calls the object ``l7rule``)."""
    if not isinstance(raw, dict) or "rule" not in raw:
        raise BadRequest('Missing argument: "rule"')
    return parse_body({L7RULES.member: raw["rule"]}, L7RULES, method)


def _mount_rules(api: APIRouter) -> None:
    path = "/lbaas/l7policies/{policy_id}/rules"

    def list_rules(request: Request, policy_id: str) -> Response:
        ctx = context(request)
        query = parse_list_query(request, L7RULES)
        with request.app.state.store.read() as s:
            return _listing(request, "rules", L7RULES.list_in(s, ctx, policy_id, query))

    def show_rule(request: Request, policy_id: str, rule_id: str) -> Response:
        ctx = context(request)
        fields = parse_list_query(request, L7RULES).fields
        with request.app.state.store.read() as s:
            return JSONResponse({"rule": L7RULES.show_in(s, ctx, policy_id, rule_id, fields)})

    async def create_rule(request: Request, policy_id: str) -> Response:
        ctx = context(request)
        body = _rule_body(await read_json(request), "POST")
        item = await _write(request, lambda s: _rendered(L7RULES, s, L7RULES.create_in(s, ctx, policy_id, body)))
        return JSONResponse({"rule": item}, status_code=201)

    async def update_rule(request: Request, policy_id: str, rule_id: str) -> Response:
        ctx = context(request)
        body = _rule_body(await read_json(request), "PUT")
        item = await _write(
            request, lambda s: _rendered(L7RULES, s, L7RULES.update_in(s, ctx, policy_id, rule_id, body)))
        return JSONResponse({"rule": item})

    async def delete_rule(request: Request, policy_id: str, rule_id: str) -> Response:
        ctx = context(request)
        await _write(request, lambda s: L7RULES.delete_in(s, ctx, policy_id, rule_id))
        return Response(status_code=204)

    api.add_api_route(path, list_rules, methods=["GET"], name="list_l7rules")
    api.add_api_route(path, create_rule, methods=["POST"], name="create_l7rule", status_code=201)
    api.add_api_route(path + "/{rule_id}", show_rule, methods=["GET"], name="show_l7rule")
    api.add_api_route(path + "/{rule_id}", update_rule, methods=["PUT"], name="update_l7rule")
    api.add_api_route(path + "/{rule_id}", delete_rule, methods=["DELETE"], name="delete_l7rule",
                      status_code=204)


def _mount_extras(api: APIRouter) -> None:
    def statuses(request: Request, item_id: str) -> dict[str, Any]:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return status.tree(s, LOADBALANCERS.get(s, ctx, item_id))

    def lb_stats(request: Request, item_id: str) -> dict[str, Any]:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return {"stats": stats.loadbalancer_stats(s, LOADBALANCERS.get(s, ctx, item_id).id)}

    def listener_stats(request: Request, item_id: str) -> dict[str, Any]:
        ctx = context(request)
        with request.app.state.store.read() as s:
            return {"stats": stats.listener_stats(s, LISTENERS.get(s, ctx, item_id).id)}

    async def lb_failover(request: Request, item_id: str) -> Response:
        ctx = context(request)
        await _write(request, lambda s: failover(s, ctx, item_id))
        return Response(status_code=202)

    def providers(request: Request) -> dict[str, Any]:
        context(request)
        return {"providers": lb_providers.listing()}

    def flavor_capabilities(request: Request, provider: str) -> dict[str, Any]:
        context(request)
        return {"flavor_capabilities": lb_providers.flavor_capabilities(provider)}

    def zone_capabilities(request: Request, provider: str) -> dict[str, Any]:
        context(request)
        return {"availability_zone_capabilities": lb_providers.zone_capabilities(provider)}

    def flavors(request: Request) -> dict[str, Any]:
        context(request)
        return {"flavors": [], "flavors_links": []}

    def zones(request: Request) -> dict[str, Any]:
        context(request)
        return {"availability_zones": [], "availability_zones_links": []}

    api.add_api_route("/lbaas/loadbalancers/{item_id}/status", statuses, methods=["GET"],
                      name="show_loadbalancer_status")
    api.add_api_route("/lbaas/loadbalancers/{item_id}/statuses", statuses, methods=["GET"],
                      include_in_schema=False)
    api.add_api_route("/lbaas/loadbalancers/{item_id}/stats", lb_stats, methods=["GET"],
                      name="show_loadbalancer_stats")
    api.add_api_route("/lbaas/listeners/{item_id}/stats", listener_stats, methods=["GET"],
                      name="show_listener_stats")
    api.add_api_route("/lbaas/loadbalancers/{item_id}/failover", lb_failover, methods=["PUT"],
                      name="failover_loadbalancer", status_code=202)
    api.add_api_route("/lbaas/providers", providers, methods=["GET"], name="list_providers")
    api.add_api_route("/lbaas/providers/{provider}/flavor_capabilities", flavor_capabilities, methods=["GET"],
                      name="list_flavor_capabilities")
    api.add_api_route("/lbaas/providers/{provider}/availability_zone_capabilities", zone_capabilities,
                      methods=["GET"], name="list_availability_zone_capabilities")
    api.add_api_route("/lbaas/flavors", flavors, methods=["GET"], name="list_flavors")
    api.add_api_route("/lbaas/availabilityzones", zones, methods=["GET"], name="list_availability_zones")


def install(app: FastAPI) -> None:
    from netbay.api import lbstats, lbstatus

    lbstatus.install()  # the load-balancer kinds of PUT /netbay/v1/status
    app.include_router(router)
    app.include_router(lbstats.router)  # PUT /netbay/v1/lbstats: the dataplane's counters
    api = APIRouter(tags=["load-balancer"])
    _mount_extras(api)  # before the collections: ``…/{id}/status`` is not an id
    for resource in (LOADBALANCERS, LISTENERS, POOLS, HEALTHMONITORS, L7POLICIES):
        _mount(api, resource)
    _mount_members(api)
    _mount_rules(api)
    app.include_router(api, prefix="/load-balancer/v2")
    # Octavia answers under /v2.0 too (neutron-lbaas compatibility).
    app.include_router(api, prefix="/load-balancer/v2.0", include_in_schema=False)
