"""Kubernetes objects on flannel (vxlan, host-gw) and calico clusters, checked with packets.

For each driver mode: a cluster of a master and two minions built by the conductor;
``netbay k8s``'s controller (:func:`netbay.k8s.controllers.open_controller` picks the
node-driver one) applies a Deployment of two replicas (one per minion, addresses from
their node's lease), a ClusterIP Service and a NodePort Service in front of them. Both
replicas answer through the cluster IP from a client pod, and through the node port of
one minion from another node. A deny-all NetworkPolicy is enforced on calico (the
cluster IP stops answering) and on flannel accepted, reported *not enforced by flannel*
(the controller's events, the policy's status, ``netbay k8s apply``'s output), with
traffic still flowing.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbay.client import Api
from netbay.k8s import desired
from netbay.k8s.controllers import open_controller
from netbay.k8s.nodecluster import NodeController, policy_status
from netbay.k8s.objects import key_of, parse
from netbay.store.db import Store

from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener, tcp_read
from .cluster_pods import clusternet, ip_of, make_cluster, scale
from .k8s_fixtures import cli_env, netbay_exec, node_pods
from tests import zygote

CLOUD_TAG = "kd"

MODES = {
    "flannel-vxlan": ("flannel", {"flannel_backend": "vxlan"}),
    "flannel-host-gw": ("flannel", {"flannel_backend": "host-gw"}),
    "calico-direct": ("calico", {}),
}

APP = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: busybox, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 80, targetPort: http}]}
---
apiVersion: v1
kind: Service
metadata: {name: web-np, namespace: shop}
spec: {type: NodePort, selector: {app: web}, ports: [{port: 81, targetPort: 8080, nodePort: 30081}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: shop, labels: {app: client}}
spec: {containers: [{name: c, image: busybox}]}
"""

DENY_ALL = """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all, namespace: shop}
spec: {podSelector: {matchLabels: {app: web}}, policyTypes: [Ingress]}
"""


def answers(ns: str, ip: str, port: int, want: set[bytes], timeout: float = 15) -> set[bytes]:
    """Ask until every answer in ``want`` was seen (bounded); the answers seen."""
    seen: set[bytes] = set()

    def done() -> bool:
        got = tcp_read(ns, ip, port, 0.5)
        if got:
            seen.add(got)
        return want <= seen
    wait_for(done, timeout, 0.02, f"{sorted(want)} from {ip}:{port} in {ns}")
    return seen


@pytest.fixture(params=list(MODES))
def k8s(request: pytest.FixtureRequest, cloud: Cloud) -> Iterator[tuple[str, NodeController, dict]]:
    mode = request.param
    driver, labels = MODES[mode]
    cid = make_cluster(cloud, f"k8s-{mode}", labels, 2, driver)
    api, store = Api(cloud.server.url, cloud.server.token), Store(cloud.server.database_url)
    ctrl = open_controller(api, store, cid, cloud.names)
    try:
        assert isinstance(ctrl, NodeController)
        yield mode, ctrl, clusternet(cloud, cid)
    finally:
        try:
            ctrl.delete_all()
        finally:
            api.close()
            store.dispose()
            cloud.http.delete(f"/container-infra/v1/clusters/{cid}")


