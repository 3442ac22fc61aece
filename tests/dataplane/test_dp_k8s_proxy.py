"""kube-proxy's job on flannel and calico clusters, checked with packets and the nodes' tables.

* Services applied one at a time (each pass sends only what changed): every Service
  applied so far keeps answering, from a pod and from the master's own namespace;
* deleting one Service takes exactly its elements out of every node's maps — the
  other Services' elements are untouched, and they still answer;
* a controller SIGKILLed mid-apply, a node's table left behind by it (elements lost):
  a new controller's first pass (a full resync) rebuilds every node's table to what
  the Services want, and they all answer;
* a LoadBalancer Service's ``loadBalancerIP`` and a Service's ``externalIPs`` answer a
  namespace outside the cluster (a sandbox on the nodes' network, routed to a minion
  whose port has the addresses as allowed address pairs), on flannel and calico.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netbay.client import Api
from netbay.dataplane.nft import Nft
from netbay.k8s import desired
from netbay.k8s.controllers import open_controller
from netbay.k8s.kubeproxy import SLOTS, TABLE
from netbay.k8s.nodecluster import NodeController
from netbay.k8s.objects import key_of, parse
from netbay.store.db import Store

from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener, tcp_read
from .cluster_pods import clusternet, ip_of, make_cluster
from .k8s_fixtures import killed_apply, node_pods

CLOUD_TAG = "kx"

MODES = {
    "flannel-vxlan": ("flannel", {"flannel_backend": "vxlan"}),
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
kind: Pod
metadata: {name: client, namespace: shop, labels: {app: client}}
spec: {containers: [{name: c, image: busybox}]}
"""

LB_IP, EXTERNAL_IP = "203.0.113.7", "198.51.100.9"
EXPOSED = f"""
apiVersion: v1
kind: Service
metadata: {{name: lb, namespace: shop}}
spec: {{type: LoadBalancer, loadBalancerIP: {LB_IP}, selector: {{app: web}}, ports: [{{port: 80, targetPort: 8080}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: ext, namespace: shop}}
spec: {{externalIPs: [{EXTERNAL_IP}], selector: {{app: web}}, ports: [{{port: 81, targetPort: 8080}}]}}
"""


def service(i: int) -> str:
    return (f"apiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: shop}}\n"
            "spec: {selector: {app: web}, ports: [{port: 80, targetPort: http}]}\n")


def answers(ns: str, ip: str, port: int, want: set[bytes], timeout: float = 15) -> None:
    """Ask until every answer in ``want`` was seen (bounded)."""
    seen: set[bytes] = set()

    def done() -> bool:
        got = tcp_read(ns, ip, port, 0.5)
        if got:
            seen.add(got)
        return want <= seen
    wait_for(done, timeout, 0.02, f"{sorted(want)} from {ip}:{port} in {ns}")


def elements(ns: str) -> set[str]:
    """Every element of the proxy's maps and sets in node ``ns``: ``"<map> <element>"``."""
    with Nft(ns) as nft:
        objs = nft.list_ruleset()
    out = set()
    for o in objs:
        body = o.get("map") or o.get("set")
        if body is not None and body.get("table") == TABLE:
            out |= {f"{body['name']} {json.dumps(e, sort_keys=True)}" for e in body.get("elem") or []}
    return out


class Lab:
    def __init__(self, cloud: Cloud, ctrl: NodeController, net: dict[str, Any]) -> None:
        self.cloud, self.ctrl, self.net = cloud, ctrl, net
        pods = node_pods(ctrl)
        self.web = [pods["shop/web-0"], pods["shop/web-1"]]
        self.names = {p["name"].encode() for p in self.web}
        self.client = cloud.names.pod(pods["shop/client"]["id"])
        self.master = cloud.names.sandbox(next(n for n in net["nodes"] if n["role"] == "master")["sandbox_id"])
        self.nodes = [cloud.names.sandbox(n["sandbox_id"]) for n in net["nodes"]]

    def every_service_answers(self, ctrl: NodeController | None = None) -> None:
        ctrl = ctrl or self.ctrl
        for (ns, name), vip in sorted(ctrl.vips.items()):
            if ns == "shop" and name.startswith("s"):
                for where in (self.client, self.master):
                    answers(where, vip, 80, self.names)


@pytest.fixture(params=list(MODES))
def lab(request: pytest.FixtureRequest, cloud: Cloud) -> Iterator[Lab]:
    driver, labels = MODES[request.param]
    cid = make_cluster(cloud, f"kx-{request.param}", labels, 2, driver)
    api, store = Api(cloud.server.url, cloud.server.token), Store(cloud.server.database_url)
    ctrl = open_controller(api, store, cid, cloud.names)
    servers: list[Listener] = []
    try:
        assert isinstance(ctrl, NodeController)
        report = ctrl.apply(parse(APP))
        assert not report.events, report.events
        lab = Lab(cloud, ctrl, clusternet(cloud, cid))
        servers = [Listener(cloud.names.pod(p["id"]), p["address"], 8080, p["name"].encode()) for p in lab.web]
        yield lab
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


