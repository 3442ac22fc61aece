"""The Kubernetes mapping on a real cloud: ``netbay k8s apply --backend openstack
--os-cloud peer`` makes a kuryr cluster's namespaces, pods and NetworkPolicies in a
real Neutron (Keystone and Neutron's API server from PyPI, ``tests/backendfix.py``).

That Neutron runs API-only — no agents — and netbay's dataplane does not wire a
cloud's ports, so pods are realized as kuryr's controller left them for the
kubelet: ports named ``ns/pod``, ``device_owner=compute:kuryr``, bound to their
node, with an address from their namespace's subnet (taken from the cluster's
subnet pool). These tests assert API effects as the cloud's own ``openstack`` CLI
reports them, never packets. Without Octavia in the catalog a Service that needs a
load balancer is refused by name before anything changes (a headless one needs none);
with it (the session's ``octavia`` peer), every such Service becomes a load balancer
in the cloud's Octavia, as kuryr-kubernetes made them.

Also here: the two backend capabilities the mapping leans on (bulk create, batch)
behave the same — all or nothing — on both backends (``network_backend``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from coehelp import ci_client, make_template, wait_status
from conftest import unique

from netbay import errors
from netbay.backends import batch
from netbay.client import Api
from netbay.backends.loadbalancers import open_lb_backend, settled
from netbay.backends.openstack import OpenStackBackend
from netbay.dataplane.names import Names
from netbay.k8s.controller import Controller
from netbay.k8s.objects import key_of, parse
from netbay.k8s.portsonly import BoundPorts
from netbay.k8s.services import NO_LOAD_BALANCERS, NoLoadBalancers
from netbay.k8s.source import ManifestSource
from netbay.store.db import Store
from tests.peers.openstack_cloud import Cloud
from tests.backendfix import cloud_snapshot, netbay_on_cloud, octavia_snapshot, openstack
from tests import zygote

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
def admin(cloud: Cloud):
    conn = cloud.connection()
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def quotas(admin, cloud_env: dict[str, str]) -> Iterator[None]:
    """Room for the policies' groups, as kuryr asked of a project (Neutron's default is 10 groups)."""
    project = admin.current_project_id
    was = admin.network.get_quota(project)
    openstack(cloud_env, "quota", "set", "--secgroups", "100", "--secgroup-rules", "500", project)
    yield
    openstack(cloud_env, "quota", "set", "--secgroups", str(was.security_groups), "--secgroup-rules",
              str(was.security_group_rules), project)


@pytest.fixture(scope="module")
def cluster(server, admin, quotas) -> Iterator[str]:
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


def netbay_k8s(server, env: dict[str, str], verb: str, *args: str) -> subprocess.CompletedProcess:
    """``netbay k8s VERB`` as a user runs it against that cloud (its clouds.yaml, its token)."""
    run_env = {**os.environ, **env, "NETBAY_URL": server.url}
    return zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", verb, "--backend", "openstack",
                       "--database-url", server.database_url, "--data-dir", str(server.data_dir), *args],
                      capture_output=True, text=True, timeout=300, env=run_env)


def controller(server, admin, cid: str) -> Controller:
    """The same wiring ``netbay k8s --backend openstack`` makes, in-process."""
    return Controller(Api(server.url, lambda: admin.auth_token), Store(server.database_url), cid, Names("nbt-"),
                      net=OpenStackBackend(connection=admin), lbs=None, pods=BoundPorts())


def test_manifests_become_the_clouds_ports_and_groups_and_leave_nothing(
        server, admin, cluster: str, cloud_env: dict[str, str], tmp_path: Path) -> None:
    before = cloud_snapshot(cloud_env)
    try:
        check_manifests(server, admin, cluster, cloud_env, tmp_path, before)
    finally:   # whatever happened: the cluster's objects and what was made for them go
        ctrl = controller(server, admin, cluster)
        try:
            ctrl.delete_all()
        finally:
            ctrl.close()
    after = cloud_snapshot(cloud_env)
    left = [(g.name, g.tags) for g in admin.network.security_groups() if g.id in after["security group"] -
            before["security group"]]
    assert after == before, left


def check_manifests(server, admin, cluster: str, cloud_env: dict[str, str], tmp_path: Path,
                    before: dict[str, set[str]]) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(APP)
    r = netbay_k8s(server, cloud_env, "apply", "-f", str(manifest), "--cluster", cluster)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "made pod shop/web-0" in r.stdout and "made network ns/shop" in r.stdout, r.stdout

    # Pods: ports named ns/pod, kuryr's owner, bound to a node of the cluster, an address of their subnet.
    ports = {p["Name"]: p for p in listed(cloud_env, "port", "--long")}
    assert set(ports) >= PODS, sorted(ports)
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

    # No Octavia: a ClusterIP Service is refused by name, and nothing changes. The controller
    # as ``netbay k8s`` makes it for a catalog without ``load-balancer`` (the session's cloud
    # may have Octavia by now, so no catalog is asked here).
    mid = cloud_snapshot(cloud_env)
    svc = tmp_path / "svc.yaml"
    svc.write_text(CLUSTER_IP_SERVICE)
    ctrl = controller(server, admin, cluster)
    try:
        with pytest.raises(NoLoadBalancers) as refused:
            ManifestSource([svc]).apply(ctrl)
    finally:
        ctrl.close()
    assert f"Service shop/web {NO_LOAD_BALANCERS}" in str(refused.value)
    assert cloud_snapshot(cloud_env) == mid

    r = netbay_k8s(server, cloud_env, "delete", "-f", str(manifest), "--cluster", cluster)
    assert r.returncode == 0, r.stdout + r.stderr
    after = cloud_snapshot(cloud_env)
    # Pods, networks, subnets and interfaces are gone; the policy engine keeps its spare
    # groups ready until the cluster's objects are all gone (the caller's delete_all).
    assert {k: after[k] for k in ("port", "network", "subnet", "router", "floating ip")} == \
        {k: before[k] for k in ("port", "network", "subnet", "router", "floating ip")}


class Crash(BaseException):
    """Stops the controller dead, as SIGKILL would: nothing is undone."""


def test_a_controller_killed_midway_is_resumed_by_tag_and_delete_leaves_nothing(
        server, admin, cluster: str, cloud_env: dict[str, str]) -> None:
    """The controller dies right after the cloud made the second pod's port (its reply
    lost): a new one (nothing in memory) adopts the ports, networks and subnets by
    their tags and names, makes only what is missing, and its delete leaves the cloud
    as it was."""
    before = cloud_snapshot(cloud_env)
    objects = parse(APP)
    first = controller(server, admin, cluster)
    made = {"port": 0}
    real = first.net.create

    def create(member: str, body):
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
    assert cloud_snapshot(cloud_env) == before


# -- Services on the cloud's Octavia -----------------------------------------------------------

SERVED = """
apiVersion: v1
kind: Namespace
metadata: {name: store}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: store}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: store}
spec:
  clusterIP: CLUSTER_IP
  selector: {app: api}
  ports: [{name: http, port: 80, targetPort: http}, {name: metrics, port: 9090, targetPort: 9090}]
