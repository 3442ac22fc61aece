"""Issue 25 (hardening) defects 7, 10 and 11 and issue 24's label whitespace, through
the real python-magnumclient and ``openstack coe`` against a netbay API server.

- Pod/service ranges a cluster cannot use (loopback, multicast, link-local, reserved,
  the default route) are refused at the template naming the label and the problem; so
  are ranges overlapping the external network or the private subnet in a way the
  driver cannot route — at the template where it knows them, and at cluster create
  (before anything is made) for what only the cluster names. The spec's own
  ``flannel_network_cidr=10.0.0.0/8`` keeps working.
- Labels have limits (count, key, value, total) on templates and clusters, create and
  PATCH, refused in Magnum's error format without echoing the whole value back.
- A labels PATCH that is not a dict of literals says what is wrong with the value.
- A label a driver reads is stored as it is read (``" vxlan"`` → ``vxlan``): the HOT
  export, the agent's config and cluster create see the value the API accepted.

The server runs without its conductor: what a create would make is the conductor's
job, so "nothing made" is checked on the API's own lists (clusters, networks, …).
"""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest
from coehelp import magnum_error, make_template
from conftest import ADMIN_PASSWORD, unique

from netbay.drivers import registry
from tests.osc import openstack as run_openstack

SERVER_ARGS = ("--no-conductor",)
pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)
PUBLIC_SUBNET = "172.24.4.0/24"  # netbay's bootstrap external network ``public``
LISTS = {"/container-infra/v1/clusters": "clusters", "/network/v2.0/networks": "networks",
         "/network/v2.0/subnets": "subnets", "/network/v2.0/ports": "ports",
         "/network/v2.0/routers": "routers", "/netbay/v1/sandboxes": "sandboxes"}


@pytest.fixture(scope="module")
def magnum(server):
    from keystoneauth1 import session as ks_session
    from keystoneauth1.identity import v3
    from magnumclient.client import Client

    auth = v3.Password(auth_url=server.auth_url, username="admin", password=ADMIN_PASSWORD,
                       project_name="admin", user_domain_name="Default", project_domain_name="Default")
    return Client("1", session=ks_session.Session(auth=auth), region_name="RegionOne")


def osc(server, *args: str) -> subprocess.CompletedProcess:
    """``openstack`` as a user types it (python-magnumclient's OSC plugin)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_USERNAME="admin", OS_PASSWORD=ADMIN_PASSWORD,
               OS_PROJECT_NAME="admin", OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default",
               OS_IDENTITY_API_VERSION="3")
    return run_openstack(*args, env=env)


def refused_by_magnumclient(call, *args, **kwargs) -> str:
    """The call raises magnumclient's BadRequest (a 400); the error's detail (magnumclient
    prints the title, Magnum's message up to its first full stop, and keeps the detail)."""
    from magnumclient import exceptions as mexc

    with pytest.raises(mexc.BadRequest) as bad:
        call(*args, **kwargs)
    assert bad.value.http_status == 400
    assert bad.value.details.startswith(bad.value.message)
    return bad.value.details


def snapshot(raw: httpx.Client) -> dict[str, set[str]]:
    out = {}
    for path, key in LISTS.items():
        r = raw.get(path)
        assert r.status_code == 200, r.text
        out[key] = {item.get("uuid") or item["id"] for item in r.json()[key]}
    return out


# --- defect 7: pod CIDRs that cannot work ---------------------------------------------------------------


UNUSABLE = [
    ("kubernetes", "flannel", "flannel_network_cidr", "127.0.0.0/8", "loopback range 127.0.0.0/8"),
    ("kubernetes", "flannel", "flannel_network_cidr", "224.0.0.0/4", "multicast range 224.0.0.0/4"),
    ("kubernetes", "flannel", "flannel_network_cidr", "0.0.0.0/0", "is the default route"),
    ("kubernetes", "flannel", "flannel_network_cidr", "169.254.0.0/16", "link-local range 169.254.0.0/16"),
    ("kubernetes", "flannel", "flannel_network_cidr", "96.0.0.0/3", "overlaps the loopback range"),
    ("kubernetes", "flannel", "flannel_network_cidr", "0.0.0.0/8", "'this network'"),
    ("kubernetes", "calico", "calico_ipv4pool", "127.1.0.0/16", "loopback range"),
    ("kubernetes", "calico", "calico_ipv4pool", "240.0.0.0/8", "reserved (class E, broadcast)"),
    ("swarm", "docker", "docker_overlay_cidr", "224.10.0.0/16", "multicast range"),
    ("kubernetes", "kuryr", "kuryr_pod_subnet_pool", "169.254.0.0/16", "link-local range"),
    ("kubernetes", "kuryr", "kuryr_service_cidr", "127.0.0.0/16", "loopback range"),
    ("kubernetes", "flannel", "fixed_subnet_cidr", "127.0.0.0/24", "loopback range"),
    ("kubernetes", "kuryr", "kuryr_pod_subnet_pool_ipv6", "fe80::/64", "IPv6 link-local range fe80::/10"),
    ("kubernetes", "kuryr", "kuryr_service_cidr_ipv6", "ff05::/112", "IPv6 multicast range ff00::/8"),
    ("kubernetes", "kuryr", "kuryr_service_cidr_ipv6", "::/0", "is the default route"),
]


@pytest.mark.parametrize("coe, driver, label, cidr, problem", UNUSABLE)
def test_unusable_ranges_are_refused_at_the_template_naming_label_and_problem(
        ci, magnum, coe, driver, label, cidr, problem):
    body = {"name": unique("bad"), "coe": coe, "network_driver": driver, "external_network_id": "public",
            "labels": {label: cidr}}
    detail = magnum_error(ci.post("/clustertemplates", json=body), 400)
    assert detail.startswith(f"Invalid value '{cidr}' for label {label}: ") and problem in detail, detail
    message = refused_by_magnumclient(magnum.cluster_templates.create, **body)
    assert label in message and problem in message
    # A cluster's own labels get the same check (its template is fine).
    template = make_template(ci, name=unique("ok"), coe=coe, network_driver=driver, external_network_id="public")
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": template["uuid"],
                                   "labels": {label: cidr}})
    assert problem in magnum_error(r, 400)


