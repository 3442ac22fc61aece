"""Turning the ``X-Auth-Token`` header into a ``Context``."""

from __future__ import annotations

from fastapi import Request

from netbay.api import policy
from netbay.context import Context
from netbay.errors import Unauthorized
from netbay.identity.tokens import Token


def context(request: Request) -> Context:
    """The caller's identity, as its API family's policy lets it act (``netbay.api.policy``);
    every API route but discovery and login needs it."""
    cached = request.scope.get("netbay.context")
    if cached is not None:
        return cached
    state = request.app.state
    if state.noauth:
        project = request.headers.get("X-Project-Id", "admin")
        return Context.admin(project)
    value = request.headers.get("X-Auth-Token")
    if not value:
        raise Unauthorized("The request you have made requires authentication.")
    token = state.tokens.verify(value)
    ctx = policy.enforce(request.method, request.url.path, token.context)
    request.scope["netbay.token"] = token
    request.scope["netbay.context"] = ctx
    return ctx


def token(request: Request) -> Token | None:
    """The caller's verified token (None under ``--noauth``), after :func:`context`."""
    context(request)
    return request.scope.get("netbay.token")


def admin_context(request: Request) -> Context:
    ctx = context(request)
    if not ctx.is_admin:
        from netbay.errors import Forbidden

        raise Forbidden("This operation needs the admin role.")
    return ctx
