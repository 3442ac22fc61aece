"""Kubernetes manifests on a kuryr cluster, checked with real packets (issue 12).

A kuryr cluster (built by the conductor: pod subnet pool, service subnet, router,
default-allow pod group) and the mapping controller in-process on the same store;
pods are real ports plugged into sandbox namespaces. Checked: pods of two namespaces
reach each other through the router; a ClusterIP Service spreads connections over
its pods and follows a Deployment's scale; a LoadBalancer Service answers on its
floating IP from the external network's namespace; a selector-less Service uses its
Endpoints; a controller SIGKILLed in the middle of applying 33 objects (NetworkPolicies
among them: after some ports, after the first load balancer, after the first policy
group) is resumed by a resync to exactly the manifests' state — ports, load balancers
with their listeners, pools and members, the policies' security groups with their rules
and memberships; deleting everything leaves nothing; a kubelet's ``netbay-cni`` call
plugs the port the controller made for its pod (no second port).
"""

from __future__ import annotations

import ipaddress
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from netbay.client import LB, NET
from netbay.backends.http import HttpBackend
from netbay.dataplane import netns
from netbay.k8s import desired, podport
from netbay.k8s.controller import Controller
from netbay.k8s.objects import parse

from . import k8s_docs
from .agent_fixtures import Cloud, wait_for
from .cni_fixtures import Daemon, bin_dir, daemon, invoke, netbay_conf  # noqa: F401 - bin_dir, daemon: fixtures
from .cluster_net import Listener, tcp_read
from .cluster_pods import make_cluster
from .dp_helpers import ping
from .k8s_fixtures import (cli_env, controller, ctrl, lb, lb_tree, pod_ip, pod_ns,  # noqa: F401 - ctrl: a fixture
                           policy_quota, port_of)
from .k8s_fixtures import keys_of as ctrl_keys
from tests import zygote


CLOUD_TAG = "k8"   # the shared `cloud` fixture (conftest.py): its namespace prefix
CLOUD_K8S = True   # ... with the Kubernetes mapping's host leftovers swept


@pytest.fixture(scope="module")
def cluster(cloud: Cloud) -> str:
    policy_quota(cloud)   # the SIGKILL test's policies
    return make_cluster(cloud, "kuryr1", {"kuryr_pod_subnet_pool": "10.10.0.0/16"}, 1, driver="kuryr")


APP = """
apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {team: a}}
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
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: other}
spec: {containers: [{name: c, image: busybox}]}
"""


def serve(ctrl: Controller, ns: str, names: list[str], port: int) -> list[Listener]:
    return [Listener(pod_ns(ctrl, ns, n), "0.0.0.0", port, n.encode()) for n in names]


def answers(client: str, ip: str, port: int, n: int) -> list[bytes | None]:
    return [tcp_read(client, ip, port, timeout=2.0) for _ in range(n)]


def wait_answers(client: str, ip: str, port: int, expect: set[bytes], tries: int = 12) -> set:
    """Connect until every expected reply came back (bounded); returns what was seen."""
    seen: set = set()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not expect <= seen:
        seen |= set(answers(client, ip, port, tries))
    return seen


