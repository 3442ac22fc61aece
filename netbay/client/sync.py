"""The synchronous face: :class:`Api`, thread-safe, the token renewed on 401.

WHY urllib3 and not httpx here: every NetworkPolicy change, pod and cluster step is
one or more of these calls, and on this path httpx's request and response models cost
a third of a millisecond or more per call before a byte leaves (to 127.0.0.1: 0.80 ms
from the call to the server's handler, against 0.51 ms through urllib3; BENCHMARKS.md).
A transport failure is still said as httpx's ``TransportError`` family, the one every
caller (and the async face, :mod:`netbay.client.aio`, which stays on httpx) catches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3

from netbay import keepalive
from netbay.client.errors import IDEMPOTENT, ApiError, error_of

NET = "/network/v2.0"
LB = "/load-balancer/v2/lbaas"
SANDBOXES = "/netbay/v1/sandboxes"


class _Pool(urllib3.HTTPConnectionPool):
    """A pool whose kept-alive connections are closed (and reopened on use) once idle
    :data:`netbay.keepalive.CLIENT` seconds, before the server would close them under a
    request (urllib3 keeps them for ever)."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        conn = super()._get_conn(timeout)
        released = getattr(conn, "netbay_released", None)
        if released is not None and time.monotonic() - released > keepalive.CLIENT:
            conn.close()
        return conn

    def _put_conn(self, conn: Any) -> None:
        if conn is not None:
            conn.netbay_released = time.monotonic()
        super()._put_conn(conn)


class _TlsPool(_Pool, urllib3.HTTPSConnectionPool):
    pass


class Api:
    """A client of netbay's APIs at ``url`` with a token from ``token()``, renewed once on
    a 401; thread-safe (the executor's workers call it in parallel: one pool of kept-alive
    connections). ``headers`` go with every call (``OpenStack-API-Version`` …)."""

    def __init__(self, url: str, token: Callable[[], str], *, timeout: float = 30.0,
                 headers: Mapping[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self._token_source = token
        self._token: str | None = None
        self._token_lock = threading.Lock()   # one login for callers in parallel, not one each
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._pool = urllib3.PoolManager(maxsize=64, block=False, retries=False,
                                         timeout=urllib3.Timeout(connect=timeout, read=timeout))
        self._pool.pool_classes_by_scheme = {"http": _Pool, "https": _TlsPool}

    def fork(self) -> Api:
        """Another client of the same server and credentials (its own connections)."""
        return type(self)(self.url, self._token_source, timeout=self._timeout, headers=self._headers)

    def close(self) -> None:
        self._pool.clear()

    def call(self, method: str, path: str, body: Any = None, *, timeout: float | None = None,
             **params: Any) -> Any:
        """``path`` below ``url`` (or a full URL); ``params`` the query. The JSON answer, or
        :class:`ApiError` with the API's own message."""
        url = path if path.startswith(("http://", "https://")) else self.url + path
        if params:
            url += ("&" if "?" in url else "?") + _query(params)
        content = None if body is None else orjson.dumps(body)
        renewed = resent = False
        for _ in range(3):
            token = self._token or self._fetch_token()
            headers = {**self._headers, "X-Auth-Token": token}
            if content is not None:
                headers["Content-Type"] = "application/json"
            try:
                r = self._pool.request(method, url, body=content, headers=headers, redirect=False,
                                       timeout=None if timeout is None else urllib3.Timeout(
                                           connect=self._timeout, read=timeout))
            except urllib3.exceptions.ProtocolError as exc:
                if resent or method.upper() not in IDEMPOTENT:
                    raise _unanswered(exc, method, url) from exc
                resent = True   # a kept-alive connection the server closed as it was reused
                continue
            except urllib3.exceptions.HTTPError as exc:
                raise _unanswered(exc, method, url) from exc
            if r.status == 401 and not renewed:
                self._token, renewed = None, True
                continue
            if r.status >= 400:
                raise error_of(r.status, r.data)
            return orjson.loads(r.data) if r.data else None
        raise AssertionError("unreachable")

    def _fetch_token(self) -> str:
        with self._token_lock:
            if self._token is None:
                self._token = self._token_source()
            return self._token

    def gone_ok(self, method: str, path: str, body: Any = None, **params: Any) -> None:
        """A delete: 404 means already gone."""
        try:
            self.call(method, path, body, **params)
        except ApiError as exc:
            if exc.status != 404:
                raise


def post_json(url: str, body: Any, timeout: float) -> tuple[int, Mapping[str, str], Any]:
    """One unauthenticated POST (a Keystone login): status, headers, JSON body; an error
    answer is :class:`ApiError`."""
    try:
        r = urllib3.request("POST", url, body=orjson.dumps(body), headers={"Content-Type": "application/json"},
                            timeout=urllib3.Timeout(connect=timeout, read=timeout), retries=False, redirect=False)
    except urllib3.exceptions.HTTPError as exc:
        raise _unanswered(exc, "POST", url) from exc
    if r.status >= 400:
        raise error_of(r.status, r.data)
    return r.status, r.headers, orjson.loads(r.data) if r.data else None


def _query(params: Mapping[str, Any]) -> str:
    """Query parameters as httpx encodes them: a list repeats its key, booleans are
    ``true``/``false``, None is empty."""
    def text(v: Any) -> str:
        return "true" if v is True else "false" if v is False else "" if v is None else str(v)
    return urlencode([(k, text(item)) for k, v in params.items()
                      for item in (v if isinstance(v, (list, tuple)) else [v])])


def _unanswered(exc: urllib3.exceptions.HTTPError, method: str, url: str) -> Exception:
    """A call that got no answer, as httpx says it (what callers catch); httpx is imported
    here only, on a failure: its import costs a client command more than the rest of it."""
    import httpx

    request = httpx.Request(method, url)
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):  # NewConnectionError too: refused
        kind: type[httpx.TransportError] = (httpx.ConnectError if isinstance(exc, urllib3.exceptions.NewConnectionError)
                                            else httpx.ConnectTimeout)
    elif isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        kind = httpx.ReadTimeout
    elif isinstance(exc, urllib3.exceptions.ProtocolError):
        kind = httpx.RemoteProtocolError
    elif isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(exc.reason, urllib3.exceptions.HTTPError):
        return _unanswered(exc.reason, method, url)
    else:
        kind = httpx.TransportError
    return kind(str(exc), request=request)
