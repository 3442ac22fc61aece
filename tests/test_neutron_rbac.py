"""Neutron's RBAC as its API tests see it (issue 29, item 4): networks made external for
one project or for all (``access_as_external``), ``router:external`` following the
policies, sharing seen only by the policy's target, and ``is_default`` — through
openstacksdk, asserting Neutron's status codes and bodies."""

from __future__ import annotations

import httpx
import openstack.exceptions
import pytest
from conftest import Server, neutron_error, unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)

EXTERNAL = "access_as_external"
SHARED = "access_as_shared"


@pytest.fixture(scope="module", autouse=True)
def admin_policies_unlimited(admin) -> None:
    """The admin writes more policies here than Neutron's default quota of 10 allows."""
    admin.network.update_quota(admin.current_project_id, rbac_policies=-1)


@pytest.fixture(scope="module")
def other(server: Server):
    """A member of a second fresh project."""
    user, password, project = server.make_user()
    return server.connect(user, password, project)


@pytest.fixture(scope="module")
def other_http(server: Server, other) -> httpx.Client:
    return server.http(other.auth_token)


def _policies(admin, net_id: str, action: str = EXTERNAL, target: str = "*") -> list:
    return list(admin.network.rbac_policies(object_id=net_id, action=action, target_project_id=target))


def _admin_net(admin, *, external: bool, cidr: str | None = None):
    net = admin.network.create_network(name=unique("ext"), is_router_external=external)
    if cidr:
        admin.network.create_subnet(network_id=net.id, cidr=cidr, ip_version=4, is_dhcp_enabled=False)
    return net


def test_external_flag_makes_and_clears_the_wildcard_policy(admin) -> None:
    net = _admin_net(admin, external=True)
    [policy] = _policies(admin, net.id)
    assert (policy.project_id, policy.target_project_id) == (net.project_id, "*")
    admin.network.update_network(net, is_router_external=False)
    assert _policies(admin, net.id) == []
    net2 = _admin_net(admin, external=False)
    assert _policies(admin, net2.id) == []
    admin.network.update_network(net2, is_router_external=True)
    assert len(_policies(admin, net2.id)) == 1


def test_policies_convert_the_network(admin, other) -> None:
    net = _admin_net(admin, external=False)
    policy = admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=EXTERNAL,
                                              target_project_id=other.current_project_id)
    assert admin.network.get_network(net.id).is_router_external is True
    mine = admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=EXTERNAL,
                                            target_project_id=admin.current_project_id)
    admin.network.delete_rbac_policy(policy)
    assert admin.network.get_network(net.id).is_router_external is True   # one left
    admin.network.delete_rbac_policy(mine)
    assert admin.network.get_network(net.id).is_router_external is False  # the last one gone
    # a sharing policy's deletion leaves an external network external
    ext = _admin_net(admin, external=True)
    shared = admin.network.create_rbac_policy(object_type="network", object_id=ext.id, action=SHARED,
                                              target_project_id="*")
    admin.network.delete_rbac_policy(shared)
    assert admin.network.get_network(ext.id).is_router_external is True


def test_a_project_uses_a_network_external_for_it_only(admin, other, server: Server) -> None:
    third = server.connect(*server.make_user())
    net = _admin_net(admin, external=False, cidr="10.61.0.0/24")
    admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=EXTERNAL,
                                     target_project_id=admin.current_project_id)
    # external, but not for `other`: not found, as Neutron answers
    with pytest.raises(openstack.exceptions.NotFoundException):
        other.network.create_ip(floating_network_id=net.id)
    assert net.id not in {n.id for n in other.network.networks()}
    admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=EXTERNAL,
                                     target_project_id=other.current_project_id)
    seen = other.network.get_network(net.id)
    assert seen.is_router_external is True and seen.is_shared is False
    fip = other.network.create_ip(floating_network_id=net.id)
    assert fip.floating_ip_address.startswith("10.61.0.")
    router = other.network.create_router(name=unique("r"), external_gateway_info={"network_id": net.id})
    assert router.external_gateway_info["network_id"] == net.id
    with pytest.raises(openstack.exceptions.NotFoundException):
        third.network.create_router(name=unique("r"), external_gateway_info={"network_id": net.id})
    other.network.delete_router(router)
    other.network.delete_ip(fip)