def test_pods_services_scale_and_loadbalancer(cloud: Cloud, ctrl: Controller) -> None:
    report = ctrl.apply(parse(APP))
    assert any(m.startswith("service shop/web") for m in report.made), report.made
    # Pods are ports on their namespace's network, named ns/pod, owned compute:kuryr.
    port = ctrl.api.call("GET", f"{NET}/ports", name="shop/web-0")["ports"][0]
    assert port["device_owner"] == "compute:kuryr" and port["device_id"]
    net = ctrl.api.call("GET", f"{NET}/networks/{port['network_id']}")["network"]
    assert net["name"] == "ns/shop"
    subnet = ctrl.api.call("GET", f"{NET}/subnets", network_id=net["id"])["subnets"][0]
    assert subnet["subnetpool_id"] == ctrl.refs.pool_id and subnet["cidr"].startswith("10.10.")
    cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")

    client = pod_ns(ctrl, "other", "client")
    servers = serve(ctrl, "shop", ["web-0", "web-1", "web-2"], 8080)
    try:
        # Pod to pod across namespaces, through the cluster's router.
        assert wait_for(lambda: tcp_read(client, pod_ip(ctrl, "shop", "web-1"), 8080), 10, 0.1) == b"web-1"
        vip = lb(ctrl, "shop/web")["vip_address"]
        assert vip.startswith("10.96.")
        # The cluster IP spreads connections over the three pods.
        seen = wait_answers(client, vip, 80, {b"web-0", b"web-1", b"web-2"})
        assert {b"web-0", b"web-1", b"web-2"} <= seen, seen

        # Scale to 1: the members follow; web-1 and web-2 are gone.
        ctrl.apply(parse(APP.replace("replicas: 3", "replicas: 1")))
        assert not ctrl.api.call("GET", f"{NET}/ports", name="shop/web-2")["ports"]
        replies = set(answers(client, vip, 80, 6)) - {None}
        deadline = time.monotonic() + 10
        while replies != {b"web-0"} and time.monotonic() < deadline:
            time.sleep(0.1)
            replies = set(answers(client, vip, 80, 6)) - {None}
        assert replies == {b"web-0"}

        # type LoadBalancer: a floating IP on the VIP, answering from the external namespace.
        ctrl.apply(parse(APP.replace("  selector: {app: web}\n", "  type: LoadBalancer\n  selector: {app: web}\n")))
        fips = ctrl.api.call("GET", f"{NET}/floatingips", port_id=lb(ctrl, "shop/web")["vip_port_id"])["floatingips"]
        assert len(fips) == 1
        outside = cloud.names.external(ctrl.refs.external_network_id)
        assert wait_for(lambda: tcp_read(outside, fips[0]["floating_ip_address"], 80), 10, 0.1) == b"web-0"
        # ... and its status names that address, as a cloud provider writes it
        [stored] = [b for b in desired.load(ctrl.store, ctrl.refs.cluster_id)
                    if b["kind"] == "Service" and b["metadata"]["name"] == "web"]
        assert stored["status"] == {"loadBalancer": {"ingress": [{"ip": fips[0]["floating_ip_address"]}]}}

        # externalIPs: a floating IP with exactly that address (back to ClusterIP: the pool one goes).
        public = ctrl.api.call("GET", f"{NET}/subnets", network_id=ctrl.refs.external_network_id)["subnets"][0]
        external_ip = str(ipaddress.ip_network(public["cidr"])[200])
        ctrl.apply(parse(APP.replace("  selector: {app: web}\n", f"  externalIPs: [{external_ip}]\n  selector: {{app: web}}\n")))
        fips = ctrl.api.call("GET", f"{NET}/floatingips", port_id=lb(ctrl, "shop/web")["vip_port_id"])["floatingips"]
        assert [f["floating_ip_address"] for f in fips] == [external_ip]
        assert wait_for(lambda: tcp_read(outside, external_ip, 80), 10, 0.1) == b"web-0"
    finally:
        for s in servers:
            s.close()


EXTERNAL = """
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: data}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: data}
spec:
  clusterIP: 10.96.7.7
  ports: [{name: sql, port: 5432}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: ext, namespace: data}
subsets:
- addresses: [{ip: ENDPOINT_ADDR}]
  ports: [{name: sql, port: 15432}]
---
apiVersion: v1
kind: Service
metadata: {name: headless, namespace: data}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 80}]
"""


def test_selectorless_service_uses_endpoints_and_headless_has_no_lb(ctrl: Controller) -> None:
    ctrl.apply(parse(EXTERNAL.replace("ENDPOINT_ADDR", "10.10.250.1")))  # the pod first, to learn its address
    ip = pod_ip(ctrl, "data", "db")
    ctrl.apply(parse(EXTERNAL.replace("ENDPOINT_ADDR", ip)))
    assert lb(ctrl, "data/ext")["vip_address"] == "10.96.7.7"
    assert not ctrl.api.call("GET", f"{LB}/loadbalancers", name="data/headless")["loadbalancers"]
    [server] = serve(ctrl, "data", ["db"], 15432)
    try:
        client = pod_ns(ctrl, "data", "db")
        assert wait_for(lambda: tcp_read(client, "10.96.7.7", 5432), 10, 0.1) == b"db"
    finally:
        server.close()


NODEPORT = """
apiVersion: v1
kind: Pod
metadata: {name: api, namespace: np, labels: {app: api}}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: np}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: np}
spec:
  type: NodePort
  selector: {app: api}
  ports: [{port: 80, targetPort: 9000, nodePort: 30080}, {port: 81, targetPort: 9000, name: auto}]
"""


