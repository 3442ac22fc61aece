"""The CNI daemon's port watch (netbay.plugins.cni.watch) against a change feed of the
test's own: what CHECK may answer without the API, and what it must not."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from netbay.client import ApiError
from netbay.plugins.cni.attachment import ctr_tag, if_tag, key_of, net_tag
from netbay.plugins.cni.watch import PortWatch

KEY = ("c1", "eth0", "k8s")


def port(rev: int, host: str = "h1", port_id: str = "p1", tags: list[str] | None = None) -> dict[str, Any]:
    return {"id": port_id, "revision_number": rev, "binding:host_id": host,
            "tags": tags if tags is not None else [ctr_tag("c1"), if_tag("eth0"), net_tag("k8s")]}


class Feed:
    """``GET /netbay/v1/changes`` in memory: a long poll waits for the next change."""

    def __init__(self, changes: int = 0, says_head: bool = True) -> None:
        self.says_head = says_head   # False: an older server, which answered ``since`` for nothing newer
        self.log: list[dict[str, Any]] = [{"revision": r + 1, "resource": "network", "id": f"n{r}",
                                           "action": "create", "data": {}} for r in range(changes)]
        self.grew = threading.Condition()
        self.calls = 0
        self.fail: ApiError | None = None

    def add(self, resource: str, action: str, obj_id: str, data: dict[str, Any] | None) -> None:
        with self.grew:
            self.log.append({"revision": len(self.log) + 1, "resource": resource, "id": obj_id,
                             "action": action, "data": data})
            self.grew.notify_all()

    def call(self, method: str, path: str, body: Any = None, *, timeout: float | None = None,
             since: int = 0, wait: float = 0.0, limit: int = 1000) -> dict[str, Any]:
        assert (method, path) == ("GET", "/netbay/v1/changes")
        self.calls += 1
        with self.grew:
            if self.fail is not None:
                raise self.fail
            self.grew.wait_for(lambda: len(self.log) > since or self.fail is not None, timeout=min(wait, 0.2))
            if self.fail is not None:
                raise self.fail
            items = self.log[since:since + limit]
            head = min(since, len(self.log)) if self.says_head else since
        return {"changes": items, "revision": items[-1]["revision"] if items else head}

    def close(self) -> None:
        pass


def eventually(cond: Callable[[], Any], timeout: float = 3.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {cond}")


@pytest.fixture
def feed() -> Feed:
    return Feed(changes=37)


@pytest.fixture
def watch(feed: Feed):
    w = PortWatch(feed, key_of).start()  # type: ignore[arg-type]
    eventually(lambda: w.ready)
    yield w
    w.close()
    with feed.grew:
        feed.grew.notify_all()


def test_joins_at_the_head_without_reading_the_log(feed: Feed, watch: PortWatch) -> None:
    """The head is one read (the feed answers it for nothing newer), not a scan of the log;
    a change made right after is the first one the watch follows."""
    assert watch._revision == 37
    calls = feed.calls
    feed.add("port", "update", "p1", port(3))
    eventually(lambda: watch._revision == 38)
    assert calls <= 2   # the head, then (maybe already parked) the first long poll


def test_a_feed_that_does_not_say_its_head(feed: Feed) -> None:
    """An older server answers ``since`` itself: no watch (CHECK asks the API), never a watch
    parked past every revision."""
    old = Feed(changes=5, says_head=False)
    w = PortWatch(old, key_of).start()  # type: ignore[arg-type]
    w._thread.join(5)
    assert not w._thread.is_alive() and not w.ready and w.ticket() is None


def test_a_port_learnt_follows_the_feed(feed: Feed, watch: PortWatch) -> None:
    assert watch.get(KEY) is None                   # unknown: the API is asked
    watch.put(port(2), watch.ticket())
    assert watch.get(KEY) == port(2)
    feed.add("port", "update", "p1", port(3, host="h2"))   # bound elsewhere
    eventually(lambda: (watch.get(KEY) or {}).get("binding:host_id") == "h2")
    feed.add("port", "update", "p1", port(4, tags=["user"]))   # no longer this attachment's
    eventually(lambda: watch.get(KEY) is None)


def test_a_deleted_port_is_not_answered(feed: Feed, watch: PortWatch) -> None:
    watch.put(port(2), watch.ticket())
    feed.add("port", "delete", "p1", None)
    eventually(lambda: watch.get(KEY) is None)
    watch.put(port(2), watch.ticket())   # a read the deletion overtook: not kept
    assert watch.get(KEY) is None


def test_an_older_read_does_not_replace_a_newer_change(feed: Feed, watch: PortWatch) -> None:
    watch.put(port(2), watch.ticket())
    feed.add("port", "update", "p1", port(5, host="h2"))
    eventually(lambda: (watch.get(KEY) or {}).get("revision_number") == 5)
    watch.put(port(3), watch.ticket())
    assert watch.get(KEY)["revision_number"] == 5   # type: ignore[index]


def test_a_read_from_before_the_feed_was_joined_is_not_kept(feed: Feed) -> None:
    w = PortWatch(feed, key_of)   # not started: not following the feed
    assert w.ticket() is None
    w.put(port(2), w.ticket())
    assert w.get(KEY) is None


def test_a_failed_feed_drops_everything_and_rejoins(feed: Feed, watch: PortWatch) -> None:
    ticket = watch.ticket()
    watch.put(port(2), ticket)
    feed.fail = ApiError(503, "down")
    with feed.grew:
        feed.grew.notify_all()
    eventually(lambda: not watch.ready)
    assert watch.get(KEY) is None
    feed.fail = None
    eventually(lambda: watch.ready)
    watch.put(port(2), ticket)   # read before the feed was lost: not kept
    assert watch.get(KEY) is None
    watch.put(port(2), watch.ticket())
    assert watch.get(KEY) == port(2)


def test_credentials_that_may_not_read_the_feed(feed: Feed) -> None:
    feed.fail = ApiError(403, "admin only")
    w = PortWatch(feed, key_of).start()  # type: ignore[arg-type]
    w._thread.join(5)
    assert not w._thread.is_alive() and not w.ready and w.ticket() is None