def test_the_specs_10_0_0_0_8_example_is_accepted_through_openstack_coe(server, ci, magnum):
    name = unique("spec")
    r = osc(server, "coe", "cluster", "template", "create", name, "--coe", "kubernetes", "--image", "fedora-coreos", "--network-driver",
            "flannel", "--external-network", "public", "--labels",
            "flannel_network_cidr=10.0.0.0/8,flannel_network_subnetlen=22,flannel_backend=vxlan", "-f", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    template = ci.get(f"/clustertemplates/{name}").json()
    assert template["labels"] == {"flannel_network_cidr": "10.0.0.0/8", "flannel_network_subnetlen": "22",
                                  "flannel_backend": "vxlan"}
    # The private subnet 10.0.0.0/24 lies in the first /22, which flannel keeps free.
    cluster = magnum.clusters.create(name=unique("spec"), cluster_template_id=template["uuid"], node_count=2)
    assert magnum.clusters.get(cluster.uuid).status == "CREATE_IN_PROGRESS"
    # So does any private subnet of that first /22, but not one a node's lease would hold.
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": template["uuid"],
                                   "labels": {**template["labels"], "fixed_subnet_cidr": "10.0.3.0/24"}})
    assert r.status_code == 202, r.text
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": template["uuid"],
                                   "labels": {**template["labels"], "fixed_subnet_cidr": "10.0.4.0/24"}})
    assert "overlaps the cluster's private subnet 10.0.4.0/24" in magnum_error(r, 400)


