"""The load-balancer seam: the same calls, results and errors from netbay's own
Octavia-compatible API and from a real Octavia.

The ``openstack`` side is Octavia's API from PyPI (``tests/peers/octavia_peer.py``)
with its noop provider driver: nothing provisions or carries packets, and the
statuses a provider reports (ACTIVE once made, DELETED once gone) come from a
stand-in through Octavia's own driver agent. So these tests assert API effects —
objects, their links and tags, statuses, errors — never traffic. Both backends come
from one parametrized fixture, ``lb_backend`` (``tests/backendfix.py``); after each
test both list exactly the load balancers, listeners, pools and monitors they did before.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from lbhelp import gone

from netbay import errors
from netbay.backends.loadbalancers import LB_KINDS, LoadBalancerBackend

pytestmark = pytest.mark.peers
SETTLE_TIMEOUT = 60


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _status(fn: Callable) -> int:
    with pytest.raises(errors.NetbayError) as caught:
        fn()
    return caught.value.status


def settled(b: LoadBalancerBackend, lb_id: str) -> dict:
    """The load balancer once out of ``PENDING_*`` (bounded), as every Octavia client waits."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        lb = b.show("loadbalancer", lb_id)
        if not lb["provisioning_status"].startswith("PENDING_"):
            return lb
        assert time.monotonic() < deadline, f"{lb_id} still {lb['provisioning_status']}"
        time.sleep(0.1)


def test_the_seam_is_the_protocol(lb_backend: LoadBalancerBackend) -> None:
    assert isinstance(lb_backend, LoadBalancerBackend)
    assert lb_backend.describe()["backend"] == lb_backend.name
    assert LB_KINDS == ("loadbalancer", "listener", "pool", "member", "healthmonitor")


def test_a_load_balancer_tree_round_trip(clean_lb_backend: LoadBalancerBackend) -> None:
    b = clean_lb_backend
    tag = _name("tag")
    lb = b.create("loadbalancer", {"name": _name("lb"), "vip_subnet_id": b.vip_subnet_id, "tags": [tag]})
    assert lb["vip_subnet_id"] == b.vip_subnet_id and lb["provisioning_status"] == "PENDING_CREATE"
    lb = settled(b, lb["id"])
    assert lb["provisioning_status"] == "ACTIVE" and lb["tags"] == [tag]
    assert [o["id"] for o in b.list("loadbalancer", tags=[tag])] == [lb["id"]]
    listener = b.create("listener", {"loadbalancer_id": lb["id"], "protocol": "TCP", "protocol_port": 6443,
                                     "name": "api"})
    assert listener["loadbalancers"] == [{"id": lb["id"]}] and listener["protocol_port"] == 6443
    settled(b, lb["id"])
    pool = b.create("pool", {"listener_id": listener["id"], "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"})
    assert pool["listeners"] == [{"id": listener["id"]}] and pool["loadbalancers"] == [{"id": lb["id"]}]
    settled(b, lb["id"])
    monitor = b.create("healthmonitor", {"pool_id": pool["id"], "type": "TCP", "delay": 5, "max_retries": 3,
                                         "timeout": 5})
    assert monitor["pools"] == [{"id": pool["id"]}]
    settled(b, lb["id"])
    member = b.create("member", {"address": "10.70.0.10", "protocol_port": 6443,
                                 "subnet_id": b.vip_subnet_id}, parent=pool["id"])
    assert (member["address"], member["protocol_port"]) == ("10.70.0.10", 6443)
    settled(b, lb["id"])
    assert [m["id"] for m in b.list("member", parent=pool["id"])] == [member["id"]]
    assert b.show("member", member["id"], parent=pool["id"])["id"] == member["id"]
    renamed = b.update("listener", listener["id"], {"name": "api2"})
    assert renamed["name"] == "api2"
    settled(b, lb["id"])
    assert b.show("listener", listener["id"])["name"] == "api2"
    # The batch update: the pool's members become exactly these two.
    b.replace_members(pool["id"], [{"address": "10.70.0.11", "protocol_port": 6443},
                                   {"address": "10.70.0.12", "protocol_port": 6443}])
    settled(b, lb["id"])
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while sorted(m["address"] for m in b.list("member", parent=pool["id"])) != ["10.70.0.11", "10.70.0.12"]:
        assert time.monotonic() < deadline, b.list("member", parent=pool["id"])
        time.sleep(0.1)
    b.delete("loadbalancer", lb["id"], cascade=True)
    gone(b, lb["id"])
    assert _status(lambda: b.show("listener", listener["id"])) == 404
    assert _status(lambda: b.show("pool", pool["id"])) == 404


def test_one_child_at_a_time_is_deleted(clean_lb_backend: LoadBalancerBackend) -> None:
    b = clean_lb_backend
    lb = b.create("loadbalancer", {"name": _name("lb"), "vip_subnet_id": b.vip_subnet_id})
    settled(b, lb["id"])
    listener = b.create("listener", {"loadbalancer_id": lb["id"], "protocol": "HTTP", "protocol_port": 80})
    settled(b, lb["id"])
    b.delete("listener", listener["id"])
    settled(b, lb["id"])
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while listener["id"] in {o["id"] for o in b.list("listener")}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    b.delete("loadbalancer", lb["id"])
    gone(b, lb["id"])


def test_errors_are_the_same(clean_lb_backend: LoadBalancerBackend) -> None:
    b = clean_lb_backend
    missing = str(uuid.uuid4())
    for kind in ("loadbalancer", "listener", "pool", "healthmonitor"):
        assert _status(lambda kind=kind: b.show(kind, missing)) == 404, kind
        assert _status(lambda kind=kind: b.delete(kind, missing)) == 404, kind
    assert _status(lambda: b.list("member", parent=missing)) == 404
    assert _status(lambda: b.replace_members(missing, [])) == 404
    # Bad bodies: no VIP, a VIP subnet that is no id or that the network service does not
    # know, a port out of range, a listener on no load balancer.
    assert _status(lambda: b.create("loadbalancer", {"name": "no-vip"})) == 400
    assert _status(lambda: b.create("loadbalancer", {"vip_subnet_id": "not-a-uuid"})) == 400
    assert _status(lambda: b.create("loadbalancer", {"vip_subnet_id": missing})) in (400, 404)
    assert _status(lambda: b.create("listener", {"loadbalancer_id": missing, "protocol": "TCP",
                                                 "protocol_port": 80})) in (400, 404)
    lb = b.create("loadbalancer", {"name": _name("lb"), "vip_subnet_id": b.vip_subnet_id})
    try:
        settled(b, lb["id"])
        assert _status(lambda: b.create("listener", {"loadbalancer_id": lb["id"], "protocol": "TCP",
                                                     "protocol_port": 70000})) == 400
        listener = b.create("listener", {"loadbalancer_id": lb["id"], "protocol": "TCP", "protocol_port": 80})
        settled(b, lb["id"])
        # The same port twice on one load balancer: Octavia's 409.
        assert _status(lambda: b.create("listener", {"loadbalancer_id": lb["id"], "protocol": "TCP",
                                                     "protocol_port": 80})) == 409
        # A tree cannot go without cascade.
        assert _status(lambda: b.delete("loadbalancer", lb["id"])) in (400, 409)
        assert b.show("listener", listener["id"])["id"] == listener["id"]
    finally:
        settled(b, lb["id"])
        b.delete("loadbalancer", lb["id"], cascade=True)
    gone(b, lb["id"])
    with pytest.raises(errors.BadRequest):
        b.list("member")   # a member needs its pool
