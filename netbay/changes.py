"""The change stream reconcilers follow: every commit appends revisions.

``since(n)`` returns what changed after revision ``n``; ``wait(n, timeout)``
blocks (without holding a thread) until something did. Commits in this process
wake waiters at once; commits by other processes sharing the database are seen
by a short poll.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import func, select

from netbay.store import changelog
from netbay.store.db import Store
from netbay.store.models import Change

POLL_SECONDS = 0.5
MAX_BATCH = 1000


def render(change: Change) -> dict[str, Any]:
    return {
        "revision": change.revision,
        "resource": change.resource,
        "id": change.resource_id,
        "action": change.action,
        "project_id": change.project_id,
        "data": change.data,
        "at": change.at.strftime("%Y-%m-%dT%H:%M:%SZ") if change.at else None,
    }


class ChangeFeed:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._waiting = 0  # calls to ``wait`` under way (changed on the event loop only)
        store.on_commit(self._committed)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the server's event loop so commits can wake waiters."""
        self._loop = loop
        self._event = asyncio.Event()

    def _committed(self) -> None:
        # Waking the loop costs a syscall and a loop iteration per commit: only when
        # someone waits. A waiter counts itself before its first look at the log, so a
        # commit it did not see always wakes it.
        if self._waiting and self._loop is not None and self._event is not None:
            self._loop.call_soon_threadsafe(self._event.set)

    def latest(self) -> int:
        with self.store.read() as s:
            bound = changelog.committed(s)
            highest = s.scalar(select(func.max(Change.revision))) or 0
            return highest if bound is None else min(highest, bound)

    def since(self, revision: int, limit: int = MAX_BATCH) -> list[dict[str, Any]]:
        """Changes after ``revision`` in order, none past a transaction still open (see
        netbay/store/changelog.py): a reader never sees N+1 before N."""
        with self.store.read() as s:
            query = select(Change).where(Change.revision > revision)
            if (bound := changelog.committed(s)) is not None:
                query = query.where(Change.revision <= bound)
            return [render(c) for c in s.scalars(query.order_by(Change.revision).limit(limit))]

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
