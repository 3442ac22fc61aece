"""The change stream's tail in memory (SQLite): a woken waiter is answered from the
rows this process just committed — exactly what the database would answer — and
only when no other process's commit can be missing from it."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest

from netbay.changes import ChangeFeed
from netbay.store import changelog, migrate
from netbay.store.db import Store


@pytest.fixture()
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'tail.db'}"
    migrate.upgrade(url)
    return url


def _commit(store: Store, n: int, tag: str) -> None:
    with store.write() as s:
        for i in range(n):
            changelog.append(s, {"resource": "port", "resource_id": f"{tag}-{i}", "action": "update",
                                 "project_id": "p", "at": datetime.datetime.now(datetime.UTC),
                                 "data": {"name": tag, "fixed_ips": [{"ip_address": "10.0.0.5"}],
                                          "pair": ("a", 1), "n": i}})


def test_tail_answers_what_the_database_answers(url: str) -> None:
    store = Store(url)
    feed = ChangeFeed(store)
    assert feed.recent(0) is None  # nothing committed here yet: ask the database
    _commit(store, 3, "a")
    _commit(store, 2, "b")
    for since in range(5):
        assert feed.recent(since) == feed.since(since)  # same rendering (tuples as lists too)
    assert feed.recent(1, limit=2) == feed.since(1, limit=2)
    assert feed.recent(5) is None  # nothing newer in memory: the database decides


def test_another_process_commit_is_never_skipped(url: str) -> None:
    store, other = Store(url), Store(url)  # two processes on one file (two engines)
    feed = ChangeFeed(store)
    _commit(store, 2, "mine")        # revisions 1, 2
    _commit(other, 1, "theirs")      # 3: not in this process's memory
    _commit(store, 1, "mine-again")  # 4
    assert [c["revision"] for c in feed.recent(0)] == [1, 2]  # the run before the gap only
    assert feed.recent(2) is None    # 3 is not in memory: read the database
    assert [c["id"] for c in feed.since(2)] == ["theirs-0", "mine-again-0"]
    assert [c["revision"] for c in feed.recent(3)] == [4]


def _counting_reads(feed: ChangeFeed) -> tuple[ChangeFeed, list[int]]:
    """``feed``, and the revisions it reads the database after (each ``since`` call)."""
    reads: list[int] = []
    since = feed.since

    def counted(revision: int, limit: int = 1000) -> list:
        reads.append(revision)
        return since(revision, limit)
    feed.since = counted  # type: ignore[method-assign]
    return feed, reads


def test_a_waiter_is_woken_and_answered_from_memory(url: str) -> None:
    store = Store(url)
    feed, reads = _counting_reads(ChangeFeed(store))

    async def main() -> list:
        feed.bind(asyncio.get_running_loop())
        waiter = asyncio.ensure_future(feed.wait(0, 5.0))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(_commit, store, 2, "w")
        return await asyncio.wait_for(waiter, 5.0)

    got = asyncio.run(main())
    assert [c["id"] for c in got] == ["w-0", "w-1"]
    assert reads == [0]  # the first look read the database (empty); the wake-up did not


def test_a_reader_behind_the_tail_reads_the_database(url: str) -> None:
    from netbay.changes import TAIL

    store = Store(url)
    feed = ChangeFeed(store)
    _commit(store, TAIL + 5, "many")  # one transaction: its first rows fell off the tail
    assert feed.recent(0) is None
    assert [c["revision"] for c in feed.since(0)] == list(range(1, TAIL + 6))
    assert feed.recent(10) == feed.since(10)  # still whole from there on


def test_a_thread_of_this_process_is_woken_by_the_commit(url: str) -> None:
    """``wait_here`` (the agent beside the server): woken by the commit, answered from
    memory with its own copies, without reading the database again."""
    import threading
    import time

    store = Store(url)
    feed, reads = _counting_reads(ChangeFeed(store))
    got: list = []
    waiter = threading.Thread(target=lambda: got.extend(feed.wait_here(0, 10.0)))
    waiter.start()
    time.sleep(0.1)  # parked: the database said nothing yet
    t = time.perf_counter()
    _commit(store, 2, "w")
    waiter.join(5)
    assert not waiter.is_alive()
    assert time.perf_counter() - t < 0.25  # woken by the commit, not by the 0.5 s poll
    assert [c["id"] for c in got] == ["w-0", "w-1"] and reads == [0]
    got[0]["data"]["name"] = "changed by the reader"
    assert feed.recent(0)[0]["data"]["name"] == "w"  # the tail is not the reader's to change


def test_a_thread_sees_another_process_commit_and_stops_when_told(url: str) -> None:
    import threading
    import time

    store, other = Store(url), Store(url)
    feed = ChangeFeed(store)
    _commit(other, 1, "theirs")  # not in this process's memory: the short poll finds it
    assert [c["id"] for c in feed.wait_here(0, 5.0)] == ["theirs-0"]
    t = time.monotonic()
    assert feed.wait_here(1, 0.2) == []  # nothing new: answered empty at the timeout
    assert 0.15 < time.monotonic() - t < 2
    stop = threading.Event()
    stop.set()
    t = time.monotonic()
    assert feed.wait_here(1, 30.0, stop=stop) == []  # a stopping agent is not held 30 s
    assert time.monotonic() - t < 2
