"""The Kubernetes mapping on a real cloud: ``netbay k8s apply --backend openstack
--os-cloud peer`` makes a kuryr cluster's namespaces, pods and NetworkPolicies in a
real Neutron (Keystone and Neutron's API server from PyPI, ``tests/backendfix.py``).

That Neutron runs API-only — no agents — and netbay's dataplane does not wire a
cloud's ports, so pods are realized as kuryr's controller left them for the
kubelet: ports named ``ns/pod``, ``device_owner=compute:kuryr``, bound to their
node, with an address from their namespace's subnet (taken from the cluster's
subnet pool). These tests assert API effects as the cloud's own ``openstack`` CLI
reports them, never packets. The cloud has no Octavia here: a Service that needs a
load balancer is refused by name before anything changes; a headless one needs none.

Also here: the two backend capabilities the mapping leans on (bulk create, batch)
behave the same — all or nothing — on both backends (``network_backend``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from coehelp import ci_client, make_template, wait_status
from conftest import unique

from netbay import errors
from netbay.backends import batch
from netbay.backends.apiclient import Api
from netbay.backends.openstack import OpenStackBackend
from netbay.dataplane.names import Names
from netbay.k8s.controller import Controller
from netbay.k8s.objects import parse
from netbay.k8s.portsonly import BoundPorts
from netbay.k8s.services import NO_LOAD_BALANCERS
from netbay.store.db import Store
from tests.peers.openstack_cloud import Cloud
from tests.backendfix import cli_snapshot, netbay_on_cloud, openstack

pytestmark = pytest.mark.peers

BUILD_TIMEOUT = 300

APP = """
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: a}}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: other, labels: {role: client}}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Service
metadata: {name: web-headless, namespace: shop}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-from-other, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: other}}}]
    ports: [{protocol: TCP, port: http}]
"""

CLUSTER_IP_SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
"""

PODS = {"shop/web-0", "shop/web-1", "shop/web-2", "other/client"}