def test_nodeport_answers_on_every_node(ctrl: Controller) -> None:
    from netbay.k8s.nodeports import plan
    from netbay.k8s.objects import desired as desired_of

    ctrl.apply(parse(NODEPORT))
    [server] = serve(ctrl, "np", ["api"], 9000)
    try:
        client = pod_ns(ctrl, "np", "client")
        forwards = plan(desired_of(parse(NODEPORT)), {("np", "api"): lb(ctrl, "np/api")["vip_address"]})
        auto = next(f[1] for f in forwards if f[3] == 81)
        assert 30000 <= auto <= 32767 and auto != 30080
        nodes = [address for _, _, address in ctrl.refs.node_boxes]
        assert len(nodes) == 2 and all(nodes)
        for address in nodes:  # the master and the minion
            for node_port in (30080, auto):
                assert wait_for(lambda: tcp_read(client, address, node_port), 10, 0.1) == b"api", (address, node_port)
    finally:
        server.close()
    # Deleting the Service takes its node ports off every node.
    ctrl.delete(k for k in ctrl_keys(NODEPORT) if k.kind == "Service")
    assert tcp_read(pod_ns(ctrl, "np", "client"), nodes[0], 30080, timeout=0.5) is None


def manifests_33() -> str:
    """3 namespaces, each: 7 pods, a ClusterIP and a LoadBalancer Service, and a
    NetworkPolicy (its pods take ingress on port 80 from their namespace's pods only)."""
    return k8s_docs.many([f"n{i}" for i in range(3)], lambda ns: [
        *(k8s_docs.pod(ns, f"p{j}", "{app: a}", port=None) for j in range(7)),
        k8s_docs.service(ns, "s", "a", 80), k8s_docs.service(ns, "lb", "a", 81, type_="LoadBalancer"),
        k8s_docs.own_namespace_only(ns, "a", 80)])


def state(ctrl: Controller) -> dict:
    """What exists for the cluster: ports, networks, load balancers (each listener with
    its pool's members, by pod name) and the policy's security groups (by key: their
    rules, and each pod's groups), floating IPs, sandboxes."""
    from netbay.k8s.policy.neutron import SPARE

    tag = ctrl.refs.tag
    ports = {p["name"]: p for p in ctrl.api.call("GET", f"{NET}/ports", tags=f"{tag},netbay-k8s=pod")["ports"]}
    pod_of = {p["fixed_ips"][0]["ip_address"]: name for name, p in ports.items()}
    lbs = {x["name"]: {**{k: [(pod_of.get(a, a), n) for a, n in v] for k, v in lb_tree(ctrl, x).items()},
                       "pools": len(x.get("pools") or [])}
           for x in ctrl.api.call("GET", f"{LB}/loadbalancers", tags=tag)["loadbalancers"]}
    groups = ctrl.api.call("GET", f"{NET}/security-groups", tags=f"k8s-policy:{ctrl.refs.cluster_id}")[
        "security_groups"]
    # by key (the description names it); a peer group's key is a hash: "peer" (one per namespace here)
    key = {g["id"]: re.sub(r"^peer:.*", "peer", g["description"].removeprefix("k8s policy "))
           for g in groups if g["name"] != SPARE}
    spares = [g for g in groups if g["name"] == SPARE]
    in_use = {sg for p in ports.values() for sg in p["security_groups"]}
    return {
        "ports": sorted(ports),
        "networks": sorted(n["name"] for n in ctrl.api.call("GET", f"{NET}/networks",
                                                             tags=f"{tag},netbay-k8s=network")["networks"]),
        "lbs": lbs,
        "groups": sorted(key.values()),
        "rules": {key[g["id"]]: sorted((r["direction"], r["protocol"], r["port_range_min"],
                                        key.get(r["remote_group_id"], r["remote_group_id"]), r["remote_ip_prefix"])
                                       for r in g["security_group_rules"])
                  for g in groups if g["id"] in key and key[g["id"]].startswith("policy:")},
        "pod_groups": {name: sorted(key.get(sg, sg) for sg in p["security_groups"]) for name, p in ports.items()},
        "spares": "ok" if len(spares) <= ctrl.policy.engine.groups.want_spares and not any(
            g["security_group_rules"] or g["id"] in in_use for g in spares) else spares,
        "fips": len(ctrl.api.call("GET", f"{NET}/floatingips", tags=tag)["floatingips"]),
        "sandboxes": len(ctrl.sandboxes.existing()),
    }


