"""One way to put a REST collection on a router: list, show, create, update, delete
and extra verbs, for top-level collections and child ones (``/pools/{pool_id}/members``).

A ``Collection`` says where a collection hangs, its JSON keys, how its API family
parses queries and bodies and words a list, and what each verb calls; ``mount`` makes
the routes. The network, load-balancer, pod and sandbox APIs are all mounted here, so
the order of checks (caller, query, body, precondition), the status codes and the
transaction rules are decided once.

The verbs' callables take ``(session, ctx, *ids, ...)``: ``ids`` are the parents' ids
(outermost first) and, for an item, the item's. Reads run in a read session; writes
in ``Store.retrying`` on the thread pool, and answer what their callable returns.
"""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from netbay.api.auth import context
from netbay.api.responses import JSONResponse
from netbay.errors import BadRequest
from netbay.network.resource import ListQuery, Page

Options = Callable[[Request], Mapping[str, Any]]


async def read_json(request: Request) -> Any:
    """The body as JSON; its size is capped while it is read (:mod:`netbay.bodylimit`)."""
    raw = await request.body()
    if not raw:
        raise BadRequest("Resource body required")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("Malformed request body") from None


async def write(request: Request, work: Callable[[Any], Any]) -> Any:
    """``work(session)`` in one write transaction (retried on races), off the event loop."""
    store = request.app.state.store
    return await run_in_threadpool(lambda: store.retrying(work))


def bare_listing(request: Request, key: str, page: Page, query: ListQuery) -> dict[str, Any]:
    """A list body with the items only (no pagination links)."""
    return {key: page.items}


def _no_options(request: Request) -> Mapping[str, Any]:
    return {}


@dataclass(frozen=True)
class Verb:
    """A route beyond the five (``PUT …/{item_id}/failover``); ``suffix`` follows the
    collection's path ("" is the collection itself)."""

    method: str
    suffix: str
    endpoint: Callable[..., Any]
    name: str | None = None
    status_code: int | None = None
    include_in_schema: bool = True
    openapi_extra: dict[str, Any] | None = None


@dataclass(frozen=True)
class Bulk:
    """Creating several items in one POST, chosen when the body has the list's key."""

    parse: Callable[[dict[str, Any]], list[Any]]
    create: Callable[..., list[dict[str, Any]]]  # (session, ctx, *parent_ids, bodies) → items


@dataclass(frozen=True)
class Collection:
    """A collection of an API: its place, its keys, its dialect and its verbs.

    A verb whose callable is None gets no route. ``parse(raw, "POST" | "PUT")`` turns
    the JSON body into what ``create`` / ``update`` get; ``query`` parses the query
    string (``fields`` for a show too) and ``listing`` makes the list body of the API
    family (its pagination links). ``update_options`` / ``delete_options`` read what
    the request adds to a write (an ``If-Match``, ``?cascade=``) before it starts;
    they are passed to the callable as keyword arguments.
    """

    segment: str                 # the last path segment: "networks", "members"
    member: str                  # one item's JSON key: "network", "rule"
    key: str                     # the list's JSON key: "networks", "rules"
    query: Callable[[Request], ListQuery]
    listing: Callable[[Request, str, Page, ListQuery], dict[str, Any]] = bare_listing
    parse: Callable[[Any, str], Any] | None = None
    list: Callable[..., Page] | None = None                 # (session, ctx, *parent_ids, query)
    show: Callable[..., dict[str, Any]] | None = None       # (session, ctx, *ids, fields)
    create: Callable[..., dict[str, Any]] | None = None     # (session, ctx, *parent_ids, body)
    update: Callable[..., dict[str, Any]] | None = None     # (session, ctx, *ids, body, **options)
    delete: Callable[..., None] | None = None               # (session, ctx, *ids, **options)
    prefix: str = ""             # where a top-level collection hangs: "/v2.0", "/lbaas"
    parent: Collection | None = None
    parent_param: str = ""       # the parent's id in this path: "pool_id"
    item_param: str = "item_id"
    # The route names' words: (plural, singular), e.g. ("l7rules", "l7rule") for the
    # rules whose JSON keys are "rules" / "rule"; default (segment, member).
    names: tuple[str, str] | None = None
    # Writes a read implies, in their own transactions: ``(store, ctx, filters)``.
    before_read: Callable[[Any, Any, dict[str, builtins.list[str]]], None] | None = None
    bulk: Bulk | None = None
    update_options: Options = _no_options
    delete_options: Options = _no_options
    create_schema: dict[str, Any] | None = None  # the routes' ``openapi_extra``
    update_schema: dict[str, Any] | None = None
    verbs: tuple[Verb, ...] = field(default=())

    @property
    def path(self) -> str:
        if self.parent is None:
            return f"{self.prefix}/{self.segment}"
        return f"{self.parent.path}/{{{self.parent_param}}}/{self.segment}"

    @property
    def parent_params(self) -> tuple[str, ...]:
        """The path parameters naming the parents, outermost first."""
        if self.parent is None:
            return ()
        return (*self.parent.parent_params, self.parent_param)


