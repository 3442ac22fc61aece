"""A cap on request bodies, enforced while they are read: no body is buffered whole first.

WHY here and as ASGI middleware: a check after ``await request.body()`` comes too late —
the body is already in memory (a 600 MiB POST to the token route, no credentials, took
the server from 121 MiB to 1.9 GiB). :class:`BodyLimit` wraps every HTTP surface (the
API app and the Docker plugin's socket) before routing, authentication or parsing:

- a ``Content-Length`` over the limit is refused at once, nothing read (a client that
  sent ``Expect: 100-continue`` never sends the body);
- otherwise ``receive`` counts the bytes as they stream (chunked bodies included) and
  raises a 413 :class:`~starlette.exceptions.HTTPException` from the read that passes
  the limit, so each app's own handlers say it in their API's error format.

Either way the 413 carries ``Connection: close``: the server stops reading the rest of
the upload instead of draining it. A top-level module that imports nothing of netbay,
so the API and the plugins (neither above the other) share it.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY = 1 << 20
"""1 MiB: the largest body any netbay socket takes (the API's, checked after reading
until now). Its largest callers — bulk creates (at most 1000 resources), the agent's
status reports — stay below it; the plugins' requests are a few kB."""

Refusal = Callable[[Scope, str], ASGIApp]
"""(scope, message) → the 413 response (an ASGI app) in the surface's error format."""


def message(limit: int) -> str:
    return f"Request is too large: a request body is limited to {limit} bytes."


def declared_length(scope: Scope) -> int | None:
    """The ``Content-Length`` header's value, None when absent (the HTTP parser has
    already refused a malformed one)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimit:
    """ASGI middleware: 413 for any HTTP request whose body passes ``limit`` bytes."""

    def __init__(self, app: ASGIApp, *, refuse: Refusal, limit: int = MAX_BODY) -> None:
        self.app, self.refuse, self.limit = app, refuse, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, text = self.limit, message(self.limit)
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            await self.refuse(scope, text)(scope, receive, _closing(send))
            return
        seen = 0
        over = False

        async def counted() -> Message:
            nonlocal seen, over
            if over:  # an app that swallowed the first refusal gets it again, never more body
                raise HTTPException(413, text)
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    over = True
                    raise HTTPException(413, text)
            return msg

        async def sending(msg: Message) -> None:
            await (_closing(send) if over else send)(msg)

        await self.app(scope, counted, sending)


def _closing(send: Send) -> Send:
    """``send`` with ``Connection: close`` on the response: the unread rest of the
    upload is dropped with the connection, not read and discarded."""
    async def closing(msg: Message) -> None:
        if msg["type"] == "http.response.start":
            headers = [(k, v) for k, v in msg.get("headers", ()) if k.lower() != b"connection"]
            msg = {**msg, "headers": [*headers, (b"connection", b"close")]}
        await send(msg)
    return closing


__all__ = ["MAX_BODY", "BodyLimit", "Refusal", "declared_length", "message"]