def test_services_and_policy_on_node_drivers(cloud: Cloud, k8s: tuple[str, NodeController, dict],
                                             tmp_path: Path) -> None:
    mode, ctrl, net = k8s
    report = ctrl.apply(parse(APP))
    assert not report.events, report.events
    pods = node_pods(ctrl)
    web = [pods["shop/web-0"], pods["shop/web-1"]]
    minions = {n["name"] for n in net["nodes"] if n["role"] == "minion"}
    assert {p["node"] for p in web} == minions, "one replica per minion"
    for p in web:   # the node's lease: flannel's subnet, calico's block
        assert ipaddress.ip_address(p["address"]) in ipaddress.ip_network(net["leases"][p["node"]])
    servers = [Listener(cloud.names.pod(p["id"]), p["address"], 8080, p["name"].encode()) for p in web]
    try:
        names = {p["name"].encode() for p in web}
        client = cloud.names.pod(pods["shop/client"]["id"])
        vip = ctrl.vips[("shop", "web")]
        assert ipaddress.ip_address(vip) in ipaddress.ip_network("10.254.0.0/16")
        assert answers(client, vip, 80, names) == names, "both replicas through the cluster IP"
        shown = netbay_exec(cloud, ctrl, "shop/client", "ip", "-4", "-o", "addr", "show", "dev", "eth0")
        assert pods["shop/client"]["address"] in shown.stdout, (shown.stdout, shown.stderr)
        own = cloud.names.pod(web[0]["id"])   # a replica through its own Service: itself (hairpin) and the other
        assert answers(own, vip, 80, names) == names
        # the node port of one minion, from the master (another node): both replicas answer,
        # the one on the other minion too (masqueraded through the node that translated)
        master = next(n for n in net["nodes"] if n["role"] == "master")
        node = next(n for n in net["nodes"] if n["name"] == web[0]["node"])
        assert answers(cloud.names.sandbox(master["sandbox_id"]), ip_of(node), 30081, names) == names
        # NetworkPolicy: calico enforces it, flannel reports it not enforced
        report = ctrl.apply(parse(DENY_ALL))
        status = policy_status(ctrl.refs.spec)["conditions"][0]
        stored = next(b for b in desired.load(ctrl.store, ctrl.refs.cluster_id) if b["kind"] == "NetworkPolicy")
        assert stored["status"]["conditions"] == [status], "the stored policy's status condition says it"
        if ctrl.refs.spec.enforces_policy:
            assert not report.events and status["status"] == "True"
            assert wait_for(lambda: tcp_read(client, vip, 80, 0.3) is None, 10, 0.05, "deny-all enforced")
            ctrl.delete([key_of(parse(DENY_ALL)[0])])
            assert answers(client, vip, 80, names) == names, "open again once the policy is gone"
        else:
            assert [e for e in report.events if "shop/deny-all" in e and "not enforced by flannel" in e], report.events
            assert status["status"] == "False" and "not enforced by flannel" in status["message"]
            assert answers(client, vip, 80, names) == names, "flannel leaves traffic flowing"
            # the CLI says so too, on every apply
            manifest = tmp_path / "deny.yaml"
            manifest.write_text(DENY_ALL)
            done = zygote.run([sys.executable, "-m", "netbay.cli.main", "k8s", "apply", "-f", str(manifest),
                               "--cluster", ctrl.refs.cluster_id, "--url", cloud.server.url],
                              env={**cli_env(cloud), "NETBAY_AGENT_PREFIX": cloud.names.prefix},
                              capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr
            assert "NetworkPolicy shop/deny-all: not enforced by flannel" in " ".join(done.stdout.split()), done.stdout
    finally:
        for s in servers:
            s.close()


DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: shop}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: a, image: busybox}]}
"""


def test_a_node_added_later_answers_the_services(cloud: Cloud) -> None:
    """Scale 2 → 3 minions: the next pass gives the new node the whole table, and the
    Services answer there too (its own traffic to the cluster IP and to a node port);
    a DaemonSet has a pod on each minion, the new one included."""
    cid = make_cluster(cloud, "k8s-scale", {}, 2, "calico")
    api, store = Api(cloud.server.url, cloud.server.token), Store(cloud.server.database_url)
    ctrl = open_controller(api, store, cid, cloud.names)
    servers = []
    try:
        ctrl.apply(parse(APP + "---" + DAEMONSET))

        def daemons() -> dict[str, str]:
            return {p["node"]: p["status"] for p in ctrl.api.call("GET", "/netbay/v1/pods", cluster_id=cid)["pods"]
                    if p["labels"].get("netbay-k8s", "").startswith("shop/agent-")}
        minions = {n["name"] for n in clusternet(cloud, cid)["nodes"] if n["role"] == "minion"}
        assert set(daemons()) == minions and len(minions) == 2
        web = [p for p in ctrl.api.call("GET", "/netbay/v1/pods", cluster_id=cid)["pods"]
               if p["labels"].get("netbay-k8s", "").startswith("shop/web-")]
        servers = [Listener(cloud.names.pod(p["id"]), p["address"], 8080, p["name"].encode()) for p in web]
        names = {p["name"].encode() for p in web}
        before = {n["name"] for n in clusternet(cloud, cid)["nodes"]}
        scale(cloud, cid, 3)
        ctrl.resync()
        new = next(n for n in clusternet(cloud, cid)["nodes"] if n["name"] not in before)
        ns = cloud.names.sandbox(new["sandbox_id"])
        assert answers(ns, ctrl.vips[("shop", "web")], 80, names) == names
        assert answers(ns, ip_of(new), 30081, names) == names
        assert set(daemons()) == minions | {new["name"]}, "the DaemonSet follows the scale"
    finally:
        for s in servers:
            s.close()
        try:
            ctrl.delete_all()
        finally:
            ctrl.close()
            api.close()
            store.dispose()
            cloud.http.delete(f"/container-infra/v1/clusters/{cid}")