def wanted_33() -> dict:
    """What :func:`manifests_33` wants, written out."""
    pods = [f"n{i}/p{j}" for i in range(3) for j in range(7)]
    return {
        "ports": sorted(pods),
        "networks": ["ns/n0", "ns/n1", "ns/n2"],
        "lbs": {**{f"n{i}/s": {"TCP:80": sorted((f"n{i}/p{j}", 80) for j in range(7)), "pools": 1} for i in range(3)},
                **{f"n{i}/lb": {"TCP:81": sorted((f"n{i}/p{j}", 81) for j in range(7)), "pools": 1}
                   for i in range(3)}},
        "groups": sorted(["nodes", "open-egress", "open-ingress", *[f"policy:n{i}/np" for i in range(3)],
                          *["peer"] * 3]),
        # port 80 from the namespace's own pods (its peer group); the nodes' group: always
        "rules": {f"policy:n{i}/np": [("ingress", "tcp", 80, "peer", None)] for i in range(3)},
        "pod_groups": {p: ["nodes", "open-egress", "peer", f"policy:{p.split('/')[0]}/np"] for p in pods},
        "spares": "ok", "fips": 3, "sandboxes": 21,
    }


def first_policy_group(ctrl: Controller) -> bool:
    from netbay.k8s.policy.neutron import SPARE

    groups = ctrl.api.call("GET", f"{NET}/security-groups", tags=f"k8s-policy:{ctrl.refs.cluster_id}")
    return any(g["name"] != SPARE for g in groups["security_groups"])


