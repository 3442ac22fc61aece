"""On a real cloud, netbay acts in its caller's project: two projects of the cloud's
own Keystone, each with a member, and netbay's clouds.yaml credentials (the cloud's
admin, as a service account) acting for one of them.

- The seam (:meth:`OpenStackBackend.for_project`) makes every kind of network object
  in project A, as the cloud's own ``openstack … list --project A`` shows; it lists
  what A's member lists with A's own token in the real Neutron; project B sees none
  of A's objects (404, as the real Neutron answers B's token) and cannot use them.
- A cluster asked for with A's token through netbay's Magnum API is built in A (every
  tagged object's project is A, none lands in the clouds.yaml project), B's token gets
  404 on it, and its delete leaves nothing; a template or build naming a network finds
  the one A sees, though B has one of the same name.
- Zun's API with each member's token puts A's container port in A and tells B that
  A's network is not found; Octavia's side of the seam makes A's load balancer in A
  and refuses B with Octavia's 403.

Neutron runs API-only (no agents), so these assert API effects, never packets.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from coehelp import ci_client, make_template, wait_status
from conftest import unique
from openstack import exceptions as sdk_errors

from netbay.backends.openstack import OpenStackBackend
from netbay.errors import BadRequest, Forbidden, NotFound
from tests.backendfix import PUBLIC, netbay_on_cloud, openstack
from tests.peers.openstack_cloud import Cloud

pytestmark = pytest.mark.peers

BUILD_TIMEOUT = 300
PASSWORD = "scope-member-secret"
SWEPT = ("network", "subnet", "port", "router", "floatingip", "security_group", "security_group_rule")
# What each member lists, as the real Neutron answers a project's own token.
SDK_LISTS = {"network": "networks", "subnet": "subnets", "port": "ports", "router": "routers",
             "floatingip": "ips", "security_group": "security_groups", "security_group_rule": "security_group_rules"}
CLI = {"network": "network", "subnet": "subnet", "port": "port", "router": "router", "floatingip": "floating ip",
       "security_group": "security group"}


@dataclass
class Project:
    id: str
    name: str
    conn: object    # openstacksdk, as the project's member (its own Keystone token)


@pytest.fixture(scope="module")
def admin(cloud: Cloud) -> Iterator:
    conn = cloud.connection()
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def projects(cloud: Cloud, admin) -> Iterator[tuple[Project, Project]]:
    """Two fresh projects in the cloud's Keystone, each with a user holding ``member`` on it."""
    ident = admin.identity
    member = ident.find_role("member")
    made, out = [], []
    with contextlib.ExitStack() as stack:
        for _ in range(2):
            name = unique("scope")
            project = ident.create_project(name=name, domain_id="default")
            user = ident.create_user(name=name, password=PASSWORD, domain_id="default", default_project_id=project.id)
            made.append((project, user))
            ident.assign_project_role_to_user(project, user, member)
            conn = cloud.connection(project=name, user=name, password=PASSWORD)
            stack.callback(conn.close)
            out.append(Project(project.id, name, conn))
        try:
            yield out[0], out[1]
        finally:
            for project, user in made:   # the default group Neutron made on the project's first call
                for group in admin.network.security_groups(project_id=project.id):
                    admin.network.delete_security_group(group)
                ident.delete_user(user)
                ident.delete_project(project)


@pytest.fixture(scope="module")
def seam(admin):
    """The ``openstack`` backend on the clouds.yaml credentials (the cloud's admin)."""
    return OpenStackBackend(connection=admin)


def cli_ids(env: dict[str, str], member: str, project: str, *args: str) -> set[str]:
    """The ids the cloud's own ``openstack <member> list --project P`` shows."""
    rows = json.loads(openstack(env, *CLI[member].split(), "list", "--project", project, *args, "-f", "json",
                                "-c", "ID"))
    return {row["ID"] for row in rows}


def real_ids(project: Project, member: str) -> set[str]:
    """What the project's member lists in the real Neutron with its own token."""
    return {o.id for o in getattr(project.conn.network, SDK_LISTS[member])()}


