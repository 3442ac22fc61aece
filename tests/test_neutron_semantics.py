"""Neutron's semantics where netbay once differed (issue 10), one test per behaviour.

Each expectation is Neutron's code, cited in the test: status codes, error types
and messages as Neutron emits them. openstacksdk or the ``openstack`` CLI make the
requests; raw HTTP only where neither can say it (``shared=`` on subnets, the
pagination links, bulk bodies wrapped per item, body types).

Every test runs against netbay's API and against a real Neutron (``neutron_api`` in
``tests/backendfix.py``): what these tests claim is Neutron's, Neutron must do too.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from conftest import neutron_error, unique
from openstack import exceptions as sdk_exc

pytestmark = [pytest.mark.every_db,   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)
              pytest.mark.shared_server]   # its tests make their own objects

_octet = itertools.count(1)


def cidr4() -> str:
    return f"10.{100 + next(_octet)}.0.0/24"


@pytest.fixture(scope="module")
def server(neutron_api):
    """netbay's network API or a real Neutron's: both backends run every test here."""
    return neutron_api


@pytest.fixture(scope="module")
def other(server):
    """A member of another project: (openstacksdk connection, raw HTTP client)."""
    user, password, project = server.make_user()
    conn = server.connect(user, password, project)
    return conn, server.http(conn.auth_token)


def network(conn, *cidrs: str, **attrs):
    net = conn.network.create_network(name=unique("sem"), **attrs)
    subnets = [conn.network.create_subnet(network_id=net.id, cidr=c, ip_version=ipaddress.ip_network(c).version)
               for c in cidrs]
    return net, subnets


# --- GET /subnets?shared= ------------------------------------------------------------------------


def test_subnets_filter_on_shared(admin, member, member_http):
    _, [shared_subnet] = network(admin, cidr4(), shared=True)
    _, [own_subnet] = network(member, cidr4())
    # openstacksdk has no ``shared`` query parameter for subnets: raw HTTP.
    r = member_http.get("/subnets", params={"shared": "true"})
    assert r.status_code == 200, r.text
    shared = {s["id"] for s in r.json()["subnets"]}
    unshared = {s["id"] for s in member_http.get("/subnets", params={"shared": "False"}).json()["subnets"]}
    assert shared_subnet.id in shared and own_subnet.id not in shared
    assert own_subnet.id in unshared and shared_subnet.id not in unshared
    # Neutron's subnet ``shared`` is a filter, not a visible attribute.
    assert "shared" not in member_http.get(f"/subnets/{shared_subnet.id}").json()["subnet"]
    # Its plugin converts it (neutron-lib ``convert_to_boolean``): InvalidInput, not the API's HTTPBadRequest.
    neutron_error(member_http.get("/subnets", params={"shared": "maybe"}), 400, "InvalidInput",
                  "Invalid input for operation: 'maybe' cannot be converted to boolean.")


# --- PUT /floatingips/{id} without port_id ---------------------------------------------------------


def test_floating_ip_update_without_port_id(admin, member, member_http):
    """l3_db ``_check_and_get_fip_assoc``: an empty body disassociates; a body of other
    attributes only keeps the association (the fix of Neutron bug 1610045)."""
    public = admin.network.find_network("public")
    net, [subnet] = network(member, cidr4())
    router = member.network.create_router(name=unique("r"), external_gateway_info={"network_id": public.id})
    member.network.add_interface_to_router(router, subnet_id=subnet.id)
    port = member.network.create_port(network_id=net.id)
    fip = member.network.create_ip(floating_network_id=public.id, port_id=port.id)
    assert fip.port_id == port.id
    kept = member.network.update_ip(fip, description="only a description")
    assert kept.port_id == port.id and kept.description == "only a description"
    # openstacksdk sends nothing when nothing changed: the empty body goes raw.
    r = member_http.put(f"/floatingips/{fip.id}", json={"floatingip": {}})
    assert r.status_code == 200, r.text
    cleared = r.json()["floatingip"]
    assert cleared["port_id"] is None and cleared["fixed_ip_address"] is None and cleared["router_id"] is None
    assert member.network.get_ip(fip).port_id is None
    member.network.delete_ip(fip)
    member.network.remove_interface_from_router(router, subnet_id=subnet.id)
    member.network.delete_router(router)


# --- MTU minimums ----------------------------------------------------------------------------------


def test_network_mtu_minimums_per_ip_version(member):
    """db_base_plugin_v2 ``_validate_subnet_network_mtu`` and ``_validate_change_network_mtu``:
    68 for IPv4, 1280 for IPv6, NetworkMTUSubnetConflict (409)."""
    tiny = member.network.create_network(name=unique("mtu"), mtu=60)
    assert tiny.mtu == 60
    with pytest.raises(sdk_exc.ConflictException) as caught:
        member.network.create_subnet(network_id=tiny.id, ip_version=4, cidr=cidr4())
    assert f"MTU of {tiny.id} is not valid, subnet requires a minimum of 68" in str(caught.value)
    small = member.network.create_network(name=unique("mtu"), mtu=1000)
    member.network.create_subnet(network_id=small.id, ip_version=4, cidr=cidr4())  # enough for IPv4
    with pytest.raises(sdk_exc.ConflictException) as caught:
        member.network.create_subnet(network_id=small.id, ip_version=6, cidr="fd10:1::/64")
    assert "subnet requires a minimum of 1280" in str(caught.value)
    # Updates: below what the subnets need is refused, and the MTU stays.
    net, _ = network(member, cidr4(), "fd10:2::/64")
    default = net.mtu   # the deployment's: 1500 on netbay, 1450 on Neutron's VXLAN (1500 - 50)
    with pytest.raises(sdk_exc.ConflictException) as caught:
        member.network.update_network(net, mtu=1279)
    assert "subnet requires a minimum of 1280" in str(caught.value)
    with pytest.raises(sdk_exc.ConflictException) as caught:
        member.network.update_network(net, mtu=67)
    assert "subnet requires a minimum of 68" in str(caught.value)
    assert member.network.get_network(net).mtu == default
    assert member.network.update_network(net, mtu=1280).mtu == 1280
    # Without subnets any MTU goes; 0 is the default.
    assert member.network.update_network(tiny, mtu=50).mtu == 50
    assert member.network.create_network(name=unique("mtu"), mtu=0).mtu == default


def test_mtu_conflict_body(member, member_http):
    net = member.network.create_network(name=unique("mtu"), mtu=67)
    r = member_http.post("/subnets", json={"subnet": {"network_id": net.id, "ip_version": 4, "cidr": cidr4()}})
    neutron_error(r, 409, "NetworkMTUSubnetConflict",
                  f"MTU of {net.id} is not valid, subnet requires a minimum of 68")


# --- pagination links ------------------------------------------------------------------------------


def _link(body: dict, collection: str, rel: str) -> dict[str, str] | None:
    found = [link for link in body.get(f"{collection}_links", []) if link["rel"] == rel]
    assert len(found) <= 1
    if not found:
        return None
    return dict(parse_qsl(urlsplit(found[0]["href"]).query))


def test_pagination_links_as_neutron_emits_them(server, member, member_http):
    """api_common ``get_pagination_links``: ``next`` unless a forward page is short,
    ``previous`` unless a reverse page is short; ``<collection>_links`` only when there is one."""
    net = member.network.create_network(name=unique("page"))
    names = [f"p{i}" for i in range(4)]
    ports = {member.network.create_port(network_id=net.id, name=n).name: n for n in names}
    assert len(ports) == 4
    base = {"network_id": net.id, "sort_key": "name", "sort_dir": "asc"}

    first = member_http.get("/ports", params={**base, "limit": 2}).json()
    assert [p["name"] for p in first["ports"]] == ["p0", "p1"]
    nxt, prev = _link(first, "ports", "next"), _link(first, "ports", "previous")
    ids = {p["name"]: p["id"] for p in first["ports"]}
    assert nxt == {**base, "limit": "2", "marker": ids["p1"]}
    assert prev == {**base, "limit": "2", "marker": ids["p0"], "page_reverse": "True"}
    href = next(link["href"] for link in first["ports_links"] if link["rel"] == "next")
    assert href.startswith(f"{server.network_url}/ports?")
    assert list(dict(parse_qsl(urlsplit(href).query)))[-1] == "marker"  # the marker goes last

    # A full last page still has ``next`` (Neutron does not look ahead); the page after
    # it is empty and short: no ``next``, a ``previous`` without marker.
    second = member_http.get("/ports", params={**base, "limit": 2, "marker": ids["p1"]}).json()
    assert [p["name"] for p in second["ports"]] == ["p2", "p3"]
    last_id = second["ports"][-1]["id"]
    assert _link(second, "ports", "next")["marker"] == last_id
    empty = member_http.get("/ports", params={**base, "limit": 2, "marker": last_id}).json()
    assert empty["ports"] == [] and _link(empty, "ports", "next") is None
    assert _link(empty, "ports", "previous") == {**base, "limit": "2", "page_reverse": "True"}

    # A short forward page: only ``previous``.
    short = member_http.get("/ports", params={**base, "limit": 3, "marker": ids["p1"]}).json()
    assert [link["rel"] for link in short["ports_links"]] == ["previous"]

    # Reverse: the page before p2 is p0, p1, in forward order; ``next`` always, and
    # ``previous`` while the page is full.
    second_ids = {p["name"]: p["id"] for p in second["ports"]}
    back = member_http.get("/ports", params={**base, "limit": 2, "marker": second_ids["p2"],
                                             "page_reverse": "True"}).json()
    assert [p["name"] for p in back["ports"]] == ["p0", "p1"]
    assert _link(back, "ports", "next") == {**base, "limit": "2", "marker": ids["p1"]}
    assert _link(back, "ports", "previous") == {**base, "limit": "2", "marker": ids["p0"],
                                                "page_reverse": "True"}
    start = member_http.get("/ports", params={**base, "limit": 2, "marker": ids["p0"],
                                              "page_reverse": "True"}).json()
    assert start["ports"] == [] or [p["name"] for p in start["ports"]] == []
    assert _link(start, "ports", "previous") is None and _link(start, "ports", "next") is not None

    # No limit, no links at all; openstacksdk walks the pages to the end.
    assert "ports_links" not in member_http.get("/ports", params={"network_id": net.id}).json()
    walked = [p.name for p in member.network.ports(network_id=net.id, sort_key="name", sort_dir="asc",
                                                   limit=2, paginated=True)]
    assert walked == names


# --- port_security_enabled on networks -------------------------------------------------------------


def test_network_port_security_is_inherited_by_new_ports(member):
    net, _ = network(member, cidr4(), port_security_enabled=False)
    assert net.is_port_security_enabled is False
    port = member.network.create_port(network_id=net.id)
    assert port.is_port_security_enabled is False and port.security_group_ids == []
    # A port may still ask for its own setting; the network's default may change.
    assert member.network.create_port(network_id=net.id, port_security_enabled=True).is_port_security_enabled
    net = member.network.update_network(net, port_security_enabled=True)
    assert net.is_port_security_enabled is True
    again = member.network.create_port(network_id=net.id)
    assert again.is_port_security_enabled is True and len(again.security_group_ids) == 1
    assert member.network.get_port(port).is_port_security_enabled is False  # existing ports keep theirs
    # Not a filter of networks (the port-security extension marks no ``is_filter``).
    with pytest.raises(sdk_exc.BadRequestException) as caught:
        list(member.network.networks(port_security_enabled=True))
    assert "['port_security_enabled'] is invalid attribute for filtering" in str(caught.value)


# --- the same security group twice ------------------------------------------------------------------


def test_port_with_a_security_group_twice(member, member_http):
    net, _ = network(member, cidr4())
    sg = member.network.create_security_group(name=unique("sg"))
    with pytest.raises(sdk_exc.BadRequestException) as caught:
        member.network.create_port(network_id=net.id, security_group_ids=[sg.id, sg.id])
    assert f"Duplicate items in the list: '{sg.id}'" in str(caught.value)
    port = member.network.create_port(network_id=net.id, security_group_ids=[sg.id])
    with pytest.raises(sdk_exc.BadRequestException):
        member.network.update_port(port, security_group_ids=[sg.id, sg.id])
    r = member_http.put(f"/ports/{port.id}", json={"port": {"security_groups": [sg.id, sg.id]}})
    neutron_error(r, 400, "HTTPBadRequest",
                  f"Invalid input for security_groups. Reason: Duplicate items in the list: '{sg.id}'.")
    assert member.network.get_port(port).security_group_ids == [sg.id]


# --- another project's id from a non-admin --------------------------------------------------------


def test_foreign_project_id_from_a_member_is_a_400(member, member_http, other):
    message = ("Specifying 'project_id' other than the authenticated project in request is not allowed "
               "for the current user.")
    other_project = other[0].current_project_id
    with pytest.raises(sdk_exc.BadRequestException) as caught:
        member.network.create_network(name=unique("n"), project_id=other_project)
    assert message in str(caught.value)
    for collection, body in (("networks", {"name": "x"}), ("security-groups", {"name": "x"}),
                             ("routers", {"name": "x"})):
        for key in ("project_id", "tenant_id"):
            member_key = {"networks": "network", "security-groups": "security_group", "routers": "router"}
            r = member_http.post(f"/{collection}", json={member_key[collection]: {**body, key: other_project}})
            neutron_error(r, 400, "HTTPBadRequest", message)
    # One's own project is fine.
    assert member.network.create_network(name=unique("n"), project_id=member.current_project_id).id


# --- the provider extension -----------------------------------------------------------------------


def _openstack(server, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(server.cli_env())
    return subprocess.run([str(Path(sys.executable).parent / "openstack"), *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_provider_attributes_on_network_create(server, admin, admin_http, member, member_http):
    vni = 40000 + next(_octet)
    r = _openstack(server, "network", "create", unique("prov"), "--provider-network-type", "vxlan",
                   "--provider-segment", str(vni), "-f", "json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert (made["provider:network_type"], made["provider:segmentation_id"]) == ("vxlan", vni)
    assert made["provider:physical_network"] is None
    shown = admin.network.get_network(made["id"])
    assert (shown.provider_network_type, shown.provider_segmentation_id) == ("vxlan", vni)
    assert made["id"] in {n.id for n in admin.network.networks(provider_segmentation_id=vni)}
    # The same VNI again: ML2's TunnelIdInUse.
    r = admin_http.post("/networks", json={"network": {"provider:network_type": "vxlan",
                                                       "provider:segmentation_id": vni}})
    neutron_error(r, 409, "TunnelIdInUse", f"Unable to create the network. The tunnel ID {vni} is in use.")
    # A type but no id: the next free VNI.
    auto = admin.network.create_network(name=unique("prov"), provider_network_type="vxlan")
    assert auto.provider_network_type == "vxlan" and auto.provider_segmentation_id
    for body, message in (
        ({"provider:network_type": "vlan", "provider:physical_network": "physnet1"},
         "Invalid input for operation: network_type value 'vlan' not supported."),
        ({"provider:segmentation_id": 5}, "Invalid input for operation: network_type required."),
        ({"provider:network_type": "vxlan", "provider:physical_network": "physnet1"},
         "Invalid input for operation: provider:physical_network specified for vxlan network."),
    ):
        neutron_error(admin_http.post("/networks", json={"network": body}), 400, "InvalidInput", message)
    # Members may neither set nor see them (Neutron's admin-only policies).
    neutron_error(member_http.post("/networks", json={"network": {"provider:network_type": "vxlan"}}),
                  403, "PolicyNotAuthorized",
                  "(rule:create_network and rule:create_network:provider:network_type) is disallowed by policy")
    own = member_http.post("/networks", json={"network": {"name": unique("n")}}).json()["network"]
    assert not any(k.startswith("provider:") for k in own)
    assert "provider:network_type" in admin_http.get(f"/networks/{own['id']}").json()["network"]


@pytest.mark.embedded_only("Neutron 29's ML2 VXLAN driver takes a VNI of 2**24 (it checks no range "
                            "outside its tenant ranges); netbay refuses what a VXLAN header cannot carry")
def test_provider_segmentation_id_beyond_24_bits(admin_http):
    r = admin_http.post("/networks", json={"network": {"provider:network_type": "vxlan",
                                                       "provider:segmentation_id": 2**24}})
    neutron_error(r, 400, "InvalidInput",
                  "Invalid input for operation: segmentation_id out of range (1 through 16777215).")


# --- If-Match: revision_number ---------------------------------------------------------------------


def test_if_match_revision_number(member, member_http):
    net = member.network.create_network(name=unique("rev"))
    stale = net.revision_number
    assert stale == 1  # a new network, as Neutron 29 returns it
    updated = member.network.update_network(net.id, name=unique("rev"), if_revision=stale)
    assert updated.revision_number > stale
    with pytest.raises(sdk_exc.PreconditionFailedException):
        member.network.update_network(net.id, name="not-applied", if_revision=stale)
    assert member.network.get_network(net).name == updated.name
    r = member_http.put(f"/networks/{net.id}", json={"network": {"name": "x"}},
                        headers={"If-Match": f"revision_number={stale}"})
    neutron_error(r, 412, "RevisionNumberConstraintFailed",
                  f"Constrained to {stale}, but current revision is {updated.revision_number}")
    r = member_http.delete(f"/networks/{net.id}", headers={"If-Match": f"revision_number={stale}"})
    neutron_error(r, 412, "RevisionNumberConstraintFailed")
    r = member_http.put(f"/networks/{net.id}", json={"network": {"name": "x"}},
                        headers={"If-Match": "revision_number=abc"})
    neutron_error(r, 400, "BadRequest", "Bad if-match request: Revision number etag must be in the format of "
                  "revision_number=<int>.")
    r = member_http.delete(f"/networks/{net.id}", headers={"If-Match": f"revision_number={updated.revision_number}"})
    assert r.status_code == 204, r.text
    aliases = {e.alias for e in member.network.extensions()}
    assert {"revision-if-match", "provider", "port-security", "net-mtu-writable",
            "subnet-external-network"} <= aliases


# --- an admin's rule in another project's group ----------------------------------------------------


def test_admin_rule_in_a_members_group(admin, member):
    """securitygroups_db: the rule is filed under the project the request names."""
    sg = member.network.create_security_group(name=unique("sg"))
    named = admin.network.create_security_group_rule(security_group_id=sg.id, direction="ingress",
                                                      protocol="tcp", port_range_min=80, port_range_max=80,
                                                      project_id=admin.current_project_id)
    assert named.project_id == admin.current_project_id
    # It is in the group, and the group's owner sees (sg_owner) and may remove it.
    assert named.id in {r["id"] for r in member.network.get_security_group(sg).security_group_rules}
    assert member.network.get_security_group_rule(named.id).project_id == admin.current_project_id
    assert named.id in {r.id for r in member.network.security_group_rules(security_group_id=sg.id)}
    member.network.delete_security_group_rule(named)


@pytest.mark.embedded_only("netbay files an admin's rule that names no project under the group's project; "
                           "Neutron's API fills in the caller's (a deliberate difference)")
def test_admin_rule_naming_no_project_is_the_groups(admin, member):
    sg = member.network.create_security_group(name=unique("sg"))
    plain = admin.network.create_security_group_rule(security_group_id=sg.id, direction="ingress",
                                                      protocol="tcp", port_range_min=22, port_range_max=22)
    assert plain.project_id == member.current_project_id
    assert plain.id in {r["id"] for r in member.network.get_security_group(sg).security_group_rules}
    member.network.delete_security_group_rule(plain)


# --- subnet pool prefix lengths ---------------------------------------------------------------------


def test_subnet_pool_prefix_lengths_are_strings(member, member_http):
    """db_base_plugin_common ``_make_subnetpool_dict`` renders them with ``str()``."""
    pool = member.network.create_subnet_pool(name=unique("pool"), prefixes=["10.240.0.0/16"],
                                             min_prefixlen=20, default_prefixlen=24, max_prefixlen=28)
    assert (pool.minimum_prefix_length, pool.default_prefix_length, pool.maximum_prefix_length) == (20, 24, 28)
    raw = member_http.get(f"/subnetpools/{pool.id}").json()["subnetpool"]
    assert (raw["min_prefixlen"], raw["default_prefixlen"], raw["max_prefixlen"]) == ("20", "24", "28")
    listed = member_http.get("/subnetpools", params={"id": pool.id}).json()["subnetpools"]
    assert listed[0]["default_prefixlen"] == "24"


# --- bulk create ---------------------------------------------------------------------------------


def test_bulk_create_as_neutron_reads_it(member, member_http):
    """v2 base ``prepare_request_body``: the plural key wins, each item bare or wrapped."""
    names = [unique("bulk") for _ in range(3)]
    r = member_http.post("/networks", json={"networks": [{"name": names[0]}, {"network": {"name": names[1]}}]})
    assert r.status_code == 201, r.text
    assert [n["name"] for n in r.json()["networks"]] == names[:2]
    made = member.network.create_ports if hasattr(member.network, "create_ports") else None
    net = r.json()["networks"][0]
    if made is not None:  # openstacksdk's own bulk call
        ports = list(made([{"network_id": net["id"], "name": "a"}, {"network_id": net["id"], "name": "b"}]))
        assert sorted(p.name for p in ports) == ["a", "b"]
    neutron_error(member_http.post("/networks", json={"networks": []}), 400, "HTTPBadRequest", "Resources required")
    # One bad item refuses the whole request, and nothing is made.
    r = member_http.post("/networks", json={"networks": [{"name": names[2]}, {"network": {"colour": "red"}}]})
    neutron_error(r, 400, "HTTPBadRequest")
    assert member.network.find_network(names[2]) is None


# --- deleting an external network and its floating IPs ------------------------------------------------


def test_deleting_an_external_network_and_its_floating_ips(admin):
    """external_net_db ``_process_l3_delete``: unassociated floating IPs go with the network;
    an associated one keeps its port on the network, which is then in use."""
    ext, _ = network(admin, "192.0.2.0/24", is_router_external=True)
    spare = admin.network.create_ip(floating_network_id=ext.id)
    inner, [inner_subnet] = network(admin, cidr4())
    router = admin.network.create_router(name=unique("r"), external_gateway_info={"network_id": ext.id})
    admin.network.add_interface_to_router(router, subnet_id=inner_subnet.id)
    port = admin.network.create_port(network_id=inner.id)
    held = admin.network.create_ip(floating_network_id=ext.id, port_id=port.id)
    with pytest.raises(sdk_exc.ConflictException):
        admin.network.delete_network(ext)
    admin.network.update_ip(held, port_id=None)
    admin.network.update_router(router, external_gateway_info={})
    admin.network.delete_network(ext)
    assert admin.network.find_network(ext.id) is None
    assert admin.network.find_ip(spare.id) is None and admin.network.find_ip(held.id) is None
    assert list(admin.network.ports(network_id=ext.id)) == []
    # Only unassociated ones: the network goes at once.
    lone, _ = network(admin, "198.51.100.0/24", is_router_external=True)
    fips = [admin.network.create_ip(floating_network_id=lone.id) for _ in range(2)]
    admin.network.delete_network(lone)
    assert all(admin.network.find_ip(f.id) is None for f in fips)


@pytest.mark.embedded_only("Neutron 29 deletes the unassociated floating IPs before it finds the "
                           "network in use, and keeps them deleted; netbay's refused delete changes nothing")
def test_a_refused_external_network_delete_keeps_its_floating_ips(admin):
    ext, _ = network(admin, "192.0.2.0/24", is_router_external=True)
    spare = admin.network.create_ip(floating_network_id=ext.id)
    admin.network.create_port(network_id=ext.id, device_owner="compute:nova")
    with pytest.raises(sdk_exc.ConflictException):
        admin.network.delete_network(ext)
    assert admin.network.find_ip(spare.id) is not None


# --- an external network's subnets -------------------------------------------------------------------


def test_external_network_subnets_are_visible_to_every_project(admin, member, member_http, other):
    """The subnet-external-network extension: visible to all, with ``router:external``."""
    ext, [ext_subnet] = network(admin, "203.0.113.0/24", is_router_external=True)
    _, [own] = network(member, cidr4())
    for conn, http in ((member, member_http), other):
        assert conn.network.get_subnet(ext_subnet.id).cidr == "203.0.113.0/24"
        assert ext_subnet.id in {s.id for s in conn.network.subnets(network_id=ext.id)}
        body = http.get(f"/subnets/{ext_subnet.id}").json()["subnet"]
        assert body["router:external"] is True
        external = {s["id"] for s in http.get("/subnets", params={"router:external": "true"}).json()["subnets"]}
        assert ext_subnet.id in external and own.id not in external
    assert member_http.get(f"/subnets/{own.id}").json()["subnet"]["router:external"] is False
    r = member_http.post("/subnets", json={"subnet": {"network_id": own.network_id, "ip_version": 4,
                                                      "cidr": cidr4(), "router:external": True}})
    neutron_error(r, 400, "HTTPBadRequest", "Attribute 'router:external' not allowed in POST")
    admin.network.delete_network(ext)


# --- deleting an automatic-address IPv6 subnet --------------------------------------------------------


@pytest.mark.parametrize("mode", ["slaac", "dhcpv6-stateless"])
def test_deleting_an_auto_address_subnet_removes_its_addresses(member, member_http, mode):
    """db_base_plugin_v2 ``_remove_subnet_ip_allocations_from_ports``."""
    net, [v4] = network(member, cidr4())
    v6 = member.network.create_subnet(network_id=net.id, ip_version=6, cidr=f"fd20:{next(_octet)}::/64",
                                      ipv6_ra_mode=mode, ipv6_address_mode=mode)
    port = member.network.create_port(network_id=net.id)
    assert {ip["subnet_id"] for ip in port.fixed_ips} == {v4.id, v6.id}
    revision = port.revision_number
    member.network.delete_subnet(v6)
    after = member.network.get_port(port.id)
    assert [ip["subnet_id"] for ip in after.fixed_ips] == [v4.id]
    assert after.revision_number > revision  # a port update, for the dataplane too
    assert member.network.get_network(net).subnet_ids == [v4.id]
    # A stateful subnet with ports is still in use (its addresses are not automatic).
    stateful = member.network.create_subnet(network_id=net.id, ip_version=6, cidr=f"fd21:{next(_octet)}::/64",
                                            ipv6_ra_mode="dhcpv6-stateful", ipv6_address_mode="dhcpv6-stateful")
    member.network.create_port(network_id=net.id, fixed_ips=[{"subnet_id": stateful.id}])
    neutron_error(member_http.delete(f"/subnets/{stateful.id}"), 409, "SubnetInUse")


def test_auto_address_subnet_on_a_router_interface_stays(member, member_http):
    net, _ = network(member, cidr4())
    v6 = member.network.create_subnet(network_id=net.id, ip_version=6, cidr=f"fd22:{next(_octet)}::/64",
                                      ipv6_ra_mode="slaac", ipv6_address_mode="slaac")
    router = member.network.create_router(name=unique("r6"))
    member.network.add_interface_to_router(router, subnet_id=v6.id)
    neutron_error(member_http.delete(f"/subnets/{v6.id}"), 409, "SubnetInUse")
    member.network.remove_interface_from_router(router, subnet_id=v6.id)
