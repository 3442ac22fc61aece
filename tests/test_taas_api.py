"""Tap-as-a-Service (port mirroring) through the real ``openstack`` CLI and raw HTTP
(issue 13, item 1): the ``taas`` extension, tap services and tap flows with TaaS's
fields, directions, project scoping and Neutron's error bodies. Packets are in
``tests/dataplane/test_dp_taas.py``."""

from __future__ import annotations

import httpx
import pytest
from conftest import Server, neutron_error, unique
from oschelp import osc_as, osc_json

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

BAD_ID = "0b5e7f6e-7a5c-4d8e-9d4f-3c2b1a000000"


@pytest.fixture(scope="module")
def net(admin_http: httpx.Client) -> str:
    r = admin_http.post("/networks", json={"network": {"name": unique("taas")}})
    nid = r.json()["network"]["id"]
    admin_http.post("/subnets", json={"subnet": {"network_id": nid, "cidr": "10.77.0.0/24", "ip_version": 4}})
    return nid


def _port(http: httpx.Client, net: str) -> str:
    r = http.post("/ports", json={"port": {"network_id": net, "name": unique("p")}})
    assert r.status_code == 201, r.text
    return r.json()["port"]["id"]


def test_extension_and_resources_advertised(admin_http: httpx.Client) -> None:
    ext = admin_http.get("/extensions/taas").json()["extension"]
    assert ext["alias"] == "taas" and ext["name"] == "Neutron Tap as a Service"
    hrefs = {r["collection"]: r["links"][0]["href"] for r in admin_http.get("").json()["resources"]}
    assert hrefs["tap_services"].endswith("/v2.0/taas/tap_services")
    assert hrefs["tap_flows"].endswith("/v2.0/taas/tap_flows")


@pytest.mark.slow
def test_openstack_cli_lifecycle(server: Server, admin_http: httpx.Client, net: str) -> None:
    dst, src = _port(admin_http, net), _port(admin_http, net)
    name = unique("ts")
    ts = osc_json(server, "tap", "service", "create", "--name", name, "--port", dst)
    assert ts["port_id"] == dst and ts["status"] == "DOWN"
    flow = osc_json(server, "tap", "flow", "create", "--name", unique("tf"), "--port", src,
                    "--tap-service", name, "--direction", "BOTH")
    assert flow["source_port"] == src and flow["tap_service_id"] == ts["id"] and flow["direction"] == "BOTH"
    assert any(f["ID"] == flow["id"] for f in osc_json(server, "tap", "flow", "list"))
    assert any(s["ID"] == ts["id"] for s in osc_json(server, "tap", "service", "list"))
    assert osc_json(server, "tap", "service", "show", name)["id"] == ts["id"]
    r = osc_as(server, "tap", "flow", "update", flow["id"], "--description", "mirror")
    assert r.returncode == 0, r.stderr
    assert osc_json(server, "tap", "flow", "show", flow["id"])["description"] == "mirror"
    assert osc_as(server, "tap", "flow", "delete", flow["id"]).returncode == 0
    assert admin_http.get(f"/taas/tap_flows/{flow['id']}").status_code == 404
    assert osc_as(server, "tap", "service", "delete", ts["id"]).returncode == 0
    neutron_error(admin_http.get(f"/taas/tap_services/{ts['id']}"), 404, "TapServiceNotFound",
                  f"Tap Service  {ts['id']} does not exist")