@pytest.mark.parametrize("driver, labels, contains", [
    ("calico", {"calico_ipv4pool": "10.0.0.0/16"},   # calico uses every block, the first one too
     "Label calico_ipv4pool=10.0.0.0/16 overlaps the cluster's private subnet 10.0.0.0/24"),
    ("flannel", {"flannel_network_cidr": "10.0.0.0/16", "fixed_subnet_cidr": "10.0.5.0/24"},
     "Label flannel_network_cidr=10.0.0.0/16 overlaps the cluster's private subnet 10.0.5.0/24"),
    ("flannel", {"fixed_subnet_cidr": "10.0.0.0/8"},  # the private subnet holds the pods' network
     "Label flannel_network_cidr=10.100.0.0/16 overlaps the cluster's private subnet 10.0.0.0/8"),
    ("kuryr", {"kuryr_service_cidr": "10.0.0.0/16"},
     "Label kuryr_service_cidr=10.0.0.0/16 overlaps the cluster's private subnet 10.0.0.0/24"),
    ("flannel", {"flannel_network_cidr": "172.24.0.0/16"},
     f"Label flannel_network_cidr=172.24.0.0/16 overlaps the external network's subnet {PUBLIC_SUBNET}"),
    ("calico", {"calico_ipv4pool": "172.24.4.128/25"},
     f"Label calico_ipv4pool=172.24.4.128/25 overlaps the external network's subnet {PUBLIC_SUBNET}"),
    # IPv6 (issue 28): a driver that cannot do it says so by name; kuryr's dual-stack ranges are checked.
    ("calico", {"calico_ipv6pool": "fd00:1::/116"},
     "Label calico_ipv6pool=fd00:1::/116 has room for 64 /122 blocks, fewer than calico_ipv4pool=192.168.0.0/16's "
     "1024 /26 blocks (each node holds one of each): use /112 or shorter."),
    ("calico", {"calico_ipv6pool": "fd00:1::/48", "calico_ipv4pool_ipip": "Always"},
     "Label calico_ipv6pool=fd00:1::/48 cannot be used with calico_ipv4pool_ipip=Always: IP-in-IP carries IPv4 only"),
    ("flannel", {"flannel_ipv6_network_cidr": "fd00:1::/64"},
     "Label flannel_ipv6_network_cidr=fd00:1::/64 must be shorter than /64: each node gets a /64 out of it"),
    ("flannel", {"flannel_ipv6_network_cidr": "fd00:1::/60"},
     "Label flannel_ipv6_network_cidr=fd00:1::/60 has room for 16 node /64s, fewer than "
     "flannel_network_cidr=10.100.0.0/16's 256 /24s (each node holds one of each): use /56 or shorter."),
    ("kuryr", {"kuryr_pod_subnet_pool_ipv6": "fd00:10::/56"},
     "Label kuryr_pod_subnet_pool_ipv6=fd00:10::/56 asks for a dual-stack cluster, which needs IPv6 pod "
     "subnets and IPv6 cluster IPs: set kuryr_service_cidr_ipv6 too"),
    ("kuryr", {"kuryr_pod_subnet_pool_ipv6": "fd00:10::/56", "kuryr_service_cidr_ipv6": "fd00:96::/64"},
     "Label kuryr_service_cidr_ipv6=fd00:96::/64 is too large: an IPv6 service range is /108 or longer"),
    ("kuryr", {"kuryr_pod_subnet_pool_ipv6": "fd00::/48", "kuryr_service_cidr_ipv6": "fd00::/112"},
     "Labels kuryr_pod_subnet_pool_ipv6=fd00::/48 and kuryr_service_cidr_ipv6=fd00::/112 overlap"),
    ("kuryr", {"kuryr_service_cidr_ipv6": "10.96.0.0/16"},
     "Invalid value '10.96.0.0/16' for label kuryr_service_cidr_ipv6: expecting an IPv6 network"),
])
def test_ranges_the_driver_cannot_route_are_refused_at_the_template(ci, magnum, driver, labels, contains):
    body = {"name": unique("ovl"), "coe": "kubernetes", "network_driver": driver, "external_network_id": "public",
            "labels": labels}
    assert contains in magnum_error(ci.post("/clustertemplates", json=body), 400)
    assert contains in refused_by_magnumclient(magnum.cluster_templates.create, **body)
    ok = make_template(ci, name=unique("ovl"), network_driver=driver, external_network_id="public")
    r = ci.patch(f"/clustertemplates/{ok['uuid']}", json=[{"op": "replace", "path": "/labels", "value": labels}])
    assert contains in magnum_error(r, 400)
    assert ci.get(f"/clustertemplates/{ok['uuid']}").json()["labels"] == {}


def test_a_dual_stack_flannel_template_is_accepted(ci) -> None:
    """flannel's IPv6Network (issue 28.5): no longer refused; the typed config carries it."""
    labels = {"flannel_ipv6_network_cidr": "fd00:10::/56", "flannel_backend": "host-gw"}
    template = make_template(ci, name=unique("v6"), network_driver="flannel", external_network_id="public",
                             labels=labels)
    assert template["labels"]["flannel_ipv6_network_cidr"] == "fd00:10::/56"
    cfg = registry.config("flannel", labels)
    assert (cfg.network6, cfg.subnet_len6, cfg.pod_networks) == ("fd00:10::/56", 64, ["10.100.0.0/16", "fd00:10::/56"])


