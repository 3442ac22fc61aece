"""Serving FastAPI-declared routes as plain Starlette routes, under one prefix.

FastAPI gives every request dependency solving, three exit stacks and its
telemetry hooks, and matches routes one by one (about 3 µs a route here): a
request to the network API paid ~0.3 ms before reaching its handler. The
network API's handlers take only the request and their path parameters, so
none of that is needed to run them. ``serve_plainly`` puts a Starlette
``Mount`` in front of every other route; it answers every path under the
prefix with the same handlers. The FastAPI routes stay where they are: they
are what ``/openapi.json`` describes, and answer nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from netbay.api.responses import JSONResponse


def serve_plainly(app: FastAPI, prefix: str, routes: Sequence[BaseRoute]) -> None:
    """Answer ``prefix/...`` with ``routes``' handlers, matched before any other route."""
    plain = [_plain(route, prefix) for route in routes
             if isinstance(route, APIRoute) and route.path.startswith(prefix + "/")]
    app.router.routes.insert(0, Mount(prefix, routes=plain))


def _plain(route: APIRoute, prefix: str) -> Route:
    plain = Route(route.path[len(prefix):], _endpoint(route.endpoint), methods=list(route.methods or ()),
                  name=route.name)
    if plain.methods is not None and "HEAD" not in (route.methods or ()):
        plain.methods.discard("HEAD")  # Starlette adds HEAD to GET routes; FastAPI does not
    return plain


def _endpoint(handler: Callable[..., Any]) -> Callable[[Request], Any]:
    """``handler([request], **path_params)`` as a Starlette endpoint (sync stays sync: the
    thread pool runs it, as FastAPI did)."""
    takes_request = "request" in inspect.signature(handler).parameters

    def arguments(request: Request) -> tuple[tuple[Request, ...], dict[str, Any]]:
        return ((request,) if takes_request else ()), request.path_params

    if inspect.iscoroutinefunction(handler):

        async def call_async(request: Request) -> Response:
            args, params = arguments(request)
            return _response(await handler(*args, **params))

        return call_async

    def call(request: Request) -> Response:
        args, params = arguments(request)
        return _response(handler(*args, **params))

    return call


def _response(result: Any) -> Response:
    return result if isinstance(result, Response) else JSONResponse(result)