def test_the_seam_makes_in_its_project_lists_as_its_member_and_hides_it_from_another(
        seam, projects, admin, cloud_env: dict[str, str]) -> None:
    a_project, b_project = projects
    a, b = seam.for_project(a_project.id), seam.for_project(b_project.id)
    public = admin.network.find_network(PUBLIC).id
    for project in projects:   # each project's default group, which Neutron makes on its first read
        real_ids(project, "security_group")
    made: dict[str, dict] = {}
    try:
        made["network"] = a.create("network", {"name": unique("scoped")})
        made["subnet"] = a.create("subnet", {"network_id": made["network"]["id"], "cidr": "10.91.0.0/24",
                                             "ip_version": 4})
        made["security_group"] = a.create("security_group", {"name": unique("sg")})
        made["security_group_rule"] = a.create("security_group_rule", {
            "security_group_id": made["security_group"]["id"], "direction": "ingress", "ethertype": "IPv4",
            "protocol": "tcp", "port_range_min": 22, "port_range_max": 22})
        made["port"] = a.create("port", {"network_id": made["network"]["id"],
                                         "security_groups": [made["security_group"]["id"]]})
        made["router"] = a.create("router", {"name": unique("r"), "external_gateway_info": {"network_id": public}})
        a.add_router_interface(made["router"]["id"], subnet_id=made["subnet"]["id"])
        made["floatingip"] = a.create("floatingip", {"floating_network_id": public,
                                                     "port_id": made["port"]["id"]})

        # In project A, as the cloud's own CLI (the admin's clouds.yaml) lists that project.
        assert {m: o["project_id"] for m, o in made.items()} == {m: a_project.id for m in made}
        for member in CLI:
            assert made[member]["id"] in cli_ids(cloud_env, member, a_project.id), member
            assert made[member]["id"] not in cli_ids(cloud_env, member, admin.current_project_id), member
        # The seam lists for A exactly what A's member lists with its own token, and for B what B's does.
        for member in SWEPT:
            assert {o["id"] for o in a.list(member)} == real_ids(a_project, member), member
            assert {o["id"] for o in b.list(member)} == real_ids(b_project, member), member
        assert PUBLIC in {n["name"] for n in b.list("network")}     # external: every project sees it

        # B: A's objects are not found, through the seam as through the real Neutron with B's token.
        for member, obj in made.items():
            with pytest.raises(NotFound):
                b.show(member, obj["id"])
            with pytest.raises(NotFound):
                b.delete(member, obj["id"])
            with pytest.raises(NotFound):
                b.update(member, obj["id"], {"description": "stolen"})
        with pytest.raises(sdk_errors.NotFoundException):
            b_project.conn.network.get_network(made["network"]["id"])
        with pytest.raises(sdk_errors.NotFoundException):
            b_project.conn.network.get_port(made["port"]["id"])
        with pytest.raises(NotFound):
            b.create("port", {"network_id": made["network"]["id"]})
        with pytest.raises(NotFound):
            b.add_router_interface(made["router"]["id"], subnet_id=made["subnet"]["id"])
        with pytest.raises(BadRequest):
            b.create("network", {"name": unique("other"), "project_id": a_project.id})
        with pytest.raises(Forbidden):   # seen (external) but not B's: no port on it, as Neutron says
            b.create("port", {"network_id": public})
        with pytest.raises(Forbidden):
            b.update("network", public, {"name": "taken"})
        assert a.show("network", made["network"]["id"])["id"] == made["network"]["id"]
    finally:
        _undo(a, made)
    for member in SWEPT:   # nothing left in A but the default group Neutron made (and its rules)
        left = [o for o in a.list(member) if o["project_id"] == a_project.id]
        assert all(o.get("name") == "default" or member == "security_group_rule" for o in left), (member, left)
    assert not {o["security_group_id"] for o in a.list("security_group_rule")} - \
        {g["id"] for g in a.list("security_group")}


def _undo(a, made: dict[str, dict]) -> None:
    for member in ("floatingip", "router", "port", "security_group", "network"):
        if member not in made:
            continue
        if member == "router" and "subnet" in made:
            with contextlib.suppress(NotFound):
                a.remove_router_interface(made["router"]["id"], subnet_id=made["subnet"]["id"])
        a.delete(member, made[member]["id"])


TEMPLATE = {"coe": "kubernetes", "network_driver": "flannel", "external_network_id": PUBLIC,
            "floating_ip_enabled": True, "master_lb_enabled": False, "labels": {"flannel_backend": "vxlan"}}