def test_services_applied_one_by_one_deleted_and_resynced_after_sigkill(lab: Lab, tmp_path: Path) -> None:
    if not lab.ctrl.refs.spec.enforces_policy:
        pytest.skip("one driver is enough for the incremental path (calico)")
    ctrl = lab.ctrl
    for i in range(4):   # each apply: a pass that sends only this Service's elements
        ctrl.apply(parse(service(i)))
        lab.every_service_answers()
    before = {ns: elements(ns) for ns in lab.nodes}
    vip = ctrl.vips[("shop", "s1")]
    ctrl.delete([key_of(parse(service(1))[0])])
    for ns in lab.nodes:
        after = elements(ns)
        gone = before[ns] - after
        assert after <= before[ns], "a deletion adds nothing"
        assert len(gone) == SLOTS and all(vip in e for e in gone), "exactly s1's slots left"
        assert not any(vip in e for e in after)
    assert ("shop", "s1") not in ctrl.vips
    lab.every_service_answers()
    assert tcp_read(lab.client, vip, 80, 0.5) is None, "the deleted Service answers no more"

    # a controller killed mid-apply of many Services; a node's table then loses elements
    manifest = tmp_path / "many.yaml"
    manifest.write_text("---\n".join(service(i) for i in range(10, 60)))
    killed_apply(lab.cloud, ctrl.refs.cluster_id, manifest,
                 lambda: sum(key_of(b).kind == "Service" for b in desired.load(ctrl.store, ctrl.refs.cluster_id)) > 3)
    subprocess.run(["ip", "netns", "exec", lab.nodes[-1], "nft", "flush", "map", "ip", TABLE, "service-backends"],
                   check=True, timeout=30)
    fresh = open_controller(ctrl.api, ctrl.store, ctrl.refs.cluster_id, lab.cloud.names)
    try:
        assert isinstance(fresh, NodeController)
        fresh.resync()   # a restart: every node's table rebuilt whole
        stored = {key_of(b).name for b in desired.load(ctrl.store, ctrl.refs.cluster_id) if key_of(b).kind == "Service"}
        assert {name for (_, name) in fresh.vips} == stored
        tables = [elements(ns) for ns in lab.nodes]
        assert all(t == tables[0] for t in tables), "every node holds the same table"
        wanted = sum(1 for e in tables[0] if e.startswith("service-backends "))
        assert wanted == SLOTS * (len(stored) + len(fresh.dns.rules()))   # (+ kube-dns: UDP and TCP 53)
        for name in sorted(stored)[:: max(1, len(stored) // 5)]:   # a sample across the range
            answers(lab.client, fresh.vips[("shop", name)], 80, lab.names)
    finally:
        fresh.close()


def test_load_balancer_and_external_ips_answer_from_outside(lab: Lab) -> None:
    cloud, ctrl = lab.cloud, lab.ctrl
    ctrl.apply(parse(EXPOSED))
    minion = next(n for n in lab.net["nodes"] if n["role"] == "minion")
    box = cloud.ok(cloud.http.get(f"/netbay/v1/sandboxes/{minion['sandbox_id']}"))["sandbox"]
    outside = cloud.sandbox("kx-outside", networks=[box["ports"][0]["network_id"]])   # the nodes' network
    try:
        cloud.wait_status(f"/network/v2.0/ports/{outside['ports'][0]['port_id']}", "ACTIVE", 30)
        ns = cloud.sandbox_ns(outside["id"])
        for ip in (LB_IP, EXTERNAL_IP):   # the outside world's route to the addresses: a minion
            subprocess.run(["ip", "-n", ns, "route", "replace", f"{ip}/32", "via", ip_of(minion)],
                           check=True, timeout=30)
        # the minion's port may answer from the addresses (its replies come from them): the
        # operator's step, as for any address a node answers beyond its own (MetalLB's too)
        node_port = cloud.port(box["ports"][0]["port_id"])
        pairs = [*node_port["allowed_address_pairs"], *({"ip_address": ip} for ip in (LB_IP, EXTERNAL_IP))]
        cloud.ok(cloud.http.put(f"/network/v2.0/ports/{node_port['id']}",
                                json={"port": {"allowed_address_pairs": pairs}}))
        answers(ns, LB_IP, 80, lab.names)
        answers(ns, EXTERNAL_IP, 81, lab.names)
        assert tcp_read(ns, LB_IP, 81, 0.5) is None, "only the Service's own port"
        # The LoadBalancer Service's status names the address that answered, as a cloud
        # provider writes it; the ClusterIP one with externalIPs gets none written.
        stored = {key_of(b).name: b for b in desired.load(ctrl.store, ctrl.refs.cluster_id)
                  if key_of(b).kind == "Service"}
        assert stored["lb"]["status"] == {"loadBalancer": {"ingress": [{"ip": LB_IP}]}}
        assert "status" not in stored["ext"]
    finally:
        cloud.delete_sandbox(outside["id"])