def test_bad_input_is_refused_as_neutron_does(admin_http: httpx.Client, net: str) -> None:
    dst, src = _port(admin_http, net), _port(admin_http, net)
    neutron_error(admin_http.post("/taas/tap_services", json={"tap_service": {"name": "x"}}), 400,
                  "HTTPBadRequest", "Failed to parse request. Required attribute 'port_id' not specified")
    neutron_error(admin_http.post("/taas/tap_services", json={"tap_service": {"port_id": "nope"}}), 400,
                  "HTTPBadRequest", "Invalid input for port_id. Reason: 'nope' is not a valid UUID.")
    neutron_error(admin_http.post("/taas/tap_services", json={"tap_service": {"port_id": BAD_ID}}), 404,
                  "PortNotFound", f"Port {BAD_ID} could not be found.")
    ts = admin_http.post("/taas/tap_services", json={"tap_service": {"port_id": dst}}).json()["tap_service"]
    flow = {"tap_service_id": ts["id"], "source_port": src}
    neutron_error(admin_http.post("/taas/tap_flows", json={"tap_flow": flow}), 400, "HTTPBadRequest",
                  "Failed to parse request. Required attribute 'direction' not specified")
    neutron_error(admin_http.post("/taas/tap_flows", json={"tap_flow": {**flow, "direction": "UP"}}), 400,
                  "HTTPBadRequest", "Invalid input for direction. Reason: 'UP' is not in ['IN', 'OUT', 'BOTH'].")
    neutron_error(admin_http.post("/taas/tap_flows", json={"tap_flow": {**flow, "direction": "IN",
                                                                        "tap_service_id": BAD_ID}}),
                  404, "TapServiceNotFound")
    neutron_error(admin_http.post("/taas/tap_flows", json={"tap_flow": {**flow, "direction": "IN",
                                                                        "source_port": dst}}), 400, "HTTPBadRequest")
    neutron_error(admin_http.post("/taas/tap_flows", json={"tap_flow": {**flow, "direction": "IN",
                                                                        "status": "ACTIVE"}}), 400, "HTTPBadRequest")
    # the port's deletion takes the tap service and its flows along
    made = admin_http.post("/taas/tap_flows", json={"tap_flow": {**flow, "direction": "OUT"}})
    assert made.status_code == 201, made.text
    assert admin_http.delete(f"/ports/{dst}").status_code == 204
    assert admin_http.get(f"/taas/tap_services/{ts['id']}").status_code == 404
    assert admin_http.get(f"/taas/tap_flows/{made.json()['tap_flow']['id']}").status_code == 404


def test_another_projects_port_is_not_found(server: Server, admin_http: httpx.Client, net: str) -> None:
    user, password, project = server.make_user()
    mine = server.http(server.token(user, password, project))
    r = mine.post("/networks", json={"network": {"name": unique("own")}})
    own_net = r.json()["network"]["id"]
    mine.post("/subnets", json={"subnet": {"network_id": own_net, "cidr": "10.78.0.0/24", "ip_version": 4}})
    own_port = _port(mine, own_net)
    foreign = _port(admin_http, net)   # the admin project's
    neutron_error(mine.post("/taas/tap_services", json={"tap_service": {"port_id": foreign}}), 404,
                  "PortNotFound", f"Port {foreign} could not be found.")
    ts = mine.post("/taas/tap_services", json={"tap_service": {"port_id": own_port}})
    assert ts.status_code == 201, ts.text
    ts_id = ts.json()["tap_service"]["id"]
    neutron_error(mine.post("/taas/tap_flows", json={"tap_flow": {
        "tap_service_id": ts_id, "source_port": foreign, "direction": "BOTH"}}), 404, "PortNotFound")
    # the CLI looks the port up first and finds none
    r = osc_as(server, "tap", "flow", "create", "--port", foreign, "--tap-service", ts_id, "--direction", "BOTH",
             user=user, password=password, project=project)
    assert r.returncode != 0 and f"No Port found for {foreign}" in r.stderr, r.stderr
    # and another project's tap service neither shows nor takes flows
    theirs = admin_http.post("/taas/tap_services", json={"tap_service": {"port_id": _port(admin_http, net)}})
    their_id = theirs.json()["tap_service"]["id"]
    neutron_error(mine.get(f"/taas/tap_services/{their_id}"), 404, "TapServiceNotFound")
    neutron_error(mine.post("/taas/tap_flows", json={"tap_flow": {
        "tap_service_id": their_id, "source_port": own_port, "direction": "IN"}}), 404, "TapServiceNotFound")
    assert all(s["id"] != their_id for s in mine.get("/taas/tap_services").json()["tap_services"])


def test_admin_for_another_project_must_use_its_ports(server: Server, admin_http: httpx.Client, net: str) -> None:
    mine = _port(admin_http, net)
    other = server.connect(*server.make_user())
    other_project = other.current_project_id
    neutron_error(admin_http.post("/taas/tap_services", json={"tap_service": {
        "port_id": mine, "project_id": other_project}}), 403, "PortDoesNotBelongToTenant",
        "The specified port does not belong to the tenant")
    ts = admin_http.post("/taas/tap_services", json={"tap_service": {"port_id": mine}}).json()["tap_service"]
    neutron_error(admin_http.post("/taas/tap_flows", json={"tap_flow": {
        "tap_service_id": ts["id"], "source_port": _port(admin_http, net), "direction": "IN",
        "project_id": other_project}}), 403, "TapServiceNotBelongToTenant",
        "Specified Tap Service does not belong to the tenant")
