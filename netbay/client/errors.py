"""One error for a refused call of netbay's APIs, and one decoder of their error bodies.

Each API answers an error in its own format; the decoder reads them all, so a caller
(and a user of the CLI) sees the API's own message whichever service refused:

- Neutron: ``{"NeutronError": {"type", "message", "detail"}}``
- Keystone: ``{"error": {"code", "title", "message"}}``
- Octavia (WSME): ``{"faultcode", "faultstring", "debuginfo"}``
- Magnum and Zun: ``{"errors": [{"status", "code", "title", "detail"}]}``
- Nova and Cinder: ``{"itemNotFound": {"code", "message"}}`` (any one-key ``{"<kind>": {"message"}}``)
- FastAPI and netbay's own: ``{"detail": "…"}`` or ``{"detail": [{"msg"…}]}``, ``{"message": "…"}``
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from netbay.errors import NetbayError


class ApiError(RuntimeError):
    """An API call refused; ``message`` is the API's own text, ``kind`` its error type
    when the body names one (Neutron's ``NeutronError.type``, Nova's ``itemNotFound``)."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


# Both kinds of refusal — ``netbay.errors`` from a backend seam, ``ApiError`` from this
# client — carry a ``status`` and a ``message``, so a 404 means "gone" whichever answered.
Refused = (ApiError, NetbayError)


def gone_ok(call: Callable[[], Any]) -> None:
    """A delete: 404 means already gone."""
    try:
        call()
    except Refused as exc:
        if exc.status != 404:
            raise


def or_none(call: Callable[[], Any]) -> Any:
    """A read: None when the object is gone."""
    try:
        return call()
    except Refused as exc:
        if exc.status == 404:
            return None
        raise


def decode(status: int, content: bytes) -> tuple[str, str | None]:
    """``(message, kind)`` of an error answer, whichever API gave it; the text itself
    (or ``HTTP <status>``) when the body is not one of the formats above."""
    try:
        body = orjson.loads(content) if content else None
    except ValueError:
        return content.decode(errors="replace")[:500], None
    if body is None:
        return f"HTTP {status}", None
    if not isinstance(body, dict):
        return str(body)[:500], None
    inner = body.get("NeutronError")
    if isinstance(inner, dict):
        return str(inner.get("message") or inner.get("detail") or inner), _text(inner.get("type"))
    inner = body.get("error")
    if isinstance(inner, dict):   # Keystone
        return str(inner.get("message") or inner.get("title") or inner), None
    if isinstance(body.get("faultstring"), str):   # Octavia
        return body["faultstring"], None
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):   # Magnum, Zun
        first = errors[0]
        return str(first.get("detail") or first.get("title") or first), None
    detail = body.get("detail")
    if isinstance(detail, str):
        return detail, None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):   # FastAPI's validation
        return "; ".join(str(d.get("msg", d)) for d in detail), None
    for key in ("description", "message"):
        if isinstance(body.get(key), str):
            return body[key], None
    if len(body) == 1:   # Nova, Cinder: {"itemNotFound": {"code": 404, "message": "…"}}
        kind, inner = next(iter(body.items()))
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"], kind
    return str(body)[:500], None


def _text(value: Any) -> str | None:
    return str(value) if value else None


def error_of(status: int, content: bytes) -> ApiError:
    """The :class:`ApiError` of an error answer."""
    message, kind = decode(status, content)
    return ApiError(status, message, kind)


# Methods both faces send once more when the connection breaks before an answer (RFC 9110
# 9.2.2): a kept-alive connection the server closes on its idle timeout as the client
# reuses it. Never a POST: the server may have acted on it.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def unreachable(where: str, exc: BaseException) -> NetbayError:
    """A server that did not answer, as the backend seams say it: status 503, kind ``Unreachable``."""
    err = NetbayError(f"{where} is unreachable ({type(exc).__name__}: {exc or 'no answer'})", kind="Unreachable")
    err.status = 503
    return err
