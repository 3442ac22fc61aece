"""Appending to the change log so that readers see revisions in commit order.

A revision taken from a sequence mid-transaction becomes visible only at commit: on
PostgreSQL a transaction holding revision N may commit after one holding N+1 (or roll
back), and a reader following ``revision > last`` would skip N for good.

Writers: a transaction's change rows wait until its end (:func:`append`), then
(:func:`seal`) are inserted, each row's revision from ``netbay_take_revision()``
(migration 0010): under a short numbering lock it draws the revision and takes a
transaction-scoped advisory lock named after it, held until the transaction ends
(in the INSERT itself: no extra round trip).
Readers: ``netbay_committed_revision`` (:func:`committed`) answers the highest revision
below which no transaction is still open — the lowest open revision lock, minus one,
or the last drawn. Rows up to it are final; nothing higher is shown yet. Commits stay
concurrent (PostgreSQL's group commit): only the numbering is serialised, for
microseconds, not the commit and its fsync. A rolled-back revision leaves a gap that
is final at once (its lock went with it): nobody waits for it.

SQLite has one writer at a time, holding its lock through the commit: the rowid
numbering is already in commit order, and every row is final. There :func:`seal` also
answers the rows with their revisions (one writer: consecutive rowids), so the process that committed
them can hand them to its change stream's waiters without reading them back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import func, insert, text
from sqlalchemy.orm import Session

from netbay.store.models import Change

PENDING = "changelog.pending"
BEFORE_SEAL = "changelog.before_seal"
_COMMITTED = text("SELECT netbay_committed_revision()")
_INSERT = insert(Change.__table__)
_INSERT_NUMBERED = insert(Change.__table__).values(revision=func.netbay_take_revision())


def append(session: Session, row: dict[str, Any]) -> None:
    """Queue a change row (``resource``, ``resource_id``, ``action``, ``project_id``,
    ``data``, ``at``) to be written when the transaction commits."""
    session.info.setdefault(PENDING, []).append(row)


def before_seal(session: Session, fn: Callable[[Session], None]) -> None:
    """Run ``fn(session)`` once when the transaction's rows are sealed, before they are
    written: a record that many operations of one transaction would each rewrite
    (a group's, for each of its rules changed) is appended once, at the end."""
    session.info.setdefault(BEFORE_SEAL, []).append(fn)


def seal(session: Session) -> list[tuple[int, dict[str, Any]]] | None:
    """Write the queued rows with their revisions; call last before the commit. Returns
    ``(revision, row)`` pairs in revision order where they are final at the commit
    (SQLite); None where commit order may differ from it (PostgreSQL)."""
    for fn in session.info.pop(BEFORE_SEAL, ()):
        fn(session)
    rows = session.info.pop(PENDING, None)
    if not rows:
        return []
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        conn.execute(_INSERT_NUMBERED, rows)
        return None
    conn.execute(_INSERT, rows)  # one executemany; under the write lock the rowids run on
    last = conn.connection.driver_connection.execute("SELECT last_insert_rowid()").fetchone()[0]
    return list(zip(range(last - len(rows) + 1, last + 1), rows))


def committed(session: Session) -> int | None:
    """The highest revision readers may see (every one below it is final); None: no
    bound needed (SQLite)."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    return session.execute(_COMMITTED).scalar_one()


__all__ = ["append", "before_seal", "committed", "seal"]
