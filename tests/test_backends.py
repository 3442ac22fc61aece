"""The network backend seam: the same calls, the same results and the same
errors from netbay's embedded service and from a real Neutron.

The ``openstack`` backend runs against Keystone and Neutron's API server
installed from PyPI (``tests/peers/openstack_cloud.py``): API only, no agents,
so these tests assert API effects (objects, addresses, statuses and errors),
never packets. Both backends come from one parametrized fixture,
``network_backend`` (``tests/backendfix.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from netbay import errors
from netbay.backends import NetworkBackend
from tests.peers.openstack_cloud import Cloud
from tests import zygote

pytestmark = pytest.mark.peers


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _status(fn) -> tuple[int, str]:
    with pytest.raises(errors.NetbayError) as caught:
        fn()
    return caught.value.status, caught.value.kind


def test_network_subnet_port_round_trip(clean_backend: NetworkBackend) -> None:
    b = clean_backend
    net = b.create("network", {"name": _name("net")})
    assert net["status"] == "ACTIVE" and net["admin_state_up"] is True
    subnet = b.create("subnet", {"network_id": net["id"], "cidr": "10.61.0.0/24", "ip_version": 4})
    assert subnet["gateway_ip"] == "10.61.0.1"
    port = b.create("port", {"network_id": net["id"], "name": "p1",
                             "fixed_ips": [{"subnet_id": subnet["id"], "ip_address": "10.61.0.10"}]})
    assert port["fixed_ips"] == [{"subnet_id": subnet["id"], "ip_address": "10.61.0.10"}]
    assert len(port["mac_address"]) == 17 and port["device_owner"] == ""
    assert [p["id"] for p in b.list("port", network_id=net["id"])] == [port["id"]]
    renamed = b.update("port", port["id"], {"name": "p2", "device_owner": "compute:netbay",
                                            "device_id": "c1"})
    assert (renamed["name"], renamed["device_owner"], renamed["device_id"]) == ("p2", "compute:netbay", "c1")
    assert b.show("port", port["id"])["revision_number"] > port["revision_number"]
    b.delete("port", port["id"])
    assert _status(lambda: b.show("port", port["id"])) == (404, "PortNotFound")
    b.delete("subnet", subnet["id"])
    b.delete("network", net["id"])


def test_errors_are_the_same(clean_backend: NetworkBackend) -> None:
    b = clean_backend
    missing = str(uuid.uuid4())
    assert _status(lambda: b.show("network", missing)) == (404, "NetworkNotFound")
    assert _status(lambda: b.delete("subnet", missing)) == (404, "SubnetNotFound")
    net = b.create("network", {"name": _name("net")})
    try:
        assert _status(lambda: b.create("subnet", {"network_id": net["id"], "cidr": "10.61.0.0/33",
                                                   "ip_version": 4}))[0] == 400
        subnet = b.create("subnet", {"network_id": net["id"], "cidr": "10.62.0.0/29", "ip_version": 4})
        # An address outside the subnet, then one taken twice: Neutron's 400 and 409.
        assert _status(lambda: b.create("port", {"network_id": net["id"], "fixed_ips": [
            {"subnet_id": subnet["id"], "ip_address": "10.99.0.5"}]}))[0] == 400
        port = b.create("port", {"network_id": net["id"], "fixed_ips": [{"ip_address": "10.62.0.5"}]})
        assert _status(lambda: b.create("port", {"network_id": net["id"], "fixed_ips": [
            {"ip_address": "10.62.0.5"}]})) == (409, "IpAddressAlreadyAllocated")
        # A user port on the network: it cannot go.
        assert _status(lambda: b.delete("network", net["id"])) == (409, "NetworkInUse")
        # The /29 has 5 usable addresses besides the gateway; one is taken.
        for _ in range(4):
            b.create("port", {"network_id": net["id"]})
        assert _status(lambda: b.create("port", {"network_id": net["id"]})) == (409, "IpAddressGenerationFailure")
        for p in b.list("port", network_id=net["id"]):
            b.delete("port", p["id"])
        assert port["id"] not in {p["id"] for p in b.list("port")}
    finally:
        for p in b.list("port", network_id=net["id"]):
            b.delete("port", p["id"])
        b.delete("network", net["id"])


def test_router_interface_and_floating_ip(clean_backend: NetworkBackend) -> None:
    b = clean_backend
    ext = b.create("network", {"name": _name("ext"), "router:external": True})
    made: list[tuple[str, str]] = [("network", ext["id"])]
    try:
        ext_sub = b.create("subnet", {"network_id": ext["id"], "cidr": "203.0.113.0/24", "ip_version": 4,
                                      "enable_dhcp": False})
        made.append(("subnet", ext_sub["id"]))
        net = b.create("network", {"name": _name("net")})
        made.append(("network", net["id"]))
        sub = b.create("subnet", {"network_id": net["id"], "cidr": "10.63.0.0/24", "ip_version": 4})
        made.append(("subnet", sub["id"]))
        router = b.create("router", {"name": _name("r"), "external_gateway_info": {"network_id": ext["id"]}})
        made.append(("router", router["id"]))
        assert router["external_gateway_info"]["network_id"] == ext["id"]
        info = b.add_router_interface(router["id"], subnet_id=sub["id"])
        assert info["subnet_id"] == sub["id"] and info["id"] == router["id"]
        iface = b.show("port", info["port_id"])
        assert iface["device_owner"] == "network:router_interface"
        assert iface["fixed_ips"][0]["ip_address"] == "10.63.0.1"
        port = b.create("port", {"network_id": net["id"]})
        made.append(("port", port["id"]))
        fip = b.create("floatingip", {"floating_network_id": ext["id"], "port_id": port["id"]})
        made.append(("floatingip", fip["id"]))
        assert fip["fixed_ip_address"] == port["fixed_ips"][0]["ip_address"]
        assert fip["floating_ip_address"].startswith("203.0.113.") and fip["router_id"] == router["id"]
        # The router cannot leave the subnet while a floating IP needs the path.
        assert _status(lambda: b.remove_router_interface(router["id"], subnet_id=sub["id"]))[0] == 409
        b.delete("floatingip", fip["id"])
        made.remove(("floatingip", fip["id"]))
        b.remove_router_interface(router["id"], subnet_id=sub["id"])
        assert _status(lambda: b.show("port", info["port_id"]))[0] == 404
    finally:
        for member, obj_id in reversed(made):
            b.delete(member, obj_id)


def test_security_groups_rules_and_tags(clean_backend: NetworkBackend) -> None:
    b = clean_backend
    group = b.create("security_group", {"name": _name("sg"), "description": "web"})
    try:
        assert {r["direction"] for r in group["security_group_rules"]} == {"egress"}
        rule = {"security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4",
                "protocol": "tcp", "port_range_min": 80, "port_range_max": 80, "remote_ip_prefix": "0.0.0.0/0"}
        made = b.create("security_group_rule", rule)
        assert (made["protocol"], made["port_range_min"]) == ("tcp", 80)
        assert _status(lambda: b.create("security_group_rule", rule)) == (409, "SecurityGroupRuleExists")
        assert _status(lambda: b.create("security_group_rule", {**rule, "port_range_min": 90}))[0] == 400
        tag = _name("cluster")
        assert b.set_tags("security_group", group["id"], [tag, "netbay"]) == sorted([tag, "netbay"])
        assert [g["id"] for g in b.list("security_group", tags=tag)] == [group["id"]]
        assert b.show("security_group", group["id"])["tags"] == sorted([tag, "netbay"])
    finally:
        b.delete("security_group", group["id"])


def test_describe_names_the_backend(network_backend: NetworkBackend) -> None:
    info = network_backend.describe()
    assert info["backend"] == network_backend.name
    if network_backend.name == "openstack":
        assert info["network"].startswith("http://127.0.0.1:") and info["project_id"]


def _doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return zygote.run([sys.executable, "-m", "netbay.cli.main", "doctor", "--json", *args],
                      capture_output=True, text=True, timeout=180, env={**os.environ, **env})


def test_doctor_says_which_backend_and_whether_it_answers(cloud: Cloud, tmp_path: Path) -> None:
    clouds = {"clouds": {
        "peer": {"auth": cloud.auth(), "region_name": "RegionOne", "identity_api_version": 3},
        "wrong": {"auth": cloud.auth(password="not-the-password"), "region_name": "RegionOne",
                  "identity_api_version": 3},
    }}
    (tmp_path / "clouds.yaml").write_text(json.dumps(clouds))  # YAML is a superset of JSON
    env = {"OS_CLIENT_CONFIG_FILE": str(tmp_path / "clouds.yaml")}
    r = _doctor(env, "--backend", "openstack", "--os-cloud", "peer")
    assert r.returncode == 0, r.stdout + r.stderr
    seen = json.loads(r.stdout)["network_backend"]
    assert seen["backend"] == "openstack" and seen["reachable"] is True
    assert seen["network"].startswith(cloud.network_url)
    r = _doctor({**env, "NETBAY_NETWORK_BACKEND": "openstack", "OS_CLOUD": "wrong"})
    assert r.returncode == 1
    seen = json.loads(r.stdout)["network_backend"]
    assert seen["reachable"] is False and ("401" in seen["detail"] or "Unauthorized" in seen["detail"])
    r = _doctor({}, "--backend", "embedded")
    assert json.loads(r.stdout)["network_backend"] == {
        "backend": "embedded", "reachable": True,
        "detail": "netbay's own network service and kernel dataplane on this machine"}


def test_netbay_accepts_the_clouds_tokens_scoped_to_their_project(
        cloud: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``NETBAY_EXTERNAL_KEYSTONE``, netbay's own APIs take the real Keystone's tokens
    and act for the token's project: another project's token sees 404s."""
    from tests.conftest import start_server, stop_server

    admin = cloud.connection()
    other = admin.identity.create_project(name=_name("proj"), domain_id="default")
    password = uuid.uuid4().hex
    user = admin.identity.create_user(name=_name("user"), password=password, domain_id="default",
                                      default_project_id=other.id)
    admin.identity.assign_project_role_to_user(other, user, admin.identity.find_role("member"))
    theirs = cloud.connection(project=other.name, user=user.name, password=password)
    monkeypatch.setenv("NETBAY_EXTERNAL_KEYSTONE", cloud.auth_url)
    server = start_server(f"sqlite:///{tmp_path / 'netbay.db'}", tmp_path)
    try:
        base = f"{server.url}/network/v2.0"
        as_admin = {"X-Auth-Token": admin.auth_token}
        r = httpx.post(f"{base}/networks", json={"network": {"name": "from-the-cloud"}}, headers=as_admin)
        assert r.status_code == 201, r.text
        net = r.json()["network"]
        assert net["project_id"] == admin.current_project_id
        as_member = {"X-Auth-Token": theirs.auth_token}
        assert httpx.get(f"{base}/networks/{net['id']}", headers=as_member).status_code == 404
        mine = httpx.post(f"{base}/networks", json={"network": {"name": "theirs"}}, headers=as_member)
        assert mine.status_code == 201 and mine.json()["network"]["project_id"] == other.id
        seen = httpx.get(f"{base}/networks", headers=as_member).json()["networks"]
        assert mine.json()["network"]["id"] in {n["id"] for n in seen} and net["id"] not in {n["id"] for n in seen}
        assert {n["project_id"] for n in seen if not (n["shared"] or n["router:external"])} == {other.id}
        # A member of the cloud is no admin here either; a forged token is refused.
        assert httpx.post(f"{base}/networks", json={"network": {"name": "x", "shared": True}},
                          headers=as_member).status_code == 403
        assert httpx.get(f"{base}/networks", headers={"X-Auth-Token": "not-a-token"}).status_code == 401
    finally:
        stop_server(server)
        admin.identity.delete_user(user)
        admin.identity.delete_project(other)
        theirs.close()
        admin.close()
