"""Revisions committed out of order: on PostgreSQL a transaction that took a lower
revision may commit after one with a higher (or never: a rollback), so the agent
remembers the revisions a batch skipped over (``holes``: revision -> when it was
found missing) and fetches them once they are committed, or gives them up."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from netbay.agent.api import Api

# How long (s) a skipped revision is waited for, how often it is looked for meanwhile,
# and how many skipped revisions of one batch are remembered at most.
HOLE_GRACE = 5.0
HOLE_POLL = 0.2
MAX_HOLES = 1000


def note_holes(holes: dict[int, float], since: int, changes: Sequence[Mapping[str, Any]]) -> None:
    """Remember revisions skipped over: on PostgreSQL a transaction that took a lower
    revision may commit after one with a higher (or never: a rollback)."""
    now, prev = time.monotonic(), since
    for c in changes:
        rev = c.get("revision")
        if not isinstance(rev, int):
            continue
        if prev + 1 < rev <= prev + MAX_HOLES:
            for missing in range(prev + 1, rev):
                holes.setdefault(missing, now)
        prev = max(prev, rev)
        holes.pop(rev, None)


def fill_holes(holes: dict[int, float], api: Api, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fetch what has since been committed below the newest revision seen; holes
    older than :data:`HOLE_GRACE` are given up (rolled back)."""
    now = time.monotonic()
    for rev, seen in list(holes.items()):
        if now - seen > HOLE_GRACE:
            del holes[rev]
    if not holes:
        return changes
    late = api.changes(min(holes) - 1, 0).get("changes") or []
    found = [c for c in late if c.get("revision") in holes]
    for c in found:
        del holes[c["revision"]]
    # Late changes concern other rows than the ones committed after them (a row's
    # writers are serialized by its lock), so applying them now is safe.
    return [*found, *changes]
