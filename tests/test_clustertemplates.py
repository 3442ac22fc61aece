"""Cluster templates (and baymodels) over HTTP: Magnum's fields, defaults, rules and
errors, the driver registry's label checks, versions, scoping, and the CLI."""

from __future__ import annotations

import uuid

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from clihelp import cli_here
from coehelp import ci_client, magnum_error, make_keypair, make_template, new_member
from conftest import ADMIN_PASSWORD, unique

# The API alone: no conductor builds these clusters; tests report statuses themselves.
SERVER_ARGS = ("--no-conductor",)
pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


@pytest.fixture(scope="module")
def ci_admin(server):
    token = server.token()
    for name in ('key1',):  # keypair names the tests' templates and clusters use
        make_keypair(server, token, name)
    return ci_client(server, token)


@pytest.fixture(scope="module")
def ci_member(server):
    return new_member(server)


@pytest.fixture(scope="module")
def ci_other(server):
    return new_member(server)


# --- create: defaults and what is stored -----------------------------------------------------------


def test_create_minimal_kubernetes_template_gets_magnums_defaults(ci_admin):
    r = ci_admin.post("/clustertemplates", json={"name": unique("ct"), "coe": "kubernetes"})
    assert r.status_code == 201, r.text
    t = r.json()
    assert r.headers["location"] == t["links"][0]["href"]
    assert t["links"][0]["href"].endswith(f"/container-infra/v1/clustertemplates/{t['uuid']}")
    assert t["network_driver"] == "flannel"  # the COE default, stored
    assert (t["floating_ip_enabled"], t["master_lb_enabled"], t["tls_disabled"]) == (True, False, False)
    assert (t["public"], t["hidden"], t["registry_enabled"], t["server_type"]) == (False, False, False, "vm")
    assert t["labels"] == {} and t["labels_ignored"] == []
    assert t["project_id"] == "admin" and t["created_at"] and t["updated_at"] is None
    shown = ci_admin.get(f"/clustertemplates/{t['uuid']}").json()
    assert shown["network_driver"] == "flannel"
    assert shown == t


def test_name_is_generated_when_absent(ci_admin):
    t = make_template(ci_admin)
    assert t["name"].endswith("-template")


@pytest.mark.parametrize("coe, driver", [("kubernetes", "flannel"), ("swarm", "docker"),
                                         ("swarm-mode", "docker"), ("mesos", "docker")])
def test_each_coe_default_network_driver_is_stored(ci_admin, coe, driver):
    t = make_template(ci_admin, coe=coe)
    assert t["network_driver"] == driver
    assert ci_admin.get(f"/clustertemplates/{t['uuid']}").json()["network_driver"] == driver


@pytest.mark.parametrize("coe, driver", [("kubernetes", "calico"), ("swarm", "flannel"),
                                         ("swarm-mode", "flannel"), ("kubernetes", "flannel")])
def test_supported_drivers_are_accepted(ci_admin, coe, driver):
    assert make_template(ci_admin, coe=coe, network_driver=driver)["network_driver"] == driver


@pytest.mark.parametrize("coe, driver, expecting", [
    ("kubernetes", "docker", "flannel/calico/kuryr/unspecified"),
    ("kubernetes", "Flannel", "flannel/calico/kuryr/unspecified"),  # case-sensitive, as in Magnum
    ("swarm", "calico", "docker/flannel/unspecified"),
    ("swarm-mode", "weave", "docker/flannel/unspecified"),
    ("mesos", "flannel", "docker/unspecified"),
])
def test_unsupported_driver_is_400_in_magnums_words(ci_admin, coe, driver, expecting):
    r = ci_admin.post("/clustertemplates", json={"coe": coe, "network_driver": driver})
    magnum_error(r, 400, f"Network driver type {driver} is not supported, expecting a {expecting} network driver.")


def test_dcos_is_a_known_coe_that_netbay_does_not_build(ci_admin):
    magnum_error(ci_admin.post("/clustertemplates", json={"coe": "dcos"}), 400,
                 "Requested COE type dcos is not supported.")


