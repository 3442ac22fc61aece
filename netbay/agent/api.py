"""The agent's calls of the network service: the state, the change stream, status.

On :class:`netbay.client.Api` (one pool of connections per :class:`Api`; :meth:`Api.fork`
gives another thread its own). The admin token is fetched from Keystone
(:class:`netbay.client.auth.Credentials`) and renewed on 401.
:class:`BesideServer` is the client of an agent in the server's own process (``netbay
up``): the same calls, but the change stream straight from the server's feed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from netbay.client import Api as _Client
from netbay.client import ApiError  # noqa: F401 - re-exported: the agent's callers catch it from here
from netbay.client.auth import Credentials  # noqa: F401 - re-exported (netbay.agent)


class Api(_Client):
    """The calls the agent makes, on :class:`netbay.client.Api` (admin token renewed on 401)."""

    def __init__(self, url: str, token: Callable[[], str]) -> None:
        super().__init__(url, token, timeout=10.0)

    def fork(self) -> Api:
        return Api(self.url, self._token_source)

    def state(self) -> dict[str, Any]:
        return self.call("GET", "/netbay/v1/state", timeout=120)

    def changes(self, since: int, wait: float) -> dict[str, Any]:
        return self.call("GET", "/netbay/v1/changes", since=since, wait=wait, timeout=wait + 30)

    def put_status(self, report: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
        return self.call("PUT", "/netbay/v1/status", report, timeout=60)

    def put_lbstats(self, report: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        return self.call("PUT", "/netbay/v1/lbstats", report, timeout=60)

    def put_metering(self, report: Mapping[str, Any]) -> dict[str, Any]:
        return self.call("PUT", "/netbay/v1/metering", report, timeout=60)


class Feed(Protocol):
    """The server's change feed, as :class:`BesideServer` uses it (netbay.changes.ChangeFeed)."""

    def wait_here(self, revision: int, timeout: float, limit: int = ...,
                  stop: threading.Event | None = None) -> list[dict[str, Any]]: ...

    def quiet_head(self, revision: int) -> int: ...


class BesideServer(Api):
    """The client of an agent running in the server's process: its long poll is a wait
    on the server's own change feed, woken by the commit itself — the HTTP round trip,
    the event loop's turn and the JSON of every change are off each change's path (the
    state, status and stats still go over HTTP, as any agent's do)."""

    def __init__(self, url: str, token: Callable[[], str], feed: Feed, stop: threading.Event) -> None:
        super().__init__(url, token)
        self.feed = feed
        self.stop = stop

    def changes(self, since: int, wait: float) -> dict[str, Any]:
        items = self.feed.wait_here(since, wait, stop=self.stop)
        return {"changes": items, "revision": items[-1]["revision"] if items else self.feed.quiet_head(since)}
