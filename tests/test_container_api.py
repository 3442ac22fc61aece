"""The Zun-compatible container API over HTTP without Docker: container networks,
containers' ports and attachments, Zun's rules, errors, versions and scoping, and
python-zunclient. (Docker itself: tests/dataplane/test_dp_containers.py.)"""

from __future__ import annotations

import time

import pytest

from conftest import unique
from zunhelp import network, zun_error, zun_http, zunclient

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


@pytest.fixture(scope="module")
def member(server):
    user, password, project = server.make_user()
    token = server.token(user, password, project)
    return {"zun": zun_http(server, token), "neutron": server.http(token), "creds": (user, password, project)}


@pytest.fixture(scope="module")
def other(server):
    user, password, project = server.make_user()
    token = server.token(user, password, project)
    return {"zun": zun_http(server, token), "neutron": server.http(token)}


def _wait(zun, uuid: str, statuses: set[str], timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        c = zun.get(f"/containers/{uuid}").json()
        if c["status"] in statuses or time.monotonic() > deadline:
            assert c["status"] in statuses, c
            return c
        time.sleep(0.1)


def _ports(neutron, device_id: str) -> list[dict]:
    return neutron.get("/ports", params={"device_id": device_id}).json()["ports"]


# --- discovery, versions, catalog ----------------------------------------------------------------


def test_catalog_versions_and_negotiation(server, member):
    import httpx

    token = server.token()
    catalog = httpx.get(f"{server.auth_url}/auth/catalog", headers={"X-Auth-Token": token}, timeout=10).json()["catalog"]
    (zun,) = [s for s in catalog if s["type"] == "container"]
    assert zun["name"] == "zun" and zun["endpoints"][0]["url"].endswith("/container/v1")
    root = httpx.get(f"{server.url}/container/", timeout=10).json()
    assert root["versions"][0]["min_version"] == "1.1" and root["versions"][0]["max_version"] == "1.40"
    r = member["zun"].get("/networks")
    assert r.status_code == 200 and r.headers["openstack-api-version"] == "container 1.40"
    plain = zun_http(server, token, version=None).get("/networks")
    assert plain.headers["openstack-api-version"] == "container 1.1"
    for bad in ("container 1.41", "container 2.0", "container-infra 1.1"):
        r = zun_http(server, token, version=bad).get("/networks")
        zun_error(r, 406)
        assert r.json()["errors"][0]["code"] == "zun.microversion-unsupported"
    zun_error(member["zun"].get("/nothing-here"), 404)


# --- container networks ------------------------------------------------------------------------------


def test_network_create_list_show_delete_and_scoping(member, other):
    net, subnet = network(member["neutron"], unique("cn"), "10.91.0.0/24")
    zun = member["zun"]
    r = zun.post("/networks", json={"name": "web", "neutron_net_id": net["name"], "neutron_subnet": subnet["id"]})
    assert r.status_code == 200, r.text
    made = r.json()
    assert made["neutron_net_id"] == net["id"] and made["name"] == "web"
    assert made["neutron_subnet"] == subnet["id"] and made["project_id"] == net["project_id"]
    assert [n["uuid"] for n in zun.get("/networks").json()["networks"]] == [made["uuid"]]
    for ident in (made["uuid"], "web", net["id"]):
        assert zun.get(f"/networks/{ident}").json()["uuid"] == made["uuid"]
    zun_error(zun.post("/networks", json={"name": "again", "neutron_net_id": net["id"]}), 409)
    # Another project sees nothing and cannot use or delete it.
    assert other["zun"].get("/networks").json()["networks"] == []
    zun_error(other["zun"].get(f"/networks/{made['uuid']}"), 404)
    zun_error(other["zun"].delete(f"/networks/{made['uuid']}"), 404)
    zun_error(other["zun"].post("/networks", json={"name": "xx", "neutron_net_id": net["id"]}), 404,
              f"Neutron network {net['id']} could not be found.")
    assert zun.delete(f"/networks/{made['uuid']}").status_code == 204
    zun_error(zun.get(f"/networks/{made['uuid']}"), 404)


def test_network_create_errors(member):
    net, subnet = network(member["neutron"], unique("cn"), "10.92.0.0/24")
    zun = member["zun"]
    zun_error(zun.post("/networks", json={"name": "nn", "neutron_net_id": "no-such-net"}), 404,
              "Neutron network no-such-net could not be found.")
    zun_error(zun.post("/networks", json={"name": "nn"}), 400, "'neutron_net_id' is a required property")
    zun_error(zun.post("/networks", json={"neutron_net_id": net["id"], "colour": "red"}), 400,
              contains="'colour' was unexpected")
    zun_error(zun.post("/networks", json={"neutron_net_id": net["id"], "neutron_subnet": "nope"}), 400,
              f"Subnet nope is not a subnet of network {net['id']}.")
    zun_error(zun.post("/networks", json={"neutron_net_id": net["id"], "neutron_pool": "nope"}), 400,
              f"Subnet pool nope has no subnet on network {net['id']}.")
    assert zun.get("/networks").json()["networks"] == [] or all(
        n["neutron_net_id"] != net["id"] for n in zun.get("/networks").json()["networks"])


# --- containers: ports, attachments, rules ---------------------------------------------------------


def test_create_makes_a_port_and_delete_removes_it(member):
    net, subnet = network(member["neutron"], unique("cc"), "10.93.0.0/24")
    zun, neutron = member["zun"], member["neutron"]
    r = zun.post("/containers?run=true", json={"name": unique("c"), "image": "busybox", "command": ["sleep", "60"],
                                               "nets": [{"network": net["name"], "v4-fixed-ip": "10.93.0.50"}]})
    assert r.status_code == 202, r.text
    c = r.json()
    assert c["status"] == "Creating" and c["task_state"] == "container_creating"
    (port,) = _ports(neutron, c["uuid"])
    assert port["device_owner"] == "compute:netbay" and port["fixed_ips"][0]["ip_address"] == "10.93.0.50"
    assert c["addresses"] == {net["id"]: [{"addr": "10.93.0.50", "version": 4, "port": port["id"],
                                           "subnet_id": subnet["id"], "preserve_on_delete": False}]}
    # The container network was made on the fly; deleting it while attached is refused.
    (cn,) = [n for n in zun.get("/networks").json()["networks"] if n["neutron_net_id"] == net["id"]]
    zun_error(zun.delete(f"/networks/{cn['uuid']}"), 409, contains="is in use by container")
    # No Docker host here: the runner reports Zun's Error with the reason.
    done = _wait(zun, c["uuid"], {"Error"})
    assert "No container runtime" in done["status_reason"] and done["task_state"] is None
    assert zun.delete(f"/containers/{c['uuid']}").status_code == 204
    zun_error(zun.get(f"/containers/{c['uuid']}"), 404)
    assert _ports(neutron, c["uuid"]) == []
    assert zun.delete(f"/networks/{cn['uuid']}").status_code == 204


def test_a_users_port_is_bound_then_kept(member):
    net, subnet = network(member["neutron"], unique("cp"), "10.94.0.0/24")
    zun, neutron = member["zun"], member["neutron"]
    port = neutron.post("/ports", json={"port": {"network_id": net["id"]}}).json()["port"]
    c = zun.post("/containers", json={"image": "busybox", "nets": [{"port": port["id"]}]}).json()
    bound = neutron.get(f"/ports/{port['id']}").json()["port"]
    assert bound["device_id"] == c["uuid"] and bound["device_owner"] == "compute:netbay"
    assert c["addresses"][net["id"]][0]["preserve_on_delete"] is True
    # A port in use cannot be given to a second container.
    zun_error(zun.post("/containers", json={"image": "busybox", "nets": [{"port": port["id"]}]}), 400,
              f"Port {port['id']} is still in use.")
    _wait(zun, c["uuid"], {"Error"})
    assert zun.delete(f"/containers/{c['uuid']}").status_code == 204
    kept = neutron.get(f"/ports/{port['id']}").json()["port"]
    assert kept["device_id"] == "" and kept["device_owner"] == ""


def test_create_errors_leave_nothing(member, other):
    net, subnet = network(member["neutron"], unique("ce"), "10.95.0.0/24")
    zun, neutron = member["zun"], member["neutron"]
    before = {p["id"] for p in neutron.get("/ports").json()["ports"]}
    zun_error(zun.post("/containers", json={"image": "busybox", "nets": [{"network": "no-such-net"}]}), 404,
              "Neutron network no-such-net could not be found.")
    zun_error(zun.post("/containers", json={"image": "busybox", "nets": [
        {"network": net["id"]}, {"network": net["id"], "v4-fixed-ip": "10.77.0.5"}]}), 400)
    zun_error(zun.post("/containers", json={"image": "busybox", "nets": [{"network": net["id"]}],
                                             "security_groups": ["no-such-group"]}), 400,
              "Security group no-such-group could not be found.")
    zun_error(zun.post("/containers", json={"nets": [{"network": net["id"]}]}), 400, "'image' is a required property")
    for bad in ({"nets": [{"network": 5}]}, {"nets": "x"}, {"environment": {"A": 1}}, {"command": 7},
                {"exposed_ports": ["80"]}, {"hostname": 3}, {"security_groups": "default"}):
        zun_error(zun.post("/containers", json={"image": "busybox", **bad}), 400)
    for bad in ({"neutron_net_id": 5}, {"neutron_net_id": net["id"], "neutron_subnet": 5}, [1]):
        zun_error(zun.post("/networks", json=bad), 400)
    zun_error(zun.post("/containers", content=b"{nope"), 400)
    # Another project's network is not there for it.
    zun_error(other["zun"].post("/containers", json={"image": "busybox", "nets": [{"network": net["id"]}]}), 404)
    assert {p["id"] for p in neutron.get("/ports").json()["ports"]} == before
    assert zun.get("/containers").json()["containers"] == [] or all(
        c["addresses"].get(net["id"]) is None for c in zun.get("/containers").json()["containers"])


def test_default_network_is_the_projects_oldest(server):
    user, password, project = server.make_user()
    token = server.token(user, password, project)
    zun, neutron = zun_http(server, token), server.http(token)
    first, _ = network(neutron, unique("old"), "10.96.1.0/24")
    time.sleep(1.1)  # created_at has a resolution of one second
    network(neutron, unique("new"), "10.96.2.0/24")
    c = zun.post("/containers", json={"image": "busybox"}).json()
    assert list(c["addresses"]) == [first["id"]]
    _wait(zun, c["uuid"], {"Error"})
    assert zun.delete(f"/containers/{c['uuid']}").status_code == 204


def test_state_rules_and_other_projects(member, other):
    net, _ = network(member["neutron"], unique("cs"), "10.97.0.0/24")
    zun = member["zun"]
    c = zun.post("/containers", json={"image": "busybox", "name": unique("s"), "nets": [{"network": net["id"]}]}).json()
    _wait(zun, c["uuid"], {"Error"})
    zun_error(zun.post(f"/containers/{c['uuid']}/stop"), 409, f"Cannot stop container {c['uuid']} in Error state.")
    zun_error(other["zun"].get(f"/containers/{c['uuid']}"), 404, f"Container {c['uuid']} could not be found.")
    zun_error(other["zun"].delete(f"/containers/{c['uuid']}"), 404)
    zun_error(other["zun"].get("/containers", params={"all_projects": "true"}), 403)
    assert zun.get(f"/containers/{c['name']}").json()["uuid"] == c["uuid"]
    nets = zun.get(f"/containers/{c['uuid']}/network_list").json()["networks"]
    assert [n["net_id"] for n in nets] == [net["id"]]
    zun_error(zun.post(f"/containers/{c['uuid']}/network_attach", params={"network": net["id"]}), 409,
              f"Cannot network_attach container {c['uuid']} in Error state.")
    zun_error(zun.post(f"/containers/{c['uuid']}/network_attach"), 400,
              "Either 'network' or 'port' must be given, not both.")
    zun_error(zun.post(f"/containers/{c['uuid']}/execute", params={"command": "true"}), 409,
              f"Cannot execute container {c['uuid']} in Error state.")
    # Zun's rebuild: allowed from Error, a new image kept; here no Docker, so Error again.
    zun_error(zun.post(f"/containers/{c['uuid']}/rebuild", params={"image_driver": "glance"}), 400,
              contains="image_driver")
    zun_error(other["zun"].post(f"/containers/{c['uuid']}/rebuild"), 404)
    assert zun.post(f"/containers/{c['uuid']}/rebuild", params={"image": "busybox:2"}).status_code == 202
    rebuilt = _wait(zun, c["uuid"], {"Error"})
    assert rebuilt["image"] == "busybox:2" and rebuilt["task_state"] is None
    assert zun.delete(f"/containers/{c['uuid']}").status_code == 204
    zun_error(zun.post(f"/containers/{c['uuid']}/rebuild"), 404)


def test_exposed_ports_open_through_a_group_of_the_containers_own(member):
    net, _ = network(member["neutron"], unique("cx"), "10.99.0.0/24")
    zun, neutron = member["zun"], member["neutron"]
    zun_error(zun.post("/containers", json={"image": "busybox", "exposed_ports": {"http": {}}}), 400,
              contains="'http' is not a port")
    c = zun.post("/containers", json={"image": "busybox", "nets": [{"network": net["id"]}],
                                      "exposed_ports": {"80/tcp": {}, "53/udp": {}}}).json()
    assert c["ports"] == [53, 80]
    (group,) = neutron.get("/security-groups", params={"name": f"zun-{c['uuid']}"}).json()["security_groups"]
    opened = {(r["protocol"], r["port_range_min"], r["port_range_max"]) for r in group["security_group_rules"]
              if r["direction"] == "ingress"}
    assert opened == {("tcp", 80, 80), ("udp", 53, 53)}
    (port,) = _ports(neutron, c["uuid"])
    assert port["security_groups"] == [group["id"]]  # Zun's: only its own group, not also the default
    assert c["security_groups"] == [group["id"]]
    # Groups asked for stay beside it.
    mine = neutron.post("/security-groups", json={"security_group": {"name": unique("sg")}}).json()["security_group"]
    d = zun.post("/containers", json={"image": "busybox", "nets": [{"network": net["id"]}],
                                      "security_groups": [mine["name"]], "exposed_ports": {"22": {}}}).json()
    (dport,) = _ports(neutron, d["uuid"])
    (dgroup,) = neutron.get("/security-groups", params={"name": f"zun-{d['uuid']}"}).json()["security_groups"]
    assert sorted(dport["security_groups"]) == sorted([mine["id"], dgroup["id"]])
    _wait(zun, d["uuid"], {"Error"})
    assert zun.delete(f"/containers/{d['uuid']}").status_code == 204
    _wait(zun, c["uuid"], {"Error"})
    assert zun.delete(f"/containers/{c['uuid']}").status_code == 204
    assert neutron.get(f"/security-groups/{group['id']}").status_code == 404


# --- python-zunclient -----------------------------------------------------------------------------


def test_admin_lists_all_projects_with_zunclient(server, member):
    net, _ = network(member["neutron"], unique("za"), "10.90.0.0/24")
    c = member["zun"].post("/containers", json={"image": "busybox", "nets": [{"network": net["id"]}]}).json()
    zc = zunclient(server)
    assert c["uuid"] not in [x.uuid for x in zc.containers.list()]
    assert c["uuid"] in [x.uuid for x in zc.containers.list(all_projects=True)]
    _wait(member["zun"], c["uuid"], {"Error"})
    assert member["zun"].delete(f"/containers/{c['uuid']}").status_code == 204


def test_admin_reaches_other_projects_containers_as_zuns_policy_has_it(server, member, other):
    """Zun's ``get_resource``: an admin finds any project's container (by uuid or name, with or
    without ``all_projects``); ``all_projects`` on show or delete is an admin's rule (403)."""
    net, _ = network(member["neutron"], unique("zx"), "10.88.0.0/24")
    zun = member["zun"]
    c = zun.post("/containers", json={"image": "busybox", "name": unique("x"), "nets": [{"network": net["id"]}]}).json()
    _wait(zun, c["uuid"], {"Error"})
    admin = zun_http(server, server.token())
    for params in ({"all_projects": "True"}, {}):
        shown = admin.get(f"/containers/{c['uuid']}", params=params)
        assert shown.status_code == 200 and shown.json()["project_id"] == c["project_id"], shown.text
    assert admin.get(f"/containers/{c['name']}", params={"all_projects": "True"}).json()["uuid"] == c["uuid"]
    zun_error(zun.get(f"/containers/{c['uuid']}", params={"all_projects": "True"}), 403,
              "Policy doesn't allow container:get_one_all_projects to be performed.")
    zun_error(zun.delete(f"/containers/{c['uuid']}", params={"all_projects": "True"}), 403,
              "Policy doesn't allow container:delete_all_projects to be performed.")
    zun_error(zun.delete(f"/containers/{c['uuid']}", params={"force": "True"}), 403,
              "Policy doesn't allow container:delete_force to be performed.")
    zun_error(other["zun"].get(f"/containers/{c['uuid']}"), 404)
    # An action on another project's container (Error: no Docker here): its own 409, not 404.
    zun_error(admin.post(f"/containers/{c['uuid']}/stop", params={"all_projects": "True"}), 409,
              f"Cannot stop container {c['uuid']} in Error state.")
    (made,) = [a for a in zun.get(f"/containers/{c['uuid']}/container_actions").json()["containerActions"]]
    assert made["action"] == "create" and made["project_id"] == c["project_id"]
    assert admin.delete(f"/containers/{c['uuid']}", params={"all_projects": "True"}).status_code == 204
    zun_error(zun.get(f"/containers/{c['uuid']}"), 404)
    assert _ports(member["neutron"], c["uuid"]) == []


def test_hosts_and_services_are_this_deployments_for_admins(server, member):
    admin = zun_http(server, server.token())
    (host,) = admin.get("/hosts").json()["hosts"]
    assert {"uuid", "hostname", "cpus", "mem_total", "total_containers", "os_type", "architecture",
            "kernel_version", "links"} <= set(host)
    assert admin.get(f"/hosts/{host['uuid']}").json()["hostname"] == host["hostname"]
    zun_error(admin.get("/hosts/no-such-host"), 404)
    (service,) = admin.get("/services").json()["services"]
    assert service["binary"] == "zun-compute" and service["host"] == host["hostname"]
    assert service["state"] == "down"   # no Docker here
    for path, rule in (("/hosts", "host:get_all"), ("/services", "zun-service:get_all")):
        zun_error(member["zun"].get(path), 403, f"Policy doesn't allow {rule} to be performed.")
    zc = zunclient(server)
    assert [h.hostname for h in zc.hosts.list()] == [host["hostname"]]
    assert [s.binary for s in zc.services.list()] == ["zun-compute"]


def test_resources_and_mounts_are_kept_and_cinder_refused(member):
    net, _ = network(member["neutron"], unique("zr"), "10.87.0.0/24")
    zun = member["zun"]
    c = zun.post("/containers", json={"image": "busybox", "nets": [{"network": net["id"]}], "cpu": 0.5,
                                      "memory": "64", "restart_policy": {"Name": "on-failure",
                                                                         "MaximumRetryCount": 3},
                                      "mounts": [{"type": "volume", "size": 1, "destination": "/data"},
                                                 {"type": "bind", "source": "aGk=", "destination": "/etc/x"}]})
    assert c.status_code == 202, c.text
    shown = c.json()
    assert (shown["cpu"], shown["memory"]) == (0.5, "64")
    assert shown["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": "3"}
    zun_error(zun.post("/containers", json={"image": "busybox", "restart_policy": {
        "Name": "always", "MaximumRetryCount": 2}}), 400, "maximum retry count not valid with restart policy of always")
    zun_error(zun.post("/containers", json={"image": "busybox", "mounts": [
        {"type": "volume", "source": "vol-1", "destination": "/data"}]}), 400, contains="Volume vol-1 could not be found")
    _wait(zun, shown["uuid"], {"Error"})
    assert zun.delete(f"/containers/{shown['uuid']}").status_code == 204


def test_zunclient_create_list_show_delete(server, member):
    user, password, project = member["creds"]
    net, _ = network(member["neutron"], unique("zc"), "10.98.0.0/24")
    zc = zunclient(server, user, password, project)
    made = zc.containers.create(name=unique("zc"), image="busybox", command=["sleep", "60"],
                                nets=[{"network": net["name"], "v4-fixed-ip": "10.98.0.9"}])
    assert made.status == "Creating"
    assert made.uuid in [c.uuid for c in zc.containers.list()]
    shown = zc.containers.get(made.uuid)
    assert shown.addresses[net["id"]][0]["addr"] == "10.98.0.9"
    from zunclient import exceptions

    with pytest.raises(exceptions.NotFound):
        zc.containers.get("no-such-container")
    with pytest.raises(exceptions.BadRequest):
        zc.containers.create(image="busybox", nets=[{"network": net["id"], "v4-fixed-ip": "10.1.2.3"}])
    _wait(member["zun"], made.uuid, {"Error"})
    zc.containers.delete(made.uuid)
    assert made.uuid not in [c.uuid for c in zc.containers.list()]
