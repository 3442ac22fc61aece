"""A lean HTTP/1.1 load generator client: keep-alive connections, prebuilt requests.

On a 2-core machine the load generator shares the cores with the server, so
its CPU per request is taken from the server. httpx costs 1.5-6 ms of CPU per
request; this client sends bytes built once per phase and parses answers with
httptools (the parser uvicorn uses), about 0.1 ms per request.

``Pool`` hands out up to ``size`` connections; a caller waiting for a free one
waits in the client, so an open loop still counts that time (its latency runs
from the intended send time). A connection the server closed while idle is
opened again on the next use (uvicorn drops idle keep-alive connections after
5 s).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

import httptools

IDLE_SECONDS = 2.0  # reopen a connection idle this long rather than race the server's close


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")


def request_bytes(method: str, host: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """One complete HTTP/1.1 request, built once and sent many times."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    if body or method in {"POST", "PUT", "PATCH"}:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Connection(asyncio.Protocol):
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.used_at = time.monotonic()
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._body: list[bytes] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"bad HTTP answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionError("connection closed by the server"))

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        answer = Answer(self._parser.get_status_code(), b"".join(self._body))
        self._body = []
        if not self._parser.should_keep_alive():
            self.close()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(answer)

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    async def send(self, data: bytes) -> Answer:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        try:
            return await self._waiter
        finally:
            self._waiter = None
            self.used_at = time.monotonic()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Up to ``size`` keep-alive connections to one server."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port, self.size = host, port, size
        self._idle: deque[Connection] = deque()
        self._opened = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def _open(self) -> Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(Connection, self.host, self.port)
        return conn

    async def acquire(self) -> Connection:
        while True:
            while self._idle:
                conn = self._idle.pop()  # most recently used first: keeps few connections warm
                if not conn.closed and time.monotonic() - conn.used_at < IDLE_SECONDS:
                    return conn
                conn.close()
                self._opened -= 1
            if self._opened < self.size:
                self._opened += 1
                try:
                    return await self._open()
                except BaseException:
                    self._opened -= 1
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def release(self, conn: Connection) -> None:
        if conn.closed:
            self._opened -= 1
        else:
            self._idle.append(conn)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def send(self, data: bytes) -> Answer:
        conn = await self.acquire()
        try:
            return await conn.send(data)
        except BaseException:
            conn.close()
            raise
        finally:
            self.release(conn)

    async def warm(self, data: bytes) -> None:
        """Open every connection by sending ``data`` on all of them at once."""
        await asyncio.gather(*(self.send(data) for _ in range(self.size)))

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
        self._opened = 0