def test_every_attribute_round_trips(ci_admin):
    body = {"name": unique("full"), "coe": "kubernetes", "image_id": "fedora-coreos", "flavor_id": "m1.small",
            "master_flavor_id": "m1.medium", "keypair_id": "key1", "external_network_id": "public",
            "dns_nameserver": "8.8.8.8,1.1.1.1", "docker_volume_size": 5, "apiserver_port": 6443,
            "http_proxy": "http://p:3128", "https_proxy": "http://p:3128", "no_proxy": "10.0.0.1",
            "volume_driver": "cinder", "docker_storage_driver": "overlay2", "insecure_registry": "10.0.0.1:5000",
            "cluster_distro": "fedora-coreos", "tls_disabled": True, "registry_enabled": True,
            "master_lb_enabled": True, "floating_ip_enabled": False, "server_type": "bm", "tags": "a,b",
            "labels": {"flannel_backend": "host-gw", "kube_tag": "v1.30", "flannel_network_subnetlen": 26}}
    t = make_template(ci_admin, **body)
    for key, value in body.items():
        assert t[key] == value, key
    assert t["labels_ignored"] == ["kube_tag"]


def test_string_booleans_are_accepted_as_magnum_does(ci_admin):
    t = make_template(ci_admin, master_lb_enabled="true", floating_ip_enabled="no")
    assert (t["master_lb_enabled"], t["floating_ip_enabled"]) == (True, False)


# --- labels: the registry's checks (beyond Magnum) ------------------------------------------------


@pytest.mark.parametrize("labels, message", [
    ({"flannel_backend": "gre"}, "Invalid value 'gre' for label flannel_backend: expecting one of vxlan|host-gw."),
    ({"flannel_network_cidr": "10.100.0.0"}, None),
    ({"flannel_network_cidr": "not-a-cidr"}, None),
    ({"flannel_network_cidr": "10.100.0.1/16"}, None),  # host bits set
    ({"flannel_network_cidr": "fd00::/64"}, None),
    ({"flannel_network_subnetlen": "twenty"}, None),
    ({"flannel_network_subnetlen": 31}, None),
    ({"flannel_network_subnetlen": True}, None),
    ({"flannel_network_subnetlen": 16}, None),  # not longer than the /16 network
    ({"flannel_network_cidr": "10.0.0.0/24", "flannel_network_subnetlen": 24}, None),
    ({"fixed_subnet_cidr": "10.0.0.0/33"}, None),
])
def test_bad_flannel_labels_are_400_naming_the_label(ci_admin, labels, message):
    r = ci_admin.post("/clustertemplates", json={"coe": "kubernetes", "labels": labels})
    detail = magnum_error(r, 400, message)
    assert next(iter(labels)) in detail or "flannel_network_subnetlen" in detail


def test_cidr_label_error_names_what_is_expected(ci_admin):
    r = ci_admin.post("/clustertemplates", json={"coe": "kubernetes", "labels": {"flannel_network_cidr": "x"}})
    magnum_error(r, 400, "Invalid value 'x' for label flannel_network_cidr: expecting an IPv4 network in CIDR "
                         "notation, e.g. 10.100.0.0/16.")


def test_flannel_udp_backend_is_refused_with_the_reason_and_the_alternatives(ci_admin):
    r = ci_admin.post("/clustertemplates", json={"coe": "kubernetes", "labels": {"flannel_backend": "udp"}})
    detail = magnum_error(r, 400)
    assert detail.startswith("Label flannel_backend=udp is not supported:")
    assert "vxlan" in detail and "host-gw" in detail


@pytest.mark.parametrize("labels", [
    {"calico_ipv4pool_ipip": "always"},
    {"calico_ipv4pool_vxlan": "Off"},
    {"calico_ipv4pool": "192.168.0.0/33"},
    {"calico_ipv4pool_ipip": "Always", "calico_ipv4pool_vxlan": "CrossSubnet"},
])
def test_bad_calico_labels_are_400(ci_admin, labels):
    r = ci_admin.post("/clustertemplates", json={"coe": "kubernetes", "network_driver": "calico",
                                                 "labels": labels})
    assert "calico_ipv4pool" in magnum_error(r, 400)


@pytest.mark.parametrize("mode", ["Always", "CrossSubnet"])
def test_ip_in_ip_is_refused_naming_the_missing_kernel_feature(ci_admin, mode):
    from netbay.coe.hostcheck import host_features

    if host_features()["ipip"].available:
        pytest.skip("this host's kernel has IP-in-IP: calico ipip modes are accepted here")
    r = ci_admin.post("/clustertemplates", json={"coe": "kubernetes", "network_driver": "calico",
                                                 "labels": {"calico_ipv4pool_ipip": mode}})
    detail = magnum_error(r, 400)
    assert f"calico_ipv4pool_ipip={mode}" in detail and "kernel feature ipip" in detail
    assert "calico_ipv4pool_vxlan" in detail  # what to use instead


