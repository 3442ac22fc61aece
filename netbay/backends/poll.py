"""Waiting on a cloud object's status: one bounded poll with backoff for every seam.

A server turning ACTIVE, a load balancer leaving ``PENDING_*``: the cloud says when by
its status only, so the caller asks again, starting fast (most settle in a few of the
provider's milliseconds) and backing off to a cap, never past the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(fetch: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool], timeout: float, *,
          first: float, cap: float, late: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """``fetch()`` again until ``done`` holds for its answer (returned); ``TimeoutError``
    with ``late(last answer)`` after ``timeout`` seconds. ``fetch``'s own errors (a 404)
    go to the caller."""
    deadline = time.monotonic() + timeout
    delay = first
    while True:
        obj = fetch()
        if done(obj):
            return obj
        if time.monotonic() > deadline:
            raise TimeoutError(late(obj))
        time.sleep(delay)
        delay = min(delay * 2, cap)


__all__ = ["until"]
