"""Clusters (and bays) over HTTP and through the real python-magnumclient: Magnum's
fields, inheritance from the template, rules, status codes and errors.

The server runs without its conductor (``--no-conductor``: tests/test_cluster_backends.py
and tests/test_clusters_build.py cover building), so a test plays the conductor's part by reporting a status through
``PUT /netbay/v1/status``.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from coehelp import ci_client, magnum_error, make_keypair, make_template, new_member, report_status
from conftest import ADMIN_PASSWORD, unique

# The API alone: no conductor builds these clusters; tests report statuses themselves.
SERVER_ARGS = ("--no-conductor",)


@pytest.fixture(scope="module")
def ci_admin(server):
    token = server.token()
    for name in ('key1', 'mine'):  # keypair names the tests' templates and clusters use
        make_keypair(server, token, name)
    return ci_client(server, token)


@pytest.fixture(scope="module")
def ci_member(server):
    return new_member(server)


@pytest.fixture(scope="module")
def template(ci_admin) -> dict:
    return make_template(ci_admin, name=unique("k8s"), keypair_id="key1", flavor_id="m1.small",
                         master_flavor_id="m1.medium", docker_volume_size=5, external_network_id="public",
                         labels={"flannel_backend": "host-gw", "kube_tag": "v1"})


def _create(client: httpx.Client, **body) -> str:
    r = client.post("/clusters", json=body)
    assert r.status_code == 202, r.text
    assert set(r.json()) == {"uuid"}
    return r.json()["uuid"]


# --- create ------------------------------------------------------------------------------------------


def test_create_is_202_with_uuid_and_inherits_from_the_template(ci_admin, template):
    cid = _create(ci_admin, name=unique("c"), cluster_template_id=template["uuid"], node_count=2)
    c = ci_admin.get(f"/clusters/{cid}").json()
    assert (c["status"], c["status_reason"], c["node_count"], c["master_count"]) == ("CREATE_IN_PROGRESS", None, 2, 1)
    assert c["cluster_template_id"] == template["uuid"]
    assert (c["keypair"], c["flavor_id"], c["master_flavor_id"], c["docker_volume_size"]) == (
        "key1", "m1.small", "m1.medium", 5)
    assert (c["floating_ip_enabled"], c["master_lb_enabled"], c["create_timeout"]) == (True, False, 60)
    assert c["labels"] == {"flannel_backend": "host-gw", "kube_tag": "v1"}
    assert c["labels_ignored"] == ["kube_tag"]
    for output in ("api_address", "stack_id", "coe_version"):
        assert c[output] is None
    assert (c["node_addresses"], c["master_addresses"]) == ([], [])
    assert c["links"][0]["href"].endswith(f"/container-infra/v1/clusters/{cid}")


def test_template_by_name_generated_name_and_overrides(ci_admin, template):
    cid = _create(ci_admin, cluster_template_id=template["name"], keypair="mine", flavor_id="m1.large",
                  floating_ip_enabled=False, master_lb_enabled=True, master_count=3, create_timeout=5)
    c = ci_admin.get(f"/clusters/{cid}").json()
    assert c["name"].endswith("-cluster")
    assert (c["keypair"], c["flavor_id"], c["floating_ip_enabled"], c["master_lb_enabled"]) == (
        "mine", "m1.large", False, True)
    assert (c["master_count"], c["create_timeout"]) == (3, 5)


def test_cluster_labels_replace_the_templates_unless_merged(ci_admin, template):
    replaced = ci_admin.get("/clusters/" + _create(ci_admin, cluster_template_id=template["uuid"],
                                                    labels={"flannel_network_subnetlen": "25"})).json()
    assert replaced["labels"] == {"flannel_network_subnetlen": "25"}
    merged = ci_admin.get("/clusters/" + _create(ci_admin, cluster_template_id=template["uuid"], merge_labels=True,
                                                  labels={"flannel_backend": "vxlan", "x": "y"})).json()
    assert merged["labels"] == {"flannel_backend": "vxlan", "kube_tag": "v1", "x": "y"}
    assert merged["labels_ignored"] == ["kube_tag", "x"]


def test_master_count_above_one_needs_master_lb(ci_admin, template):
    r = ci_admin.post("/clusters", json={"cluster_template_id": template["uuid"], "master_count": 3})
    magnum_error(r, 400, "master_count must be 1 when master_lb_enabled is False")
    lb = make_template(ci_admin, master_lb_enabled=True)
    _create(ci_admin, cluster_template_id=lb["uuid"], master_count=3)
    r = ci_admin.post("/clusters", json={"cluster_template_id": lb["uuid"], "master_count": 3,
                                         "master_lb_enabled": False})
    magnum_error(r, 400, "master_count must be 1 when master_lb_enabled is False")


# A fixed UUID, not uuid4(): every pytest-xdist worker must collect the same test ids.
@pytest.mark.parametrize("ident", ["no-such-template", "1b5b2c9e-6f0e-4d3a-9c1e-0a7e5f3d2b41"])
def test_unknown_template_is_400(ci_admin, ident):
    magnum_error(ci_admin.post("/clusters", json={"cluster_template_id": ident}), 400,
                 f"ClusterTemplate {ident} could not be found.")


def test_another_projects_private_template_is_unknown_but_a_public_one_is_usable(ci_admin, ci_member, template):
    magnum_error(ci_member.post("/clusters", json={"cluster_template_id": template["uuid"]}), 400,
                 f"ClusterTemplate {template['uuid']} could not be found.")
    public = make_template(ci_admin, public=True)
    cid = _create(ci_member, cluster_template_id=public["uuid"])
    assert ci_member.get(f"/clusters/{cid}").json()["project_id"] != "admin"
    magnum_error(ci_admin.delete(f"/clustertemplates/{public['uuid']}"), 400, contains="is referenced")


def test_a_hidden_template_makes_clusters_for_admins_only(ci_admin, ci_member):
    """Magnum's cluster create: ``if cluster_template.hidden and not context.is_admin:
    raise NotAuthorized()`` — a public hidden template is shown by its uuid, not used."""
    hidden = make_template(ci_admin, public=True, hidden=True)
    assert ci_member.get(f"/clustertemplates/{hidden['uuid']}").status_code == 200
    magnum_error(ci_member.post("/clusters", json={"cluster_template_id": hidden["uuid"]}), 403, "Not authorized.")
    _create(ci_admin, cluster_template_id=hidden["uuid"])


@pytest.mark.parametrize("body, contains", [
    ({}, "Invalid input for field/attribute cluster_template_id. Value: 'Unset'. Mandatory field missing."),
    ({"name": "1abc"}, "Value should match the pattern ^[a-zA-Z][a-zA-Z0-9_.-]*$"),
    ({"name": "a b"}, "Value should match the pattern"),
    ({"name": "a" * 243}, "maximum character requirement of 242"),
    ({"node_count": -1}, "Value should be greater or equal to 0"),
    ({"node_count": 0}, "Resizing a nodegroup to zero is not supported in the provided microversion."),
    ({"node_count": "three"}, "Wrong type"),
    ({"node_count": 2.5}, "Wrong type"),
    ({"node_count": True}, "Wrong type"),
    ({"node_count": 2**40}, "lower or equal to"),
    ({"master_count": 0}, "greater or equal to 1"),
    ({"create_timeout": -1}, "greater or equal to 0"),
    ({"floating_ip_enabled": "sometimes"}, "Unrecognized value"),
    ({"labels": "a=b"}, "Wrong type"),
    ({"labels": {"flannel_backend": "gre"}}, "Invalid value 'gre' for label flannel_backend"),
    ({"labels": {"flannel_network_cidr": "10.0.0.0/8", "flannel_network_subnetlen": 6}}, "flannel_network_subnetlen"),
    ({"status": "CREATE_COMPLETE", "frobs": 1}, "Unknown attribute for argument cluster: frobs"),
    ({"fixed_network": "nowhere"}, "Unable to find fixed network nowhere."),
    ({"discovery_url": "https://d/" + "x" * 300}, "maximum character requirement of 255"),
    ({"keypair": "k\u0000"}, "NUL"),
])
def test_bad_cluster_bodies_are_400(ci_admin, template, body, contains):
    body = {"cluster_template_id": template["uuid"], **body} if body else body
    magnum_error(ci_admin.post("/clusters", json=body), 400, contains=contains)


@pytest.mark.parametrize("raw", [b"{", b"", b"[]", b"42", b'{"cluster_template_id": 5}'])
def test_malformed_cluster_bodies_are_400(ci_admin, raw):
    magnum_error(ci_admin.post("/clusters", content=raw, headers={"Content-Type": "application/json"}), 400)


def test_status_read_only_attributes_are_not_taken_from_the_body(ci_admin, template):
    cid = _create(ci_admin, cluster_template_id=template["uuid"], status="CREATE_COMPLETE", api_address="x")
    c = ci_admin.get(f"/clusters/{cid}").json()
    assert (c["status"], c["api_address"]) == ("CREATE_IN_PROGRESS", None)


# --- update: only node_count, only when settled ------------------------------------------------------------


def test_node_count_is_patchable_once_the_cluster_is_complete(server, ci_admin, template):
    cid = _create(ci_admin, name=unique("scale"), cluster_template_id=template["uuid"])
    scale = [{"op": "replace", "path": "/node_count", "value": 3}]
    magnum_error(ci_admin.patch(f"/clusters/{cid}", json=scale), 400,
                 'Updating a cluster when status is "CREATE_IN_PROGRESS" is not supported.')
    report_status(server, cid, "CREATE_COMPLETE")
    r = ci_admin.patch(f"/clusters/{cid}", json=scale)
    assert r.status_code == 202, r.text
    assert r.json() == {"uuid": cid}
    c = ci_admin.get(f"/clusters/{cid}").json()
    assert (c["node_count"], c["status"]) == (3, "UPDATE_IN_PROGRESS")
    magnum_error(ci_admin.patch(f"/clusters/{cid}", json=scale), 400, contains='status is "UPDATE_IN_PROGRESS"')
    report_status(server, cid, "UPDATE_FAILED: minion 3 did not come up")
    c = ci_admin.get(f"/clusters/{c['name']}").json()
    assert (c["status"], c["status_reason"]) == ("UPDATE_FAILED", "minion 3 did not come up")
    report_status(server, cid, "UPDATE_COMPLETE")
    r = ci_admin.patch(f"/clusters/{cid}", json=[{"op": "replace", "path": "/node_count", "value": "1"}])
    assert r.status_code == 202 and ci_admin.get(f"/clusters/{cid}").json()["node_count"] == 1


@pytest.mark.parametrize("ops, message", [
    ([{"op": "replace", "path": "/name", "value": "other"}], "cannot change cluster property(ies) name."),
    ([{"op": "add", "path": "/labels/x", "value": "1"}], "cannot change cluster property(ies) labels."),
    ([{"op": "replace", "path": "/master_count", "value": 3},
      {"op": "replace", "path": "/node_count", "value": 2}], "cannot change cluster property(ies) master_count."),
    ([{"op": "replace", "path": "/create_timeout", "value": 1},
      {"op": "replace", "path": "/keypair", "value": "k"}], "cannot change cluster property(ies) create_timeout, keypair."),
    ([{"op": "remove", "path": "/cluster_template_id"}],
     "Invalid input for field/attribute patch. Value: '/cluster_template_id'. '/cluster_template_id' is a mandatory "
     "attribute and can not be removed"),
    ([{"op": "replace", "path": "/api_address", "value": "x"}], None),
    ([{"op": "replace", "path": "/stack_id", "value": "x"}], None),
    ([{"op": "replace", "path": "/node_count", "value": 0}],
     "Resizing a nodegroup to zero is not supported in the provided microversion."),
    ([{"op": "replace", "path": "/node_count", "value": -1}], None),
    ([{"op": "replace", "path": "/node_count", "value": "many"}], None),
    ([{"op": "replace", "path": "/status", "value": "CREATE_COMPLETE"}], None),
    ({"node_count": 2}, None),
])
def test_only_node_count_can_change(server, ci_admin, template, ops, message):
    cid = _create(ci_admin, cluster_template_id=template["uuid"])
    report_status(server, cid, "CREATE_COMPLETE")
    magnum_error(ci_admin.patch(f"/clusters/{cid}", json=ops), 400, message)


def test_status_reports_are_checked(server, ci_admin, template):
    cid = _create(ci_admin, cluster_template_id=template["uuid"])
    r = httpx.put(f"{server.url}/netbay/v1/status", json={"clusters": {cid: "DONE"}},
                  headers={"X-Auth-Token": server.token()})
    assert r.status_code == 400
    r = httpx.put(f"{server.url}/netbay/v1/status", json={"clusters": {str(uuid.uuid4()): "CREATE_COMPLETE"}},
                  headers={"X-Auth-Token": server.token()})
    assert r.status_code == 200 and r.json()["updated"]["clusters"] == []


# --- read, list, scope, delete ---------------------------------------------------------------------------


def test_list_summary_and_detail(ci_admin, template):
    cid = _create(ci_admin, name=unique("lst"), cluster_template_id=template["uuid"])
    summary = {c["uuid"]: c for c in ci_admin.get("/clusters").json()["clusters"]}[cid]
    assert {"uuid", "name", "cluster_template_id", "node_count", "master_count", "status", "stack_id",
            "create_timeout", "links"} <= set(summary)
    assert "api_address" not in summary and "node_addresses" not in summary
    detail = {c["uuid"]: c for c in ci_admin.get("/clusters/detail").json()["clusters"]}[cid]
    assert "api_address" in detail and "node_addresses" in detail and "status_reason" in detail
    page = ci_admin.get("/clusters", params={"limit": 1}).json()
    assert len(page["clusters"]) == 1 and "marker=" in page["next"]


def test_clusters_are_scoped_to_their_project(ci_admin, ci_member, template):
    public = make_template(ci_admin, public=True)
    mine = _create(ci_member, name=unique("mine"), cluster_template_id=public["uuid"])
    theirs = _create(ci_admin, name=unique("theirs"), cluster_template_id=template["uuid"])
    listed = {c["uuid"] for c in ci_member.get("/clusters").json()["clusters"]}
    assert mine in listed and theirs not in listed
    magnum_error(ci_member.get(f"/clusters/{theirs}"), 404, f"Cluster {theirs} could not be found.")
    magnum_error(ci_member.delete(f"/clusters/{theirs}"), 404)
    assert mine in {c["uuid"] for c in ci_admin.get("/clusters").json()["clusters"]}
    assert ci_admin.get(f"/clusters/{mine}").status_code == 200


@pytest.mark.parametrize("ident", ["a%00b", "%00", "x" * 2000])
def test_odd_identifiers_in_paths_are_404(ci_admin, ident):
    for collection in ("clusters", "clustertemplates", "bays", "baymodels"):
        magnum_error(ci_admin.get(f"/{collection}/{ident}"), 404)
        magnum_error(ci_admin.delete(f"/{collection}/{ident}"), 404)


def test_ambiguous_cluster_names_are_409(ci_admin, template):
    name = unique("twin")
    _create(ci_admin, name=name, cluster_template_id=template["uuid"])
    _create(ci_admin, name=name, cluster_template_id=template["uuid"])
    magnum_error(ci_admin.get(f"/clusters/{name}"), 409,
                 "Multiple clusters exist with same name. Please use the cluster uuid instead.")


def test_delete_is_204_and_frees_the_template(ci_admin):
    t = make_template(ci_admin)
    cid = _create(ci_admin, cluster_template_id=t["uuid"])
    r = ci_admin.delete(f"/clusters/{cid}")
    assert r.status_code == 204 and not r.content
    magnum_error(ci_admin.get(f"/clusters/{cid}"), 404, f"Cluster {cid} could not be found.")
    magnum_error(ci_admin.delete(f"/clusters/{cid}"), 404)
    assert ci_admin.delete(f"/clustertemplates/{t['uuid']}").status_code == 204


# --- legacy bays ------------------------------------------------------------------------------------------------


def test_bays_at_1_1_are_synchronous_and_renamed(server, template):
    bays = ci_client(server, server.token())  # no version header: 1.1
    r = bays.post("/bays", json={"name": unique("bay"), "baymodel_id": template["uuid"], "node_count": 2,
                                 "bay_create_timeout": 10})
    assert r.status_code == 201, r.text
    bay = r.json()
    assert (bay["baymodel_id"], bay["bay_create_timeout"], bay["node_count"]) == (template["uuid"], 10, 2)
    assert "cluster_template_id" not in bay and "bay_faults" in bay
    assert "/v1/bays/" in r.headers["location"]
    listed = {b["uuid"]: b for b in bays.get("/bays").json()["bays"]}[bay["uuid"]]
    assert set(listed) == {"uuid", "name", "baymodel_id", "node_count", "status", "bay_create_timeout",
                           "master_count", "stack_id", "links"}
    assert bays.get(f"/clusters/{bay['uuid']}").json()["cluster_template_id"] == template["uuid"]
    magnum_error(bays.post("/bays", json={"name": "x"}), 400,
                 "Invalid input for field/attribute baymodel_id. Value: 'Unset'. Mandatory field missing.")
    magnum_error(bays.post("/bays", json={"baymodel_id": template["uuid"], "cluster_template_id": "x"}), 400,
                 "Unknown attribute for argument bay: cluster_template_id")
    report_status(server, bay["uuid"], "CREATE_COMPLETE")
    r = bays.patch(f"/bays/{bay['uuid']}", json=[{"op": "replace", "path": "/node_count", "value": 1}])
    assert r.status_code == 200 and r.json()["node_count"] == 1
    assert bays.delete(f"/bays/{bay['uuid']}").status_code == 204


def test_bays_from_1_2_are_asynchronous(server, template):
    bays = ci_client(server, server.token(), version="1.2")
    r = bays.post("/bays", json={"baymodel_id": template["name"]})
    assert r.status_code == 202 and set(r.json()) == {"uuid"}
    bay_id = r.json()["uuid"]
    report_status(server, bay_id, "CREATE_COMPLETE")
    r = bays.patch(f"/bays/{bay_id}", json=[{"op": "replace", "path": "/node_count", "value": 4}])
    assert r.status_code == 202 and r.json() == {"uuid": bay_id}
    magnum_error(bays.patch(f"/bays/{bay_id}", json=[{"op": "remove", "path": "/baymodel_id"}]), 400,
                 contains="mandatory attribute")


# --- the real python-magnumclient -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def magnum(server):
    pytest.importorskip("magnumclient")
    from keystoneauth1 import session as ks_session
    from keystoneauth1.identity import v3
    from magnumclient.client import Client

    auth = v3.Password(auth_url=server.auth_url, username="admin", password=ADMIN_PASSWORD,
                       project_name="admin", user_domain_name="Default", project_domain_name="Default")
    return Client("1", session=ks_session.Session(auth=auth), region_name="RegionOne")


def test_magnumclient_templates_and_clusters(server, magnum):
    from magnumclient import exceptions as mexc

    name = unique("mc")
    ct = magnum.cluster_templates.create(name=name, coe="kubernetes", external_network_id="public",
                                         labels={"flannel_backend": "host-gw", "flannel_network_subnetlen": "25"},
                                         master_lb_enabled=True)
    assert ct.network_driver == "flannel" and ct.labels["flannel_backend"] == "host-gw"
    assert name in {t.name for t in magnum.cluster_templates.list()}
    assert magnum.cluster_templates.get(name).uuid == ct.uuid
    updated = magnum.cluster_templates.update(ct.uuid, [
        {"op": "replace", "path": "/labels", "value": str({"flannel_backend": "vxlan"})},
        {"op": "replace", "path": "/flavor_id", "value": "m1.tiny"}])
    assert updated.labels == {"flannel_backend": "vxlan"} and updated.flavor_id == "m1.tiny"

    # (bad templates through magnumclient, on both backends: tests/test_cluster_backends.py)
    with pytest.raises(mexc.NotFound):
        magnum.cluster_templates.get(str(uuid.uuid4()))

    cluster = magnum.clusters.create(name=unique("mcc"), cluster_template_id=ct.uuid, node_count=2, master_count=3)
    got = magnum.clusters.get(cluster.uuid)
    assert (got.status, got.node_count, got.master_count) == ("CREATE_IN_PROGRESS", 2, 3)
    assert cluster.uuid in {c.uuid for c in magnum.clusters.list()}
    with pytest.raises(mexc.BadRequest) as bad:
        magnum.clusters.create(cluster_template_id="missing-" + name)
    assert "could not be found" in str(bad.value)
    with pytest.raises(mexc.BadRequest):
        magnum.clusters.update(cluster.uuid, [{"op": "replace", "path": "/node_count", "value": 3}])
    report_status(server, cluster.uuid, "CREATE_COMPLETE")
    magnum.clusters.update(cluster.uuid, [{"op": "replace", "path": "/node_count", "value": 3}])
    assert magnum.clusters.get(cluster.uuid).node_count == 3
    with pytest.raises(mexc.BadRequest) as bad:
        magnum.clusters.update(cluster.uuid, [{"op": "replace", "path": "/name", "value": "x"}])
    assert "cannot change cluster property(ies) name" in str(bad.value)
    with pytest.raises(mexc.BadRequest) as bad:
        magnum.cluster_templates.delete(ct.uuid)
    assert "is referenced by one or multiple clusters" in str(bad.value)

    magnum.clusters.delete(cluster.uuid)
    with pytest.raises(mexc.NotFound):
        magnum.clusters.get(cluster.uuid)
    magnum.cluster_templates.delete(ct.uuid)
    assert ct.uuid not in {t.uuid for t in magnum.cluster_templates.list()}
