"""Zun's container API through the backend seam: the same netbay server, on its own
network service and on a real cloud's Neutron (``netbay up --backend openstack
--os-cloud peer``; Keystone and Neutron's API server from PyPI, ``tests/backendfix.py``).

Driven by the real python-zunclient (``endpoint_override`` at netbay's ``/container``,
authenticated by whichever Keystone the server trusts) and checked with the backend's
own ``openstack`` CLI and listings (:func:`tests.backendfix.cloud_snapshot`). No Docker host is given, so a container goes to ``Error`` once
its ports are made; that cloud's Neutron has no agents either. These tests assert API
effects — ports, owners, bindings, addresses, errors, what is left — never packets
(the embedded backend's packets are tests/dataplane/test_dp_containers.py's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import ADMIN_PASSWORD, start_server, stop_server, unique
from zunhelp import settled_container, zunclient_at

from tests.backendfix import BACKENDS, cloud_snapshot, netbay_on_cloud, openstack

pytestmark = pytest.mark.peers

# Zun's kuryr driver's owner on a cloud; netbay's own dataplane wires compute:netbay.
OWNERS = {"embedded": "compute:netbay", "openstack": "compute:kuryr"}


@dataclass
class Side:
    """One netbay server on one backend: its Zun client, the backend's CLI and seam."""

    kind: str
    zun: object
    env: dict[str, str]
    seam: object
    closers: list = field(default_factory=list)

    def project_id(self) -> str:
        return json.loads(openstack(self.env, "token", "issue", "-f", "json"))["project_id"]


@pytest.fixture(scope="module", params=BACKENDS)
def side(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    data = tmp_path_factory.mktemp(f"zun-{request.param}")
    if request.param == "embedded":
        from netbay.client import Api
        from netbay.backends.http import HttpBackend

        server = start_server(f"sqlite:///{data / 'netbay.db'}", data)
        auth = {"auth_url": server.auth_url, "username": "admin", "password": ADMIN_PASSWORD,
                "project_name": "admin", "user_domain_name": "Default", "project_domain_name": "Default"}
        env = _clouds_yaml(data, auth)
        api = Api(server.url, server.token)
        s = Side("embedded", zunclient_at(server, auth), env, HttpBackend(api), [api.close, lambda: stop_server(server)])
        yield s
    else:
        from netbay.backends.openstack import OpenStackBackend

        cloud, env = request.getfixturevalue("cloud"), request.getfixturevalue("cloud_env")
        conn = cloud.connection()
        with netbay_on_cloud(env, data) as server:
            s = Side("openstack", zunclient_at(server, cloud.auth()), env, OpenStackBackend(connection=conn),
                     [conn.close])
            yield s
    for close in s.closers:
        close()


def _clouds_yaml(data: Path, auth: dict[str, str]) -> dict[str, str]:
    path = data / "clouds.yaml"
    path.write_text(json.dumps({"clouds": {"netbay": {"auth": auth, "region_name": "RegionOne",
                                                      "identity_api_version": 3}}}))
    return {"OS_CLIENT_CONFIG_FILE": str(path), "OS_CLOUD": "netbay"}


@pytest.fixture
def net(side: Side) -> Iterator[tuple[dict, dict]]:
    """A network with an IPv4 subnet in the backend, deleted afterwards."""
    network = side.seam.create("network", {"name": unique("zun")})
    subnet = side.seam.create("subnet", {"network_id": network["id"], "cidr": "10.96.0.0/24", "ip_version": 4})
    yield network, subnet
    side.seam.delete("network", network["id"])


def test_a_containers_port_is_zuns_in_the_backend_and_goes_with_it(side: Side, net) -> None:
    network, subnet = net
    before = cloud_snapshot(side.env)
    made = side.zun.containers.create(name=unique("zc"), image="busybox", nets=[{"network": network["id"]}],
                                      exposed_ports={"8080/tcp": {}})
    c = settled_container(side.zun, made.uuid)
    (port,) = side.seam.list("port", device_id=made.uuid)
    assert port["device_owner"] == OWNERS[side.kind] and port["network_id"] == network["id"]
    if side.kind == "openstack":   # Zun binds the port to the container's host
        assert port["binding:host_id"] == c["host"]
    shown = json.loads(openstack(side.env, "port", "show", port["id"], "-f", "json"))
    assert shown["device_id"] == made.uuid and shown["device_owner"] == OWNERS[side.kind]
    assert c["addresses"] == {network["id"]: [
        {"addr": f["ip_address"], "version": 4, "port": port["id"], "subnet_id": subnet["id"],
         "preserve_on_delete": False} for f in port["fixed_ips"]]}
    # exposed ports: only Zun's own zun-<uuid> (not also the default, as Zun), made in the backend
    groups = {g["id"]: g["name"] for g in side.seam.list("security_group") if g["id"] in port["security_groups"]}
    assert sorted(groups.values()) == [f"zun-{made.uuid}"]
    assert cloud_snapshot(side.env) != before
    side.zun.containers.delete(made.uuid)
    assert side.seam.list("port", device_id=made.uuid) == []
    assert cloud_snapshot(side.env) == before


def test_a_users_port_is_bound_then_given_back(side: Side, net) -> None:
    network, subnet = net
    own = side.seam.create("port", {"network_id": network["id"], "name": unique("own")})
    try:
        made = side.zun.containers.create(image="busybox", nets=[{"port": own["id"]}])
        c = settled_container(side.zun, made.uuid)
        bound = side.seam.show("port", own["id"])
        assert bound["device_id"] == made.uuid and bound["device_owner"] == OWNERS[side.kind]
        assert c["addresses"][network["id"]][0]["preserve_on_delete"] is True
        assert c["addresses"][network["id"]][0]["addr"] == own["fixed_ips"][0]["ip_address"]
        side.zun.containers.delete(made.uuid)
        kept = side.seam.show("port", own["id"])
        assert kept["device_id"] == "" and kept["device_owner"] == ""
    finally:
        side.seam.delete("port", own["id"])


def test_a_port_quota_refusal_names_the_backends_error_and_leaves_nothing(side: Side, net) -> None:
    """Two networks need two ports; the quota leaves room for one: the first port made is
    deleted again and no container is left."""
    from zunclient.common.apiclient.exceptions import HttpError

    first, _ = net
    second = side.seam.create("network", {"name": unique("zun2")})
    try:
        side.seam.create("subnet", {"network_id": second["id"], "cidr": "10.97.0.0/24", "ip_version": 4})
        project = side.project_id()
        used = len(side.seam.list("port", project_id=project))
        before = cloud_snapshot(side.env)
        containers = {c.uuid for c in side.zun.containers.list()}
        openstack(side.env, "quota", "set", "--ports", str(used + 1), project)
        try:
            with pytest.raises(HttpError) as refused:
                side.zun.containers.create(image="busybox", nets=[{"network": first["id"]},
                                                                  {"network": second["id"]}])
        finally:
            openstack(side.env, "quota", "set", "--ports", "-1", project)
        assert refused.value.http_status == 409
        assert "Quota exceeded for resources: ['port']" in str(refused.value), str(refused.value)
        assert cloud_snapshot(side.env) == before
        assert {c.uuid for c in side.zun.containers.list()} == containers
    finally:
        side.seam.delete("network", second["id"])