def mount(router: APIRouter, coll: Collection) -> None:
    """Add ``coll``'s routes to ``router``: list and create on the collection, then its
    collection verbs, then show, update and delete on an item, then its item verbs."""
    path, item = coll.path, f"{coll.path}/{{{coll.item_param}}}"
    plural, singular = coll.names or (coll.segment, coll.member)
    parents, ids = coll.parent_params, (*coll.parent_params, coll.item_param)
    handlers = _Handlers(coll)

    def add(route: str, handler: Callable[..., Any], params: tuple[str, ...], method: str, name: str,
            **extra: Any) -> None:
        router.add_api_route(route, _declared(handler, params), methods=[method], name=name, **extra)

    if coll.list is not None:
        add(path, handlers.list_items, parents, "GET", f"list_{plural}")
    if coll.create is not None:
        add(path, handlers.create_item, parents, "POST", f"create_{singular}", status_code=201,
            openapi_extra=coll.create_schema)
    _add_verbs(router, path, [v for v in coll.verbs if not v.suffix.startswith(f"/{{{coll.item_param}}}")])
    if coll.show is not None:
        add(item, handlers.show_item, ids, "GET", f"show_{singular}")
    if coll.update is not None:
        add(item, handlers.update_item, ids, "PUT", f"update_{singular}", openapi_extra=coll.update_schema)
    if coll.delete is not None:
        add(item, handlers.delete_item, ids, "DELETE", f"delete_{singular}", status_code=204)
    _add_verbs(router, path, [v for v in coll.verbs if v.suffix.startswith(f"/{{{coll.item_param}}}")])


def _add_verbs(router: APIRouter, path: str, verbs: list[Verb]) -> None:
    for verb in verbs:
        extra: dict[str, Any] = {"include_in_schema": verb.include_in_schema}
        if verb.name is not None:
            extra["name"] = verb.name
        if verb.status_code is not None:
            extra["status_code"] = verb.status_code
        if verb.openapi_extra is not None:
            extra["openapi_extra"] = verb.openapi_extra
        router.add_api_route(path + verb.suffix, verb.endpoint, methods=[verb.method], **extra)


class _Handlers:
    """The five handlers of one collection; each takes the request and the path's ids."""

    def __init__(self, coll: Collection) -> None:
        self.coll = coll

    def _ids(self, path: dict[str, str], item: bool) -> list[str]:
        names = self.coll.parent_params + ((self.coll.item_param,) if item else ())
        return [path[name] for name in names]

    def list_items(self, request: Request, **path: str) -> Response:
        coll, ctx = self.coll, context(request)
        query = coll.query(request)
        store = request.app.state.store
        if coll.before_read is not None:
            coll.before_read(store, ctx, query.filters)
        assert coll.list is not None
        with store.read() as s:
            page = coll.list(s, ctx, *self._ids(path, False), query)
        return JSONResponse(coll.listing(request, coll.key, page, query))

    def show_item(self, request: Request, **path: str) -> Response:
        coll, ctx = self.coll, context(request)
        fields = coll.query(request).fields
        store = request.app.state.store
        if coll.before_read is not None:
            coll.before_read(store, ctx, {})
        assert coll.show is not None
        with store.read() as s:
            return JSONResponse({coll.member: coll.show(s, ctx, *self._ids(path, True), fields)})

    async def create_item(self, request: Request, **path: str) -> Response:
        coll, ctx = self.coll, context(request)
        raw = await read_json(request)
        parents = self._ids(path, False)
        if coll.bulk is not None and isinstance(raw, dict) and coll.key in raw:  # the list's key wins
            bulk, bodies = coll.bulk, coll.bulk.parse(raw)
            items = await write(request, lambda s: bulk.create(s, ctx, *parents, bodies))
            return JSONResponse({coll.key: items}, status_code=201)
        assert coll.parse is not None and coll.create is not None
        body, create = coll.parse(raw, "POST"), coll.create
        item = await write(request, lambda s: create(s, ctx, *parents, body))
        return JSONResponse({coll.member: item}, status_code=201)

    async def update_item(self, request: Request, **path: str) -> Response:
        coll, ctx = self.coll, context(request)
        assert coll.parse is not None and coll.update is not None
        body, update = coll.parse(await read_json(request), "PUT"), coll.update
        options, ids = coll.update_options(request), self._ids(path, True)
        item = await write(request, lambda s: update(s, ctx, *ids, body, **options))
        return JSONResponse({coll.member: item})

    async def delete_item(self, request: Request, **path: str) -> Response:
        coll, ctx = self.coll, context(request)
        assert coll.delete is not None
        delete, options, ids = coll.delete, coll.delete_options(request), self._ids(path, True)
        await write(request, lambda s: delete(s, ctx, *ids, **options))
        return Response(status_code=204)


def _declared(handler: Callable[..., Any], params: tuple[str, ...]) -> Callable[..., Any]:
    """``handler`` declaring ``(request, <each path parameter>: str)``, which is what
    FastAPI documents and passes (and :mod:`netbay.api.plainroutes` passes)."""
    if inspect.iscoroutinefunction(handler):
        async def declared_async(request: Request, **path: str) -> Response:
            return await handler(request, **path)

        declared: Callable[..., Any] = declared_async
    else:
        def declared_sync(request: Request, **path: str) -> Response:
            return handler(request, **path)

        declared = declared_sync
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    declared.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("request", kind, annotation=Request),
         *(inspect.Parameter(p, kind, annotation=str) for p in params)],
        return_annotation=Response)
    return declared