def test_a_dual_stack_calico_template_is_accepted(ci) -> None:
    """calico's IPv6 pool (issue 28.5): no longer refused (but with IP-in-IP, which is IPv4 only)."""
    labels = {"calico_ipv6pool": "fd00:20::/64", "calico_ipv4pool_vxlan": "Always"}
    template = make_template(ci, name=unique("v6"), network_driver="calico", external_network_id="public",
                             labels=labels)
    assert template["labels"]["calico_ipv6pool"] == "fd00:20::/64"
    cfg = registry.config("calico", labels)
    assert (cfg.pool6, cfg.block_len6, cfg.pod_networks) == ("fd00:20::/64", 122, ["192.168.0.0/16", "fd00:20::/64"])
    assert cfg.lease6("192.168.0.64/26") == "fd00:20::40/122"
    assert cfg.pod_address6("192.168.0.64/26", "192.168.0.66") == "fd00:20::42"


def test_overlap_with_the_external_network_is_refused_at_cluster_create_with_nothing_made(
        ci, raw, magnum):
    template = make_template(ci, name=unique("ext"), network_driver="flannel", external_network_id="public",
                             labels={"flannel_backend": "vxlan"})
    before = snapshot(raw)
    labels = {"flannel_network_cidr": "172.16.0.0/12"}   # holds the external 172.24.4.0/24
    message = refused_by_magnumclient(magnum.clusters.create, name=unique("ext"),
                                      cluster_template_id=template["uuid"], labels=labels)
    want = f"Label flannel_network_cidr=172.16.0.0/12 overlaps the external network's subnet {PUBLIC_SUBNET}"
    assert want in message
    r = ci.post("/clusters", json={"name": unique("ext"), "cluster_template_id": template["uuid"],
                                   "labels": labels, "merge_labels": True})
    assert magnum_error(r, 400).startswith(want)
    assert snapshot(raw) == before


def test_a_named_fixed_subnet_is_checked_at_cluster_create(ci, raw):
    net = raw.post("/network/v2.0/networks", json={"network": {"name": unique("fixed")}}).json()["network"]
    try:
        subnet = raw.post("/network/v2.0/subnets", json={"subnet": {
            "network_id": net["id"], "cidr": "10.50.3.0/24", "ip_version": 4, "name": unique("fixed")}})
        assert subnet.status_code == 201, subnet.text
        template = make_template(ci, name=unique("fx"), network_driver="flannel", external_network_id="public")
        before = snapshot(raw)
        body = {"name": unique("fx"), "cluster_template_id": template["uuid"], "fixed_network": net["id"],
                "fixed_subnet": subnet.json()["subnet"]["id"]}
        r = ci.post("/clusters", json={**body, "labels": {"flannel_network_cidr": "10.50.0.0/16"}})
        assert ("Label flannel_network_cidr=10.50.0.0/16 overlaps the cluster's private subnet 10.50.3.0/24"
                in magnum_error(r, 400))
        assert snapshot(raw) == before
        r = ci.post("/clusters", json={**body, "labels": {"flannel_network_cidr": "10.60.0.0/16"}})
        assert r.status_code == 202, r.text
        assert ci.delete(f"/clusters/{r.json()['uuid']}").status_code == 204
    finally:
        raw.delete(f"/network/v2.0/networks/{net['id']}")


# --- defect 10: limits -----------------------------------------------------------------------------------


BIG = "x" * 900_000
MANY = {f"k{i}": "v" for i in range(10_000)}


def _short_refusal(r: httpx.Response, contains: str) -> None:
    detail = magnum_error(r, 400, contains=contains)
    assert detail.startswith("Invalid input for field/attribute labels. Value: ")
    assert len(r.content) < 2000, "the refused value is not echoed back whole"


@pytest.mark.parametrize("labels, contains", [
    ({"kube_tag": BIG}, "Label kube_tag has a value of 900000 characters, more than the 4096 allowed."),
    (MANY, "10000 labels are more than the 256 allowed."),
    ({f"k{i}": "v" * 4000 for i in range(20)}, "more than the 65535 allowed."),
])
def test_label_limits_on_templates_and_clusters_create_and_patch(ci, magnum, labels, contains):
    _short_refusal(ci.post("/clustertemplates", json={"coe": "kubernetes", "labels": labels}), contains)
    template = make_template(ci, name=unique("lim"))
    r = ci.patch(f"/clustertemplates/{template['uuid']}",
                 json=[{"op": "replace", "path": "/labels", "value": labels}])
    _short_refusal(r, contains)
    _short_refusal(ci.post("/clusters", json={"cluster_template_id": template["uuid"], "labels": labels}), contains)
    r = ci.post("/clusters", json={"name": unique("lim"), "cluster_template_id": template["uuid"]})
    assert r.status_code == 202, r.text
    cluster = r.json()["uuid"]
    r = ci.patch(f"/clusters/{cluster}", json=[{"op": "replace", "path": "/labels", "value": labels}])
    _short_refusal(r, contains)
    assert contains in refused_by_magnumclient(magnum.cluster_templates.create, name=unique("lim"),
                                               coe="kubernetes", labels=labels)


