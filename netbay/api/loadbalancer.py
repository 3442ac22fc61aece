"""The Octavia-compatible load-balancer API v2 under ``/load-balancer``.

Octavia's list parameters (``limit``/``marker``/``page_reverse``, ``sort=key:dir,…``
or ``sort_key``/``sort_dir``, ``fields``, filters) and request bodies refused in
WSME's words; the collections (members and L7 rules as children of pools and L7
policies) are mounted by :mod:`netbay.api.collections`; the rules live in
``netbay.lbaas``.
Errors are rendered as Octavia's ``{"faultcode", "faultstring", "debuginfo"}``
by ``netbay.api.errors`` (chosen by path).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request, Response
from pydantic import ValidationError

from netbay.api.auth import context
from netbay.api.collections import Collection, Verb, mount, read_json, write
from netbay.errors import BadRequest
from netbay.lbaas import stats, status
from netbay.lbaas.batch import batch_update
from netbay.lbaas.failover import failover
from netbay.lbaas.populate import full, populate
from netbay.lbaas import providers as lb_providers
from netbay.lbaas.common import LBBody, LBResource, invalid_input, new_tree, not_offered
from netbay.lbaas.registry import HEALTHMONITORS, L7POLICIES, L7RULES, LISTENERS, LOADBALANCERS, MEMBERS, POOLS
from netbay.network.resource import ListQuery, Page, to_bool
from netbay.api.urls import public_root

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


def _versions(request: Request) -> list[dict[str, Any]]:
    href = f"{public_root(request)}/load-balancer/v2"
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
    url = f"{public_root(request)}{request.url.path}"
    keep = [(k, v) for k, v in request.query_params.multi_items() if k not in {"marker", "page_reverse"}]
    links = []
    if page.previous_marker:
        query = keep + [("marker", page.previous_marker), ("page_reverse", "True")]
        links.append({"href": f"{url}?{urlencode(query)}", "rel": "previous"})
    if page.next_marker:
        links.append({"href": f"{url}?{urlencode(keep + [('marker', page.next_marker)])}", "rel": "next"})
    return links


def octavia_listing(request: Request, key: str, page: Page, query: ListQuery) -> dict[str, Any]:
    """An Octavia list body: the items and ``<key>_links`` (empty without a page)."""
    return {key: page.items, f"{key}_links": _links(request, page)}


def _rendered(resource: LBResource, session: Any, obj: Any) -> dict[str, Any]:
    session.flush()
    return resource.render(session, obj, resource.tags_of(session, [obj.id])[obj.id])


# --- collections --------------------------------------------------------------------------------


def collection(resource: LBResource, **changes: Any) -> Collection:
    """The Octavia collection of a top-level ``resource`` under ``/lbaas`` (``changes``:
    fields that differ from the plain one, as the load balancer's create)."""
    return replace(Collection(
        segment=resource.collection, member=resource.member, key=resource.collection, prefix="/lbaas",
        query=lambda request: parse_list_query(request, resource), listing=octavia_listing,
        parse=lambda raw, method: parse_body(raw, resource, method),
        list=resource.list, show=resource.show,
        create=lambda s, ctx, body: _rendered(resource, s, resource.create(s, ctx, body)),
        update=lambda s, ctx, item_id, body: _rendered(resource, s, resource.update(s, ctx, item_id, body)),
        delete=resource.delete), **changes)


def _pop_tree(raw: Any) -> Any:
    """The ``listeners`` of a fully populated load balancer create (taken out of the body)."""
    member = raw.get("loadbalancer") if isinstance(raw, dict) else None
    if isinstance(member, dict) and "listeners" in member:
        raw["loadbalancer"] = dict(member)
        return raw["loadbalancer"].pop("listeners")
    return None


def _parse_tree(raw: Any, method: str) -> tuple[Any, Any]:
    """A load balancer's body and, on create, the tree of children to populate it with."""
    tree = _pop_tree(raw) if method == "POST" else None
    return parse_body(raw, LOADBALANCERS, method), tree


def _create_tree(s: Any, ctx: Any, parsed: tuple[Any, Any]) -> dict[str, Any]:
    body, tree = parsed
    with new_tree(s) as made:
        obj = LOADBALANCERS.create(s, ctx, body)
        if tree:
            populate(s, ctx, obj, tree, parse_body)
    return full(LOADBALANCERS.rendered(s, obj), made)


def _update_lb(s: Any, ctx: Any, item_id: str, parsed: tuple[Any, Any]) -> dict[str, Any]:
    return _rendered(LOADBALANCERS, s, LOADBALANCERS.update(s, ctx, item_id, parsed[0]))


def _cascade(request: Request) -> dict[str, Any]:
    return {"cascade": to_bool(request.query_params.get("cascade", "false"))}


def child(resource: LBResource, parent: Collection, parent_param: str, segment: str, member: str,
          verbs: tuple[Verb, ...] = ()) -> Collection:
    """The Octavia collection of ``resource`` under an item of ``parent`` (the ``*_in``
    methods take the parent's id first); its JSON keys are ``segment`` and ``member``."""
    wrapped = member != resource.member

    def parse(raw: Any, method: str) -> Any:
        if wrapped:  # the API's key is not the resource's: "rule" for an l7rule
            if not isinstance(raw, dict) or member not in raw:
                raise BadRequest(f'Missing argument: "{member}"')
            raw = {resource.member: raw[member]}
        return parse_body(raw, resource, method)

    in_parent: Any = resource  # MEMBERS or L7RULES: the resources with ``*_in`` methods
    return Collection(
        segment=segment, member=member, key=segment, parent=parent, parent_param=parent_param,
        item_param=f"{member}_id", names=(resource.collection, resource.member),
        query=lambda request: parse_list_query(request, resource), listing=octavia_listing, parse=parse,
        list=in_parent.list_in, show=in_parent.show_in,
        create=lambda s, ctx, pid, body: _rendered(resource, s, in_parent.create_in(s, ctx, pid, body)),
        update=lambda s, ctx, pid, cid, body: _rendered(resource, s, in_parent.update_in(s, ctx, pid, cid, body)),
        delete=in_parent.delete_in, verbs=verbs)


# --- verbs beyond the five ----------------------------------------------------------------------


async def batch_members(request: Request, pool_id: str) -> Response:
    ctx = context(request)
    raw = await read_json(request)
    if not isinstance(raw, dict) or "members" not in raw:
        raise BadRequest('Missing argument: "members"')
    if not isinstance(raw["members"], list):
        raise invalid_input("members", raw["members"], "Value should be a list")
    bodies = [parse_body({"member": m}, MEMBERS, "POST") for m in raw["members"]]
    additive = to_bool(request.query_params.get("additive_only", "false"))
    await write(request, lambda s: batch_update(s, ctx, pool_id, bodies, additive_only=additive))
    return Response(status_code=202)


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
    await write(request, lambda s: failover(s, ctx, item_id))
    return Response(status_code=202)


def _collections() -> list[Collection]:
    loadbalancers = collection(
        LOADBALANCERS, parse=_parse_tree, create=_create_tree, update=_update_lb, delete_options=_cascade,
        verbs=(Verb("GET", "/{item_id}/status", statuses, name="show_loadbalancer_status"),
               Verb("GET", "/{item_id}/statuses", statuses, include_in_schema=False),
               Verb("GET", "/{item_id}/stats", lb_stats, name="show_loadbalancer_stats"),
               Verb("PUT", "/{item_id}/failover", lb_failover, name="failover_loadbalancer", status_code=202)))
    listeners = collection(LISTENERS, verbs=(
        Verb("GET", "/{item_id}/stats", listener_stats, name="show_listener_stats"),))
    pools, l7policies = collection(POOLS), collection(L7POLICIES)
    members = child(MEMBERS, pools, "pool_id", "members", "member", verbs=(
        Verb("PUT", "", batch_members, name="batch_update_members", status_code=202),))
    rules = child(L7RULES, l7policies, "policy_id", "rules", "rule")
    return [loadbalancers, listeners, pools, collection(HEALTHMONITORS), l7policies, members, rules]


# --- provider catalogue ---------------------------------------------------------------------------


def _mount_catalogue(api: APIRouter) -> None:
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
    _mount_catalogue(api)
    for coll in _collections():
        mount(api, coll)
    app.include_router(api, prefix="/load-balancer/v2")
    # Octavia answers under /v2.0 too (neutron-lbaas compatibility).
    app.include_router(api, prefix="/load-balancer/v2.0", include_in_schema=False)