def test_good_calico_labels_and_the_other_drivers_labels_are_ignored(ci_admin):
    t = make_template(ci_admin, network_driver="calico", labels={
        "calico_ipv4pool": "10.200.0.0/16", "calico_ipv4pool_ipip": "Never", "calico_ipv4pool_vxlan": "CrossSubnet",
        "flannel_backend": "nonsense", "my_label": "x"})
    # flannel's labels mean nothing to calico: kept as given, reported, not checked.
    assert t["labels"]["flannel_backend"] == "nonsense"
    assert t["labels_ignored"] == ["flannel_backend", "my_label"]


def test_unknown_labels_are_kept_and_reported_as_ignored(ci_admin):
    t = make_template(ci_admin, labels={"flannel_backend": "vxlan", "zzz": "1", "admission_control_list": "x"})
    assert t["labels"] == {"flannel_backend": "vxlan", "zzz": "1", "admission_control_list": "x"}
    assert t["labels_ignored"] == ["admission_control_list", "zzz"]


def test_docker_driver_labels_are_all_ignored_but_common_ones_checked(ci_admin):
    t = make_template(ci_admin, coe="swarm", labels={"flannel_backend": "udp", "fixed_subnet_cidr": "10.9.0.0/24"})
    assert t["labels_ignored"] == ["flannel_backend"]
    r = ci_admin.post("/clustertemplates", json={"coe": "swarm", "labels": {"fixed_subnet_cidr": "bogus"}})
    magnum_error(r, 400, contains="fixed_subnet_cidr")


# --- bad input: always 4xx in Magnum's format, never 500 --------------------------------------------


@pytest.mark.parametrize("raw", [b"{", b"", b"[1,2]", b'"x"', b"null", b"\xff\xfe"])
def test_malformed_bodies_are_400(ci_admin, raw):
    r = ci_admin.post("/clustertemplates", content=raw, headers={"Content-Type": "application/json"})
    magnum_error(r, 400)


@pytest.mark.parametrize("body, contains", [
    ({}, "Invalid input for field/attribute coe. Value: 'Unset'. Mandatory field missing."),
    ({"coe": "k8s"}, "Value should be one of: dcos, kubernetes, mesos, swarm, swarm-mode"),
    ({"coe": "kubernetes", "name": ""}, "Value should have a minimum character requirement of 1"),
    ({"coe": "kubernetes", "name": "x" * 256}, "maximum character requirement of 255"),
    ({"coe": "kubernetes", "name": 7}, "Wrong type"),
    ({"coe": "kubernetes", "apiserver_port": 80}, "Value should be greater or equal to 1024"),
    ({"coe": "kubernetes", "apiserver_port": 70000}, "Value should be lower or equal to 65535"),
    ({"coe": "kubernetes", "apiserver_port": "http"}, "Wrong type"),
    ({"coe": "kubernetes", "docker_volume_size": 0}, "greater or equal to 1"),
    ({"coe": "kubernetes", "docker_volume_size": 2, "docker_storage_driver": "devicemapper"},
     "expecting minimum value 3GB"),
    ({"coe": "kubernetes", "floating_ip_enabled": "maybe"}, "Unrecognized value 'maybe'"),
    ({"coe": "kubernetes", "public": [True]}, "Unrecognized value"),
    ({"coe": "kubernetes", "server_type": "vmx"}, "Value should be one of: bm, vm"),
    ({"coe": "kubernetes", "dns_nameserver": "8.8.8.8,dns.example"}, "comma separated dns list"),
    ({"coe": "kubernetes", "labels": ["a=b"]}, "Wrong type"),
    ({"coe": "kubernetes", "labels": {"a": {"b": "c"}}}, "Label a should have"),
    ({"coe": "kubernetes", "labels": {"": "x"}}, "Label keys"),
    ({"coe": "kubernetes", "volume_driver": "rexray"}, "Volume driver type rexray is not supported"),
    ({"coe": "kubernetes", "frobnicate": 1}, "Unknown attribute for argument cluster_template: frobnicate"),
    ({"coe": "kubernetes", "name": "a\u0000b"}, "NUL"),
])
def test_invalid_attributes_are_400_in_wsme_words(ci_admin, body, contains):
    magnum_error(ci_admin.post("/clustertemplates", json=body), 400, contains=contains)


def test_read_only_attributes_echoed_back_are_ignored(ci_admin):
    t = make_template(ci_admin, uuid=str(uuid.uuid4()), project_id="someone", labels_ignored=["x"])
    assert t["project_id"] == "admin"


# --- references into the network service -------------------------------------------------------------


def test_a_member_cannot_name_another_projects_network(ci_member, server):
    admin_net = httpx.Client(base_url=f"{server.url}/network/v2.0", headers={"X-Auth-Token": server.token()})
    name = unique("private")
    net = admin_net.post("/networks", json={"network": {"name": name}}).json()["network"]
    try:
        magnum_error(ci_member.post("/clustertemplates", json={"coe": "kubernetes", "fixed_network": name}),
                     400, f"Unable to find fixed network {name}.")
    finally:
        admin_net.delete(f"/networks/{net['id']}")
        admin_net.close()