def test_one_label_added_by_patch_is_held_to_the_limit_too(ci):
    template = make_template(ci, name=unique("lim"), labels={"a": "b"})
    r = ci.patch(f"/clustertemplates/{template['uuid']}", json=[{"op": "add", "path": "/labels/big", "value": BIG}])
    _short_refusal(r, "Label big has a value of 900000 characters")
    assert ci.get(f"/clustertemplates/{template['uuid']}").json()["labels"] == {"a": "b"}
    for value in (BIG, "{'a': " + "1+" * 400_000 + "1}"):   # not a dict, nor literals: not echoed whole
        r = ci.patch(f"/clustertemplates/{template['uuid']}",
                     json=[{"op": "replace", "path": "/labels", "value": value}])
        magnum_error(r, 400, contains="Couldn't apply patch")
        assert len(r.content) < 4000, r.content[:300]


def test_labels_at_the_limits_are_accepted(ci):
    labels = {f"k{i}": "v" for i in range(255)} | {"k" * 255: "v" * 4096}
    template = make_template(ci, name=unique("lim"), labels=labels)
    assert template["labels"] == labels
    r = ci.post("/clusters", json={"name": unique("lim"), "cluster_template_id": template["uuid"]})
    assert r.status_code == 202, r.text


# --- defect 11: the PATCH wording -------------------------------------------------------------------------


@pytest.mark.parametrize("value, says", [
    ("{'flannel_backend': 1+2}", "1+2 is an expression (BinOp), not a quoted string, number or boolean"),
    ("{'flannel_backend': vxlan}", "vxlan is a name, not a quoted string, number or boolean"),
    ("{'a': open('x')}", "open('x') is an expression (Call)"),
])
def test_a_labels_patch_that_is_no_dict_of_literals_says_what_is_wrong(ci, magnum, value, says):
    template = make_template(ci, name=unique("pw"))
    op = [{"op": "replace", "path": "/labels", "value": value}]
    detail = magnum_error(ci.patch(f"/clustertemplates/{template['uuid']}", json=op), 400)
    assert detail.startswith(f"Couldn't apply patch '{json.dumps(op)}'. Reason: labels ")
    assert says in detail and "<ast." not in detail, detail
    message = refused_by_magnumclient(magnum.cluster_templates.update, template["uuid"], op)
    assert says in message and "<ast." not in message


# --- issue 24: labels normalized once, at the API ------------------------------------------------------------


def _master_udp_ports(ci: httpx.Client, cluster_id: str) -> set[int]:
    hot = ci.get(f"/clusters/{cluster_id}/template")
    assert hot.status_code == 200, hot.text
    ports = set()
    for name, res in hot.json()["template"]["resources"].items():
        if res["type"] == "OS::Neutron::SecurityGroup" and "master" in name:
            ports |= {r["port_range_min"] for r in res["properties"]["rules"] if r.get("protocol") == "udp"}
    return ports