@pytest.fixture(scope="module")
def server(cloud_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    with netbay_on_cloud(cloud_env, tmp_path_factory.mktemp("netbay")) as srv:
        yield srv


@pytest.fixture(scope="module")
def admin(cloud: Cloud):  # noqa: ANN201
    conn = cloud.connection()
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def quotas(admin, cloud_env: dict[str, str]) -> Iterator[None]:  # noqa: ANN001
    """Room for the policies' groups, as kuryr asked of a project (Neutron's default is 10 groups)."""
    project = admin.current_project_id
    was = admin.network.get_quota(project)
    openstack(cloud_env, "quota", "set", "--secgroups", "100", "--secgroup-rules", "500", project)
    yield
    openstack(cloud_env, "quota", "set", "--secgroups", str(was.security_groups), "--secgroup-rules",
              str(was.security_group_rules), project)


@pytest.fixture(scope="module")
def cluster(server, admin, quotas) -> Iterator[str]:  # noqa: ANN001
    """A kuryr cluster built in the cloud's Neutron (1 master, 1 minion; no load balancer)."""
    ci = ci_client(server, admin.auth_token)
    tpl = make_template(ci, name=unique("kuryr"), external_network_id="public", network_driver="kuryr",
                        floating_ip_enabled=False, master_lb_enabled=False,
                        labels={"kuryr_pod_subnet_pool": "10.20.0.0/16"})
    r = ci.post("/clusters", json={"name": unique("k"), "cluster_template_id": tpl["uuid"], "node_count": 1})
    assert r.status_code == 202, r.text
    cid = r.json()["uuid"]
    built = wait_status(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"), BUILD_TIMEOUT)
    assert built["status"] == "CREATE_COMPLETE", built["status_reason"]
    yield cid
    assert ci.delete(f"/clusters/{cid}").status_code == 204
    assert wait_status(ci, cid, ("GONE", "DELETE_FAILED"), BUILD_TIMEOUT)["status"] == "GONE"
    ci.close()


def listed(env: dict[str, str], what: str, *extra: str) -> list[dict]:
    return json.loads(openstack(env, *what.split(), "list", "-f", "json", *extra))


def netbay_k8s(server, env: dict[str, str], verb: str, *args: str) -> subprocess.CompletedProcess:  # noqa: ANN001
    """``netbay k8s VERB`` as a user runs it against that cloud (its clouds.yaml, its token)."""
    run_env = {**os.environ, **env, "NETBAY_URL": server.url}
    return subprocess.run([sys.executable, "-m", "netbay.cli.main", "k8s", verb, "--backend", "openstack",
                           "--database-url", server.database_url, "--data-dir", str(server.data_dir), *args],
                          capture_output=True, text=True, timeout=300, env=run_env)


def controller(server, admin, cid: str) -> Controller:  # noqa: ANN001
    """The same wiring ``netbay k8s --backend openstack`` makes, in-process."""
    return Controller(Api(server.url, lambda: admin.auth_token), Store(server.database_url), cid, Names("nbt-"),
                      net=OpenStackBackend(connection=admin), lbs=None, pods=BoundPorts())


def test_manifests_become_the_clouds_ports_and_groups_and_leave_nothing(
        server, admin, cluster: str, cloud_env: dict[str, str], tmp_path: Path) -> None:  # noqa: ANN001
    before = cli_snapshot(cloud_env)
    try:
        check_manifests(server, admin, cluster, cloud_env, tmp_path, before)
    finally:   # whatever happened: the cluster's objects and what was made for them go
        ctrl = controller(server, admin, cluster)
        try:
            ctrl.delete_all()
        finally:
            ctrl.close()
    after = cli_snapshot(cloud_env)
    left = [(g.name, g.tags) for g in admin.network.security_groups() if g.id in after["security group"] -
            before["security group"]]
    assert after == before, left


def check_manifests(server, admin, cluster: str, cloud_env: dict[str, str], tmp_path: Path,  # noqa: ANN001
                    before: dict[str, set[str]]) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(APP)
    r = netbay_k8s(server, cloud_env, "apply", "-f", str(manifest), "--cluster", cluster)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "made pod shop/web-0" in r.stdout and "made network ns/shop" in r.stdout, r.stdout

    # Pods: ports named ns/pod, kuryr's owner, bound to a node of the cluster, an address of their subnet.
    ports = {p["Name"]: p for p in listed(cloud_env, "port", "--long")}
    assert PODS <= set(ports), sorted(ports)
    networks = {n["Name"]: n for n in listed(cloud_env, "network")}
    assert {"ns/shop", "ns/other"} <= set(networks)
    subnets = {s["Network"]: s for s in listed(cloud_env, "subnet")}
    tag = f"netbay-cluster={cluster}"
    pools = list(admin.network.subnet_pools(tags=tag))
    assert len(pools) == 1
    nodes = {p.device_id for p in admin.network.ports(tags=tag, device_owner="compute:netbay")}
    for name in PODS:
        ns = name.split("/")[0]
        port = admin.network.get_port(ports[name]["ID"])
        assert port.device_owner == "compute:kuryr" and port.device_id
        assert port.binding_host_id in nodes, (port.binding_host_id, nodes)
        assert port.network_id == networks[f"ns/{ns}"]["ID"]
        cidr = subnets[port.network_id]["Subnet"]
        assert ipaddress.ip_address(port.fixed_ips[0]["ip_address"]) in ipaddress.ip_network(cidr)
        assert ipaddress.ip_network(cidr).subnet_of(ipaddress.ip_network("10.20.0.0/16"))
        assert port.fixed_ips[0]["ip_address"] in str(ports[name]["Fixed IP Addresses"])
    # The namespaces' subnets are on the cluster's router.
    router = list(admin.network.routers(tags=tag))[0]
    inside = {ip["subnet_id"] for p in admin.network.ports(device_id=router.id,
                                                           device_owner="network:router_interface")
              for ip in p.fixed_ips}
    assert {subnets[networks[f"ns/{ns}"]["ID"]]["ID"] for ns in ("shop", "other")} <= inside

    # The policy: its groups in the cloud, the selected pods in them, the others not.
    groups = {g["Name"]: g for g in listed(cloud_env, "security group")}
    policy_groups = {name: g for name, g in groups.items() if name.startswith("k8s-np-") and name != "k8s-np-spare"}
    assert len(policy_groups) >= 2, sorted(groups)
    web = admin.network.get_port(ports["shop/web-0"]["ID"])
    client = admin.network.get_port(ports["other/client"]["ID"])
    assert set(web.security_group_ids) & {g["ID"] for g in policy_groups.values()}
    rules = [r for g in policy_groups.values()
             for r in admin.network.security_group_rules(security_group_id=g["ID"])]
    assert any(r.direction == "ingress" and r.protocol == "tcp" and r.port_range_min == 8080 and r.remote_group_id
               for r in rules), rules
    assert set(client.security_group_ids) & {g["ID"] for g in policy_groups.values()}   # the peer group

    # No Octavia: a ClusterIP Service is refused by name, and nothing changes.
    mid = cli_snapshot(cloud_env)
    svc = tmp_path / "svc.yaml"
    svc.write_text(CLUSTER_IP_SERVICE)
    r = netbay_k8s(server, cloud_env, "apply", "-f", str(svc), "--cluster", cluster)
    said = " ".join(r.stderr.split())
    assert r.returncode == 1 and f"Service shop/web {NO_LOAD_BALANCERS}" in said, r.stdout + r.stderr
    assert cli_snapshot(cloud_env) == mid

    r = netbay_k8s(server, cloud_env, "delete", "-f", str(manifest), "--cluster", cluster)
    assert r.returncode == 0, r.stdout + r.stderr
    after = cli_snapshot(cloud_env)
    # Pods, networks, subnets and interfaces are gone; the policy engine keeps its spare
    # groups ready until the cluster's objects are all gone (the caller's delete_all).
    assert {k: after[k] for k in ("port", "network", "subnet", "router", "floating ip")} == \
        {k: before[k] for k in ("port", "network", "subnet", "router", "floating ip")}


class Crash(BaseException):
    """Stops the controller dead, as SIGKILL would: nothing is undone."""


def test_a_controller_killed_midway_is_resumed_by_tag_and_delete_leaves_nothing(
        server, admin, cluster: str, cloud_env: dict[str, str]) -> None:  # noqa: ANN001
    """The controller dies right after the cloud made the second pod's port (its reply
    lost): a new one (nothing in memory) adopts the ports, networks and subnets by
    their tags and names, makes only what is missing, and its delete leaves the cloud
    as it was."""
    before = cli_snapshot(cloud_env)
    objects = parse(APP)
    first = controller(server, admin, cluster)
    made = {"port": 0}
    real = first.net.create

    def create(member: str, body):  # noqa: ANN001, ANN202
        obj = real(member, body)
        if member == "port":
            made["port"] += 1
            if made["port"] == 2:
                raise Crash()
        return obj

    first.net.create = create  # type: ignore[method-assign]
    with pytest.raises(Crash):
        first.apply(objects)
    first.close()
    tag = f"netbay-cluster={cluster}"
    second = controller(server, admin, cluster)
    try:
        # Made, but (this Neutron takes tags in a second call) maybe not tagged yet.
        assert len([p for p in admin.network.ports(device_owner="compute:kuryr") if p.name in PODS]) == 2
        second.resync()
        pods = [p for p in admin.network.ports(device_owner="compute:kuryr") if p.name in PODS]
        assert sorted(p.name for p in pods) == sorted(PODS)          # none twice, none missing
        assert all({tag, "netbay-k8s=pod"} <= set(p.tags) for p in pods)
        assert len(list(admin.network.networks(tags=f"{tag},netbay-k8s=network"))) == 2
        assert second.resync().made == []                           # converged: nothing more to make
        second.delete_all()
    finally:
        second.close()
    assert cli_snapshot(cloud_env) == before


# -- the backend capabilities the mapping uses, on both backends ------------------------------


def test_bulk_create_is_all_or_nothing(clean_backend) -> None:  # noqa: ANN001
    net = clean_backend
    network = net.create("network", {"name": unique("bulk")})
    try:
        good = {"network_id": network["id"], "name": "a"}
        with pytest.raises(errors.NetbayError) as refused:
            batch.create_many(net, "port", [good, {**good, "name": "b"},
                                            {"network_id": "00000000-0000-0000-0000-000000000000", "name": "c"}])
        assert refused.value.status == 404
        assert net.list("port", network_id=network["id"]) == []
        made = batch.create_many(net, "port", [good, {**good, "name": "b"}])
        assert sorted(p["name"] for p in made) == ["a", "b"]
        assert len(net.list("port", network_id=network["id"])) == 2
    finally:
        for p in net.list("port", network_id=network["id"]):
            net.delete("port", p["id"])
        net.delete("network", network["id"])


def test_a_refused_batch_changes_nothing(clean_backend) -> None:  # noqa: ANN001
    """The policy engine's batch on a backend without one: in order, undone on a refusal."""
    net = clean_backend
    group = net.create("security_group", {"name": unique("np")})
    network = net.create("network", {"name": unique("np")})
    port = net.create("port", {"network_id": network["id"], "name": "p"})
    try:
        ops = [{"method": "PUT", "path": f"security-groups/{group['id']}", "body": {"security_group": {
                    "name": "renamed"}}},
               {"method": "POST", "path": "security-group-rules", "body": {"security_group_rules": [
                   {"security_group_id": group["id"], "direction": "ingress", "ethertype": "IPv4",
                    "protocol": "tcp", "port_range_min": 80, "port_range_max": 80}]}},
               {"method": "PUT", "path": f"ports/{port['id']}", "body": {"port": {"security_groups": [group["id"]]}}},
               {"method": "DELETE", "path": "security-group-rules/00000000-0000-0000-0000-000000000000",
                "missing_ok": True},
               {"method": "PUT", "path": "ports/00000000-0000-0000-0000-000000000000",
                "body": {"port": {"security_groups": []}}}]
        rules_before = {r["id"] for r in net.list("security_group_rule", security_group_id=group["id"])}
        with pytest.raises(errors.NotFound):
            batch.run(net, ops)
        assert net.show("security_group", group["id"])["name"] == group["name"]
        assert {r["id"] for r in net.list("security_group_rule", security_group_id=group["id"])} == rules_before
        assert net.show("port", port["id"])["security_groups"] == port["security_groups"]
        done = batch.run(net, ops[:4])
        assert done[0]["security_group"]["name"] == "renamed" and done[3] is None
        assert done[2]["port"]["security_groups"] == [group["id"]]
        assert len(done[1]["security_group_rules"]) == 1
    finally:
        net.delete("port", port["id"])
        net.delete("network", network["id"])
        net.delete("security_group", group["id"])


def test_the_policy_engine_makes_and_removes_the_same_groups_on_both_backends(clean_backend) -> None:  # noqa: ANN001
    """NetworkPolicy → groups, rules and memberships through the seam: a deny-all-but-
    from-``b`` policy isolates ``a``'s port in a policy group, ``b`` joins the peer group
    with the rule pointing at it; a new engine (a restart) adopts them by tag, and the
    cluster's delete leaves the backend as it was."""
    from lightkube import codecs

    from netbay.k8s.policy import Cluster, Namespace, Pod, PolicyEngine

    net = clean_backend
    network = net.create("network", {"name": unique("np")})
    subnet = net.create("subnet", {"network_id": network["id"], "cidr": "10.77.0.0/24", "ip_version": 4})
    ports = {name: net.create("port", {"network_id": network["id"], "name": f"x/{name}"}) for name in ("a", "b")}
    tag = f"k8s-policy:{unique('c')}"
    policy = codecs.from_dict({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                               "metadata": {"name": "a-from-b", "namespace": "x"},
                               "spec": {"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Ingress"],
                                        "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]}})

    def cluster(*policies) -> Cluster:  # noqa: ANN002
        return Cluster.of([Namespace("x", {})],
                          [Pod("x", n, p["id"], p["fixed_ips"][0]["ip_address"], {"pod": n}, ())
                           for n, p in ports.items()], policies, [], nodes=[])

    engine = PolicyEngine(net, tag=tag, spares=1)
    try:
        engine.sync(cluster(policy))
        engine.wait_spares()
        groups = {g["id"]: g for g in net.list("security_group", tags=tag)}
        a_groups = set(net.show("port", ports["a"]["id"])["security_groups"])
        b_groups = set(net.show("port", ports["b"]["id"])["security_groups"])
        assert a_groups <= set(groups) and b_groups <= set(groups)
        peer = [r for gid in a_groups for r in groups[gid]["security_group_rules"]
                if r["direction"] == "ingress" and r.get("remote_group_id")]
        assert len(peer) == 1 and peer[0]["remote_group_id"] in b_groups - a_groups
        engine.close()
        again = PolicyEngine(net, tag=tag, spares=1)     # a new process: adopts, makes nothing twice
        again.sync(cluster(policy))
        again.wait_spares()
        assert {g["id"] for g in net.list("security_group", tags=tag)} == set(groups)
        again.sync(cluster())                                # the policy deleted: its groups go
        again.close(delete=True)
        assert net.list("security_group", tags=tag) == []
    finally:
        for p in ports.values():
            net.delete("port", p["id"])
        net.delete("subnet", subnet["id"])
        net.delete("network", network["id"])
