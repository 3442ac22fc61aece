"""Engine and transactions.

Write transactions run one at a time per process (see ``Store.write``); across
processes, SQLite's single writer and PostgreSQL's row locks plus unique keys
decide. ``Store.write()`` is the only way to change state: everything done in
it commits together or not at all, and listeners learn of a commit only after it
happened.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from netbay.store import changelog


def default_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'netbay.db'}"


def make_engine(url: str, *, writer: bool = False) -> Engine:
    """An engine; for SQLite a ``writer`` engine takes the write lock at BEGIN."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            json_serializer=_json_dumps,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=20,
            max_overflow=40,
        )

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
            # Let BEGIN be emitted by SQLAlchemy (below) so writes take the lock up front.
            dbapi_conn.isolation_level = None

        begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

        @event.listens_for(engine, "begin")
        def _begin(conn) -> None:  # noqa: ANN001
            # Straight to the driver: nothing to log, compile or read back.
            conn.connection.driver_connection.execute(begin)

        return engine
    # No pre-ping (a round trip per checkout): a connection the server dropped is
    # invalidated on first use, and ``Store.retrying`` runs the transaction again.
    return create_engine(url, pool_size=20, max_overflow=40, json_serializer=_json_dumps)


def _json_dumps(value: object) -> str:
    """JSON columns (the change log's renderings above all) through orjson: 5-10x faster."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


class Store:
    """Sessions for readers and for writers, and commit notifications."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.is_sqlite = url.startswith("sqlite")
        self._write_engine = make_engine(url, writer=True) if self.is_sqlite else self.engine
        # Facts that almost never change (a project's default security group…), shared
        # by every session as ``session.info["cache"]``. A stale entry can only make a
        # write break a foreign key; ``retrying`` then clears the cache and runs it again.
        self.cache: dict[Any, Any] = {}
        # PostgreSQL reads run in autocommit: under its READ COMMITTED (the default) every
        # statement takes its own snapshot inside a transaction too, so a read transaction
        # bought nothing but a BEGIN and a ROLLBACK round trip. SQLite readers keep one
        # snapshot for the whole read (BEGIN).
        readers = self.engine if self.is_sqlite else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._sessions = sessionmaker(readers, expire_on_commit=False, info={"cache": self.cache})
        self._write_sessions = sessionmaker(self._write_engine, expire_on_commit=False,
                                            info={"cache": self.cache})
        self._write_lock = threading.Lock()
        self._listeners: list[Callable[[list[tuple[int, dict[str, Any]]] | None], None]] = []

    def on_commit(self, listener: Callable[[list[tuple[int, dict[str, Any]]] | None], None]) -> None:
        """``listener(rows)`` after each commit: the change rows it wrote as ``(revision,
        row)`` (:func:`netbay.store.changelog.seal`; None on PostgreSQL)."""
        self._listeners.append(listener)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._sessions() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One transaction; commits on success, rolls back everything on error.

        Transaction bodies run one at a time per process. SQLite has one writer anyway
        (the lock spares busy-wait retries), and holds it through the commit. On
        PostgreSQL the body's ten-odd round trips from many threads at once cost twice
        the CPU in GIL hand-offs (bench/port_create_wrk.py: 125 → 180 creates/s with
        one body at a time); its commit waits outside the lock, so the next body
        overlaps the fsync, and row locks and unique keys still decide every race.
        """
        session = self._write_sessions()
        try:
            with self._write_lock:
                yield session
                sealed = changelog.seal(session)
                if self.is_sqlite:
                    session.commit()
                else:
                    session.flush()
            if not self.is_sqlite:
                session.commit()
        except BaseException:
            session.rollback()
            self.cache.clear()  # facts this transaction cached (a default group it made) went with it
            raise
        finally:
            session.close()
        for listener in self._listeners:
            listener(sealed)

    def retrying(self, fn: Callable[[Session], object], attempts: int = 5) -> object:
        """Run ``fn`` in a write transaction, retrying races on PostgreSQL.

        A unique-key clash between two concurrent writers (same IP, same MAC) is
        retried with a fresh view. SQLite writers are serial, so there a clash can
        only be a generated value (a random MAC) meeting an existing one: drawn again.
        """
        for attempt in range(attempts):
            try:
                with self.write() as session:
                    return fn(session)
            except DBAPIError as exc:
                if isinstance(exc, IntegrityError):
                    self.cache.clear()
                if attempt == attempts - 1 or not (exc.connection_invalidated or _is_race(exc, self.is_sqlite)):
                    raise
                time.sleep(0.002 * (attempt + 1))
        raise AssertionError("unreachable")

    def dispose(self) -> None:
        self.engine.dispose()
        self._write_engine.dispose()


def _is_race(exc: Exception, sqlite: bool) -> bool:
    """A clash worth another try: a concurrent writer, a drawn value, a stale cache entry."""
    if sqlite:
        text = str(getattr(exc, "orig", exc))
        return isinstance(exc, IntegrityError) and (
            "UNIQUE constraint failed" in text or "FOREIGN KEY constraint failed" in text)
    code = getattr(getattr(exc, "orig", None), "sqlstate", None)
    # unique_violation, foreign_key_violation, serialization_failure, deadlock_detected
    return code in {"23505", "23503", "40001", "40P01"}
