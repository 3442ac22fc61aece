"""The one parametrized fixture behind every backend-independent test (issue 14).

A test that asks for ``network_backend`` runs twice: against netbay's embedded
network service and against a real cloud's Neutron (Keystone and Neutron's API
server from PyPI, ``tests/peers/openstack_cloud.py``). The cloud is started once
per test session and shared; it has an external network named ``public``, as an
operator's cloud would. Tests written against it assert API effects (objects,
addresses, statuses, errors), never packets: that Neutron has no agents.

Loaded by ``tests/conftest.py`` (``pytest_plugins``); fixtures:

- ``cloud`` — the running peers (:class:`tests.peers.openstack_cloud.Cloud`);
- ``cloud_env`` — ``OS_CLIENT_CONFIG_FILE`` / ``OS_CLOUD`` naming it ``peer``, for
  netbay (``--backend openstack --os-cloud peer``) and the ``openstack`` CLI alike;
- ``network_backend`` — a :class:`netbay.backends.NetworkBackend`, embedded or openstack;
- ``clean_backend`` — the same, checked afterwards to hold exactly what it held before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

PUBLIC = "public"
# What a test must leave as it found it, per backend.
SWEPT = ("network", "subnet", "port", "router", "floatingip", "security_group")
BACKENDS = ("embedded", "openstack")


@pytest.fixture(scope="session")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.peers.openstack_cloud import openstack_cloud

    with openstack_cloud(tmp_path_factory.mktemp("openstack")) as c:
        conn = c.connection()
        public = conn.network.create_network(name=PUBLIC, is_router_external=True)
        conn.network.create_subnet(network_id=public.id, cidr="203.0.113.0/24", ip_version=4,
                                   name=f"{PUBLIC}-subnet", is_dhcp_enabled=False)
        conn.close()
        yield c


@pytest.fixture(scope="session")
def cloud_env(cloud, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:  # noqa: ANN001
    """``clouds.yaml`` naming the cloud ``peer``."""
    path = tmp_path_factory.mktemp("clouds") / "clouds.yaml"
    path.write_text(json.dumps({"clouds": {"peer": {"auth": cloud.auth(), "region_name": "RegionOne",
                                                    "identity_api_version": 3}}}))  # YAML ⊇ JSON
    return {"OS_CLIENT_CONFIG_FILE": str(path), "OS_CLOUD": "peer"}


@pytest.fixture(scope="module", params=BACKENDS)
def network_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from netbay.backends import open_backend

    if request.param == "embedded":
        from netbay.store import migrate
        from netbay.store.db import Store

        url = f"sqlite:///{tmp_path_factory.mktemp('embedded') / 'netbay.db'}"
        migrate.upgrade(url)
        store = Store(url)
        yield open_backend("embedded", store=store)
        store.dispose()
    else:
        conn = request.getfixturevalue("cloud").connection()
        yield open_backend("openstack", connection=conn)
        conn.close()


def snapshot(backend) -> dict[str, set[str]]:  # noqa: ANN001
    """Every object's id, per swept member."""
    return {m: {o["id"] for o in backend.list(m)} for m in SWEPT}


@pytest.fixture
def clean_backend(network_backend) -> Iterator:  # noqa: ANN001
    """The backend, checked afterwards to hold exactly what it held before."""
    network_backend.list("security_group")  # the project's default group appears on first use in both
    before = snapshot(network_backend)
    yield network_backend
    assert snapshot(network_backend) == before