"""

EXTRA_POD = """
apiVersion: v1
kind: Pod
metadata: {name: extra, namespace: store, labels: {app: LABEL}}
spec: {containers: [{name: c, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
"""

SECOND_SERVICE = """
---
apiVersion: v1
kind: Service
metadata: {name: api2, namespace: store}
spec:
  clusterIP: CLUSTER_IP
  selector: {app: api}
  ports: [{name: http, port: 8000, targetPort: http}]
"""

SETTLE_TIMEOUT = 120   # seconds for the provider stand-in to report a change done, on a busy machine


@pytest.fixture
def lb_admin(octavia, cloud: Cloud):
    """An admin connection made after Octavia joined the catalog (a connection reads it once)."""
    conn = cloud.connection()
    yield conn
    conn.close()


def lb_controller(server, conn, cid: str) -> Controller:
    """The wiring ``netbay k8s --backend openstack`` makes on a cloud with Octavia, in-process."""
    return Controller(Api(server.url, lambda: conn.auth_token), Store(server.database_url), cid, Names("nbt-"),
                      net=OpenStackBackend(connection=conn), lbs=open_lb_backend("openstack", connection=conn),
                      lb_provider=None, pods=BoundPorts())


def cluster_ips(server, conn, cid: str) -> list[str]:
    """Addresses of the cluster's service subnet, as the API server would pick cluster IPs."""
    from netbay.k8s.cluster import find

    api = Api(server.url, lambda: conn.auth_token)
    try:
        subnet = find(api, OpenStackBackend(connection=conn), cid).service_subnet
    finally:
        api.close()
    return [str(ipaddress.ip_network(subnet["cidr"])[i]) for i in (20, 21)]


def lb_listed(env: dict[str, str], what: str, *args: str) -> list[dict]:
    """``openstack loadbalancer [WHAT] list …`` (the real CLI, octaviaclient's plugin)."""
    words = ["loadbalancer", *([what] if what else []), "list", *args, "-f", "json"]
    return json.loads(openstack(env, *words))


def quiet(conn, name: str) -> dict:
    """The load balancer ``name`` once it and its members have settled (the stand-in has
    reported the last change): bounded."""
    lbs = open_lb_backend("openstack", connection=conn)
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        found = lbs.list("loadbalancer", name=name)
        assert len(found) == 1, found
        lb = settled(lbs, found[0]["id"], SETTLE_TIMEOUT)
        pending = [m for ls in lb["listeners"] for pool in [lbs.show("listener", ls["id"])["default_pool_id"]]
                   for m in lbs.list("member", parent=pool) if m["provisioning_status"].startswith("PENDING_")]
        if lb["provisioning_status"] == "ACTIVE" and not pending:
            return lb
        assert time.monotonic() < deadline, (lb["provisioning_status"], pending)
        time.sleep(0.2)


def wait_until(check, what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {SETTLE_TIMEOUT} s"
        time.sleep(0.5)


def pod_addresses(conn, *names: str) -> set[str]:
    """The pods' port addresses in Neutron."""
    ports = {p.name: p for p in conn.network.ports(device_owner="compute:kuryr")}
    return {ports[n].fixed_ips[0]["ip_address"] for n in names}


def octavia_view(env: dict[str, str], lb_id: str) -> dict[int, set[tuple[str, int]]]:
    """What the real CLI shows of one load balancer: listener port → its pool's members."""
    pools = {p["id"] for p in lb_listed(env, "pool", "--loadbalancer", lb_id)}
    out = {}
    for ls in lb_listed(env, "listener", "--loadbalancer", lb_id):
        assert ls["default_pool_id"] in pools, (ls, pools)
        out[ls["protocol_port"]] = {(m["address"], m["protocol_port"])
                                    for m in lb_listed(env, "member", ls["default_pool_id"])}
    assert len(pools) == len(out)   # a pool per listener, no other
    return out


def test_services_become_load_balancers_in_the_clouds_octavia_and_follow_their_pods(
        octavia, server, lb_admin, cluster: str, cloud_env: dict[str, str], tmp_path: Path) -> None:
    """``netbay k8s apply --backend openstack`` on a cloud whose catalog lists Octavia: a
    ClusterIP Service becomes a load balancer there as kuryr-kubernetes made it — VIP on the
    cluster's service subnet at the Service's cluster IP, a listener and pool per port, the
    pods' port addresses as members — members follow a scale and a label change, a change
    of its ports replaces it at the same cluster IP, and the delete leaves Octavia and
    Neutron as they were.

    The cloud's Octavia runs its noop provider driver, which provisions nothing: no packet
    reaches a VIP here, and a stand-in reports the statuses a provider would
    (``tests/peers/octavia_peer.py``). This test asserts Octavia's API effects only, as
    issue 14 (item 5) allows for a peer without its agents."""
    before, lbs_before = cloud_snapshot(cloud_env), octavia_snapshot(lb_admin)
    try:
        check_services(server, lb_admin, cluster, cloud_env, tmp_path, before)
    finally:   # whatever happened: the cluster's objects and what was made for them go
        ctrl = lb_controller(server, lb_admin, cluster)
        try:
            ctrl.delete_all()
        finally:
            ctrl.close()
    wait_until(lambda: octavia_snapshot(lb_admin) == lbs_before, "Octavia back to its snapshot")
    assert cloud_snapshot(cloud_env) == before


def check_services(server, conn, cluster: str, env: dict[str, str], tmp_path: Path,
                   before: dict[str, set[str]]) -> None:
    cluster_ip = cluster_ips(server, conn, cluster)[0]
    manifest = tmp_path / "served.yaml"

    def apply(replicas: int, *extra: str, served: str = SERVED) -> str:
        manifest.write_text(served.replace("REPLICAS", str(replicas)).replace("CLUSTER_IP", cluster_ip) +
                            "".join(f"---{e}" for e in extra))
        r = netbay_k8s(server, env, "apply", "-f", str(manifest), "--cluster", cluster)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    said = apply(3)
    assert f"made service store/api {cluster_ip}" in said, said
    lb = quiet(conn, "store/api")
    shown = json.loads(openstack(env, "loadbalancer", "show", lb["id"], "-f", "json"))
    assert shown["vip_address"] == cluster_ip
    service_subnet = [s for s in conn.network.subnets(tags=f"netbay-cluster={cluster}")
                      if s.id == shown["vip_subnet_id"]]
    assert service_subnet and ipaddress.ip_address(cluster_ip) in ipaddress.ip_network(service_subnet[0].cidr)
    assert [row["id"] for row in lb_listed(env, "") if row["name"] == "store/api"] == [lb["id"]]
    web = pod_addresses(conn, "store/api-0", "store/api-1", "store/api-2")
    assert len(web) == 3
    assert octavia_view(env, lb["id"]) == {80: {(a, 8080) for a in web}, 9090: {(a, 9090) for a in web}}

    # Scale down: the members follow (one batch update per pool, after Octavia settled).
    apply(1)
    quiet(conn, "store/api")
    one = pod_addresses(conn, "store/api-0")
    assert octavia_view(env, lb["id"]) == {80: {(a, 8080) for a in one}, 9090: {(a, 9090) for a in one}}

    # A pod the selector picks joins; relabelled, it leaves (its port stays).
    apply(1, EXTRA_POD.replace("LABEL", "api"))
    quiet(conn, "store/api")
    both = one | pod_addresses(conn, "store/extra")
    assert octavia_view(env, lb["id"]) == {80: {(a, 8080) for a in both}, 9090: {(a, 9090) for a in both}}
    apply(1, EXTRA_POD.replace("LABEL", "batch"))
    quiet(conn, "store/api")
    assert octavia_view(env, lb["id"]) == {80: {(a, 8080) for a in one}, 9090: {(a, 9090) for a in one}}
    assert [row["id"] for row in lb_listed(env, "") if row["name"] == "store/api"] == [lb["id"]]  # same one

    # A change of the ports themselves: the load balancer is replaced, at the same cluster IP
    # (the old one gone first: a real provider frees the VIP only then).
    apply(1, EXTRA_POD.replace("LABEL", "batch"),
          served=SERVED.replace(", {name: metrics, port: 9090, targetPort: 9090}", ""))
    replaced = quiet(conn, "store/api")
    assert replaced["id"] != lb["id"] and replaced["vip_address"] == cluster_ip
    assert [row["id"] for row in lb_listed(env, "") if row["name"] == "store/api"] == [replaced["id"]]
    assert octavia_view(env, replaced["id"]) == {80: {(a, 8080) for a in one}}

    # Delete: the load balancer goes with its tree (cascade); the pods' ports and networks too.
    r = netbay_k8s(server, env, "delete", "-f", str(manifest), "--cluster", cluster)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "deleted service store/api" in r.stdout, r.stdout
    # Waited for through openstacksdk (a CLI run per poll is CPU spent on no behaviour of the
    # CLI's), then seen through the CLI once.
    wait_until(lambda: not list(conn.load_balancer.load_balancers(name="store/api")),
               "the load balancer gone from Octavia")
    assert not [row for row in lb_listed(env, "") if row["name"] == "store/api"]
    after = cloud_snapshot(env)
    assert {k: after[k] for k in ("port", "network", "subnet", "router", "floating ip")} == \
        {k: before[k] for k in ("port", "network", "subnet", "router", "floating ip")}


def test_a_controller_killed_midway_leaves_no_duplicate_or_orphan_load_balancer(
        octavia, server, lb_admin, cluster: str, cloud_env: dict[str, str]) -> None:
    """The controller dies right after the cloud's Octavia made the first Service's load
    balancer (its reply lost): a new one finds it by its tags and name, adopts it and makes
    only the second. Then one dies just before deleting the load balancer of a Service that
    is gone: the next resync deletes the orphan, and the cluster's delete leaves Octavia
    and Neutron as they were. Noop provider (no data plane): API effects only."""
    before, lbs_before = cloud_snapshot(cloud_env), octavia_snapshot(lb_admin)
    ips = cluster_ips(server, lb_admin, cluster)
    bodies = parse(SERVED.replace("REPLICAS", "2").replace("CLUSTER_IP", ips[0]) +
                   SECOND_SERVICE.replace("CLUSTER_IP", ips[1]))
    tag = f"netbay-cluster={cluster},netbay-k8s=service"

    def made() -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for lb in lb_admin.load_balancer.load_balancers(tags=tag):
            out.setdefault(lb.name, []).append(lb.id)
        return out

    first = lb_controller(server, lb_admin, cluster)
    real_create = first.lbs.create

    def create(kind: str, body, **kw):
        obj = real_create(kind, body, **kw)
        if kind == "loadbalancer":
            raise Crash()
        return obj

    first.lbs.create = create  # type: ignore[method-assign]
    try:
        with pytest.raises(Crash):
            first.apply(bodies)
    finally:
        first.close()
    lost = made()
    assert list(lost) == ["store/api"] and len(lost["store/api"]) == 1, lost
    second = lb_controller(server, lb_admin, cluster)
    try:
        second.resync()
        assert made() == {"store/api": lost["store/api"], "store/api2": made()["store/api2"]}
        assert len(made()["store/api2"]) == 1
        assert second.resync().made == []                        # converged: nothing more to make
    finally:
        second.close()
    vips = {row["name"]: row["vip_address"] for row in lb_listed(cloud_env, "")}
    assert vips["store/api"] == ips[0] and vips["store/api2"] == ips[1]

    third = lb_controller(server, lb_admin, cluster)
    real_delete = third.lbs.delete

    def delete(kind: str, obj_id: str, **kw):
        if kind == "loadbalancer":
            raise Crash()
        return real_delete(kind, obj_id, **kw)

    third.lbs.delete = delete  # type: ignore[method-assign]
    second_service = [b for b in bodies if b["kind"] == "Service" and b["metadata"]["name"] == "api2"]
    try:
        with pytest.raises(Crash):
            third.delete([key_of(b) for b in second_service])
    finally:
        third.close()
    assert "store/api2" in made()                               # the orphan: its Service is gone
    fourth = lb_controller(server, lb_admin, cluster)
    try:
        assert "service store/api2" in fourth.resync().deleted
        wait_until(lambda: list(made()) == ["store/api"], "the orphan gone from Octavia")
        assert made()["store/api"] == lost["store/api"]
        fourth.delete_all()
    finally:
        fourth.close()
    wait_until(lambda: octavia_snapshot(lb_admin) == lbs_before, "Octavia back to its snapshot")
    assert cloud_snapshot(cloud_env) == before


# -- the backend capabilities the mapping uses, on both backends ------------------------------


def test_bulk_create_is_all_or_nothing(clean_backend) -> None:
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


def test_a_refused_batch_changes_nothing(clean_backend) -> None:
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


@contextmanager
def _two_pods(net, cidr: str) -> Iterator[tuple[dict, str, object]]:
    """Ports x/a and x/b on a network of their own (gone afterwards), a policy tag, and
    the NetworkPolicy "x/a-from-b": a isolated, reachable from b only."""
    from lightkube import codecs

    network = net.create("network", {"name": unique("np")})
    subnet = net.create("subnet", {"network_id": network["id"], "cidr": cidr, "ip_version": 4})
    ports = {name: net.create("port", {"network_id": network["id"], "name": f"x/{name}"}) for name in ("a", "b")}
    policy = codecs.from_dict({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                               "metadata": {"name": "a-from-b", "namespace": "x"},
                               "spec": {"podSelector": {"matchLabels": {"pod": "a"}}, "policyTypes": ["Ingress"],
                                        "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]}})
    try:
        yield ports, f"k8s-policy:{unique('c')}", policy
    finally:
        for p in ports.values():
            net.delete("port", p["id"])
        net.delete("subnet", subnet["id"])
        net.delete("network", network["id"])


def _cluster(ports: dict, *policies):
    from netbay.k8s.policy import Cluster, Namespace, Pod

    return Cluster.of([Namespace("x", {})], [Pod("x", n, p["id"], p["fixed_ips"][0]["ip_address"], {"pod": n}, ())
                                             for n, p in ports.items()], policies, [], nodes=[])


def test_the_policy_engine_makes_and_removes_the_same_groups_on_both_backends(clean_backend) -> None:
    """NetworkPolicy → groups, rules and memberships through the seam: a deny-all-but-
    from-``b`` policy isolates ``a``'s port in a policy group, ``b`` joins the peer group
    with the rule pointing at it; a new engine (a restart) adopts them by tag, and the
    cluster's delete leaves the backend as it was."""
    from netbay.k8s.policy import PolicyEngine

    net = clean_backend
    with _two_pods(net, "10.77.0.0/24") as (ports, tag, policy):
        engine = PolicyEngine(net, tag=tag, spares=1)
        engine.sync(_cluster(ports, policy))
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
        again.sync(_cluster(ports, policy))
        again.wait_spares()
        assert {g["id"] for g in net.list("security_group", tags=tag)} == set(groups)
        again.sync(_cluster(ports))                          # the policy deleted: its groups go
        again.close(delete=True)
        assert net.list("security_group", tags=tag) == []


def test_a_deleted_policys_groups_go_after_its_ports_left_them(clean_backend) -> None:
    """A policy delete is its port moves alone: the pod is back in the open group when the
    call returns, while its policy and peer groups (no port in them, so they allow
    nothing) are deleted a moment later, off the change's path. A policy back before
    that takes its old groups again; nothing is left after the cluster's delete."""
    from netbay.k8s.policy import PolicyEngine
    from netbay.k8s.policy.translate import OPEN_INGRESS

    net = clean_backend
    with _two_pods(net, "10.78.0.0/24") as (ports, tag, policy):
        engine = PolicyEngine(net, tag=tag, spares=2)
        engine.sync(_cluster(ports))
        engine.on_policy(policy)
        engine.wait_spares()
        made = {k: v for k, v in engine.groups.ids.items() if k.startswith(("policy:", "peer:"))}
        assert len(made) == 2

        engine.groups.refill = lambda: 0  # hold the deletion back, as if the refill had not run yet
        engine.on_policy_deleted("x", "a-from-b")
        for name, port in ports.items():
            groups = set(net.show("port", port["id"])["security_groups"])
            assert not groups & set(made.values()), f"{name} still in a deleted policy's group"
        assert engine.groups.ids[OPEN_INGRESS] in net.show("port", ports["a"]["id"])["security_groups"]
        tagged = {g["id"] for g in net.list("security_group", tags=tag)}
        assert set(made.values()) <= tagged, "deleted in the change's own batch, not after it"

        engine.on_policy(policy)  # back before the deletion ran: the same groups
        assert {k: engine.groups.ids[k] for k in made} == made
        engine.on_policy_deleted("x", "a-from-b")
        del engine.groups.refill  # the class's own again
        engine._refill()
        engine.wait_spares()
        tagged = {g["id"] for g in net.list("security_group", tags=tag)}
        assert not set(made.values()) & tagged, "the retired groups were not deleted"
        engine.close(delete=True)
        assert net.list("security_group", tags=tag) == []