# --- scoping and publishing ------------------------------------------------------------------------


def test_public_and_hidden_need_admin(ci_member):
    for flag in ("public", "hidden"):
        magnum_error(ci_member.post("/clustertemplates", json={"coe": "kubernetes", flag: True}), 403,
                     "Not authorized to set public or hidden flag for cluster template.")
    t = make_template(ci_member)
    r = ci_member.patch(f"/clustertemplates/{t['uuid']}", json=[{"op": "replace", "path": "/public", "value": True}])
    magnum_error(r, 403, "Not authorized to set public or hidden flag for cluster template.")


def test_a_member_sees_its_own_and_public_templates(ci_admin, ci_member, ci_other):
    mine = make_template(ci_member, name=unique("mine"))
    theirs = make_template(ci_other, name=unique("theirs"))
    public = make_template(ci_admin, name=unique("pub"), public=True)
    hidden = make_template(ci_admin, name=unique("hid"), public=True, hidden=True)
    private = make_template(ci_admin, name=unique("priv"))
    listed = {t["uuid"] for t in ci_member.get("/clustertemplates").json()["clustertemplates"]}
    assert mine["uuid"] in listed and public["uuid"] in listed
    assert not listed & {theirs["uuid"], hidden["uuid"], private["uuid"]}
    # A public hidden template is left out of lists but still reachable by its uuid.
    assert ci_member.get(f"/clustertemplates/{hidden['uuid']}").status_code == 200
    magnum_error(ci_member.get(f"/clustertemplates/{private['uuid']}"), 404,
                 f"ClusterTemplate {private['uuid']} could not be found.")
    magnum_error(ci_member.get(f"/clustertemplates/{theirs['name']}"), 404)
    everything = {t["uuid"] for t in ci_admin.get("/clustertemplates").json()["clustertemplates"]}
    assert {mine["uuid"], theirs["uuid"], public["uuid"], hidden["uuid"], private["uuid"]} <= everything


def test_a_member_cannot_change_or_delete_a_public_template_it_does_not_own(ci_admin, ci_member):
    public = make_template(ci_admin, name=unique("pub"), public=True)
    r = ci_member.patch(f"/clustertemplates/{public['uuid']}", json=[{"op": "replace", "path": "/name", "value": "x"}])
    magnum_error(r, 403, "Policy doesn't allow clustertemplate:update to be performed.")
    magnum_error(ci_member.delete(f"/clustertemplates/{public['uuid']}"), 403,
                 "Policy doesn't allow clustertemplate:delete to be performed.")


def test_lookup_by_name_and_ambiguous_names(ci_admin):
    name = unique("twin")
    one = make_template(ci_admin, name=name)
    assert ci_admin.get(f"/clustertemplates/{name}").json()["uuid"] == one["uuid"]
    make_template(ci_admin, name=name)
    magnum_error(ci_admin.get(f"/clustertemplates/{name}"), 409,
                 "Multiple ClusterTemplates exist with same name. Please use the ClusterTemplate uuid instead.")


# --- JSON patch ------------------------------------------------------------------------------------------


def _patch(client, ident, *ops):
    return client.patch(f"/clustertemplates/{ident}", json=list(ops))


def test_patch_replace_add_remove(ci_admin):
    t = make_template(ci_admin, labels={"flannel_backend": "vxlan", "x": "1"})
    r = _patch(ci_admin, t["uuid"], {"op": "replace", "path": "/name", "value": "renamed-" + t["uuid"][:6]},
               {"op": "add", "path": "/labels/flannel_network_subnetlen", "value": "26"},
               {"op": "remove", "path": "/labels/x"},
               {"op": "replace", "path": "/labels/flannel_backend", "value": "host-gw"},
               {"op": "add", "path": "/flavor_id", "value": "m1.large"},
               {"op": "replace", "path": "/master_lb_enabled", "value": True})
    assert r.status_code == 200, r.text
    after = r.json()
    assert after["name"].startswith("renamed-")
    assert after["labels"] == {"flannel_backend": "host-gw", "flannel_network_subnetlen": "26"}
    assert (after["flavor_id"], after["master_lb_enabled"]) == ("m1.large", True)
    assert after["updated_at"]
    assert ci_admin.get(f"/clustertemplates/{t['uuid']}").json()["labels"] == after["labels"]
    r = _patch(ci_admin, t["uuid"], {"op": "remove", "path": "/flavor_id"},
               {"op": "remove", "path": "/master_lb_enabled"})
    assert (r.json()["flavor_id"], r.json()["master_lb_enabled"]) == (None, False)