def test_policies_in_use_by_a_gateway(admin, other) -> None:
    net = _admin_net(admin, external=False, cidr="10.62.0.0/24")
    wildcard = admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=EXTERNAL,
                                                target_project_id="*")
    router = other.network.create_router(name=unique("r"), external_gateway_info={"network_id": net.id})
    with pytest.raises(openstack.exceptions.ConflictException):
        admin.network.delete_rbac_policy(wildcard)
    project = admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=EXTERNAL,
                                               target_project_id=other.current_project_id)
    admin.network.delete_rbac_policy(wildcard)       # the project keeps its own
    with pytest.raises(openstack.exceptions.ConflictException):
        admin.network.delete_rbac_policy(project)
    wildcard = admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=EXTERNAL,
                                                target_project_id="*")
    admin.network.delete_rbac_policy(project)
    admin.network.delete_router(router)
    admin.network.delete_rbac_policy(wildcard)
    with pytest.raises(openstack.exceptions.NotFoundException):
        other.network.create_router(name=unique("r"), external_gateway_info={"network_id": net.id})


def test_wildcard_retargeted_to_the_one_project_using_it(admin, other) -> None:
    net = _admin_net(admin, external=True, cidr="10.63.0.0/24")
    [wildcard] = _policies(admin, net.id)
    router = other.network.create_router(name=unique("r"), external_gateway_info={"network_id": net.id})
    moved = admin.network.update_rbac_policy(wildcard, target_project_id=other.current_project_id)
    assert moved.target_project_id == other.current_project_id
    admin.network.delete_router(router)


def test_members_share_their_own_networks_only(member, other, member_http: httpx.Client,
                                               other_http: httpx.Client, admin) -> None:
    net = member.network.create_network(name=unique("mine"))
    body = {"object_type": "network", "object_id": net.id, "action": EXTERNAL}
    neutron_error(member_http.post("/rbac-policies", json={"rbac_policy": {**body, "target_tenant": "*"}}),
                  403, "PolicyNotAuthorized")
    member.network.create_rbac_policy(object_type="network", object_id=net.id, action=EXTERNAL,
                                      target_project_id=other.current_project_id)
    assert net.id in {n.id for n in other.network.networks()}
    # a network shared with `other` by the admin: `other` sees it but may not share it on
    admin_net = admin.network.create_network(name=unique("adm"))
    admin.network.create_rbac_policy(object_type="network", object_id=admin_net.id, action=SHARED,
                                     target_project_id=other.current_project_id)
    r = other_http.post("/rbac-policies", json={"rbac_policy": {
        "object_type": "network", "object_id": admin_net.id, "action": SHARED,
        "target_tenant": other.current_project_id}})
    neutron_error(r, 400, "InvalidInput",
                  "Invalid input for operation: Only admins can manipulate policies on objects they do not own.")


def test_sharing_is_seen_by_the_target_only(admin, member, other, admin_http: httpx.Client) -> None:
    net = admin.network.create_network(name=unique("shared"))
    subnet = admin.network.create_subnet(network_id=net.id, cidr="10.64.0.0/24", ip_version=4)
    admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=SHARED,
                                     target_project_id=member.current_project_id)
    assert member.network.get_subnet(subnet.id).id == subnet.id
    with pytest.raises(openstack.exceptions.NotFoundException):
        other.network.get_subnet(subnet.id)
    with pytest.raises(openstack.exceptions.NotFoundException):
        other.network.get_network(net.id)
    # a wildcard policy is a change of the network, and makes it shared for every listing
    revision = member.network.get_network(net.id).revision_number
    wildcard = admin.network.create_rbac_policy(object_type="network", object_id=net.id, action=SHARED,
                                                target_project_id="*")
    assert member.network.get_network(net.id).revision_number > revision
    assert net.id in {n.id for n in admin.network.networks(is_shared=True)}
    assert net.id not in {n.id for n in admin.network.networks(is_shared=False)}
    for shared in (True, False):  # openstacksdk does not filter subnets by `shared`
        listed = admin_http.get("/subnets", params={"shared": str(shared)}).json()["subnets"]
        assert (subnet.id in {s["id"] for s in listed}) is shared
    admin.network.delete_rbac_policy(wildcard)
    assert admin.network.get_network(net.id).is_shared is False


