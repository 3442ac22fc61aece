"""Where the API answers from a client's point of view, for the links it returns.

Behind a proxy or a published port the request's own base URL is not what a client
can reach, so the configured public URL wins when there is one.
"""

from __future__ import annotations

from fastapi import Request


def public_root(request: Request) -> str:
    """The public root the API answers under, without a trailing slash."""
    return request.app.state.public_url or str(request.base_url).rstrip("/")