def test_removing_or_nulling_the_name_generates_one(ci_admin):
    t = make_template(ci_admin, name=unique("named"))
    for op in ({"op": "remove", "path": "/name"}, {"op": "replace", "path": "/name", "value": None}):
        r = _patch(ci_admin, t["uuid"], op)
        assert r.status_code == 200, r.text
        assert r.json()["name"].endswith("-template")


def test_patch_labels_as_the_str_of_a_dict_as_magnumclient_sends_them(ci_admin):
    t = make_template(ci_admin)
    r = _patch(ci_admin, t["uuid"], {"op": "replace", "path": "/labels",
                                     "value": str({"flannel_backend": "host-gw", "k": "v"})})
    assert r.status_code == 200, r.text
    assert r.json()["labels"] == {"flannel_backend": "host-gw", "k": "v"}
    assert r.json()["labels_ignored"] == ["k"]
    magnum_error(_patch(ci_admin, t["uuid"], {"op": "replace", "path": "/labels", "value": "not a dict"}), 400,
                 contains="Couldn't apply patch")


def test_patch_revalidates_driver_and_labels(ci_admin):
    t = make_template(ci_admin)
    magnum_error(_patch(ci_admin, t["uuid"], {"op": "replace", "path": "/network_driver", "value": "docker"}),
                 400, "Network driver type docker is not supported, expecting a flannel/calico/kuryr/unspecified "
                      "network driver.")
    magnum_error(_patch(ci_admin, t["uuid"], {"op": "add", "path": "/labels/flannel_backend", "value": "udp"}),
                 400, contains="flannel_backend=udp")
    r = _patch(ci_admin, t["uuid"], {"op": "replace", "path": "/network_driver", "value": "calico"},
               {"op": "add", "path": "/labels/calico_ipv4pool_vxlan", "value": "Always"})
    assert r.json()["network_driver"] == "calico"
    magnum_error(_patch(ci_admin, t["uuid"], {"op": "replace", "path": "/coe", "value": "mesos"}), 400,
                 "Network driver type calico is not supported, expecting a docker/unspecified network driver.")
    magnum_error(_patch(ci_admin, t["uuid"], {"op": "replace", "path": "/apiserver_port", "value": 1}), 400,
                 contains="greater or equal to 1024")
    assert ci_admin.get(f"/clustertemplates/{t['uuid']}").json()["network_driver"] == "calico"


@pytest.mark.parametrize("ops, contains", [
    ([{"op": "remove", "path": "/network_driver"}], "'/network_driver' is a mandatory attribute and can not be removed"),
    ([{"op": "remove", "path": "/coe"}], "'/coe' is a mandatory attribute"),
    ([{"op": "remove", "path": "/public"}], "'/public' is a mandatory attribute"),
    ([{"op": "replace", "path": "/uuid", "value": "x"}], "'/uuid' is an internal attribute and can not be updated"),
    ([{"op": "replace", "path": "/project_id", "value": "x"}], "internal attribute"),
    ([{"op": "move", "path": "/name", "value": "x"}], "Value should be one of: add, replace, remove"),
    ([{"op": "replace", "path": "/name"}], "'add' and 'replace' operations need a value"),
    ([{"op": "replace", "path": "name", "value": "x"}], "Invalid path"),
    ([{"path": "/name", "value": "x"}], "Mandatory field missing"),
    ([{"op": "add", "path": "/nonsense", "value": 1}], "Adding a new attribute /nonsense to the root of the resource"),
    ([{"op": "replace", "path": "/nonsense", "value": 1}], "Couldn't apply patch"),
    ([{"op": "remove", "path": "/labels/absent"}], "can't remove a non-existent object 'absent'"),
    ([{"op": "add", "path": "/server_type", "value": "bm"}], "has existed, please use 'replace' operation"),
    ([{"op": "replace", "path": "/server_type", "value": "xx"}], "Value should be one of: bm, vm"),
    ([{"op": "replace", "path": "/public", "value": "perhaps"}], "Unrecognized value"),
    ([{"op": "replace", "path": "/name", "value": "x", "extra": 1}], "Unknown attribute for argument patch"),
    ({"op": "replace", "path": "/name", "value": "x"}, "Wrong type"),
    ([1], "Wrong type"),
])
def test_bad_patches_are_400(ci_admin, ops, contains):
    t = make_template(ci_admin)
    magnum_error(ci_admin.patch(f"/clustertemplates/{t['uuid']}", json=ops), 400, contains=contains)


