"""A small HTTP client of netbay's own APIs (network, load balancer, sandboxes).

Lives with the backends (the HTTP backend wraps it), below every controller. The cluster builder reaches netbay's network service through
:class:`netbay.backends.http.HttpBackend`, which wraps this client; its load
balancers and sandboxes, and the Kubernetes mapping, still call it directly.
``gone_ok``/``or_none`` are the one rule for a 404 that every such caller (and the
cluster executor's handlers) follows, whether this client or a backend seam refused.

WHY urllib3 and not httpx here: every NetworkPolicy change, pod and cluster step is
one or more of these calls, and on this path httpx's request and response models cost
a third of a millisecond or more per call before a byte leaves (to 127.0.0.1: 0.80 ms
from the call to the server's handler, against 0.51 ms through urllib3; BENCHMARKS.md).
A transport failure is still said as httpx's ``TransportError`` family, the one every
caller (and the async face, :mod:`netbay.backends.aio`, which stays on httpx) catches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import urllib3

from netbay.errors import NetbayError

NET = "/network/v2.0"
LB = "/load-balancer/v2/lbaas"
SANDBOXES = "/netbay/v1/sandboxes"


class ApiError(RuntimeError):
    """An API call refused; ``message`` is the API's own error text."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind  # Neutron's ``NeutronError.type`` when the body has one


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


def error_message(response: httpx.Response) -> str:
    """The message of a Neutron, Octavia, Magnum or FastAPI error body, else the text."""
    return error_text(response.status_code, response.content)


def error_text(status: int, content: bytes) -> str:
    """:func:`error_message` of a status and a body."""
    try:
        body = orjson.loads(content)
    except ValueError:
        return content.decode(errors="replace")[:500] or f"HTTP {status}"
    if isinstance(body, dict):
        if isinstance(body.get("NeutronError"), dict):
            return str(body["NeutronError"].get("message"))
        for key in ("faultstring", "description", "detail", "message"):
            if isinstance(body.get(key), str):
                return body[key]
        if isinstance(body.get("errors"), list) and body["errors"]:
            return str(body["errors"][0].get("detail"))
    return str(body)[:500]


def error_kind(response: httpx.Response) -> str | None:
    """``NeutronError.type`` of a Neutron error body (``OverQuota`` …), else None."""
    return error_type(response.content)


def error_type(content: bytes) -> str | None:
    """:func:`error_kind` of a body."""
    try:
        body = orjson.loads(content)
    except ValueError:
        return None
    inner = body.get("NeutronError") if isinstance(body, dict) else None
    return str(inner.get("type")) if isinstance(inner, dict) and inner.get("type") else None


class Api:
    """A small HTTP client of netbay's APIs with a token renewed on 401; thread-safe
    (the executor's workers call it in parallel: one pool of kept-alive connections)."""

    def __init__(self, url: str, token: Callable[[], str], *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._token_source = token
        self._token: str | None = None
        self._pool = urllib3.PoolManager(maxsize=64, block=False, retries=False,
                                         timeout=urllib3.Timeout(connect=timeout, read=timeout))

    def close(self) -> None:
        self._pool.clear()

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        url = self.url + path
        if params:
            url += ("&" if "?" in path else "?") + _query(params)
        content = None if body is None else orjson.dumps(body)
        for attempt in range(2):
            token = self._token
            if token is None:
                token = self._token = self._token_source()
            headers = {"X-Auth-Token": token}
            if content is not None:
                headers["Content-Type"] = "application/json"
            try:
                r = self._pool.request(method, url, body=content, headers=headers, redirect=False)
            except urllib3.exceptions.HTTPError as exc:
                raise _unanswered(exc, method, url) from exc
            if r.status == 401 and attempt == 0:
                self._token = None
                continue
            if r.status >= 400:
                raise ApiError(r.status, error_text(r.status, r.data), error_type(r.data))
            return orjson.loads(r.data) if r.data else None
        raise AssertionError("unreachable")

    def gone_ok(self, method: str, path: str, body: Any = None, **params: Any) -> None:
        """A delete: 404 means already gone."""
        try:
            self.call(method, path, body, **params)
        except ApiError as exc:
            if exc.status != 404:
                raise


def _query(params: Mapping[str, Any]) -> str:
    """Query parameters as httpx encodes them: a list repeats its key, booleans are
    ``true``/``false``, None is empty."""
    def text(v: Any) -> str:
        return "true" if v is True else "false" if v is False else "" if v is None else str(v)
    return urlencode([(k, text(item)) for k, v in params.items()
                      for item in (v if isinstance(v, (list, tuple)) else [v])])


def _unanswered(exc: urllib3.exceptions.HTTPError, method: str, url: str) -> httpx.TransportError:
    """A call that got no answer, as httpx says it (what callers catch)."""
    request = httpx.Request(method, url)
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):  # NewConnectionError too: refused
        kind: type[httpx.TransportError] = (httpx.ConnectError if isinstance(exc, urllib3.exceptions.NewConnectionError)
                                            else httpx.ConnectTimeout)
    elif isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        kind = httpx.ReadTimeout
    elif isinstance(exc, urllib3.exceptions.ProtocolError):
        kind = httpx.RemoteProtocolError
    else:
        kind = httpx.TransportError
    return kind(str(exc), request=request)