def test_a_padded_flannel_backend_is_stored_as_vxlan_and_the_hot_export_opens_udp_8472(server, ci, magnum):
    name = unique("ws")
    r = osc(server, "coe", "cluster", "template", "create", name, "--coe", "kubernetes", "--image", "fedora-coreos", "--network-driver",
            "flannel", "--external-network", "public", "--labels", "flannel_backend= vxlan", "-f", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    template = ci.get(f"/clustertemplates/{name}").json()
    assert template["labels"] == {"flannel_backend": "vxlan"}
    cluster = magnum.clusters.create(name=unique("ws"), cluster_template_id=template["uuid"], node_count=1)
    assert magnum.clusters.get(cluster.uuid).labels == {"flannel_backend": "vxlan"}
    assert 8472 in _master_udp_ports(ci, cluster.uuid)
    # The same when the cluster brings the padded value itself.
    r = ci.post("/clusters", json={"name": unique("ws"), "cluster_template_id": template["uuid"],
                                   "labels": {"flannel_backend": "\tvxlan  "}})
    assert r.status_code == 202, r.text
    assert ci.get(f"/clusters/{r.json()['uuid']}").json()["labels"] == {"flannel_backend": "vxlan"}
    assert 8472 in _master_udp_ports(ci, r.json()["uuid"])


def test_a_padded_flannel_ip_masq_false_turns_masquerading_off(ci, magnum, server):
    ct = magnum.cluster_templates.create(name=unique("ws"), coe="kubernetes", network_driver="flannel",
                                         external_network_id="public", labels={"flannel_ip_masq": " false"})
    assert ct.labels == {"flannel_ip_masq": "false"}
    cluster = magnum.clusters.create(name=unique("ws"), cluster_template_id=ct.uuid, node_count=1)
    assert magnum.clusters.get(cluster.uuid).labels == {"flannel_ip_masq": "false"}
    # The typed config parsed at create is stored with the cluster: what the cluster network
    # copies and the agent is given (no label read again).
    config = _stored_driver_config(server.database_url, cluster.uuid)
    assert config == {"network": "10.100.0.0/16", "subnet_len": 24, "backend": "vxlan", "ip_masq": False,
                      "network6": "", "subnet_len6": 64, "service6": ""}
    assert registry.make("flannel", config).config.ip_masq is False


def _stored_driver_config(database_url: str, cluster_id: str) -> dict:
    from sqlalchemy import select

    from netbay.store.db import Store
    from netbay.store.models import Cluster

    store = Store(database_url)
    try:
        with store.read() as s:
            return s.scalars(select(Cluster.driver_config).where(Cluster.id == cluster_id)).one()
    finally:
        store.dispose()


def _ipip_available() -> bool:
    from netbay.coe.hostcheck import host_features

    return bool(getattr(host_features().get("ipip"), "available", False))


@pytest.mark.parametrize("mode", ["Never", "Off",
                                  pytest.param("Always", marks=pytest.mark.skipif(
                                      not _ipip_available(), reason="this host's kernel has no ipip"))])
def test_a_padded_calico_ipip_mode_is_stored_normalized_and_the_cluster_is_created(ci, magnum, mode):
    ct = magnum.cluster_templates.create(name=unique("ws"), coe="kubernetes", network_driver="calico",
                                         external_network_id="public", labels={"calico_ipv4pool_ipip": f" {mode}"})
    assert ct.labels == {"calico_ipv4pool_ipip": mode}
    cluster = magnum.clusters.create(name=unique("ws"), cluster_template_id=ct.uuid, node_count=1)
    assert magnum.clusters.get(cluster.uuid).labels == {"calico_ipv4pool_ipip": mode}


def test_a_padded_value_by_patch_is_stored_normalized_and_case_stays_significant(ci):
    template = make_template(ci, name=unique("ws"), network_driver="flannel")
    r = ci.patch(f"/clustertemplates/{template['uuid']}",
                 json=[{"op": "add", "path": "/labels/flannel_backend", "value": " host-gw "},
                       {"op": "add", "path": "/labels/flannel_network_cidr", "value": " 10.1.0.0/16"},
                       {"op": "add", "path": "/labels/note", "value": " kept as given "}])
    assert r.status_code == 200, r.text
    assert r.json()["labels"] == {"flannel_backend": "host-gw", "flannel_network_cidr": "10.1.0.0/16",
                                  "note": " kept as given "}
    r = ci.patch(f"/clustertemplates/{template['uuid']}",
                 json=[{"op": "replace", "path": "/labels/flannel_backend", "value": "VXLAN"}])
    magnum_error(r, 400, "Invalid value 'VXLAN' for label flannel_backend: expecting one of vxlan|host-gw.")


def test_pod_and_sandbox_labels_are_held_to_the_same_limits(raw):
    for path, member, body in (("/netbay/v1/sandboxes", "sandbox", {"name": "lim"}),
                               ("/netbay/v1/pods", "pod", {"name": "lim", "cluster_id": "none"})):
        for labels, reason in ((MANY, "10000 labels are more than the 256 allowed"),
                               ({"big": BIG}, "Label big has a value of 900000 characters, more than the 4096 "
                                              "allowed")):
            r = raw.post(path, json={member: {**body, "labels": labels}})
            assert r.status_code == 400, r.text
            assert r.json()["NeutronError"]["message"] == f"Invalid input for labels. Reason: {reason}.", r.text
            assert len(r.content) < 2000
