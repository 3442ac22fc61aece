"""Appending to the change log so that readers see revisions in commit order.

A revision taken from a sequence mid-transaction is visible only at commit: on
PostgreSQL a transaction holding revision N may commit after one holding N+1 (or
roll back), and a reader following ``revision > last`` would skip N for good.
So a transaction's change rows are kept aside until its end (:func:`append`) and
written just before commit (:func:`seal`) under a transaction-scoped advisory lock,
numbered from the highest committed revision: the lock is held through the commit,
so revision order is commit order and there are no holes (a rolled-back transaction
numbered nothing anyone saw). The lock is taken late to be short: it serialises
commits that change something, not the transactions' bodies.

SQLite has one writer at a time, holding its lock through the commit: the table's
own rowid numbering is already in commit order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session

from netbay.store.models import Change

PENDING = "changelog.pending"
# pg_advisory_xact_lock's key: "netbay" in ASCII, then 1 for the change log.
LOCK_KEY = 0x6E65_7462_6179_0001
_LOCK = text(f"SELECT pg_advisory_xact_lock({LOCK_KEY})")
_HIGHEST = select(func.coalesce(func.max(Change.revision), 0))
_INSERT = insert(Change.__table__)


def append(session: Session, row: dict[str, Any]) -> None:
    """Queue a change row (``resource``, ``resource_id``, ``action``, ``project_id``,
    ``data``, ``at``) to be written when the transaction commits."""
    session.info.setdefault(PENDING, []).append(row)


def seal(session: Session) -> None:
    """Write the queued rows with their revisions; call last before the commit."""
    rows = session.info.pop(PENDING, None)
    if not rows:
        return
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        conn.execute(_LOCK)  # until commit or rollback; a separate statement, so the
        base = conn.execute(_HIGHEST).scalar_one()  # max is read after the lock is ours
        rows = [{**row, "revision": base + i} for i, row in enumerate(rows, 1)]
    conn.execute(_INSERT, rows)


__all__ = ["append", "seal"]
