"""The change stream reconcilers follow: every commit appends revisions.

``since(n)`` returns what changed after revision ``n``; ``wait(n, timeout)``
blocks (without holding a thread) until something did; an answer with nothing
after ``n`` says the head (:meth:`ChangeFeed.quiet_head`). Commits in this process
wake waiters at once; commits by other processes sharing the database are seen
by a short poll.

WHY a tail in memory: on SQLite the rows a commit of this process wrote are final,
numbered and already rendered when it ends (:func:`netbay.store.changelog.seal`), so
a woken waiter is answered from them on the event loop — no thread hop, no read back,
no JSON parse: the dataplane agent learns of a change sooner (bench/change_wake.py: a
port update → a parked long poll, p50 11.6 → 6.4 ms on a loaded machine). Only a run of
revisions that starts right after the waiter's and has no gap is answered from memory
(a gap is another process's commit); anything else is read from the database.

A reader in this process (the dataplane agent ``netbay up`` runs beside the server)
waits with :meth:`ChangeFeed.wait_here` instead: the committing thread wakes it
directly, with no HTTP round trip, event-loop iteration or JSON in between.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any

import orjson
from sqlalchemy import func, select

from netbay.store import changelog
from netbay.store.db import Store
from netbay.store.models import Change

POLL_SECONDS = 0.5
MAX_BATCH = 1000
TAIL = 256  # this process's last change rows kept for waiters (a reader further behind reads the database)
AT = "%Y-%m-%dT%H:%M:%SZ"


def render(change: Change) -> dict[str, Any]:
    return {
        "revision": change.revision,
        "resource": change.resource,
        "id": change.resource_id,
        "action": change.action,
        "project_id": change.project_id,
        "data": change.data,
        "at": change.at.strftime(AT) if change.at else None,
    }


def render_row(revision: int, row: dict[str, Any]) -> dict[str, Any]:
    """A committed change row as :func:`render` answers it once read back (its data
    through the same JSON round trip, which also copies it)."""
    data = row.get("data")
    return {
        "revision": revision,
        "resource": row["resource"],
        "id": row["resource_id"],
        "action": row["action"],
        "project_id": row["project_id"],
        "data": None if data is None else orjson.loads(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)),
        "at": row["at"].strftime(AT) if row.get("at") else None,
    }


class ChangeFeed:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._waiting = 0  # calls to ``wait`` under way (changed on the event loop only)
        self._tail: deque[dict[str, Any]] = deque(maxlen=TAIL)  # this process's last commits
        self._tail_lock = threading.Lock()
        self._grew = threading.Condition(self._tail_lock)  # wait_here's wake-up
        self._commits = 0  # commits in this process (under the lock)
        store.on_commit(self._committed)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the server's event loop so commits can wake waiters."""
        self._loop = loop
        self._event = asyncio.Event()

    def _committed(self, sealed: list[tuple[int, dict[str, Any]]] | None = None) -> None:
        rendered = [render_row(rev, row) for rev, row in sealed] if sealed else []
        with self._grew:
            self._tail.extend(rendered)
            self._commits += 1
            self._grew.notify_all()
        # Waking the loop costs a syscall and a loop iteration per commit: only when
        # someone waits. A waiter counts itself before its first look at the log, so a
        # commit it did not see always wakes it.
        if self._waiting and self._loop is not None and self._event is not None:
            self._loop.call_soon_threadsafe(self._event.set)

    def recent(self, revision: int, limit: int = MAX_BATCH) -> list[dict[str, Any]] | None:
        """The changes right after ``revision`` from this process's last commits: the
        run without a gap that starts at ``revision + 1``; None when memory cannot tell
        (nothing newer, or another process's commit comes first): read the database."""
        with self._tail_lock:
            if not self._tail or self._tail[-1]["revision"] <= revision:
                return None
            out: list[dict[str, Any]] = []
            for c in reversed(self._tail):
                if c["revision"] <= revision:
                    break
                out.append(c)
        out.reverse()
        if out[0]["revision"] != revision + 1:
            return None
        for i, c in enumerate(out):
            if c["revision"] != revision + 1 + i:
                return out[:min(i, limit)]
        return out[:limit]

    def latest(self) -> int:
        with self.store.read() as s:
            bound = changelog.committed(s)
            highest = s.scalar(select(func.max(Change.revision))) or 0
            return highest if bound is None else min(highest, bound)

    def quiet_head(self, revision: int) -> int:
        """The revision an answer with nothing after ``revision`` carries: the feed's head
        (:meth:`latest`: every revision up to it final), so that a reader learns it in one
        call (``since`` the column's highest). When a commit landed after the empty read
        (the head has passed ``revision``), ``revision`` itself: resuming from it, the next
        read gets that commit — never skipped."""
        head = self.latest()
        return head if head <= revision else revision

    def since(self, revision: int, limit: int = MAX_BATCH) -> list[dict[str, Any]]:
        """Changes after ``revision`` in order, none past a transaction still open (see
        netbay/store/changelog.py): a reader never sees N+1 before N."""
        with self.store.read() as s:
            query = select(Change).where(Change.revision > revision)
            if (bound := changelog.committed(s)) is not None:
                query = query.where(Change.revision <= bound)
            return [render(c) for c in s.scalars(query.order_by(Change.revision).limit(limit))]

    def wait_here(self, revision: int, timeout: float, limit: int = MAX_BATCH,
                  stop: threading.Event | None = None) -> list[dict[str, Any]]:
        """:meth:`wait` for a thread of this process: blocks it until a change after
        ``revision`` is committed (by this process: woken at once; by another: seen by
        the same short poll), ``timeout`` passes or ``stop`` is set. The changes are
        the caller's own copies, as a reply over HTTP would be."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._grew:
                seen = self._commits
            changes = self.recent(revision, limit)
            if changes is not None:
                return orjson.loads(orjson.dumps(changes, option=orjson.OPT_NON_STR_KEYS))
            changes = self.since(revision, limit)
            remaining = deadline - time.monotonic()
            if changes or remaining <= 0 or (stop is not None and stop.is_set()):
                return changes
            with self._grew:
                self._grew.wait_for(lambda: self._commits != seen, timeout=min(POLL_SECONDS, remaining))

    async def wait(self, revision: int, timeout: float, limit: int = MAX_BATCH) -> list[dict[str, Any]]:
        self._waiting += 1
        try:
            return await self._wait(revision, timeout, limit)
        finally:
            self._waiting -= 1

    async def _wait(self, revision: int, timeout: float, limit: int) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while True:
            if self._event is not None:
                self._event.clear()
            changes = self.recent(revision, limit)
            if changes is None:
                changes = await asyncio.to_thread(self.since, revision, limit)
            remaining = deadline - loop.time()
            if changes or remaining <= 0:
                return changes
            if self._event is None:
                await asyncio.sleep(min(POLL_SECONDS, remaining))
                continue
            try:
                await asyncio.wait_for(self._event.wait(), timeout=min(POLL_SECONDS, remaining))
            except TimeoutError:
                pass


__all__ = ["ChangeFeed"]
