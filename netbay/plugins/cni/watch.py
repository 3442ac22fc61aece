"""The CNI daemon's ports, kept current by netbay's change feed, so that CHECK (a
runtime calls it again and again) reads its port here instead of asking the API.

WHY: CHECK's port read was most of CHECK — one authenticated list through the API,
several milliseconds against the reference ``bridge`` plugin's whole call. The feed
(``GET /netbay/v1/changes``, long-polled by one thread) brings every port change with
the port as the API renders it, so a port learnt here (ADD's, or a CHECK's read
through the API) stays what the API says: updated by each later change (the higher
``revision_number`` wins), gone with its deletion.

How current: a change reaches this watch as fast as the feed answers a parked long
poll (milliseconds; a commit by another server process sharing the database is seen
by the feed's short poll, ≤ 0.5 s). Nothing is answered unless the feed is followed
(:attr:`PortWatch.ready`): before the head of the feed is found (one read: the feed
answers its head when nothing is newer than ``since``), after a failed poll
(everything learnt is dropped and the head found again), or when the credentials
may not read the feed (an admin's only), or the server's feed does not say its head
(an older server) — then every CHECK asks the API, as before.
An entry is also read again after :data:`MAX_AGE` seconds, whatever the feed said.

Only netbay's own API has the feed: ``netbay cni-daemon`` hands its client to
:class:`netbay.plugins.cni.service.Cni` on the embedded backend; on a cloud's Neutron
there is no watch."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from netbay.client import Api, ApiError

log = logging.getLogger("netbay.cni")

FEED = "/netbay/v1/changes"
WAIT = 25.0          # one long poll (the feed answers at once when something changes)
MAX_AGE = 30.0       # an entry older than this is read from the API again
RETRY = 1.0          # after a failed poll, before the head is looked for again
HIGHEST = 2**31 - 1  # the feed's highest revision (an INTEGER column): nothing is ever after it


class NoHead(Exception):
    """The feed answered ``since`` itself, not its head, for nothing newer (an older server)."""

Key = tuple[str, str, str]


class PortWatch:
    """Ports by attachment key (``key_of``), current to the change feed at ``api``."""

    def __init__(self, api: Api, key_of: Callable[[Mapping[str, Any]], Key | None]) -> None:
        self.api, self.key_of = api, key_of
        self._lock = threading.Lock()
        self._ports: dict[str, tuple[float, dict[str, Any]]] = {}   # id -> (learnt at, port)
        self._ids: dict[Key, str] = {}
        # every port change of the last MAX_AGE seconds, kept or not: id -> (seen at, its
        # revision_number, None once deleted), so that a read the feed overtook is not kept
        self._recent: dict[str, tuple[float, int | None]] = {}
        self._epoch = 0            # bumped each time the feed is (re)joined: older reads are not kept
        self._ready = False
        self._revision = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="netbay-cni-watch", daemon=True)

    def start(self) -> PortWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self.api.close()

    @property
    def ready(self) -> bool:
        return self._ready

    # -- what the verbs use ----------------------------------------------------------

    def get(self, key: Key) -> dict[str, Any] | None:
        """The attachment's port as the feed last said it; None: ask the API."""
        with self._lock:
            if not self._ready or (port_id := self._ids.get(key)) is None:
                return None
            learnt, port = self._ports[port_id]
            if time.monotonic() - learnt > MAX_AGE:
                return None
            return port

    def ticket(self) -> int | None:
        """Taken before an API read whose answer is to be kept (:meth:`put`)."""
        return self._epoch if self._ready else None

    def put(self, port: Mapping[str, Any], ticket: int | None) -> None:
        """Keep ``port`` as read from the API after ``ticket``: only if the feed has been
        followed since (every later change will reach it) and it is not older than what
        the feed already said."""
        key = self.key_of(port)
        if key is None or ticket is None:
            return
        with self._lock:
            if ticket != self._epoch or not self._ready:
                return
            seen = self._recent.get(port["id"])
            if seen is not None and (seen[1] is None or seen[1] > int(port.get("revision_number") or 0)):
                return   # deleted or changed since that read
            self._keep(port, key)

    def forget(self, port_id: str) -> None:
        with self._lock:
            self._drop(port_id)

    # -- the feed --------------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self._join()
                while not self._stop.is_set():
                    body = self.api.call("GET", FEED, since=self._revision, wait=WAIT, timeout=WAIT + 10)
                    self._apply(body.get("changes") or [])
                    self._revision = max(self._revision, int(body.get("revision") or 0))
            except NoHead:
                self._leave()
                log.info("CHECK reads every port from the API: the server's change feed does not say its head")
                return
            except ApiError as exc:
                was = self._leave()
                if exc.status in (401, 403):
                    log.info("CHECK reads every port from the API: these credentials may not read "
                             "the change feed (%s)", exc.message)
                    return
                if was:   # said once per outage, not once per retry
                    log.info("the change feed failed (%s); CHECK reads from the API until it is back", exc.message)
            except Exception as exc:  # noqa: BLE001 - unreachable, closed: try again, CHECK asks the API meanwhile
                was = self._leave()
                if self._stop.is_set():
                    return
                if was:
                    log.info("the change feed failed (%s: %s); CHECK reads from the API until it is back",
                             type(exc).__name__, exc)
            self._stop.wait(RETRY)

    def _join(self) -> None:
        """The feed's head (one read: what is after the highest revision there can be is
        nothing, and such an answer carries the head), then ready, with nothing learnt
        before it. Changes committed after that read are after the head: none is missed."""
        head = int(self.api.call("GET", FEED, since=HIGHEST, limit=1, wait=0).get("revision") or 0)
        if head >= HIGHEST:
            raise NoHead
        with self._lock:
            self._ports.clear()
            self._ids.clear()
            self._recent.clear()
            self._revision = head
            self._epoch += 1
            self._ready = True

    def _leave(self) -> bool:
        """Not following the feed any more (everything learnt dropped); whether it was."""
        with self._lock:
            was, self._ready = self._ready, False
            self._epoch += 1
            self._ports.clear()
            self._ids.clear()
            self._recent.clear()
        return was

    def _apply(self, changes: list[Mapping[str, Any]]) -> None:
        now = time.monotonic()
        with self._lock:
            for change in changes:
                if change.get("resource") != "port":
                    continue
                data = change.get("data")
                gone = change.get("action") == "delete" or not isinstance(data, dict)
                revision = int(data.get("revision_number") or 0) if isinstance(data, dict) and not gone else None
                self._recent.pop(change["id"], None)
                self._recent[change["id"]] = (now, revision)
                if change["id"] not in self._ports:
                    continue
                if gone or not isinstance(data, dict):
                    self._drop(change["id"])
                    continue
                key = self.key_of(data)
                if key is None:   # no longer this attachment's
                    self._drop(change["id"])
                else:
                    self._keep(data, key)
            for port_id, (seen_at, _rev) in list(self._recent.items()):   # oldest first
                if now - seen_at <= MAX_AGE:
                    break
                del self._recent[port_id]

    def _keep(self, port: Mapping[str, Any], key: Key) -> None:
        """(Under the lock.) ``port`` unless what is kept is newer."""
        have = self._ports.get(port["id"])
        if have is not None and int(have[1].get("revision_number") or 0) > int(port.get("revision_number") or 0):
            return
        if have is not None:
            old = self.key_of(have[1])
            if old is not None and old != key:
                self._ids.pop(old, None)
        self._ports[port["id"]] = (time.monotonic(), dict(port))
        self._ids[key] = port["id"]

    def _drop(self, port_id: str) -> None:
        had = self._ports.pop(port_id, None)
        if had is not None:
            key = self.key_of(had[1])
            if key is not None and self._ids.get(key) == port_id:
                del self._ids[key]


__all__ = ["MAX_AGE", "PortWatch"]
