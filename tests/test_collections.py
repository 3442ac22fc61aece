"""The collection mounter on its own: a child collection's routes, ids, names and
verbs, answered the same by FastAPI and by the plain Starlette routes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient

from netbay.api.collections import Collection, Verb, mount
from netbay.api.plainroutes import serve_plainly
from netbay.network.resource import ListQuery, Page


class _Store:
    """Sessions are the one dict of shelves → books; writes are counted."""

    def __init__(self) -> None:
        self.books: dict[str, dict[str, dict[str, Any]]] = {"s1": {}}
        self.writes = 0

    @contextmanager
    def read(self) -> Iterator[dict[str, dict[str, dict[str, Any]]]]:
        yield self.books

    def retrying(self, fn: Any) -> Any:
        self.writes += 1
        return fn(self.books)


def _query(request: Request) -> ListQuery:
    return ListQuery({}, request.query_params.getlist("fields"), [], None, None)


def _listing(request: Request, key: str, page: Page, query: ListQuery) -> dict[str, Any]:
    return {key: page.items, f"{key}_count": len(page.items)}


def _create(s: Any, ctx: Any, shelf: str, body: dict[str, Any]) -> dict[str, Any]:
    book = {"id": body["id"], "shelf": shelf, "title": body.get("title", "")}
    s[shelf][book["id"]] = book
    return book


def _update(s: Any, ctx: Any, shelf: str, book: str, body: dict[str, Any], *, loud: bool) -> dict[str, Any]:
    s[shelf][book].update(body, title=body["title"].upper() if loud else body["title"])
    return s[shelf][book]


def _show(s: Any, ctx: Any, shelf: str, book: str, fields: list[str]) -> dict[str, Any]:
    item = s[shelf][book]
    return {k: v for k, v in item.items() if k in fields} if fields else item


def _count(request: Request, shelf_id: str) -> dict[str, Any]:
    return {"count": len(request.app.state.store.books[shelf_id])}


SHELVES = Collection(segment="shelves", member="shelf", key="shelves", prefix="/v1", query=_query)
BOOKS = Collection(
    segment="books", member="book", key="books", parent=SHELVES, parent_param="shelf_id",
    item_param="book_id", names=("volumes", "volume"), query=_query, listing=_listing,
    parse=lambda raw, method: raw["book"],
    list=lambda s, ctx, shelf, query: Page(list(s[shelf].values()), None, None),
    show=_show, create=_create, update=_update, delete=lambda s, ctx, shelf, book: s[shelf].pop(book),
    update_options=lambda request: {"loud": request.query_params.get("loud") == "1"},
    verbs=(Verb("GET", "/count", _count, name="count_volumes"),))


@pytest.fixture(params=["fastapi", "plain"])
def client(request: pytest.FixtureRequest) -> TestClient:
    app = FastAPI()
    app.state.noauth, app.state.store = True, _Store()
    router = APIRouter(prefix="/shop")
    mount(router, BOOKS)
    app.include_router(router)
    if request.param == "plain":
        serve_plainly(app, "/shop", router.routes)
    return TestClient(app)


def test_child_collection_routes_carry_the_parent_and_item_ids(client: TestClient) -> None:
    base = "/shop/v1/shelves/s1/books"
    created = client.post(base, json={"book": {"id": "b1", "title": "dune"}})
    assert (created.status_code, created.json()) == (201, {"book": {"id": "b1", "shelf": "s1", "title": "dune"}})
    assert client.get(base).json() == {"books": [created.json()["book"]], "books_count": 1}
    assert client.get(f"{base}/b1?fields=title").json() == {"book": {"title": "dune"}}
    updated = client.put(f"{base}/b1?loud=1", json={"book": {"title": "dune ii"}})
    assert updated.json()["book"]["title"] == "DUNE II"   # the update option read from the request
    assert client.get(f"{base}/count").json() == {"count": 1}
    assert client.delete(f"{base}/b1").status_code == 204
    assert client.get(f"{base}/count").json() == {"count": 0}
    assert client.app.state.store.writes == 3  # type: ignore[attr-defined]


def test_routes_are_named_and_documented_with_their_path_parameters() -> None:
    app = FastAPI()
    mount(app.router, BOOKS)
    ops = {(path, method): op for path, item in app.openapi()["paths"].items() for method, op in item.items()}
    item = "/v1/shelves/{shelf_id}/books/{book_id}"
    assert {op["operationId"].split("_v1_")[0] for op in ops.values()} == {
        "list_volumes", "create_volume", "count_volumes", "show_volume", "update_volume", "delete_volume"}
    assert [p["name"] for p in ops[(item, "get")]["parameters"]] == ["shelf_id", "book_id"]
    assert ops[(item, "delete")]["responses"].keys() == {"204", "422"}
    assert set(ops) == {("/v1/shelves/{shelf_id}/books", m) for m in ("get", "post")} | {
        ("/v1/shelves/{shelf_id}/books/count", "get")} | {(item, m) for m in ("get", "put", "delete")}
