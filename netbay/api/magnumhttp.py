"""Request helpers of the container-infra (Magnum) API, shared by its route modules.

:mod:`netbay.api.containerinfra` mounts :mod:`netbay.api.clusterops`, so the helpers
both use live here, below the two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from netbay.errors import BadRequest

PREFIX = "/container-infra"


def base(request: Request) -> str:
    """The public root the API answers under (links point there)."""
    return request.app.state.public_url or str(request.base_url).rstrip("/")


def links(request: Request, collection: str, obj_id: str) -> list[dict[str, str]]:
    root = base(request) + PREFIX
    return [{"href": f"{root}/v1/{collection}/{obj_id}", "rel": "self"},
            {"href": f"{root}/{collection}/{obj_id}", "rel": "bookmark"}]


async def body(request: Request) -> Any:
    """The body as JSON; its size is capped while it is read (:mod:`netbay.bodylimit`)."""
    raw = await request.body()
    if not raw.strip():
        raise BadRequest("Request body is empty: a JSON document is required.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"Invalid JSON in request body: {exc}.") from None


async def write(request: Request, work: Callable[[Any], Any]) -> Any:
    """``work(session)`` in one retried transaction, off the event loop."""
    store = request.app.state.store
    return await run_in_threadpool(lambda: store.retrying(work))


__all__ = ["PREFIX", "base", "body", "links", "write"]