@pytest.fixture(scope="module")
def server(cloud_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """``netbay up --backend openstack``: the clouds.yaml credentials are the cloud's admin."""
    with netbay_on_cloud(cloud_env, tmp_path_factory.mktemp("scope")) as srv:
        yield srv


def _build(ci, template: dict) -> str:
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": template["uuid"], "node_count": 1})
    assert r.status_code == 202, r.text
    cluster = wait_status(ci, r.json()["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"), BUILD_TIMEOUT)
    assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
    return cluster["uuid"]


def _delete(ci, cid: str, template: dict) -> None:
    assert ci.delete(f"/clusters/{cid}").status_code == 204
    assert wait_status(ci, cid, ("GONE", "DELETE_FAILED"), BUILD_TIMEOUT)["status"] == "GONE"
    assert ci.delete(f"/clustertemplates/{template['uuid']}").status_code == 204


def test_a_cluster_asked_for_by_project_a_is_built_in_project_a(
        server, projects, admin, cloud_env: dict[str, str]) -> None:
    a_project, b_project = projects
    net = admin.network
    before_a = {m: cli_ids(cloud_env, m, a_project.id) for m in CLI}
    ci_a = ci_client(server, a_project.conn.auth_token)
    ci_b = ci_client(server, b_project.conn.auth_token)
    template = make_template(ci_a, **{**TEMPLATE, "name": unique("scope")})
    cid = _build(ci_a, template)
    assert ci_a.get(f"/clusters/{cid}").json()["project_id"] == a_project.id

    tag = f"netbay-cluster={cid}"
    made = {"network": list(net.networks(tags=tag)), "subnet": list(net.subnets(tags=tag)),
            "router": list(net.routers(tags=tag)), "port": list(net.ports(tags=tag)),
            "floatingip": list(net.ips(tags=tag)), "security_group": list(net.security_groups(tags=tag))}
    assert [len(made[m]) for m in ("network", "subnet", "router", "floatingip")] == [1, 1, 1, 2]
    assert len(made["security_group"]) >= 3 and len(made["port"]) >= 2
    assert {o.project_id for objs in made.values() for o in objs} == {a_project.id}
    assert {o.id for o in made["network"]} <= cli_ids(cloud_env, "network", a_project.id, "--tags", tag)
    assert not cli_ids(cloud_env, "network", admin.current_project_id, "--tags", tag)
    # A's member sees its cluster's network in the real Neutron; B's gets 404 there and in netbay.
    assert a_project.conn.network.get_network(made["network"][0].id).id == made["network"][0].id
    with pytest.raises(sdk_errors.NotFoundException):
        b_project.conn.network.get_network(made["network"][0].id)
    assert ci_b.get(f"/clusters/{cid}").status_code == 404
    assert ci_b.delete(f"/clusters/{cid}").status_code == 404

    _delete(ci_a, cid, template)
    assert not list(net.networks(tags=tag)) and not list(net.ports(tags=tag))
    assert not list(net.security_groups(tags=tag)) and not list(net.ips(tags=tag))
    after_a = {m: cli_ids(cloud_env, m, a_project.id) for m in CLI}
    # Only the default group (made on A's first call, with its rules) may be new in A.
    assert {m: ids for m, ids in after_a.items() if m != "security_group"} == \
        {m: ids for m, ids in before_a.items() if m != "security_group"}
    assert {g.name for g in net.security_groups(project_id=a_project.id)} <= {"default"}


def test_the_conductor_looks_names_up_as_the_clusters_project_sees_them(
        server, projects, admin) -> None:
    """Network names collide across projects: A's template names its own network and subnet
    ``N``, B has a network and subnet ``N`` too (and one only B has). A's template cannot
    name B's; A's cluster is built on A's ``N`` — looked up as A sees the cloud, where the
    clouds.yaml admin would see two."""
    a_project, b_project = projects
    name, only_b = unique("shared-name"), unique("only-b")
    made = []
    for project, cidr in ((a_project, "10.93.0.0/24"), (b_project, "10.94.0.0/24")):
        network = project.conn.network.create_network(name=name)
        made.append((project, network))
        project.conn.network.create_subnet(network_id=network.id, cidr=cidr, ip_version=4, name=name + "-sub")
    made.append((b_project, b_project.conn.network.create_network(name=only_b)))
    try:
        ci_a = ci_client(server, a_project.conn.auth_token)
        r = ci_a.post("/clustertemplates", json={**TEMPLATE, "name": unique("t"), "fixed_network": only_b})
        assert r.status_code == 400 and f"Unable to find fixed network {only_b}." in r.text, r.text
        template = make_template(ci_a, **{**TEMPLATE, "name": unique("scope"), "floating_ip_enabled": False,
                                          "fixed_network": name, "fixed_subnet": name + "-sub"})
        cid = _build(ci_a, template)
        nodes = [p for p in admin.network.ports(tags=f"netbay-cluster={cid}") if p.device_owner == "compute:netbay"]
        assert len(nodes) == 2
        assert {(p.network_id, p.project_id) for p in nodes} == {(made[0][1].id, a_project.id)}
        _delete(ci_a, cid, template)
    finally:
        for project, network in made:
            project.conn.network.delete_network(network)


def test_a_container_of_project_a_has_its_port_in_a_and_b_cannot_use_as_network(
        server, projects, admin, cloud: Cloud) -> None:
    """Zun's API with each member's own token: A's container port and ``zun-<uuid>`` group
    are made in A; B naming A's network is told it is not found, as Zun says it."""
    from zunclient import exceptions as zun_errors

    from zunhelp import settled_container, zunclient_at

    a_project, b_project = projects
    zun_a, zun_b = (zunclient_at(server, cloud.auth(project=p.name, user=p.name, password=PASSWORD))
                    for p in projects)
    network = a_project.conn.network.create_network(name=unique("zun-a"))
    try:
        a_project.conn.network.create_subnet(network_id=network.id, cidr="10.95.0.0/24", ip_version=4)
        made = zun_a.containers.create(name=unique("zc"), image="busybox", nets=[{"network": network.id}],
                                       exposed_ports={"8080/tcp": {}})
        settled_container(zun_a, made.uuid)
        (port,) = admin.network.ports(device_id=made.uuid)
        (group,) = admin.network.security_groups(name=f"zun-{made.uuid}")
        assert (port.project_id, group.project_id) == (a_project.id, a_project.id)
        with pytest.raises(zun_errors.NotFound) as refused:
            zun_b.containers.create(name=unique("zc"), image="busybox", nets=[{"network": network.id}])
        assert f"Neutron network {network.id} could not be found" in str(refused.value)
        zun_a.containers.delete(made.uuid)
        assert not list(admin.network.ports(device_id=made.uuid))
        assert not list(admin.network.security_groups(name=f"zun-{made.uuid}"))
    finally:
        a_project.conn.network.delete_network(network)


def test_the_load_balancer_seam_makes_in_its_project_and_refuses_another(
        octavia, cloud: Cloud, seam, projects) -> None:
    """Octavia's side of the seam: A's load balancer (on A's subnet) is A's; B is refused it
    with Octavia's 403, lists none of it, and cannot put a listener under it."""
    from netbay.backends.lbcloud import CloudLoadBalancers
    from netbay.backends.loadbalancers import settled
    from lbhelp import gone

    a_project, b_project = projects
    conn = cloud.connection()   # made after Octavia joined the catalog
    try:
        lbs = CloudLoadBalancers(connection=conn)
        a, b = lbs.for_project(a_project.id), lbs.for_project(b_project.id)
        net_a = OpenStackBackend(connection=conn).for_project(a_project.id)
        network = net_a.create("network", {"name": unique("lb-a")})
        try:
            subnet = net_a.create("subnet", {"network_id": network["id"], "cidr": "10.97.0.0/24", "ip_version": 4})
            lb = a.create("loadbalancer", {"name": unique("lb"), "vip_subnet_id": subnet["id"]})
            assert settled(a, lb["id"], 60)["project_id"] == a_project.id
            assert conn.load_balancer.get_load_balancer(lb["id"]).project_id == a_project.id
            assert lb["id"] in {x["id"] for x in a.list("loadbalancer")}
            assert lb["id"] not in {x["id"] for x in b.list("loadbalancer")}
            for call in (lambda: b.show("loadbalancer", lb["id"]),
                         lambda: b.update("loadbalancer", lb["id"], {"description": "stolen"}),
                         lambda: b.delete("loadbalancer", lb["id"], cascade=True),
                         lambda: b.create("listener", {"loadbalancer_id": lb["id"], "protocol": "TCP",
                                                       "protocol_port": 80})):
                with pytest.raises(Forbidden):
                    call()
            a.delete("loadbalancer", lb["id"], cascade=True)
            gone(a, lb["id"])
            assert lb["id"] not in {x["id"] for x in a.list("loadbalancer")}
        finally:
            net_a.delete("network", network["id"])
    finally:
        conn.close()