def test_patch_unknown_template_is_404(ci_admin):
    r = ci_admin.patch("/clustertemplates/nope", json=[{"op": "replace", "path": "/name", "value": "x"}])
    magnum_error(r, 404, "ClusterTemplate nope could not be found.")


# --- in use ------------------------------------------------------------------------------------------------


def test_a_template_in_use_only_changes_name_public_hidden_and_cannot_be_deleted(ci_admin):
    t = make_template(ci_admin, name=unique("used"))
    r = ci_admin.post("/clusters", json={"cluster_template_id": t["uuid"]})
    assert r.status_code == 202, r.text
    cluster = r.json()["uuid"]
    referenced = f"ClusterTemplate {t['uuid']} is referenced by one or multiple clusters."
    for op in ({"op": "replace", "path": "/name", "value": unique("renamed")},
               {"op": "replace", "path": "/public", "value": True},
               {"op": "replace", "path": "/hidden", "value": True}):
        assert _patch(ci_admin, t["uuid"], op).status_code == 200
    for op in ({"op": "add", "path": "/labels/flannel_backend", "value": "host-gw"},
               {"op": "replace", "path": "/master_lb_enabled", "value": True},
               {"op": "replace", "path": "/network_driver", "value": "calico"}):
        magnum_error(_patch(ci_admin, t["uuid"], op), 400, referenced)
    magnum_error(ci_admin.delete(f"/clustertemplates/{t['uuid']}"), 400, referenced)
    assert ci_admin.delete(f"/clusters/{cluster}").status_code == 204
    assert _patch(ci_admin, t["uuid"], {"op": "replace", "path": "/master_lb_enabled", "value": True}).status_code == 200
    assert ci_admin.delete(f"/clustertemplates/{t['uuid']}").status_code == 204
    magnum_error(ci_admin.get(f"/clustertemplates/{t['uuid']}"), 404)


# --- lists, paging -------------------------------------------------------------------------------------------


def test_paging_with_limit_marker_and_next(ci_other):
    made = [make_template(ci_other, name=unique("page"))["uuid"] for _ in range(3)]
    seen, url = [], "/clustertemplates?limit=2"
    while url:
        body = ci_other.get(url).json()
        seen += [t["uuid"] for t in body["clustertemplates"]]
        url = body.get("next")
        if url:
            assert "/container-infra/v1/clustertemplates?" in url
            url = "/clustertemplates?" + url.split("?", 1)[1]
    assert [u for u in seen if u in made] == made
    desc = ci_other.get("/clustertemplates", params={"sort_key": "name", "sort_dir": "desc"}).json()
    names = [t["name"] for t in desc["clustertemplates"]]
    assert names == sorted(names, reverse=True)
    detail = ci_other.get("/clustertemplates/detail").json()["clustertemplates"]
    assert {t["uuid"] for t in detail} >= set(made)


@pytest.mark.parametrize("params, status, contains", [
    ({"limit": "0"}, 400, "Limit must be positive"),
    ({"limit": "x"}, 400, "limit"),
    ({"sort_dir": "up"}, 400, "Invalid sort direction: up"),
    ({"sort_key": "labels"}, 400, 'The sort_key value "labels" is an invalid field for sorting'),
    ({"sort_key": "nope"}, 400, "invalid field for sorting"),
    ({"marker": str(uuid.UUID(int=1))}, 404, "could not be found"),
])
def test_bad_list_parameters(ci_admin, params, status, contains):
    magnum_error(ci_admin.get("/clustertemplates", params=params), status, contains=contains)


# --- legacy baymodels ------------------------------------------------------------------------------------------


def test_baymodels_are_the_same_templates_with_baymodel_rules(ci_admin):
    r = ci_admin.post("/baymodels", json={"name": unique("bm"), "coe": "swarm", "dns_nameserver": "8.8.8.8",
                                          "labels": {"swarm_strategy": "spread"}})
    assert r.status_code == 201, r.text
    bm = r.json()
    assert bm["network_driver"] == "docker"
    assert "/v1/baymodels/" in r.headers["location"]
    assert ci_admin.get(f"/clustertemplates/{bm['uuid']}").json()["name"] == bm["name"]
    assert bm["uuid"] in {b["uuid"] for b in ci_admin.get("/baymodels").json()["baymodels"]}
    magnum_error(ci_admin.post("/baymodels", json={"coe": "swarm", "labels": {"n": 1}}), 400, contains="string")
    magnum_error(ci_admin.post("/baymodels", json={"coe": "swarm", "dns_nameserver": "8.8.8.8,1.1.1.1"}), 400,
                 contains="IPv4")
    magnum_error(ci_admin.post("/baymodels", json={"coe": "swarm", "x": 1}), 400,
                 "Unknown attribute for argument baymodel: x")
    r = ci_admin.patch(f"/baymodels/{bm['uuid']}", json=[{"op": "replace", "path": "/network_driver",
                                                          "value": "flannel"}])
    assert r.json()["network_driver"] == "flannel"
    assert ci_admin.delete(f"/baymodels/{bm['uuid']}").status_code == 204


