"""Trunk refusals as Neutron's API tests expect them (issue 29, item 4): the request's
subports are checked before any lookup (neutron-lib's ``validate_subports``: 400s),
a segmentation already on the trunk is a 409, a disabled trunk cannot be deleted."""

from __future__ import annotations

import uuid

import httpx
import pytest
from conftest import neutron_error, unique

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


@pytest.fixture(scope="module")
def ports(member):
    net = member.network.create_network(name=unique("trunk-err"))
    member.network.create_subnet(network_id=net.id, cidr="10.65.0.0/24", ip_version=4)
    return [member.network.create_port(network_id=net.id) for _ in range(4)]


def _trunk(http: httpx.Client, port_id: str, sub_ports: list, **extra: object) -> httpx.Response:
    return http.post("/trunks", json={"trunk": {"port_id": port_id, "sub_ports": sub_ports, **extra}})


def test_subports_checked_before_lookup(member_http: httpx.Client, ports) -> None:
    parent = ports[0].id
    stranger = str(uuid.uuid4())
    r = _trunk(member_http, parent, [{"port_id": stranger, "segmentation_type": "vlan"}])
    message = neutron_error(r, 400, "InvalidInput")
    assert "missing segmentation information" in message
    r = _trunk(member_http, parent, [{"port_id": stranger, "segmentation_id": 3}])
    neutron_error(r, 400, "InvalidInput")
    r = _trunk(member_http, parent, [{"segmentation_type": "vlan", "segmentation_id": 3}])
    neutron_error(r, 400, "InvalidInput", "Invalid input for sub_ports. Reason: A valid port UUID must be specified.")
    # duplicate segmentation in one request: 400 even when the parent is no port at all
    r = _trunk(member_http, stranger, [
        {"port_id": ports[1].id, "segmentation_type": "vlan", "segmentation_id": 2},
        {"port_id": ports[2].id, "segmentation_type": "vlan", "segmentation_id": 2}])
    neutron_error(r, 400, "InvalidInput",
                  f"Invalid input for sub_ports. Reason: Segmentation ID '2' for '{ports[2].id}' is not unique.")


def test_add_subports_errors(member, member_http: httpx.Client, ports) -> None:
    trunk = member.network.create_trunk(port_id=ports[0].id, sub_ports=[
        {"port_id": ports[1].id, "segmentation_type": "vlan", "segmentation_id": 2}])
    add = f"/trunks/{trunk.id}/add_subports"
    r = member_http.put(add, json={"sub_ports": [{"port_id": ports[2].id, "segmentation_type": "vlan"}]})
    neutron_error(r, 400, "InvalidInput")
    r = member_http.put(add, json={"sub_ports": [
        {"port_id": ports[2].id, "segmentation_type": "vlan", "segmentation_id": 2}]})
    neutron_error(r, 409, "DuplicateSubPort")
    member.network.update_trunk(trunk, admin_state_up=False)
    neutron_error(member_http.delete(f"/trunks/{trunk.id}"), 409, "TrunkDisabled",
                  f"Trunk {trunk.id} is currently disabled.")
    r = member_http.put(f"/trunks/{trunk.id}/remove_subports", json={"sub_ports": [{"port_id": ports[1].id}]})
    neutron_error(r, 409, "TrunkDisabled")
    member.network.update_trunk(trunk, admin_state_up=True)
    member.network.delete_trunk(trunk)