def test_one_default_external_network(admin, admin_http: httpx.Client, member_http: httpx.Client) -> None:
    net = _admin_net(admin, external=True)
    assert admin.network.get_network(net.id).is_default is False
    admin.network.update_network(net, is_default=True)
    assert admin.network.get_network(net.id).is_default is True
    admin.network.update_network(net, name="renamed")             # a change without is_default keeps it
    assert admin.network.get_network(net.id).is_default is True
    [wildcard] = _policies(admin, net.id)
    neutron_error(admin_http.delete(f"/rbac-policies/{wildcard.id}"), 409, "RbacPolicyInUse")
    second = _admin_net(admin, external=True)
    r = admin_http.put(f"/networks/{second.id}", json={"network": {"is_default": True}})
    neutron_error(r, 409, "DefaultExternalNetworkExists", f"A default external network already exists: {net.id}.")
    assert [n.id for n in admin.network.networks(is_default=True)] == [net.id]
    r = member_http.put(f"/networks/{second.id}", json={"network": {"is_default": True}})
    assert r.status_code in (403, 404)
    admin.network.update_network(net, is_default=False)
    admin.network.update_network(second, is_default=True)
    admin.network.update_network(second, is_default=False)


def test_security_group_shared_with_one_project(admin, member, other, member_http: httpx.Client,
                                                other_http: httpx.Client) -> None:
    group = admin.network.create_security_group(name=unique("sg"))
    with pytest.raises(openstack.exceptions.NotFoundException):
        member.network.get_security_group(group.id)
    policy = admin.network.create_rbac_policy(object_type="security_group", object_id=group.id, action=SHARED,
                                              target_project_id=member.current_project_id)
    assert member.network.get_security_group(group.id).id == group.id
    assert policy.id not in {p.id for p in other.network.rbac_policies()}
    with pytest.raises(openstack.exceptions.NotFoundException):
        other.network.get_security_group(group.id)
    # the target uses it on its port, which keeps the policy from going
    net = member.network.create_network(name=unique("sgnet"))
    member.network.create_subnet(network_id=net.id, cidr="10.71.0.0/24", ip_version=4)
    port = member.network.create_port(network_id=net.id, security_group_ids=[group.id])
    assert port.security_group_ids == [group.id]
    with pytest.raises(openstack.exceptions.ConflictException):
        admin.network.delete_rbac_policy(policy)
    # the target may not share it on (400), nor grant an action groups lack
    r = member_http.post("/rbac-policies", json={"rbac_policy": {
        "object_type": "security_group", "object_id": group.id, "action": SHARED,
        "target_tenant": other.current_project_id}})
    neutron_error(r, 400, "InvalidInput")
    mine = other.network.create_security_group(name=unique("sg"))
    r = other_http.post("/rbac-policies", json={"rbac_policy": {
        "object_type": "security_group", "object_id": mine.id, "action": EXTERNAL,
        "target_tenant": member.current_project_id}})
    neutron_error(r, 400, "InvalidActionForType")
    member.network.delete_port(port)
    admin.network.delete_rbac_policy(policy)
    with pytest.raises(openstack.exceptions.NotFoundException):
        member.network.get_security_group(group.id)


def test_subnetpool_shared_with_one_project(admin, member, other) -> None:
    pool = admin.network.create_subnet_pool(name=unique("pool"), prefixes=["10.220.0.0/16"], default_prefixlen=24)
    assert pool.id not in {p.id for p in member.network.subnet_pools()}
    policy = admin.network.create_rbac_policy(object_type="subnetpool", object_id=pool.id, action=SHARED,
                                              target_project_id=member.current_project_id)
    assert pool.id in {p.id for p in member.network.subnet_pools()}
    assert pool.id not in {p.id for p in other.network.subnet_pools()}
    net = member.network.create_network(name=unique("poolnet"))
    subnet = member.network.create_subnet(network_id=net.id, subnetpool_id=pool.id, ip_version=4)
    assert subnet.cidr.startswith("10.220.")
    with pytest.raises(openstack.exceptions.ConflictException):
        admin.network.delete_rbac_policy(policy)
    member.network.delete_subnet(subnet)
    admin.network.delete_rbac_policy(policy)
    with pytest.raises(openstack.exceptions.NotFoundException):
        member.network.get_subnet_pool(pool.id)