# --- versions, discovery, auth, unknown routes ---------------------------------------------------------------


@pytest.mark.parametrize("header, served", [(None, "1.1"), ("container-infra 1.5", "1.5"),
                                            ("container-infra latest", "1.9"), ("container-infra 1.9", "1.9"),
                                            ("compute 2.1, container-infra 1.4", "1.4")])
def test_supported_versions_are_served_and_announced(server, header, served):
    headers = {"X-Auth-Token": server.token()}
    if header:
        headers["OpenStack-API-Version"] = header
    r = httpx.get(f"{server.url}/container-infra/v1/clustertemplates", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["openstack-api-version"] == f"container-infra {served}"
    assert r.headers["openstack-api-minimum-version"] == "container-infra 1.1"
    assert r.headers["openstack-api-maximum-version"] == "container-infra 1.9"
    assert "OpenStack-API-Version" in r.headers["vary"]


@pytest.mark.parametrize("header, contains", [
    ("container-infra 1.10", "Version 1.10 was requested but the minor version is not supported"),
    ("container-infra 1.0", "The supported version range is: [1.1, 1.9]."),
    ("container-infra 2.1", "Mutually exclusive versions requested"),
    ("compute 2.1", "Invalid service type for OpenStack-API-Version header"),
    ("container-infra one.two", "Invalid value for OpenStack-API-Version header"),
    ("container-infra", "Invalid service type"),
])
def test_unsupported_versions_are_406(server, header, contains):
    r = httpx.get(f"{server.url}/container-infra/v1/clusters",
                  headers={"X-Auth-Token": server.token(), "OpenStack-API-Version": header})
    detail = magnum_error(r, 406, contains=contains)
    err = r.json()["errors"][0]
    assert err["code"] == "magnum.microversion-unsupported"
    assert (err["min_version"], err["max_version"]) == ("1.1", "1.9")
    assert r.headers["openstack-api-maximum-version"] == "container-infra 1.9"
    assert detail


def test_discovery_documents(server):
    root = httpx.get(f"{server.url}/container-infra/")
    assert root.status_code == 200
    (v1,) = root.json()["versions"]
    assert (v1["id"], v1["min_version"], v1["max_version"]) == ("v1", "1.1", "1.9")
    body = httpx.get(f"{server.url}/container-infra/v1").json()
    for key in ("clustertemplates", "clusters", "baymodels", "bays", "network_drivers"):
        assert body[key][0]["href"].startswith(f"{server.url}/container-infra/v1/")
    assert httpx.get(f"{server.url}/container-infra", follow_redirects=True).status_code == 200


def test_the_catalog_lists_container_infra(server):
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"name": "Default"}, "password": ADMIN_PASSWORD}}},
        "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}}
    catalog = httpx.post(f"{server.auth_url}/auth/tokens", json=body).json()["token"]["catalog"]
    (magnum,) = [s for s in catalog if s["type"] == "container-infra"]
    assert magnum["name"] == "magnum"
    assert {e["url"] for e in magnum["endpoints"]} == {f"{server.url}/container-infra/v1"}


def test_auth_and_routing_errors_are_in_magnums_format(server, ci_admin):
    magnum_error(httpx.get(f"{server.url}/container-infra/v1/clustertemplates"), 401)
    magnum_error(httpx.get(f"{server.url}/container-infra/v1/clustertemplates",
                           headers={"X-Auth-Token": "garbage"}), 401)
    magnum_error(ci_admin.get("/frobs"), 404, "The resource could not be found.")
    magnum_error(ci_admin.put("/clustertemplates"), 405)
    magnum_error(ci_admin.delete("/clustertemplates/" + str(uuid.uuid4())), 404)


# --- CLI -------------------------------------------------------------------------------------------------------