# Where the apply is killed: what the test sees made just before.
KILL_POINTS = {
    "after 5 ports": lambda ctrl: len(ctrl.api.call("GET", f"{NET}/ports",
                                                    tags=f"{ctrl.refs.tag},netbay-k8s=pod")["ports"]) >= 5,
    "after the first load balancer": lambda ctrl: bool(
        ctrl.api.call("GET", f"{LB}/loadbalancers", tags=ctrl.refs.tag)["loadbalancers"]),
    "after the first policy group": first_policy_group,
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_sigkill_mid_apply_then_resync_converges_and_delete_leaves_nothing(
        cloud: Cloud, cluster: str, ctrl: Controller, tmp_path: Path, point: str) -> None:
    text = manifests_33()
    assert len(parse(text)) == 33
    (tmp_path / "m.yaml").write_text(text)
    env = cli_env(cloud)
    cmd = [sys.executable, "-m", "netbay.cli.main", "k8s", "apply", "-f", str(tmp_path / "m.yaml"),
           "--cluster", cluster, "--url", cloud.server.url, "--prefix", cloud.names.prefix]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # Killed once the kill point is seen, while the apply is still under way.
        wait_for(lambda: KILL_POINTS[point](ctrl) or proc.poll() is not None, 60, 0.01, point)
        assert proc.poll() is None, f"the apply finished before {point}: {proc.stdout.read().decode()}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    assert state(ctrl) != wanted_33()   # killed half-way
    ctrl.resync()   # a new controller's first pass (the fixture's has made nothing yet)
    ctrl.policy.engine.wait_spares()
    assert state(ctrl) == wanted_33()   # nothing left over, nothing missing
    assert ctrl.resync().made == [] and ctrl.resync().deleted == []  # converged: a pass changes nothing
    ctrl.delete([k for k in (ctrl_keys(text))])
    end = state(ctrl)
    assert {k: end[k] for k in ("ports", "networks", "lbs", "fips", "sandboxes")} == \
        {"ports": [], "networks": [], "lbs": {}, "fips": 0, "sandboxes": 0}
    assert not [n for n in netns.list(cloud.names.prefix) if n.startswith(f"{cloud.names.prefix}k-")]


def test_kuryr_cluster_gets_and_loses_its_resources(cloud: Cloud) -> None:
    """A kuryr cluster made and deleted with objects applied: its pool, service subnet,
    default pod group and everything the controller made go with it."""
    from netbay.k8s.dns.resolver import sweep_orphans as sweep_resolvers
    from netbay.k8s.sandbox import PodSandboxes, sweep_orphans

    from .cluster_pods import ci, wait_cluster

    cid = make_cluster(cloud, "kuryr2", {"kuryr_pod_subnet_pool": "10.20.0.0/16", "kuryr_service_cidr": "10.97.0.0/16",
                                         "kuryr_pod_subnet_prefixlen": "26"}, 1, driver="kuryr")
    with controller(cloud, cid, delete=False) as c:
        api = c.api
        pool = api.call("GET", f"{NET}/subnetpools/{c.refs.pool_id}")["subnetpool"]
        assert pool["prefixes"] == ["10.20.0.0/16"] and int(pool["default_prefixlen"]) == 26
        assert c.refs.service_subnet["cidr"] == "10.97.0.0/16"
        c.apply(parse(APP))
        subnet = api.call("GET", f"{NET}/subnets", name="ns/shop")["subnets"][0]
        assert subnet["cidr"].endswith("/26") and subnet["cidr"].startswith("10.20.")
        tag = f"netbay-cluster={cid}"
        assert api.call("GET", f"{NET}/ports", tags=f"{tag},netbay-k8s=pod")["ports"]
        r = ci(cloud).delete(f"/clusters/{cid}")
        assert r.status_code == 204, r.text
        wait_cluster(ci(cloud), cid, ("GONE",))
        for collection in ("ports", "networks", "subnets", "subnetpools", "routers", "security-groups", "floatingips"):
            key = collection.replace("-", "_")
            assert api.call("GET", f"{NET}/{collection}", tags=tag)[key] == [], collection
        assert api.call("GET", f"{LB}/loadbalancers", tags=tag)["loadbalancers"] == []
        # The pods' namespaces on this host lost their ports: the host sweep takes them.
        assert len(sweep_orphans(HttpBackend(api), PodSandboxes(cloud.names))) == 4
        # The cluster's resolver: the agent reaps it when its port goes (no sweep needed).
        assert wait_for(lambda: not netns.list(f"{cloud.names.prefix}kd-"), 15, 0.05)
        assert sweep_resolvers(HttpBackend(api), PodSandboxes(cloud.names)) == []
        assert not [n for n in netns.list(f"{cloud.names.prefix}k-")]


def test_subnet_per_node(cloud: Cloud) -> None:
    """``kuryr_subnet_driver=node``: a network and a subnet from the pool per node, each
    pod on its node's; pods on different nodes reach each other through the router."""
    cid = make_cluster(cloud, "kuryr3", {"kuryr_subnet_driver": "node", "kuryr_pod_subnet_pool": "10.30.0.0/16",
                                         "kuryr_service_cidr": "10.98.0.0/16"}, 1, driver="kuryr")
    with controller(cloud, cid) as c:
        api = c.api
        nodes = c.refs.nodes
        assert len(nodes) == 2
        pods = "---\n".join(
            f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: a}}\n"
            f"spec: {{nodeName: {node}, containers: [{{name: c, image: busybox}}]}}\n" for i, node in enumerate(nodes))
        c.apply(parse(pods))
        nets = {n["name"]: n for n in api.call("GET", f"{NET}/networks",
                                               tags=f"netbay-cluster={cid},netbay-k8s=network")["networks"]}
        assert sorted(nets) == sorted(f"node/{n}" for n in nodes)
        for i, node in enumerate(nodes):
            port = api.call("GET", f"{NET}/ports", name=f"a/p{i}")["ports"][0]
            assert port["network_id"] == nets[f"node/{node}"]["id"] and port["description"] == f"node={node}"
        [server] = serve(c, "a", ["p1"], 7000)
        try:
            ip = api.call("GET", f"{NET}/ports", name="a/p1")["ports"][0]["fixed_ips"][0]["ip_address"]
            assert wait_for(lambda: tcp_read(pod_ns(c, "a", "p0"), ip, 7000), 10, 0.1) == b"p1"
        finally:
            server.close()
        c.delete_all()
        assert api.call("GET", f"{NET}/networks", tags=f"netbay-cluster={cid},netbay-k8s=network")["networks"] == []


