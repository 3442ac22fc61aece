"""The change stream: revisions after N, long-poll wake-up, and the full-state fallback."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from conftest import unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)


def _changes(server, token, since, wait=0.0):
    r = httpx.get(f"{server.url}/netbay/v1/changes", params={"since": since, "wait": wait},
                  headers={"X-Auth-Token": token}, timeout=wait + 10)
    assert r.status_code == 200, r.text
    return r.json()


def _head(server, token) -> int:
    """The latest revision: what is after the highest revision there can be is nothing,
    and such an answer says the head."""
    page = _changes(server, token, 2**31 - 1)
    assert page["changes"] == []
    return page["revision"]


def test_every_change_has_a_revision_in_order(server, admin):
    token = server.token()
    latest = _head(server, token)
    name = unique("chg")
    net = admin.network.create_network(name=name)
    admin.network.update_network(net, description="changed")
    admin.network.delete_network(net)
    changes = _changes(server, token, latest)["changes"]
    mine = [c for c in changes if c["id"] == net.id]
    assert [c["action"] for c in mine] == ["create", "update", "delete"]
    revisions = [c["revision"] for c in changes]
    assert revisions == sorted(revisions) and len(set(revisions)) == len(revisions)
    assert all(r > latest for r in revisions)
    assert mine[0]["resource"] == "network" and mine[0]["data"]["name"] == name
    assert mine[1]["data"]["description"] == "changed"


def test_long_poll_wakes_on_a_commit(server, admin):
    token = server.token()
    head = _head(server, token)
    name = unique("wake")
    timer = threading.Timer(0.5, lambda: admin.network.create_network(name=name))
    started = time.monotonic()
    timer.start()
    try:
        page = _changes(server, token, head, wait=10)
    finally:
        timer.join()
    elapsed = time.monotonic() - started
    assert [c["data"]["name"] for c in page["changes"] if c["resource"] == "network"] == [name]
    assert 0.4 < elapsed < 5, elapsed  # woke on the commit, not at the 10 s timeout


def test_long_poll_times_out_empty(server):
    token = server.token()
    head = _head(server, token)
    started = time.monotonic()
    page = _changes(server, token, 10**9, wait=1)
    assert page["changes"] == [] and page["revision"] <= 10**9
    assert 0.9 < time.monotonic() - started < 5
    assert page["revision"] >= head


def test_nothing_newer_says_the_head_and_resuming_from_it_misses_nothing(server, admin):
    """An empty answer carries the head (not ``since``), the same as paging to the end
    finds; a reader that resumes from it gets every later change."""
    token = server.token()
    paged = 0
    for _ in range(1000):
        page = _changes(server, token, paged)
        if not page["changes"]:
            break
        paged = page["revision"]
    head = _head(server, token)
    assert head >= paged and _changes(server, token, head)["changes"] == []
    assert _changes(server, token, head)["revision"] == head
    net = admin.network.create_network(name=unique("head"))
    later = _changes(server, token, head)
    assert net.id in {c["id"] for c in later["changes"]}
    assert all(c["revision"] > head for c in later["changes"])
    assert _head(server, token) == later["revision"]


def test_state_lists_everything_at_a_revision(server, admin):
    token = server.token()
    net = admin.network.create_network(name=unique("state"))
    r = httpx.get(f"{server.url}/netbay/v1/state", headers={"X-Auth-Token": token})
    assert r.status_code == 200
    body = r.json()
    assert net.id in {n["id"] for n in body["networks"]}
    assert "public" in {n["name"] for n in body["networks"]}
    assert body["revision"] >= 1
    for collection in ("subnets", "ports", "routers", "floatingips", "security-groups"):
        assert isinstance(body[collection], list)
    # Nothing newer than the snapshot's revision is missing from it.
    later = _changes(server, token, body["revision"])["changes"]
    assert net.id not in {c["id"] for c in later}


def test_a_revision_beyond_the_columns_range_is_refused_not_a_500(server):
    """Revisions are an INTEGER column (32 bits on PostgreSQL): a larger ``since`` is the
    caller's error, said as one, where PostgreSQL used to fail the query (the fuzzer's find)."""
    headers = {"X-Auth-Token": server.token()}
    assert _changes(server, headers["X-Auth-Token"], 2**31 - 1)["changes"] == []
    r = httpx.get(f"{server.url}/netbay/v1/changes", params={"since": 2**31}, headers=headers, timeout=10)
    assert 400 <= r.status_code < 500, r.text