def test_cli_cluster_template_lifecycle(server, ci_admin):
    name = unique("cli")
    r = cli_here(server, "cluster-template", "create", name, "--coe", "kubernetes", "--network-driver", "flannel",
             "--labels", "flannel_backend=vxlan,flannel_network_subnetlen=24;zz=1",
             "--external-network", "public", "--fixed-subnet-cidr", "10.1.0.0/24", "--master-lb-enabled",
             "--floating-ip-disabled", "--dns-nameserver", "8.8.8.8")
    assert r.returncode == 0, r.stdout + r.stderr
    t = ci_admin.get(f"/clustertemplates/{name}").json()
    assert t["labels"] == {"flannel_backend": "vxlan", "flannel_network_subnetlen": "24", "zz": "1",
                           "fixed_subnet_cidr": "10.1.0.0/24"}
    assert (t["master_lb_enabled"], t["floating_ip_enabled"], t["external_network_id"]) == (True, False, "public")
    listed = cli_here(server, "cluster-template", "list")
    assert listed.returncode == 0 and name in listed.stdout
    shown = cli_here(server, "cluster-template", "show", name)
    assert shown.returncode == 0 and t["uuid"] in shown.stdout and "labels_ignored" in shown.stdout
    upd = cli_here(server, "cluster-template", "update", name, "replace", "labels=flannel_backend=host-gw")
    assert upd.returncode == 0, upd.stdout + upd.stderr
    assert ci_admin.get(f"/clustertemplates/{name}").json()["labels"] == {"flannel_backend": "host-gw"}
    upd = cli_here(server, "cluster-template", "update", name, "add", "labels/zz=2")
    assert upd.returncode == 0, upd.stdout + upd.stderr
    upd = cli_here(server, "cluster-template", "update", name, "replace", "master_lb_enabled=false")
    assert upd.returncode == 0, upd.stdout + upd.stderr
    after = ci_admin.get(f"/clustertemplates/{name}").json()
    assert after["labels"]["zz"] == 2  # magnumclient JSON-decodes patch values
    assert after["master_lb_enabled"] is False
    bad = cli_here(server, "cluster-template", "update", name, "replace", "labels/flannel_backend=udp")
    assert bad.returncode == 1 and "udp" in " ".join((bad.stdout + bad.stderr).split())
    deleted = cli_here(server, "cluster-template", "delete", name)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert ci_admin.get(f"/clustertemplates/{name}").status_code == 404


def test_cli_refuses_bad_labels_and_reports_api_errors(server):
    r = cli_here(server, "cluster-template", "create", unique("cli"), "--coe", "kubernetes", "--labels", "novalue")
    assert r.returncode != 0 and "labels must be a list of KEY=VALUE not novalue" in r.stdout + r.stderr
    r = cli_here(server, "cluster-template", "create", unique("cli"), "--coe", "kubernetes",
             "--network-driver", "docker")
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 1 and "Network driver type docker is not supported" in out


# --- fuzz: whatever the body, a 2xx or a Magnum-format 4xx -------------------------------------------------

_json = st.recursive(st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**63 - 1)
                     | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=3), max_leaves=8)
_attrs = st.sampled_from(["name", "coe", "network_driver", "labels", "public", "apiserver_port", "dns_nameserver",
                          "external_network_id", "server_type", "docker_volume_size", "master_lb_enabled", "x"])
_values = st.one_of(_json, st.sampled_from(["kubernetes", "swarm", "flannel", "calico", "public", "vm"]),
                    st.fixed_dictionaries({}, optional={"flannel_backend": st.sampled_from(["vxlan", "udp", 1]),
                                                        "flannel_network_cidr": st.text(max_size=20)}))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.one_of(_json, st.dictionaries(_attrs, _values, max_size=5)),
       ops=st.lists(st.fixed_dictionaries({"op": st.sampled_from(["add", "replace", "remove"]),
                                           "path": st.sampled_from(["/name", "/labels", "/labels/flannel_backend",
                                                                    "/coe", "/public", "/apiserver_port", "/x"])},
                                          optional={"value": _values}), max_size=3))
def test_fuzzed_bodies_and_patches_never_fail_with_5xx(ci_member, body, ops):
    r = ci_member.post("/clustertemplates", json=body)
    assert r.status_code < 500, r.text
    if r.status_code != 201:
        magnum_error(r, r.status_code)
        return
    t = r.json()
    r = ci_member.patch(f"/clustertemplates/{t['uuid']}", json=ops)
    assert r.status_code < 500, r.text
    if r.status_code != 200:
        magnum_error(r, r.status_code)
    c = ci_member.post("/clusters", json={"cluster_template_id": t["uuid"], **(body if isinstance(body, dict) else {})})
    assert c.status_code < 500, c.text
    if c.status_code == 202:
        assert ci_member.delete(f"/clusters/{c.json()['uuid']}").status_code == 204
    assert ci_member.delete(f"/clustertemplates/{t['uuid']}").status_code == 204