KUBELET_UID = "0c6f3e1a-2b7d-4f0e-9a51-6b7572797201"
KUBELET = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: kubelet}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: kubelet, uid: {KUBELET_UID}, annotations: {{netbay.io/runtime: cni}}}}
spec: {{nodeName: {socket.gethostname()}, containers: [{{name: c, image: busybox}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: peer, namespace: kubelet}}
spec: {{containers: [{{name: c, image: busybox}}]}}
"""


def test_kubelet_cni_plugs_the_port_the_controller_made(
        cloud: Cloud, cluster: str, ctrl: Controller, daemon: Daemon, bin_dir: Path, tmp_path: Path) -> None:
    """``netbay k8s apply`` maps a pod whose runtime is the node's CNI: its port only,
    bound to its node, its UID recorded. The kubelet's ``netbay-cni`` ADD (pod identity in
    CNI_ARGS, no PORT_UUID; the config names the cluster, no network) plugs exactly that
    port into the kubelet's namespace; CHECK passes; DEL (twice) unplugs it and leaves
    the controller's port to the controller."""
    (tmp_path / "m.yaml").write_text(KUBELET)
    done = zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", "apply", "-f", str(tmp_path / "m.yaml"),
                       "--cluster", cluster, "--url", cloud.server.url, "--prefix", cloud.names.prefix],
                      env=cli_env(cloud), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    port = port_of(ctrl, "kubelet", "web")
    assert port["device_owner"] == "compute:kuryr" and podport.uid_of(port) == KUBELET_UID
    assert port["device_id"] == podport.device_id(cluster, "kubelet", "web")
    assert port["binding:host_id"] == socket.gethostname()
    assert ctrl.sandboxes.ns(port["id"]) not in netns.list(cloud.names.prefix)   # the controller plugged nothing
    on_net = {p["id"] for p in ctrl.api.call("GET", f"{NET}/ports", network_id=port["network_id"])["ports"]}
    ip = port["fixed_ips"][0]["ip_address"]
    peer_ns, peer_ip = pod_ns(ctrl, "kubelet", "peer"), pod_ip(ctrl, "kubelet", "peer")

    conf = netbay_conf("k8s-pod-network", None, daemon.sock, cluster=cluster)
    args = f"IgnoreUnknown=1;K8S_POD_NAMESPACE=kubelet;K8S_POD_NAME=web;K8S_POD_UID={KUBELET_UID}"
    ns = f"{cloud.names.prefix}kubelet-web"
    netns.create(ns)
    try:
        def call(verb: str, *, ctr: str = "kubelet-ctr", how: str = args, **extra: object):
            return invoke(bin_dir / "netbay-cni", verb, {**conf, **extra}, container=ctr, netns=netns.path(ns),
                          args=how)

        # A pod the controller has not mapped, or a newer pod of the same name: try again later.
        assert call("ADD", how=args.replace("NAME=web", "NAME=nobody")).code == 11
        assert call("ADD", how=args.replace(KUBELET_UID, "another-uid")).code == 11

        add = call("ADD")
        assert add.rc == 0, add
        plen = ipaddress.ip_network(ctrl.api.call("GET", f"{NET}/subnets/{port['fixed_ips'][0]['subnet_id']}")
                                    ["subnet"]["cidr"]).prefixlen
        assert add.json["interfaces"][0]["mac"] == port["mac_address"]
        assert [i["address"] for i in add.json["ips"]] == [f"{ip}/{plen}"]
        # The cluster's DNS, as kubelet's ClusterFirst gives it: the resolver, the namespace's search list.
        [resolver] = ctrl.api.call("GET", f"{NET}/ports", tags=f"netbay-cluster={cluster},netbay-k8s=dns")["ports"]
        assert add.json["dns"] == {"nameservers": [resolver["fixed_ips"][0]["ip_address"]], "domain": "cluster.local",
                                   "search": ["kubelet.svc.cluster.local", "svc.cluster.local", "cluster.local"],
                                   "options": ["ndots:5"]}
        after = {p["id"] for p in ctrl.api.call("GET", f"{NET}/ports", network_id=port["network_id"])["ports"]}
        assert after == on_net   # no second port
        cloud.wait_status(f"/network/v2.0/ports/{port['id']}", "ACTIVE")   # the agent adopted the fabric end
        assert wait_for(lambda: ping(peer_ns, ip), 10, 0.05, "peer -> kubelet's pod")
        assert ping(ns, peer_ip)
        assert ctrl.resync().made == []   # the controller takes the plugged port as its own, makes none

        check = call("CHECK", prevResult=add.json)
        assert (check.rc, check.out) == (0, ""), check
        for _ in range(2):   # DEL twice: both succeed
            gone = call("DEL", prevResult=add.json)
            assert (gone.rc, gone.out) == (0, ""), gone
        kept = port_of(ctrl, "kubelet", "web")
        assert kept["id"] == port["id"] and kept["device_owner"] == "compute:kuryr"
        assert kept["device_id"] == port["device_id"] and kept["binding:host_id"] == ""
        assert sorted(kept["tags"]) == sorted(port["tags"])   # the controller's tags, none of the CNI's
        assert not ping(peer_ns, ip, timeout=0.3)
        report = ctrl.resync()
        assert (report.made, report.deleted) == ([], [])   # still the controller's: kept, not made again
    finally:
        netns.delete(ns)
