"""What ``Store.retrying`` and the IPAM claims promise, in-process, on both databases.

A generated MAC that meets an existing one is drawn again; a stale cache entry
(another process deleted a project's default group) costs one retry, not an
error; transactions in flight never pick the same address.
"""

from __future__ import annotations

import pytest

from netbay.context import Context
from netbay.network import ipam, ports
from netbay.network.registry import NETWORKS, PORTS, SECURITY_GROUPS, SUBNETS
from netbay.store import migrate
from netbay.store.db import Store
from netbay.store.models import DefaultSecurityGroup, Subnet

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

ADMIN = Context.admin()


@pytest.fixture(scope="module")
def store(database_url: str):
    migrate.upgrade(database_url)
    s = Store(database_url)
    yield s
    s.dispose()


@pytest.fixture
def network(store: Store) -> str:
    with store.write() as s:
        net = NETWORKS.create(s, ADMIN, NETWORKS.create_body.model_validate({"name": "retries"}))
        SUBNETS.create(s, ADMIN, SUBNETS.create_body.model_validate(
            {"network_id": net.id, "cidr": "10.77.0.0/24", "ip_version": 4}))
        return net.id


def _create(store: Store, network_id: str, **extra: object) -> dict:
    body = PORTS.create_body.model_validate({"network_id": network_id, **extra})
    return store.retrying(lambda s: PORTS.rendered(s, PORTS.create(s, ADMIN, body)))


def test_a_generated_mac_that_is_taken_is_drawn_again(store: Store, network: str, monkeypatch) -> None:
    first = _create(store, network)
    draws = iter([first["mac_address"], "fa:16:3e:00:00:01"])
    monkeypatch.setattr(ports, "generate_mac", lambda: next(draws))
    second = _create(store, network)
    assert second["mac_address"] == "fa:16:3e:00:00:01"
    assert next(draws, None) is None  # the clash really happened and was retried


def test_a_given_mac_that_is_taken_is_a_409_not_a_retry(store: Store, network: str) -> None:
    first = _create(store, network)
    with pytest.raises(Exception) as exc:
        _create(store, network, mac_address=first["mac_address"])
    assert getattr(exc.value, "kind", None) == "MacAddressInUse"


def test_stale_default_group_in_the_cache_costs_one_retry(store: Store, network: str,
                                                          database_url: str) -> None:
    project = "proj-stale-cache"
    ctx = Context(user_id="u", project_id=project, roles=("member", "admin"))
    body = PORTS.create_body.model_validate({"network_id": network, "project_id": project})
    made = [store.retrying(lambda s: PORTS.rendered(s, PORTS.create(s, ctx, body))) for _ in range(2)]
    old_group = made[0]["security_groups"][0]
    assert store.cache[ports.default_group_key(project)] == old_group  # read, then kept
    # Another process (its own store, its own cache) deletes the ports and the group.
    other = Store(database_url)
    try:
        with other.write() as s:
            for port in made:
                PORTS.delete(s, ADMIN, port["id"])
        with other.write() as s:
            SECURITY_GROUPS.delete(s, ADMIN, old_group)
    finally:
        other.dispose()
    assert store.cache[ports.default_group_key(project)] == old_group  # stale here
    again = store.retrying(lambda s: PORTS.rendered(s, PORTS.create(s, ctx, body)))
    new_group = again["security_groups"][0]
    assert new_group != old_group
    with store.read() as s:
        assert s.get(DefaultSecurityGroup, project).security_group_id == new_group


def test_transactions_in_flight_never_pick_the_same_address(store: Store, network: str) -> None:
    with store.read() as s:
        subnet = s.query(Subnet).filter_by(network_id=network).one()
    with store.read() as a, store.read() as b:
        first = ipam.allocate(a, subnet)
        second = ipam.allocate(b, subnet)
        third = ipam.allocate(a, subnet)
        assert len({first, second, third}) == 3
        assert ipam._claims[subnet.id]
    # Both transactions ended without committing: every claim is released.
    assert subnet.id not in ipam._claims
