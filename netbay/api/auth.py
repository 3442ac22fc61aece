"""Turning the ``X-Auth-Token`` header into a ``Context``."""

from __future__ import annotations

from fastapi import Request

from netbay.context import Context
from netbay.errors import Unauthorized


def context(request: Request) -> Context:
    """The caller's identity; every API route but discovery and login needs it."""
    state = request.app.state
    if state.noauth:
        project = request.headers.get("X-Project-Id", "admin")
        return Context.admin(project)
    value = request.headers.get("X-Auth-Token")
    if not value:
        raise Unauthorized("The request you have made requires authentication.")
    return state.tokens.verify(value).context


def admin_context(request: Request) -> Context:
    ctx = context(request)
    if not ctx.is_admin:
        from netbay.errors import Forbidden

        raise Forbidden("This operation needs the admin role.")
    return ctx
