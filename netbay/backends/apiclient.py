"""A small HTTP client of netbay's own APIs (network, load balancer, sandboxes).

Lives with the backends (the HTTP backend wraps it), below every controller. The cluster builder reaches netbay's network service through
:class:`netbay.backends.http.HttpBackend`, which wraps this client; its load
balancers and sandboxes, and the Kubernetes mapping, still call it directly.
``gone_ok``/``or_none`` are the one rule for a 404 that every such caller (and the
cluster executor's handlers) follows, whether this client or a backend seam refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx

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
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or f"HTTP {response.status_code}"
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
    try:
        body = response.json()
    except ValueError:
        return None
    inner = body.get("NeutronError") if isinstance(body, dict) else None
    return str(inner.get("type")) if isinstance(inner, dict) and inner.get("type") else None


class Api:
    """A small HTTP client of netbay's APIs with a token renewed on 401; one
    ``httpx.Client`` per thread (the executor's workers call it in parallel)."""

    def __init__(self, url: str, token: Callable[[], str], *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._token_source = token
        self._token: str | None = None
        self._timeout = timeout
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()

    def _client(self) -> httpx.Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(base_url=self.url, timeout=self._timeout)
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        with self._lock:
            for client in self._clients:
                client.close()
            self._clients.clear()

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        for attempt in range(2):
            token = self._token
            if token is None:
                token = self._token = self._token_source()
            r = self._client().request(method, path, json=body, params=params or None,
                                       headers={"X-Auth-Token": token})
            if r.status_code == 401 and attempt == 0:
                self._token = None
                continue
            if r.status_code >= 400:
                raise ApiError(r.status_code, error_message(r), error_kind(r))
            return r.json() if r.content else None
        raise AssertionError("unreachable")

    def gone_ok(self, method: str, path: str, body: Any = None, **params: Any) -> None:
        """A delete: 404 means already gone."""
        try:
            self.call(method, path, body, **params)
        except ApiError as exc:
            if exc.status != 404:
                raise
